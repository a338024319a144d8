package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// The MoE block (x the block input [T, H]; E experts of F, top-k):
//
//	ids, w = moe_route(x·W_routerᵀ; k, norm)                  i32 [T, k], f32 [T, k]
//	h      = silu_glu(expert_matmul(x, gate_up[E, 2F, H], ids)) [T, k, F]
//	y      = expert_matmul(h, down[E, H, F], ids)              [T, k, H]
//	s      = (silu(x·W_gᵀ) ⊙ x·W_uᵀ)·W_dᵀ                     the shared expert
//	out    = moe_combine(y, w, s, x·W_sgᵀ)                     Σ_j w_j y_j + sigmoid(sg)·s
//
// A checkpoint with separate gate and up expert tensors takes two
// expert_matmul and silu, mul instead of silu_glu.

// RouteAttrs are the attributes of moe_route.
type RouteAttrs struct {
	// K is the experts each row takes.
	K int
	// Norm divides the kept probabilities by their sum (norm_topk_prob).
	Norm bool
}

// OpMoERoute is the router's softmax and top-k.
var OpMoERoute = &Def{
	Op: "moe_route",
	Doc: "moe_route(logits[T, E]) = (ids i32[T, K], w f32[T, K]): per row p = softmax(logits) in f32; ids are the K experts of largest p in " +
		"descending order (ties to the smaller expert id), w their p, divided by Σ of the K when Norm. A NaN logit is an error at run time.",
	Arity: 1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[RouteAttrs]("moe_route", a)
		if err != nil {
			return graph.Signature{}, err
		}
		x := in[0]
		if err := checkRows("logits", x, -1); err != nil {
			return graph.Signature{}, err
		}
		if at.K <= 0 || at.K > x.Shape[1] {
			return graph.Signature{}, fmt.Errorf("logits %s: top-k %d must be in [1, %d]", x, at.K, x.Shape[1])
		}
		s := graph.Shape{x.Shape[0], at.K}
		return graph.Signature{Outputs: []graph.Spec{{DType: graph.I32, Shape: s}, {DType: graph.F32, Shape: append(graph.Shape(nil), s...)}}}, nil
	},
}

// MoERoute picks each row's k experts and their weights from router logits.
func MoERoute(b *graph.Builder, logits *graph.Value, k int, norm bool) (ids, w *graph.Value) {
	out := b.Apply(OpMoERoute, RouteAttrs{K: k, Norm: norm}, 2, logits)
	return out[0], out[1]
}

// OpExpertMatMul multiplies each row by the experts it was routed to.
var OpExpertMatMul = &Def{
	Op: "expert_matmul",
	Doc: "expert_matmul(x[T, in] or [T, k, in], w[E, out, in], ids i32[T, k]) = y[T, k, out], y[t, j] = w[ids[t, j]] · x[t] (or x[t, j]), " +
		"accumulated in f32 whatever w's type: the units of the routed experts over the whole expert tensor; the launch shape is fixed " +
		"(T·k units), which rows of w it reads is not. An id outside [0, E) is an error at run time.",
	Arity: 3,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		x, w, ids := in[0], in[1], in[2]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if err := wantWeightType("w", w); err != nil {
			return graph.Signature{}, err
		}
		if len(w.Shape) != 3 || w.Shape.Elems() <= 0 {
			return graph.Signature{}, fmt.Errorf("w %s must be [experts, out, in]", w)
		}
		if err := checkExpertRows(x, w, ids, w.Shape[2]); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, graph.Shape{ids.Shape[0], ids.Shape[1], w.Shape[1]}), nil
	},
}

// checkExpertRows checks the rows x and the ids of a product with the
// experts w of in features: ids i32 [T, k], x f32 [T, in] or [T, k, in].
func checkExpertRows(x, w, ids *graph.Value, in int) error {
	if ids.DType != graph.I32 || len(ids.Shape) != 2 || ids.Shape[1] <= 0 {
		return fmt.Errorf("ids %s must be i32 [rows, k]", ids)
	}
	t, k := ids.Shape[0], ids.Shape[1]
	okX := (len(x.Shape) == 2 && x.Shape[0] == t) || (len(x.Shape) == 3 && x.Shape[0] == t && x.Shape[1] == k)
	if !okX || x.Shape.Last() != in {
		return fmt.Errorf("x %s, w %s, ids %s: x must be [%d, %d] or [%d, %d, %d]", x, w, ids, t, in, t, k, in)
	}
	return nil
}

// ExpertMatMul is w[ids[t, j]] · x[t] (or x[t, j]) for every unit (t, j).
func ExpertMatMul(b *graph.Builder, x, w, ids *graph.Value) *graph.Value {
	return apply1(b, OpExpertMatMul, nil, x, w, ids)
}

// OpSiLUGLU is the gated activation over a concatenated gate and up projection.
var OpSiLUGLU = &Def{
	Op:    "silu_glu",
	Doc:   "silu_glu(x[..., 2F]) = y[..., F], y_i = silu(x_i) · x_{F+i}: the expert activation over the fused gate_up projection (gate first).",
	Arity: 1,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		x := in[0]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if len(x.Shape) == 0 || x.Shape.Last()%2 != 0 || x.Shape.Last() == 0 {
			return graph.Signature{}, fmt.Errorf("x %s: the last dimension must be even and positive", x)
		}
		s := append(graph.Shape(nil), x.Shape...)
		s[len(s)-1] /= 2
		return one(graph.F32, s), nil
	},
}

// SiLUGLU is silu(gate) ⊙ up over the two halves of the last dimension.
func SiLUGLU(b *graph.Builder, x *graph.Value) *graph.Value {
	return apply1(b, OpSiLUGLU, nil, x)
}

// OpMoECombine sums the weighted expert units and the gated shared expert.
var OpMoECombine = &Def{
	Op: "moe_combine",
	Doc: "moe_combine(y[T, k, H], w[T, k][, s[T, H], sg[T, 1]]) = out[T, H], out[t] = Σ_j w[t, j]·y[t, j] (+ sigmoid(sg[t])·s[t]): " +
		"the routed experts' weighted sum plus the shared expert under its sigmoid gate.",
	Arity: -1,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		if len(in) != 2 && len(in) != 4 {
			return graph.Signature{}, fmt.Errorf("moe_combine takes y, w and optionally s, sg; got %d inputs", len(in))
		}
		y, w := in[0], in[1]
		if y.DType != graph.F32 || len(y.Shape) != 3 {
			return graph.Signature{}, fmt.Errorf("y %s must be f32 [rows, k, hidden]", y)
		}
		t, k, h := y.Shape[0], y.Shape[1], y.Shape[2]
		if err := checkRows("w", w, k); err != nil || w.Shape[0] != t {
			return graph.Signature{}, fmt.Errorf("w %s must be f32 [%d, %d] for y %s", w, t, k, y)
		}
		if len(in) == 4 {
			if err := checkRows("s", in[2], h); err != nil || in[2].Shape[0] != t {
				return graph.Signature{}, fmt.Errorf("s %s must be f32 [%d, %d] for y %s", in[2], t, h, y)
			}
			if err := checkRows("sg", in[3], 1); err != nil || in[3].Shape[0] != t {
				return graph.Signature{}, fmt.Errorf("sg %s must be f32 [%d, 1] for y %s", in[3], t, y)
			}
		}
		return one(graph.F32, graph.Shape{t, h}), nil
	},
}

// MoECombine is Σ_j w_j y_j, plus sigmoid(sg)·s when the shared expert s and
// its gate logit sg are given (both nil otherwise).
func MoECombine(b *graph.Builder, y, w, s, sg *graph.Value) *graph.Value {
	in := []*graph.Value{y, w}
	if s != nil || sg != nil {
		in = append(in, s, sg)
	}
	return apply1(b, OpMoECombine, nil, in...)
}
