package ops

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
)

// broadcasts checks that b can combine with a: the same shape, or a suffix of
// a's shape (a vector [N] against rows [T, N]).
func broadcasts(a, b *graph.Value) error {
	if len(b.Shape) > len(a.Shape) {
		return fmt.Errorf("%s and %s: the second has more dimensions", a, b)
	}
	off := len(a.Shape) - len(b.Shape)
	for i, d := range b.Shape {
		if a.Shape[off+i] != d {
			return fmt.Errorf("%s and %s do not broadcast: the second must equal the first or a suffix of its shape", a, b)
		}
	}
	return nil
}

func binaryRule(op string) func(any, []*graph.Value) (graph.Signature, error) {
	return func(_ any, in []*graph.Value) (graph.Signature, error) {
		if err := wantF32("a", in[0]); err != nil {
			return graph.Signature{}, err
		}
		if err := wantF32("b", in[1]); err != nil {
			return graph.Signature{}, err
		}
		if err := broadcasts(in[0], in[1]); err != nil {
			return graph.Signature{}, fmt.Errorf("%s: %w", op, err)
		}
		return one(graph.F32, in[0].Shape), nil
	}
}

func unaryRule(_ any, in []*graph.Value) (graph.Signature, error) {
	if err := wantF32("x", in[0]); err != nil {
		return graph.Signature{}, err
	}
	return one(graph.F32, in[0].Shape), nil
}

// ElementwiseOps are the elementwise ops, binary ones first. An op's index
// is its code in the backends' kernel tables (ElementwiseCode): the one
// numbering of them, which the CPU's kernels use and the CUDA kernels' OP_*
// constants are generated from.
var ElementwiseOps = []*Def{OpAdd, OpSub, OpMul, OpSigmoid, OpSiLU, OpScale}

// ElementwiseCode gives an elementwise op's code, its index in
// ElementwiseOps (false for an op that is not elementwise).
func ElementwiseCode(op string) (int32, bool) {
	for i, d := range ElementwiseOps {
		if d.Op == op {
			return int32(i), true
		}
	}
	return -1, false
}

// The elementwise ops. The second operand of a binary op is broadcast over
// the first's leading dimensions.
var (
	OpAdd = &Def{Op: "add", Doc: "add(a, b) = a + b, b broadcast over a's leading dimensions.", Arity: 2, Rule: binaryRule("add"), InPlace: []int{0}}
	OpSub = &Def{Op: "sub", Doc: "sub(a, b) = a - b, b broadcast over a's leading dimensions.", Arity: 2, Rule: binaryRule("sub"), InPlace: []int{0}}
	OpMul = &Def{Op: "mul", Doc: "mul(a, b) = a ⊙ b, b broadcast over a's leading dimensions.", Arity: 2, Rule: binaryRule("mul"), InPlace: []int{0}}

	OpSigmoid = &Def{Op: "sigmoid", Doc: "sigmoid(x) = 1 / (1 + exp(-x)).", Arity: 1, Rule: unaryRule, InPlace: []int{0}}
	OpSiLU    = &Def{Op: "silu", Doc: "silu(x) = x · sigmoid(x).", Arity: 1, Rule: unaryRule, InPlace: []int{0}}
	OpScale   = &Def{
		Op: "scale", Doc: "scale(x) = Factor · x.", Arity: 1, InPlace: []int{0},
		Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
			at, err := attrsAs[ScaleAttrs]("scale", a)
			if err != nil {
				return graph.Signature{}, err
			}
			if f := float64(at.Factor); math.IsNaN(f) || math.IsInf(f, 0) {
				return graph.Signature{}, fmt.Errorf("scale factor %v is not finite", at.Factor)
			}
			return unaryRule(nil, in)
		},
	}
)

// ScaleAttrs are the attributes of scale.
type ScaleAttrs struct {
	Factor float32
}

// Add is a + b.
func Add(b *graph.Builder, x, y *graph.Value) *graph.Value { return apply1(b, OpAdd, nil, x, y) }

// Sub is a - b.
func Sub(b *graph.Builder, x, y *graph.Value) *graph.Value { return apply1(b, OpSub, nil, x, y) }

// Mul is a ⊙ b.
func Mul(b *graph.Builder, x, y *graph.Value) *graph.Value { return apply1(b, OpMul, nil, x, y) }

// Sigmoid is 1 / (1 + exp(-x)).
func Sigmoid(b *graph.Builder, x *graph.Value) *graph.Value { return apply1(b, OpSigmoid, nil, x) }

// SiLU is x · sigmoid(x).
func SiLU(b *graph.Builder, x *graph.Value) *graph.Value { return apply1(b, OpSiLU, nil, x) }

// Scale is factor · x.
func Scale(b *graph.Builder, x *graph.Value, factor float32) *graph.Value {
	return apply1(b, OpScale, ScaleAttrs{Factor: factor}, x)
}
