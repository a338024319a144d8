package lm_test

import (
	"fmt"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
)

// bigramKey names the toy model's one graph: a chunk of rows.
type bigramKey struct {
	rows int
	want lm.Want
}

func (k bigramKey) String() string { return fmt.Sprintf("bigram/rows=%d/want=%s", k.rows, k.want) }

// bigram is a model whose logits for a token are a row of a table, and
// which keeps the embeddings of every position in a KV slot: the smallest
// architecture, written as a model author writes one.
type bigram struct{ vocab int }

func (m bigram) Vocab() int                              { return m.vocab }
func (m bigram) Key(rows int, want lm.Want) capture.Key  { return bigramKey{rows, want} }
func (m bigram) State(name string) (lm.StateSpec, error) { return lm.StateSpec{Kind: lm.Slot}, nil }
func (m bigram) Build(key capture.Key) (*graph.Graph, error) {
	k, ok := key.(bigramKey)
	if !ok {
		return nil, fmt.Errorf("bigram: a key of type %T", key)
	}
	return m.graph(k)
}

func (m bigram) graph(k bigramKey) (*graph.Graph, error) {
	b := graph.NewBuilder(k.String())
	call := ops.Call(b)
	ids := b.Input(lm.InputIDs, graph.I32, k.rows)
	table := b.Weight("table", graph.F32, m.vocab, m.vocab) // declared where it is used
	x := ops.Embed(b, table, ids)
	ops.KVWrite(b, x, b.State("seen", graph.F32, graph.Dyn, m.vocab), call, ops.SlotAttrs{})
	if k.want == lm.WantNone {
		return b.Graph()
	}
	if k.want == lm.WantLast && k.rows > 1 {
		// the last row in use: a chunk of fewer rows than the key's runs
		// on the plan of its bucket (lm.BucketRows)
		x = ops.LastRow(b, x, call)
	}
	b.Output(x)
	return b.Graph()
}

// ExampleNewSession runs a toy architecture on the generic session: the
// model gives its graphs and says how to keep their states; the session
// makes the slot its graph declares, chunks the prompt and reads the
// logits.
func ExampleNewSession() {
	const vocab = 4
	table := make([]float32, vocab*vocab) // the logits after token i: row i, 1 for token i+1
	for i := range vocab {
		table[i*vocab+(i+1)%vocab] = 1
	}
	weights := lm.Tensors{"table": lm.F32Tensor(table, vocab, vocab)}
	s, err := lm.NewSession(weights, bigram{vocab}, lm.SessionOptions{Chunk: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	logits, err := s.Forward([]int{0, 1, 2}, 0, lm.WantLast)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(logits.Shape(), logits.Data(), s.Pos())
	for _, st := range s.States() {
		fmt.Println(st.Name, st.Kind)
	}
	// Output:
	// (1, 4) [0 0 0 1] 3
	// seen slot
}
