package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Fused products with quantized weights, which only the planner makes (its
// rules quant_grouped_matmul, quant_matmul_swiglu, quant_norm_matmul and
// quant_swiglu_norm_matmul): grouped_matmul, matmul_swiglu, norm_matmul
// and swiglu_norm_matmul with each weight a quant_matmul's codes and block
// scales (quant_slerp_matmul, slerp_matmul's, is in fused_slerp.go). A quantized decode token would
// otherwise run each projection of a layer as its own launch, each reading
// x again. Each keeps a Decompose into quant_matmul and the primitives the
// fused plan is checked against.

// quantFusedDefs are the fused quantized products; they are registered
// beside the others.
var quantFusedDefs = []*Def{OpQuantGroupedMatMul, OpQuantMatMulSwiGLU, OpQuantNormMatMul, OpQuantSwiGLUNormMatMul}

// quantPairs checks that in holds x followed by n (codes, scales) pairs
// and gives each pair's quant_matmul output spec.
func quantPairs(op string, a QuantAttrs, x *graph.Value, pairs []*graph.Value) ([]graph.Spec, error) {
	if len(pairs) == 0 || len(pairs)%2 != 0 {
		return nil, fmt.Errorf("%s takes x and pairs of codes and scales, got %d inputs after x", op, len(pairs))
	}
	var out []graph.Spec
	for i := 0; i < len(pairs); i += 2 {
		sig, err := OpQuantMatMul.Rule(a, []*graph.Value{x, pairs[i], pairs[i+1]})
		if err != nil {
			return nil, fmt.Errorf("weight %d: %w", i/2, err)
		}
		out = append(out, sig.Outputs...)
	}
	return out, nil
}

// OpQuantGroupedMatMul is grouped_matmul over quantized weights.
var OpQuantGroupedMatMul = &Def{
	Op: "quant_grouped_matmul",
	Doc: "quant_grouped_matmul(x, w1, s1, ..., wn, sn) = (quant_matmul(x, w1, s1), ..., quant_matmul(x, wn, sn)) with one set of " +
		"blocks (the attributes) for every weight: sibling projections of one input (q/k/v/g) stored quantized, in one pass over x.",
	Arity: -1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[QuantAttrs]("quant_grouped_matmul", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if len(in) < 3 {
			return graph.Signature{}, fmt.Errorf("quant_grouped_matmul takes x and at least one weight's codes and scales, got %d inputs", len(in))
		}
		outs, err := quantPairs("quant_grouped_matmul", at, in[0], in[1:])
		if err != nil {
			return graph.Signature{}, err
		}
		return graph.Signature{Outputs: outs}, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QuantAttrs](b, "quant_grouped_matmul", a)
		if !ok {
			return failed((len(in) - 1) / 2)
		}
		var out []*graph.Value
		for i := 1; i+1 < len(in); i += 2 {
			out = append(out, QuantMatMul(b, in[0], in[i], in[i+1], at))
		}
		return out
	},
}

// QuantGroupedMatMul is QuantMatMul of x by each weight (codes and scales
// alternating in ws), as one node. Model code builds the products instead
// and lets the planner group them; this constructor is for tests.
func QuantGroupedMatMul(b *graph.Builder, x *graph.Value, a QuantAttrs, ws ...*graph.Value) []*graph.Value {
	return b.Apply(OpQuantGroupedMatMul, a, len(ws)/2, append([]*graph.Value{x}, ws...)...)
}

// OpQuantMatMulSwiGLU is matmul_swiglu over quantized gate and up weights.
var OpQuantMatMulSwiGLU = &Def{
	Op: "quant_matmul_swiglu",
	Doc: "quant_matmul_swiglu(x[T,K], wg, sg_w, wu, su_w, sg[F], su[F]) = silu(quant_matmul(x, wg, sg_w) ⊙ sg) ⊙ (quant_matmul(x, wu, su_w) ⊙ su) " +
		"with one set of blocks (the attributes) for both: a SwiGLU MLP's quantized gate and up projections of one input in one pass " +
		"over x, the scales and the gated activation applied to their outputs.",
	Arity: 7,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[QuantAttrs]("quant_matmul_swiglu", a)
		if err != nil {
			return graph.Signature{}, err
		}
		outs, err := quantPairs("quant_matmul_swiglu", at, in[0], in[1:5])
		if err != nil {
			return graph.Signature{}, err
		}
		return OpSwiGLU.Rule(nil, []*graph.Value{specValue(outs[0]), specValue(outs[1]), in[5], in[6]})
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QuantAttrs](b, "quant_matmul_swiglu", a)
		if !ok {
			return failed(1)
		}
		g := QuantMatMul(b, in[0], in[1], in[2], at)
		u := QuantMatMul(b, in[0], in[3], in[4], at)
		return []*graph.Value{SwiGLU(b, g, u, in[5], in[6])}
	},
}

// QuantMatMulSwiGLU is quant_matmul_swiglu as one node. Like
// QuantGroupedMatMul, for tests.
func QuantMatMulSwiGLU(b *graph.Builder, x, wg, sgw, wu, suw, sg, su *graph.Value, a QuantAttrs) *graph.Value {
	return apply1(b, OpQuantMatMulSwiGLU, a, x, wg, sgw, wu, suw, sg, su)
}

// QuantNormAttrs are the attributes of quant_norm_matmul,
// quant_swiglu_norm_matmul and quant_slerp_matmul: the weights' blocks and
// the epsilon of the norm (the slerp's norms).
type QuantNormAttrs struct {
	Blocks QuantAttrs
	Eps    float32
}

// String writes the attributes as dumps show them.
func (a QuantNormAttrs) String() string { return fmt.Sprintf("%s eps=%g", a.Blocks, a.Eps) }

// OpQuantNormMatMul is norm_matmul over a quantized weight.
var OpQuantNormMatMul = &Def{
	Op: "quant_norm_matmul",
	Doc: "quant_norm_matmul(x[...,K], w, s) = quant_matmul(l2norm(x), w, s): each row of x normalized over its K elements (Eps), " +
		"then projected by the quantized weight (blocks of the attributes). A kernel may scale the product instead, " +
		"(x·Wᵀ) / sqrt(Σx² + Eps), summing x² from the x it reads for the product.",
	Arity: 3,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[QuantNormAttrs]("quant_norm_matmul", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkNormedRows(at.Eps, in[0]); err != nil {
			return graph.Signature{}, err
		}
		return OpQuantMatMul.Rule(at.Blocks, in)
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QuantNormAttrs](b, "quant_norm_matmul", a)
		if !ok {
			return failed(1)
		}
		return []*graph.Value{QuantMatMul(b, L2Norm(b, in[0], 0, at.Eps), in[1], in[2], at.Blocks)}
	},
}

// QuantNormMatMul is quant_norm_matmul as one node. Like
// QuantGroupedMatMul, for tests.
func QuantNormMatMul(b *graph.Builder, x, w, s *graph.Value, a QuantNormAttrs) *graph.Value {
	return apply1(b, OpQuantNormMatMul, a, x, w, s)
}

// OpQuantSwiGLUNormMatMul is swiglu_norm_matmul over quantized weights.
var OpQuantSwiGLUNormMatMul = &Def{
	Op: "quant_swiglu_norm_matmul",
	Doc: "quant_swiglu_norm_matmul(x[T,K], wg, sg_w, wu, su_w, sg[F], su[F], wd, sd_w) = quant_norm_matmul(quant_matmul_swiglu(x, wg, sg_w, wu, su_w, sg, su), wd, sd_w) " +
		"with one set of blocks (Blocks) for the three weights: a SwiGLU MLP stored quantized with the gated activation's rows " +
		"l2-normalized (Eps) before the down projection, the activation never stored.",
	Arity: 9,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[QuantNormAttrs]("quant_swiglu_norm_matmul", a)
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err := OpQuantMatMulSwiGLU.Rule(at.Blocks, in[:7])
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err = OpQuantNormMatMul.Rule(at, []*graph.Value{specValue(sig.Outputs[0]), in[7], in[8]})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("down: %w", err)
		}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QuantNormAttrs](b, "quant_swiglu_norm_matmul", a)
		if !ok {
			return failed(1)
		}
		y := OpQuantMatMulSwiGLU.Decompose(b, at.Blocks, in[:7])[0]
		return []*graph.Value{QuantMatMul(b, L2Norm(b, y, 0, at.Eps), in[7], in[8], at.Blocks)}
	},
}

// QuantSwiGLUNormMatMul is quant_swiglu_norm_matmul as one node. Like
// QuantGroupedMatMul, for tests.
func QuantSwiGLUNormMatMul(b *graph.Builder, x, wg, sgw, wu, suw, sg, su, wd, sdw *graph.Value, a QuantNormAttrs) *graph.Value {
	return apply1(b, OpQuantSwiGLUNormMatMul, a, x, wg, sgw, wu, suw, sg, su, wd, sdw)
}
