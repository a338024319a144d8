package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Fused ops of an nGPT residual and the product after it, which only the
// planner makes (its rule slerp_matmul). The slerp's output h is both the
// next sub-layer's input and the next slerp's x, so the fused op gives h as
// well as the products. The planner makes them for prompt chunks, whose
// slerp also writes the 16-bit copy of h the products read (on CUDA), so
// that the products need not convert it, and the quantized ones for decode
// rows too, whose one-row products on CUDA can compute the slerp as they
// stage h. Each keeps a Decompose into the slerp and the product it
// replaces.

// slerpDefs are the fused slerp ops; they are registered beside the others.
var slerpDefs = []*Def{OpSlerpMatMul, OpSlerpMatMulSwiGLU, OpQuantSlerpMatMul, OpQuantSlerpMatMulSwiGLU}

// The quantized fused slerp ops' names.
const (
	quantSlerpMatMul       = "quant_slerp_matmul"
	quantSlerpMatMulSwiGLU = "quant_slerp_matmul_swiglu"
)

// SlerpParts splits the attributes a of the fused slerp op op into the
// slerp's and its product's: EpsAttrs and none for slerp_matmul and
// slerp_matmul_swiglu; for quant_slerp_matmul and
// quant_slerp_matmul_swiglu (QuantNormAttrs) its Eps and its Blocks, the
// quantized product's.
func SlerpParts(op string, a any) (EpsAttrs, any, error) {
	if op == quantSlerpMatMul || op == quantSlerpMatMulSwiGLU {
		at, err := attrsAs[QuantNormAttrs](op, a)
		return EpsAttrs{Eps: at.Eps}, at.Blocks, err
	}
	at, err := attrsAs[EpsAttrs](op, a)
	return at, nil, err
}

// slerpThen is the Rule of a fused slerp op whose product, checked by
// product's Rule, takes h = slerp(x, y, α) and the inputs after α: h's
// spec, then the product's outputs.
func slerpThen(op string, product *Def) func(a any, in []*graph.Value) (graph.Signature, error) {
	return func(a any, in []*graph.Value) (graph.Signature, error) {
		if len(in) < 4 {
			return graph.Signature{}, fmt.Errorf("%s takes x, y, alpha and at least one weight, got %d inputs", op, len(in))
		}
		_, pa, err := SlerpParts(op, a)
		if err != nil {
			return graph.Signature{}, err
		}
		slerp, err := OpSlerp.Rule(EpsAttrs{}, in[:3])
		if err != nil {
			return graph.Signature{}, fmt.Errorf("slerp: %w", err)
		}
		h := slerp.Outputs[0]
		sig, err := product.Rule(pa, append([]*graph.Value{specValue(h)}, in[3:]...))
		if err != nil {
			return graph.Signature{}, err
		}
		sig.Outputs = append([]graph.Spec{h}, sig.Outputs...)
		return sig, nil
	}
}

// OpSlerpMatMul is the nGPT residual followed by the products of its
// result.
var OpSlerpMatMul = &Def{
	Op: "slerp_matmul",
	Doc: "slerp_matmul(x[T,K], y[T,K], α[K], w1[N1,K], ..., wn[Nn,K]) = (h, h·w1ᵀ, ..., h·wnᵀ) with h = slerp(x, y, α) (Eps): " +
		"a residual update and the grouped projections of its result (Dory's q/k/v/g) in one step; h is also an output, the next residual's x.",
	Arity: -1,
	Rule:  slerpThen("slerp_matmul", OpGroupedMatMul),
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		h := apply1(b, OpSlerp, a, in[:3]...)
		return append([]*graph.Value{h}, GroupedMatMul(b, h, in[3:]...)...)
	},
}

// OpSlerpMatMulSwiGLU is the nGPT residual followed by a SwiGLU MLP's gate
// and up projections of its result.
var OpSlerpMatMulSwiGLU = &Def{
	Op: "slerp_matmul_swiglu",
	Doc: "slerp_matmul_swiglu(x[T,K], y[T,K], α[K], wg[F,K], wu[F,K], sg[F], su[F]) = (h, matmul_swiglu(h, wg, wu, sg, su)) with h = slerp(x, y, α) (Eps): " +
		"a residual update and the gated gate/up projections of its result in one step; h is also an output, the next residual's x.",
	Arity: 7,
	Rule:  slerpThen("slerp_matmul_swiglu", OpMatMulSwiGLU),
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		h := apply1(b, OpSlerp, a, in[:3]...)
		return []*graph.Value{h, apply1(b, OpMatMulSwiGLU, nil, append([]*graph.Value{h}, in[3:]...)...)}
	},
}

// OpQuantSlerpMatMul is slerp_matmul over quantized weights: the nGPT
// residual followed by the quant_grouped_matmul of its result.
var OpQuantSlerpMatMul = &Def{
	Op: quantSlerpMatMul,
	Doc: "quant_slerp_matmul(x[T,K], y[T,K], α[K], w1, s1, ..., wn, sn) = (h, quant_grouped_matmul(h, w1, s1, ..., wn, sn)) with " +
		"h = slerp(x, y, α) (Eps) and one set of blocks (Blocks) for every weight: a residual update and the quantized grouped " +
		"projections of its result (Dory's q/k/v/g) in one step; h is also an output, the next residual's x.",
	Arity: -1,
	Rule:  slerpThen("quant_slerp_matmul", OpQuantGroupedMatMul),
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QuantNormAttrs](b, "quant_slerp_matmul", a)
		if !ok {
			return failed(1 + (len(in)-3)/2)
		}
		h := apply1(b, OpSlerp, EpsAttrs{Eps: at.Eps}, in[:3]...)
		return append([]*graph.Value{h}, QuantGroupedMatMul(b, h, at.Blocks, in[3:]...)...)
	},
}

// OpQuantSlerpMatMulSwiGLU is slerp_matmul_swiglu over quantized weights:
// the nGPT residual followed by the quant_matmul_swiglu of its result.
var OpQuantSlerpMatMulSwiGLU = &Def{
	Op: quantSlerpMatMulSwiGLU,
	Doc: "quant_slerp_matmul_swiglu(x[T,K], y[T,K], α[K], wg, sg_w, wu, su_w, sg[F], su[F]) = (h, quant_matmul_swiglu(h, wg, sg_w, wu, su_w, sg, su)) " +
		"with h = slerp(x, y, α) (Eps) and one set of blocks (Blocks) for both weights: a residual update and the quantized gated gate/up " +
		"projections of its result in one step; h is also an output, the next residual's x.",
	Arity: 9,
	Rule:  slerpThen(quantSlerpMatMulSwiGLU, OpQuantMatMulSwiGLU),
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[QuantNormAttrs](b, quantSlerpMatMulSwiGLU, a)
		if !ok {
			return failed(2)
		}
		h := apply1(b, OpSlerp, EpsAttrs{Eps: at.Eps}, in[:3]...)
		return []*graph.Value{h, apply1(b, OpQuantMatMulSwiGLU, at.Blocks, append([]*graph.Value{h}, in[3:]...)...)}
	},
}

// QuantSlerpMatMulSwiGLU is quant_slerp_matmul_swiglu as one node: h and
// the gated activation. Like SlerpMatMul, for tests.
func QuantSlerpMatMulSwiGLU(b *graph.Builder, x, y, alpha *graph.Value, a QuantNormAttrs, wg, sgw, wu, suw, sg, su *graph.Value) []*graph.Value {
	return b.Apply(OpQuantSlerpMatMulSwiGLU, a, 2, x, y, alpha, wg, sgw, wu, suw, sg, su)
}

// QuantSlerpMatMul is quant_slerp_matmul as one node: h and the product of
// h by each quantized weight (codes and scales alternating in ws). Like
// SlerpMatMul, for tests.
func QuantSlerpMatMul(b *graph.Builder, x, y, alpha *graph.Value, a QuantNormAttrs, ws ...*graph.Value) []*graph.Value {
	return b.Apply(OpQuantSlerpMatMul, a, 1+len(ws)/2, append([]*graph.Value{x, y, alpha}, ws...)...)
}

// SlerpMatMul is slerp_matmul as one node: h and h·wᵢᵀ for each weight.
// Model code builds the slerp and the products instead and lets the planner
// fuse them; this constructor is for tests.
func SlerpMatMul(b *graph.Builder, x, y, alpha *graph.Value, eps float32, ws ...*graph.Value) []*graph.Value {
	return b.Apply(OpSlerpMatMul, EpsAttrs{Eps: eps}, 1+len(ws), append([]*graph.Value{x, y, alpha}, ws...)...)
}

// SlerpMatMulSwiGLU is slerp_matmul_swiglu as one node: h and the gated
// activation. Like SlerpMatMul, for tests.
func SlerpMatMulSwiGLU(b *graph.Builder, x, y, alpha *graph.Value, eps float32, wg, wu, sg, su *graph.Value) []*graph.Value {
	return b.Apply(OpSlerpMatMulSwiGLU, EpsAttrs{Eps: eps}, 2, x, y, alpha, wg, wu, sg, su)
}
