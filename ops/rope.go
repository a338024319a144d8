package ops

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
)

// RopeAttrs are the attributes of rope.
type RopeAttrs struct {
	// HeadDim is the length of one head; the last dimension holds whole heads.
	HeadDim int
	// Rotary is the number of leading dimensions of each head that rotate
	// (HeadDim × the partial rotary factor); even, at most HeadDim.
	Rotary int
	// Theta is the base of the frequencies.
	Theta float64
}

// OpRope rotates heads by their position.
var OpRope = &Def{
	Op: "rope",
	Doc: "rope(x[T, H·hd], call) rotates the first Rotary dims of every head of row t by position p = call[pos] + t, NeoX half split: " +
		"with R = Rotary, h = R/2, f_j = Theta^(-2j/R), for j < h: x'_j = x_j cos(p f_j) − x_{j+h} sin(p f_j), x'_{j+h} = x_{j+h} cos(p f_j) + x_j sin(p f_j); the other dims pass through. Angles in f64.",
	Arity: 2, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[RopeAttrs]("rope", a)
		if err != nil {
			return graph.Signature{}, err
		}
		x := in[0]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if err := checkCall(in[1]); err != nil {
			return graph.Signature{}, err
		}
		if len(x.Shape) != 2 {
			return graph.Signature{}, fmt.Errorf("x %s must be [rows, heads·head_dim]", x)
		}
		if at.HeadDim <= 0 || x.Shape[1]%at.HeadDim != 0 {
			return graph.Signature{}, fmt.Errorf("head_dim %d does not divide x %s", at.HeadDim, x)
		}
		if at.Rotary <= 0 || at.Rotary%2 != 0 || at.Rotary > at.HeadDim {
			return graph.Signature{}, fmt.Errorf("rotary dims %d must be even, positive and at most head_dim %d", at.Rotary, at.HeadDim)
		}
		if !(at.Theta > 0) || math.IsInf(at.Theta, 0) {
			return graph.Signature{}, fmt.Errorf("rope theta %v must be positive", at.Theta)
		}
		return one(graph.F32, x.Shape), nil
	},
}

// Rope rotates each head of x by its row's position (NeoX half split).
func Rope(b *graph.Builder, x, call *graph.Value, a RopeAttrs) *graph.Value {
	return apply1(b, OpRope, a, x, call)
}

func checkCall(v *graph.Value) error {
	if v.DType != graph.I32 || len(v.Shape) != 1 || v.Shape[0] != CallLen {
		return fmt.Errorf("call record %s must be i32[%d]", v, CallLen)
	}
	return nil
}
