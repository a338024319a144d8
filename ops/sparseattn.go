package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// QSA sparse attention, one layer (u the block input; nq query heads and nkv
// KV heads of hd, rotary r; an indexer of ih heads of idim over blocks of cr
// keys, keeping Keep = budget/cr blocks):
//
//	q, gate = split(u·W_qᵀ; heads nq, [hd, hd])
//	q = rope(rmsnorm(q, q_norm; hd)); k = rope(rmsnorm(u·W_kᵀ, k_norm; hd)); v = u·W_vᵀ
//	kv_write(k, K); kv_write(v, V)
//	qi, kraw = split(u·W_idxᵀ; 1, [ih·idim, idim])
//	qi = rope(rmsnorm(qi, q_layernorm; idim))
//	qsa_block_keys(kraw, k_layernorm, Kraw, B, call)      writes Kraw, B
//	sel = qsa_select(qi, B, call)                         [T, Keep] i32
//	y = GateMerge(qsa_attention(q, K, V, sel, call), gate) · W_oᵀ
//
// The selection is a list of Keep block ids per row rather than a bitmap over
// every block: its shape is static whatever the context length, so a recorded
// plan serves every position (the number of blocks grows with the context, a
// temporary's shape cannot). The indexer's score vector likewise lives only
// inside qsa_select.

// BlockKeyAttrs are the attributes of qsa_block_keys.
type BlockKeyAttrs struct {
	// Block is the indexer's compress ratio: keys per block.
	Block int
	// Rope rotates each block key at its first token's position (HeadDim is
	// the indexer's head dim).
	Rope RopeAttrs
	// Eps of the k_layernorm (an RMS norm with w).
	Eps float32
	// Ring says the raw key slot stores position j at row j mod capacity; a
	// ring of Block rows is enough, since only an incomplete block's keys are
	// read again by a later call.
	Ring bool
}

// OpQSABlockKeys stores the indexer's raw keys and compresses each block they complete.
var OpQSABlockKeys = &Def{
	Op: "qsa_block_keys",
	Doc: "qsa_block_keys(kraw[T, d], w[d], slot[cap, d], keys[bcap, d], call), n the call's rows, positions p = call[pos] + t: with " +
		"k̃(j) = kraw[j − call[pos]] for j ≥ call[pos], else slot row j (Ring: j mod cap), every block b (cr = Block) whose last position " +
		"b·cr + cr − 1 lies in [call[pos], call[pos] + n) gets keys[b] = rope_{b·cr}(rmsnorm(mean_{i<cr} k̃(b·cr + i); w, Eps)): the " +
		"indexer's block key, the mean of the block's raw keys RMS-normed with w and rotated at the block's first position. Then the " +
		"call's raw keys are written into the slot as kv_write does. A block or position outside a linear slot's capacity is an error. " +
		"It makes no output.",
	Arity: 5,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[BlockKeyAttrs]("qsa_block_keys", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if at.Block <= 0 {
			return graph.Signature{}, fmt.Errorf("qsa_block_keys: block %d must be positive", at.Block)
		}
		kraw := in[0]
		if err := checkRows("kraw", kraw, -1); err != nil {
			return graph.Signature{}, err
		}
		d := kraw.Shape[1]
		if at.Rope.HeadDim != d {
			return graph.Signature{}, fmt.Errorf("kraw %s: rope head dim %d must be the key width", kraw, at.Rope.HeadDim)
		}
		if _, err := OpRope.Rule(at.Rope, []*graph.Value{kraw, in[4]}); err != nil {
			return graph.Signature{}, err
		}
		if err := checkVector("w", in[1], d); err != nil {
			return graph.Signature{}, err
		}
		if err := checkState("slot", in[2], graph.F32, -1, d); err != nil {
			return graph.Signature{}, err
		}
		if err := checkState("keys", in[3], graph.F32, -1, d); err != nil {
			return graph.Signature{}, err
		}
		return graph.Signature{Writes: []int{2, 3}}, nil
	},
}

// QSABlockKeys stores the call's raw indexer keys in slot and writes the
// block keys of the blocks they complete.
func QSABlockKeys(b *graph.Builder, kraw, w, slot, keys, call *graph.Value, a BlockKeyAttrs) {
	b.Apply(OpQSABlockKeys, a, 0, kraw, w, slot, keys, call)
}

// SelectAttrs are the attributes of qsa_select.
type SelectAttrs struct {
	// Heads is the indexer's query heads.
	Heads int
	// Block is the compress ratio: keys per block.
	Block int
	// Keep is the blocks a query keeps (budget / Block).
	Keep int
}

// OpQSASelect is the QSA indexer: block scores and their top-k.
var OpQSASelect = &Def{
	Op: "qsa_select",
	Doc: "qsa_select(qi[T, Heads·d], keys[bcap, d], call) = sel i32[T, Keep]: row t < n at position p = call[pos] + t sees nb = ⌊(p+1)/Block⌋ " +
		"complete blocks with scores σ_b = Σ_h ReLU(qi_h · keys[b]) / sqrt(d) (f32); it keeps all nb blocks when nb ≤ Keep, else the Keep " +
		"largest σ_b (ties to the smaller block index), and lists them in ascending order followed by −1 padding. Rows t ≥ n are all −1. " +
		"A NaN score or a block past the keys' capacity is an error.",
	Arity: 3,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[SelectAttrs]("qsa_select", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkPositive("qsa_select", "heads", at.Heads, "block", at.Block, "keep", at.Keep); err != nil {
			return graph.Signature{}, err
		}
		qi, keys := in[0], in[1]
		if err := checkRows("qi", qi, -1); err != nil {
			return graph.Signature{}, err
		}
		if qi.Shape[1]%at.Heads != 0 || qi.Shape[1] == 0 {
			return graph.Signature{}, fmt.Errorf("qi %s does not hold %d heads", qi, at.Heads)
		}
		if err := checkState("keys", keys, graph.F32, -1, qi.Shape[1]/at.Heads); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (qi is %s)", err, qi)
		}
		if err := checkCall(in[2]); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.I32, graph.Shape{qi.Shape[0], at.Keep}), nil
	},
}

// QSASelect scores the complete key blocks for each row and keeps the best.
func QSASelect(b *graph.Builder, qi, keys, call *graph.Value, a SelectAttrs) *graph.Value {
	return apply1(b, OpQSASelect, a, qi, keys, call)
}

// SparseAttentionAttrs are the attributes of qsa_attention.
type SparseAttentionAttrs struct {
	Heads, KVHeads, HeadDim int
	// Block is the keys per block of the selection.
	Block int
	// Scale multiplies q·k before the softmax (1/sqrt(head_dim)).
	Scale float32
}

// OpQSAAttention is GQA attention over the selected key blocks.
var OpQSAAttention = &Def{
	Op: "qsa_attention",
	Doc: "qsa_attention(q[T, Hq·d], k[cap, Hk·d], v[cap, Hk·d], sel i32[T, Keep], call): row t < n at position p = call[pos] + t, with " +
		"nb = ⌊(p+1)/Block⌋, reads the keys at positions b·Block .. b·Block + Block − 1 of every block b in its sel row and the trailing " +
		"positions nb·Block .. p (slot row = position); query head h reads KV head h / (Hq/Hk): s_j = Scale · q_h·k_j, a = softmax(s) (f32), " +
		"out_h = Σ_j a_j v_j. A sel row must be ascending block ids < nb followed by −1; anything else, or a position past the slots' " +
		"capacity, is an error. Rows t ≥ n are 0.",
	Arity: 5,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[SparseAttentionAttrs]("qsa_attention", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkPositive("qsa_attention", "heads", at.Heads, "kv heads", at.KVHeads, "head dim", at.HeadDim, "block", at.Block); err != nil {
			return graph.Signature{}, err
		}
		if at.Heads%at.KVHeads != 0 {
			return graph.Signature{}, fmt.Errorf("qsa_attention: %d heads are not a multiple of %d kv heads", at.Heads, at.KVHeads)
		}
		q, k, v, sel := in[0], in[1], in[2], in[3]
		if err := checkRows("q", q, at.Heads*at.HeadDim); err != nil {
			return graph.Signature{}, err
		}
		for i, s := range []*graph.Value{k, v} {
			if err := checkState([]string{"k", "v"}[i], s, graph.F32, -1, at.KVHeads*at.HeadDim); err != nil {
				return graph.Signature{}, err
			}
		}
		if sel.DType != graph.I32 || len(sel.Shape) != 2 || sel.Shape[0] != q.Shape[0] || sel.Shape[1] <= 0 {
			return graph.Signature{}, fmt.Errorf("sel %s must be i32 [%d, keep] for q %s", sel, q.Shape[0], q)
		}
		if err := checkCall(in[4]); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, q.Shape), nil
	},
}

// QSAAttention attends each row to its selected blocks and trailing keys.
func QSAAttention(b *graph.Builder, q, k, v, sel, call *graph.Value, a SparseAttentionAttrs) *graph.Value {
	return apply1(b, OpQSAAttention, a, q, k, v, sel, call)
}

// OpGateMerge is QSA's output gate.
var OpGateMerge = &Def{
	Op:    "gate_merge",
	Doc:   "gate_merge(y[T, N], g[T, N]) = y ⊙ sigmoid(g): the attention output merged with its per-head gate. Decomposes into sigmoid and mul.",
	Arity: 2, InPlace: []int{0},
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		if err := sameShapeF32([]string{"y", "g"}, in); err != nil {
			return graph.Signature{}, err
		}
		if !in[0].Shape.Equal(in[1].Shape) {
			return graph.Signature{}, fmt.Errorf("y %s and g %s differ", in[0], in[1])
		}
		return one(graph.F32, in[0].Shape), nil
	},
	Decompose: func(b *graph.Builder, _ any, in []*graph.Value) []*graph.Value {
		return []*graph.Value{Mul(b, in[0], Sigmoid(b, in[1]))}
	},
}

// GateMerge builds y ⊙ sigmoid(g) as primitives; the planner fuses it.
func GateMerge(b *graph.Builder, y, g *graph.Value) *graph.Value {
	return OpGateMerge.Decompose(b, nil, []*graph.Value{y, g})[0]
}
