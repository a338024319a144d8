package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Fused ops of an attention layer's decode step that only the planner makes
// (its rules qkv_prep, attention_gate and norm_matmul). A decode token is
// hundreds of small launches; these fold the query and key preparation with
// both KV writes into one launch, the output gate into the attention's
// finish step, and a row's l2 norm into the projection that reads the row
// (Dory's o_proj after the gate, down_proj after the SwiGLU). Each keeps a
// Decompose into primitives the fused plan is checked against.

// decodeDefs are the fused decode ops; they are registered beside the others.
var decodeDefs = []*Def{OpQKVPrep, OpAttentionGate, OpNormMatMul, OpQKVAttentionGate}

// QKVPrepAttrs are the attributes of qkv_prep: the rotary and norm of both
// the queries and the keys, and how both slots store rows.
type QKVPrepAttrs struct {
	NormRope NormRopeAttrs
	Slot     SlotAttrs
}

// OpQKVPrep prepares an attention layer's queries and writes its key and
// value rows into their slots.
var OpQKVPrep = &Def{
	Op: "qkv_prep",
	Doc: "qkv_prep(q[T, Hq·d], k[T, Hk·d], v[T, Hk·d], call, kslot[cap, Hk·d], vslot[cap, Hk·d][, s[Hq·d]]) = norm_rope(q, call[, s]); " +
		"it also writes norm_rope(k, call) into kslot and v into vslot as kv_write does (row t at position call[pos] + t, Ring: mod cap). " +
		"The queries' and keys' rotary, per-head norm and scale and both KV row writes in one step.",
	Arity: -1, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[QKVPrepAttrs]("qkv_prep", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if len(in) != 6 && len(in) != 7 {
			return graph.Signature{}, fmt.Errorf("qkv_prep takes q, k, v, call, kslot, vslot and an optional scale, got %d inputs", len(in))
		}
		q, k, v, call, ks, vs := in[0], in[1], in[2], in[3], in[4], in[5]
		qIn := []*graph.Value{q, call}
		if len(in) == 7 {
			qIn = append(qIn, in[6])
		}
		sig, err := OpNormRope.Rule(at.NormRope, qIn)
		if err != nil {
			return graph.Signature{}, fmt.Errorf("q: %w", err)
		}
		if _, err := OpNormRopeKV.Rule(NormRopeKVAttrs{NormRope: at.NormRope, Slot: at.Slot}, []*graph.Value{k, call, ks}); err != nil {
			return graph.Signature{}, fmt.Errorf("k: %w", err)
		}
		if _, err := OpKVWrite.Rule(at.Slot, []*graph.Value{v, vs, call}); err != nil {
			return graph.Signature{}, fmt.Errorf("v: %w", err)
		}
		if ks == vs {
			return graph.Signature{}, fmt.Errorf("the key and value slots are both %s", ks)
		}
		if !k.Shape.Equal(v.Shape) || k.Shape[0] != q.Shape[0] {
			return graph.Signature{}, fmt.Errorf("q %s, k %s and v %s must have the same rows, k and v the same shape", q, k, v)
		}
		sig.Writes = []int{4, 5}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QKVPrepAttrs](b, "qkv_prep", a)
		if !ok {
			return failed(1)
		}
		var scale *graph.Value
		if len(in) == 7 {
			scale = in[6]
		}
		q := NormRope(b, in[0], in[3], scale, at.NormRope)
		k := NormRope(b, in[1], in[3], nil, at.NormRope)
		KVWrite(b, k, in[4], in[3], at.Slot)
		KVWrite(b, in[2], in[5], in[3], at.Slot)
		return []*graph.Value{q}
	},
}

// OpAttentionGate is attention with Dory's output gate.
var OpAttentionGate = &Def{
	Op: "attention_gate",
	Doc: "attention_gate(q[T, Hq·d], k, v, call, g[T, Hq·d], s[Hq·d]) = attention(q, k, v, call) ⊙ sigmoid(g ⊙ s): " +
		"the gate applied as the key chunks are merged (the row's l2 norm that follows goes into the next projection, norm_matmul).",
	Arity: 6, InPlace: []int{4},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[AttentionAttrs]("attention_gate", a)
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err := OpAttention.Rule(at, in[:4])
		if err != nil {
			return graph.Signature{}, err
		}
		g, s := in[4], in[5]
		if err := sameShapeF32([]string{"g", "s"}, in[4:]); err != nil {
			return graph.Signature{}, err
		}
		if !g.Shape.Equal(in[0].Shape) {
			return graph.Signature{}, fmt.Errorf("g %s and q %s differ", g, in[0])
		}
		if len(s.Shape) != 1 || s.Shape[0] != in[0].Shape.Last() {
			return graph.Signature{}, fmt.Errorf("gate scale %s must be [%d] for q %s", s, in[0].Shape.Last(), in[0])
		}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[AttentionAttrs](b, "attention_gate", a)
		if !ok {
			return failed(1)
		}
		y := Attention(b, in[0], in[1], in[2], in[3], at)
		return []*graph.Value{Mul(b, y, Sigmoid(b, Mul(b, in[4], in[5])))}
	},
}

// checkNormedRows checks x as the input of a projection of its rows
// l2-normalized (eps): what l2norm takes, and not empty.
func checkNormedRows(eps float32, x *graph.Value) error {
	if _, err := OpL2Norm.Rule(NormAttrs{Eps: eps}, []*graph.Value{x}); err != nil {
		return err
	}
	if x.Shape.Elems() == 0 {
		return fmt.Errorf("x %s is empty", x)
	}
	return nil
}

// OpNormMatMul is a projection of l2-normalized rows.
var OpNormMatMul = &Def{
	Op: "norm_matmul",
	Doc: "norm_matmul(x[...,K], w[N,K]) = matmul(l2norm(x), w): each row of x normalized over its K elements (Eps), then projected. " +
		"A kernel may scale the product instead, (x·wᵀ) / sqrt(Σx² + Eps), summing x² from the x it reads for the product.",
	Arity: 2,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[EpsAttrs]("norm_matmul", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkNormedRows(at.Eps, in[0]); err != nil {
			return graph.Signature{}, err
		}
		return OpMatMul.Rule(nil, in)
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[EpsAttrs](b, "norm_matmul", a)
		if !ok {
			return failed(1)
		}
		return []*graph.Value{MatMul(b, L2Norm(b, in[0], 0, at.Eps), in[1])}
	},
}

// QKVAttentionAttrs are the attributes of qkv_attention_gate: its
// qkv_prep's and its attention_gate's.
type QKVAttentionAttrs struct {
	Prep      QKVPrepAttrs
	Attention AttentionAttrs
}

// OpQKVAttentionGate is qkv_prep followed by the attention_gate of its
// queries: a decode row's attention from its raw projections, which on
// CUDA is one launch less (the attention's blocks prepare their own heads,
// and the block that holds the row's key writes the key and value rows).
var OpQKVAttentionGate = &Def{
	Op: "qkv_attention_gate",
	Doc: "qkv_attention_gate(q[T, Hq·d], k[T, Hk·d], v[T, Hk·d], call, kslot, vslot, s[Hq·d], g[T, Hq·d], sg[Hq·d]) = " +
		"attention_gate(qkv_prep(q, k, v, call, kslot, vslot, s), kslot, vslot, call, g, sg) (Prep, Attention): " +
		"it writes the key and value rows into their slots as qkv_prep does. A decode row's attention from its raw projections in one step.",
	Arity: 9,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[QKVAttentionAttrs]("qkv_attention_gate", a)
		if err != nil {
			return graph.Signature{}, err
		}
		prep, err := OpQKVPrep.Rule(at.Prep, in[:7])
		if err != nil {
			return graph.Signature{}, fmt.Errorf("qkv_prep: %w", err)
		}
		sig, err := OpAttentionGate.Rule(at.Attention, []*graph.Value{specValue(prep.Outputs[0]), in[4], in[5], in[3], in[7], in[8]})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("attention_gate: %w", err)
		}
		if at.Attention.HeadDim != at.Prep.NormRope.Rope.HeadDim {
			return graph.Signature{}, fmt.Errorf("attention of heads of %d over queries prepared in heads of %d", at.Attention.HeadDim, at.Prep.NormRope.Rope.HeadDim)
		}
		sig.Writes = []int{4, 5}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QKVAttentionAttrs](b, "qkv_attention_gate", a)
		if !ok {
			return failed(1)
		}
		q := apply1(b, OpQKVPrep, at.Prep, in[:7]...)
		return []*graph.Value{apply1(b, OpAttentionGate, at.Attention, q, in[4], in[5], in[3], in[7], in[8])}
	},
}
