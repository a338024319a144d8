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
	// Theta is the base of the frequencies f_j = Theta^(-2j/Rotary).
	Theta float64
	// Scaling, when not zero, scales the frequencies and gives the attention
	// factor m that multiplies the cosines and sines (a checkpoint's rope
	// scaling: linear, llama3, yarn; see RopeScaling).
	Scaling RopeScaling `json:",omitzero"`
}

// String formats the attributes for dumps, leaving Scaling out when it is
// zero.
func (a RopeAttrs) String() string {
	s := fmt.Sprintf("{HeadDim:%d Rotary:%d Theta:%v", a.HeadDim, a.Rotary, a.Theta)
	if a.Scaling != (RopeScaling{}) {
		s += " Scaling:" + a.Scaling.String()
	}
	return s + "}"
}

// Check checks the attributes on their own: Rotary even, positive and at
// most HeadDim; Theta finite and positive; Scaling valid for them (its
// frequencies finite and positive).
func (a RopeAttrs) Check() error {
	if a.HeadDim <= 0 {
		return fmt.Errorf("rope head_dim %d must be positive", a.HeadDim)
	}
	if a.Rotary <= 0 || a.Rotary%2 != 0 || a.Rotary > a.HeadDim {
		return fmt.Errorf("rotary dims %d must be even, positive and at most head_dim %d", a.Rotary, a.HeadDim)
	}
	if !(a.Theta > 0) || math.IsInf(a.Theta, 0) {
		return fmt.Errorf("rope theta %v must be positive", a.Theta)
	}
	if _, _, err := a.Scaling.Frequencies(a.Theta, a.Rotary); err != nil {
		return err
	}
	return nil
}

// CheckWidth checks the attributes (Check) and that rows of width hold
// whole heads.
func (a RopeAttrs) CheckWidth(width int) error {
	if err := a.Check(); err != nil {
		return err
	}
	if width%a.HeadDim != 0 {
		return fmt.Errorf("rope head_dim %d does not divide rows of %d", a.HeadDim, width)
	}
	return nil
}

// Frequencies gives the frequencies f_j, j < Rotary/2, and the attention
// factor m, in float64 (RopeScaling.Frequencies); kernels compute the
// angles p·f_j and m·cos, m·sin from them. It fails as Check does.
func (a RopeAttrs) Frequencies() (freqs []float64, m float64, err error) {
	if err := a.Check(); err != nil {
		return nil, 0, err
	}
	return a.Scaling.Frequencies(a.Theta, a.Rotary)
}

// OpRope rotates heads by their position.
var OpRope = &Def{
	Op: "rope",
	Doc: "rope(x[T, H·hd], call) rotates the first Rotary dims of every head of row t by position p = call[pos] + t, NeoX half split: " +
		"with R = Rotary, h = R/2, f_j = Theta^(-2j/R) and m = 1, or with Scaling f_j and m as transformers' rope type computes them (linear, llama3, yarn), for j < h: " +
		"x'_j = x_j·m·cos(p f_j) − x_{j+h}·m·sin(p f_j), x'_{j+h} = x_{j+h}·m·cos(p f_j) + x_j·m·sin(p f_j); the other dims pass through. " +
		"Angles p·f_j and m·cos, m·sin in f64, rounded to f32.",
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
		if err := at.Check(); err != nil {
			return graph.Signature{}, err
		}
		if x.Shape[1]%at.HeadDim != 0 {
			return graph.Signature{}, fmt.Errorf("head_dim %d does not divide x %s", at.HeadDim, x)
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
