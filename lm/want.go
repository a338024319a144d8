// Package lm is what every architecture under models/ shares, so that a
// model's own code is its config, its graphs and the features that are
// truly its own.
//
// A model author writes:
//
//   - a config read from config.json (the weights package reads and checks
//     fields);
//   - graph builders: one graph per key, a comparable value of the model's
//     own (a struct of the rows, the want and whatever else the graph
//     depends on) with a String method. The graphs declare every weight
//     (graph.Builder.Weight, with the checkpoint's name), every state
//     (graph.Builder.State: a KV slot [graph.Dyn, width], a recurrent
//     state of fixed shape) and the inputs (InputIDs, the call record);
//   - a Graphs value: Vocab, Key (the graph of a forward chunk), Build and
//     State (the StateSpec of each state name: Slot, Ring, Recurrent or
//     Scratch); GraphFuncs makes one of the model's functions.
//
// and gets from this package:
//
//   - Declarations and LoadWeights: the weights the graphs declare are the
//     ones a checkpoint must hold, with their shapes; missing, misshaped
//     and unread tensors are errors naming the weight's scope (the weight
//     names are written once, in the graphs). Synthesize makes random
//     weights for the same declarations;
//   - Session: the backend, the weights on it and the capture engine (a
//     Core), the states made on first use and bound by name, slots that
//     double their capacity, prompt chunking (on row buckets: BucketRows),
//     the call record, logits read into reused memory and checked for
//     NaN, rollback by the states' kinds, snapshots, and closing;
//   - Want, RunChunks, CheckTokens: the pieces Session is made of, for a
//     model whose forward runs more than one graph per chunk.
//
// A model registers itself with the models package by model_type, so the
// reel command runs it without code of its own; see models/llama for a
// whole architecture in a few hundred lines.
package lm

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Want says which rows' logits a forward computes.
type Want int

// What a forward leaves as logits.
const (
	// WantNone computes no logits: the call only extends the caches.
	WantNone Want = iota
	// WantLast computes the last row's logits.
	WantLast
	// WantAll computes every row's logits.
	WantAll
)

var wantNames = [...]string{"none", "last", "all"}

// String gives the lower-case name, as keys, dumps and flags write it.
func (w Want) String() string {
	if w >= 0 && int(w) < len(wantNames) {
		return wantNames[w]
	}
	return fmt.Sprintf("want(%d)", int(w))
}

// ParseWant reads none, last or all.
func ParseWant(s string) (Want, error) {
	for i, n := range wantNames {
		if n == s {
			return Want(i), nil
		}
	}
	return 0, fmt.Errorf("unknown want %q: want none, last or all", s)
}

// Check says whether w is one of WantNone, WantLast and WantAll.
func (w Want) Check() error {
	if w < WantNone || w > WantAll {
		return fmt.Errorf("unknown want %d", int(w))
	}
	return nil
}

// DefaultChunk is the rows of a prompt chunk unless a session says otherwise.
const DefaultChunk = 64

// ChunkRows gives the rows of a session's chunks from its option: 0 means
// DefaultChunk; fewer than one row is an error.
func ChunkRows(n int) (int, error) {
	if n == 0 {
		return DefaultChunk, nil
	}
	if n < 1 {
		return 0, fmt.Errorf("chunk of %d rows", n)
	}
	return n, nil
}

// CheckTokens checks the ids of a forward at pos0 on a cache that holds pos
// positions: at least one id, every id inside a vocabulary of vocab, and
// pos0 == pos. The errors name the offending token and position.
func CheckTokens(ids []int, pos0, pos, vocab int) error {
	if len(ids) == 0 {
		return fmt.Errorf("empty input: a forward needs at least one token")
	}
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("token %d (position %d): id %d is outside the vocabulary of %d", i, pos0+i, id, vocab)
		}
	}
	if pos0 != pos {
		return fmt.Errorf("pos0 %d does not follow the cache, which holds %d positions (roll back first to go back)", pos0, pos)
	}
	return nil
}

// RunChunks runs a forward of ids at positions pos0, pos0+1, ... as chunks
// of at most chunk rows, in order. run gets a chunk's ids, the position of
// its first row and the chunk's want: WantNone, unless want is WantAll, or
// WantLast and the chunk is the last; it returns the chunk's logits, rows
// of vocab values (ignored for WantNone). RunChunks returns the logits as a
// [rows, vocab] f32 tensor, nil for WantNone; an error of run comes back
// naming the chunk's positions.
func RunChunks(ids []int, pos0, chunk, vocab int, want Want, run func(ids []int, pos int, w Want) ([]float32, error)) (*tensor.Dense, error) {
	if chunk < 1 || vocab < 1 {
		return nil, fmt.Errorf("chunks of %d rows of %d logits", chunk, vocab)
	}
	var logits []float32
	nOut := 0
	for a := 0; a < len(ids); a += chunk {
		b := min(a+chunk, len(ids))
		w := WantNone
		if want == WantAll || (want == WantLast && b == len(ids)) {
			w = want
		}
		out, err := run(ids[a:b], pos0+a, w)
		if err != nil {
			return nil, fmt.Errorf("positions %d to %d: %w", pos0+a, pos0+b-1, err)
		}
		if w != WantNone {
			if logits == nil {
				logits = out // the usual case: one chunk has logits; no copy
			} else {
				logits = append(logits, out...)
			}
			nOut += len(out) / vocab
		}
	}
	if want == WantNone {
		return nil, nil
	}
	return tensor.New(tensor.WithShape(nOut, vocab), tensor.WithBacking(logits)), nil
}
