package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// SlotAttrs say how a KV slot stores rows by position.
type SlotAttrs struct {
	// Ring stores position p at row p mod capacity; otherwise at row p.
	Ring bool
}

// OpKVWrite writes a chunk's key or value rows into a slot.
var OpKVWrite = &Def{
	Op: "kv_write",
	Doc: "kv_write(rows[T, W], slot[cap, W], call) writes row t < call[rows], at position p = call[pos] + t, into slot row p (Ring: p mod cap); " +
		"rows from call[rows] on are padding and are not written (call[rows] = 0 means all T). " +
		"A position past the capacity of a linear slot is an error. It writes the slot and makes no output.",
	Arity: 3,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		if _, err := attrsAs[SlotAttrs]("kv_write", a); err != nil {
			return graph.Signature{}, err
		}
		rows, slot := in[0], in[1]
		if err := wantF32("rows", rows); err != nil {
			return graph.Signature{}, err
		}
		if err := checkCall(in[2]); err != nil {
			return graph.Signature{}, err
		}
		if slot.Kind != graph.State || slot.DType != graph.F32 || len(slot.Shape) != 2 {
			return graph.Signature{}, fmt.Errorf("slot %s must be an f32 state [capacity, width]", slot)
		}
		if len(rows.Shape) != 2 || rows.Shape[1] != slot.Shape[1] {
			return graph.Signature{}, fmt.Errorf("rows %s do not fit slot %s", rows, slot)
		}
		return graph.Signature{Writes: []int{1}}, nil
	},
}

// KVWrite stores rows in a slot at their positions.
func KVWrite(b *graph.Builder, rows, slot, call *graph.Value, a SlotAttrs) {
	b.Apply(OpKVWrite, a, 0, rows, slot, call)
}

// AttentionAttrs are the attributes of attention.
type AttentionAttrs struct {
	Heads, KVHeads, HeadDim int
	// Window is how many keys a row sees, itself included (sliding
	// attention); 0 sees every earlier position.
	Window int
	// Scale multiplies q·k before the softmax (1/sqrt(head_dim) usually).
	Scale float32
	// Ring says the slots store rows by position mod capacity.
	Ring bool
}

// AttentionChunkRows is the fewest query rows for which a backend may
// round attention's inputs to f16 and multiply on tensor cores (a prompt
// chunk); fewer rows (decode, speculation windows) are computed in f32.
const AttentionChunkRows = 16

// OpAttention is causal grouped-query attention over KV slots.
var OpAttention = &Def{
	Op: "attention",
	Doc: "attention(q[T, Hq·d], k[cap, Hk·d], v[cap, Hk·d], call): row t at position p = call[pos] + t, query head h reads KV head h / (Hq/Hk); " +
		"over key positions j from max(0, p − Window + 1) (0 when Window is 0) to p, stored at slot row j (Ring: j mod cap): " +
		"s_j = Scale · q_h·k_j, a = softmax(s), out_h = Σ_j a_j v_j. Keys must have been written for those positions. " +
		"Rows from call[rows] on (padding of a row bucket; 0 means all T) come out zero. " +
		"A ring that holds every key a chunk's rows read (Window ≤ cap − (T − 1)) is read by position mod cap; a shorter one (a ring grown with the sequence), or one with Window 0, holds positions below cap only, as a linear slot: a position past it is an error. " +
		"From AttentionChunkRows rows a backend may round q, k, v and the probabilities to f16 for tensor cores (sums stay f32).",
	Arity: 4,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[AttentionAttrs]("attention", a)
		if err != nil {
			return graph.Signature{}, err
		}
		q, k, v := in[0], in[1], in[2]
		if err := checkCall(in[3]); err != nil {
			return graph.Signature{}, err
		}
		if at.Heads <= 0 || at.KVHeads <= 0 || at.HeadDim <= 0 || at.Heads%at.KVHeads != 0 {
			return graph.Signature{}, fmt.Errorf("heads %d over kv heads %d of %d: heads must be a positive multiple of kv heads", at.Heads, at.KVHeads, at.HeadDim)
		}
		if at.Window < 0 {
			return graph.Signature{}, fmt.Errorf("window %d is negative", at.Window)
		}
		if err := wantF32("q", q); err != nil {
			return graph.Signature{}, err
		}
		if len(q.Shape) != 2 || q.Shape[1] != at.Heads*at.HeadDim {
			return graph.Signature{}, fmt.Errorf("q %s must be [rows, %d]", q, at.Heads*at.HeadDim)
		}
		for _, s := range []*graph.Value{k, v} {
			if s.DType != graph.F32 || len(s.Shape) != 2 || s.Shape[1] != at.KVHeads*at.HeadDim {
				return graph.Signature{}, fmt.Errorf("slot %s must be f32 [capacity, %d]", s, at.KVHeads*at.HeadDim)
			}
		}
		return one(graph.F32, q.Shape), nil
	},
}

// RingHolds says whether a slot of capacity rows is read as a ring by an
// attention of rows query rows: a ring that holds its window and the
// chunk's rows (Window ≤ capacity − (rows − 1)). A ring shorter than that
// (a session growing it with the sequence) is read as a linear slot, and
// every position must then be below its capacity.
func RingHolds(a AttentionAttrs, capacity, rows int) bool {
	return a.Ring && a.Window > 0 && a.Window <= capacity-(rows-1)
}

// Attention is causal GQA attention of q over the slots' keys and values.
func Attention(b *graph.Builder, q, k, v, call *graph.Value, a AttentionAttrs) *graph.Value {
	return apply1(b, OpAttention, a, q, k, v, call)
}
