package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Fused ops. Model code builds their primitive chains through the helpers
// below (Slerp, Mix, SwiGLU, GatedNorm, NormRope), which emit exactly the
// op's Decompose; the planner's fusion rules find those chains and put the
// fused node in their place, and with fusion off the chains run as built.

// EpsAttrs carry the epsilon of the norms inside a fused op.
type EpsAttrs struct {
	Eps float32
}

// sameShapeF32 checks a fused op's inputs: f32, fixed shapes, not empty (the
// norms of the decompositions need a row to normalize).
func sameShapeF32(names []string, in []*graph.Value) error {
	for i, v := range in {
		if err := wantF32(names[i], v); err != nil {
			return err
		}
		if v.Shape.Elems() == 0 {
			return fmt.Errorf("%s %s is empty", names[i], v)
		}
	}
	return nil
}

// OpSlerp is nGPT's residual step on the unit sphere.
var OpSlerp = &Def{
	Op:    "slerp",
	Doc:   "slerp(x[T,N], y[T,N], α[N]) = n(n(x) + α ⊙ (n(y) − n(x))) with n = l2norm over the row (Eps): nGPT's residual update.",
	Arity: 3, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		if _, err := attrsAs[EpsAttrs]("slerp", a); err != nil {
			return graph.Signature{}, err
		}
		if err := sameShapeF32([]string{"x", "y", "alpha"}, in); err != nil {
			return graph.Signature{}, err
		}
		if !in[0].Shape.Equal(in[1].Shape) {
			return graph.Signature{}, fmt.Errorf("x %s and y %s differ", in[0], in[1])
		}
		if len(in[0].Shape) == 0 {
			return graph.Signature{}, fmt.Errorf("x %s has no rows", in[0])
		}
		if len(in[2].Shape) != 1 || in[2].Shape[0] != in[0].Shape.Last() {
			return graph.Signature{}, fmt.Errorf("alpha %s must be [%d] for x %s", in[2], in[0].Shape.Last(), in[0])
		}
		return one(graph.F32, in[0].Shape), nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[EpsAttrs](b, "slerp", a)
		if !ok {
			return failed(1)
		}
		eps := at.Eps
		x := L2Norm(b, in[0], 0, eps)
		y := L2Norm(b, in[1], 0, eps)
		return []*graph.Value{L2Norm(b, Add(b, x, Mul(b, Sub(b, y, x), in[2])), 0, eps)}
	},
}

// Slerp builds n(n(x) + α ⊙ (n(y) − n(x))), the nGPT residual, as primitives.
func Slerp(b *graph.Builder, x, y, alpha *graph.Value, eps float32) *graph.Value {
	return OpSlerp.Decompose(b, EpsAttrs{Eps: eps}, []*graph.Value{x, y, alpha})[0]
}

// OpMix is the loop mix of a looped model.
var OpMix = &Def{
	Op:    "mix",
	Doc:   "mix(a[T,N], b[T,N]) = l2norm(a + b) over the row (Eps): the recurrent block's input, its state plus the input block's output.",
	Arity: 2, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		if _, err := attrsAs[EpsAttrs]("mix", a); err != nil {
			return graph.Signature{}, err
		}
		if err := sameShapeF32([]string{"a", "b"}, in); err != nil {
			return graph.Signature{}, err
		}
		if !in[0].Shape.Equal(in[1].Shape) {
			return graph.Signature{}, fmt.Errorf("a %s and b %s differ", in[0], in[1])
		}
		return one(graph.F32, in[0].Shape), nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[EpsAttrs](b, "mix", a)
		if !ok {
			return failed(1)
		}
		return []*graph.Value{L2Norm(b, Add(b, in[0], in[1]), 0, at.Eps)}
	},
}

// Mix builds l2norm(a + b) as primitives.
func Mix(b *graph.Builder, x, y *graph.Value, eps float32) *graph.Value {
	return OpMix.Decompose(b, EpsAttrs{Eps: eps}, []*graph.Value{x, y})[0]
}

// OpSwiGLU is the gated activation of a SwiGLU MLP with its scales.
var OpSwiGLU = &Def{
	Op:    "swiglu",
	Doc:   "swiglu(g[T,F], u[T,F], sg[F], su[F]) = silu(g ⊙ sg) ⊙ (u ⊙ su).",
	Arity: 4, InPlace: []int{0},
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		if err := sameShapeF32([]string{"g", "u", "sg", "su"}, in); err != nil {
			return graph.Signature{}, err
		}
		if !in[0].Shape.Equal(in[1].Shape) {
			return graph.Signature{}, fmt.Errorf("g %s and u %s differ", in[0], in[1])
		}
		for _, s := range in[2:] {
			if len(s.Shape) != 1 || s.Shape[0] != in[0].Shape.Last() {
				return graph.Signature{}, fmt.Errorf("scale %s must be [%d] for g %s", s, in[0].Shape.Last(), in[0])
			}
		}
		return one(graph.F32, in[0].Shape), nil
	},
	Decompose: func(b *graph.Builder, _ any, in []*graph.Value) []*graph.Value {
		return []*graph.Value{Mul(b, SiLU(b, Mul(b, in[0], in[2])), Mul(b, in[1], in[3]))}
	},
}

// SwiGLU builds silu(g ⊙ sg) ⊙ (u ⊙ su) as primitives.
func SwiGLU(b *graph.Builder, g, u, sg, su *graph.Value) *graph.Value {
	return OpSwiGLU.Decompose(b, nil, []*graph.Value{g, u, sg, su})[0]
}

// OpGatedNorm is an attention output gate followed by a norm.
var OpGatedNorm = &Def{
	Op:    "gated_norm",
	Doc:   "gated_norm(y[T,N], g[T,N], s[N]) = l2norm(y ⊙ sigmoid(g ⊙ s)) over the row (Eps): Dory's attention output gate.",
	Arity: 3, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		if _, err := attrsAs[EpsAttrs]("gated_norm", a); err != nil {
			return graph.Signature{}, err
		}
		if err := sameShapeF32([]string{"y", "g", "s"}, in); err != nil {
			return graph.Signature{}, err
		}
		if !in[0].Shape.Equal(in[1].Shape) {
			return graph.Signature{}, fmt.Errorf("y %s and g %s differ", in[0], in[1])
		}
		if len(in[2].Shape) != 1 || in[2].Shape[0] != in[0].Shape.Last() {
			return graph.Signature{}, fmt.Errorf("scale %s must be [%d] for y %s", in[2], in[0].Shape.Last(), in[0])
		}
		return one(graph.F32, in[0].Shape), nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		gate := Sigmoid(b, Mul(b, in[1], in[2]))
		at, ok := attrsIn[EpsAttrs](b, "gated_norm", a)
		if !ok {
			return failed(1)
		}
		return []*graph.Value{L2Norm(b, Mul(b, in[0], gate), 0, at.Eps)}
	},
}

// GatedNorm builds l2norm(y ⊙ sigmoid(g ⊙ s)) as primitives.
func GatedNorm(b *graph.Builder, y, g, s *graph.Value, eps float32) *graph.Value {
	return OpGatedNorm.Decompose(b, EpsAttrs{Eps: eps}, []*graph.Value{y, g, s})[0]
}

// NormRopeAttrs are the attributes of norm_rope.
type NormRopeAttrs struct {
	Rope RopeAttrs
	Eps  float32
}

// OpNormRope rotates heads, normalizes each head and scales it.
var OpNormRope = &Def{
	Op: "norm_rope",
	Doc: "norm_rope(x[T, H·d], call[, s[H·d]]) = l2norm_per_head(rope(x)) (⊙ s when given): Dory's query and key preparation; " +
		"the planner may also fold the following kv_write into it.",
	Arity: -1, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[NormRopeAttrs]("norm_rope", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if len(in) != 2 && len(in) != 3 {
			return graph.Signature{}, fmt.Errorf("norm_rope takes x, call and an optional scale, got %d inputs", len(in))
		}
		sig, err := OpRope.Rule(at.Rope, in[:2])
		if err != nil {
			return sig, err
		}
		if len(in) == 3 {
			if err := wantF32("scale", in[2]); err != nil {
				return graph.Signature{}, err
			}
			if len(in[2].Shape) != 1 || in[2].Shape[0] != in[0].Shape.Last() {
				return graph.Signature{}, fmt.Errorf("scale %s must be [%d] for x %s", in[2], in[0].Shape.Last(), in[0])
			}
		}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[NormRopeAttrs](b, "norm_rope", a)
		if !ok {
			return failed(1)
		}
		y := L2Norm(b, Rope(b, in[0], in[1], at.Rope), at.Rope.HeadDim, at.Eps)
		if len(in) == 3 {
			y = Mul(b, y, in[2])
		}
		return []*graph.Value{y}
	},
}

// NormRope builds l2norm_per_head(rope(x)) ⊙ scale as primitives; scale may be nil.
func NormRope(b *graph.Builder, x, call, scale *graph.Value, a NormRopeAttrs) *graph.Value {
	in := []*graph.Value{x, call}
	if scale != nil {
		in = append(in, scale)
	}
	return OpNormRope.Decompose(b, a, in)[0]
}
