package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// ropeTable holds what rope needs beyond the data: the frequencies f_j for
// j < R/2 and the attention factor m (ops.RopeAttrs.Frequencies), in
// float64.
type ropeTable struct {
	headDim, rotary int
	freq            []float64
	m               float64
}

func newRopeTable(at ops.RopeAttrs, width int) (ropeTable, error) {
	if err := at.CheckWidth(width); err != nil {
		return ropeTable{}, fmt.Errorf("rope: %w", err)
	}
	freq, m, err := at.Frequencies()
	if err != nil {
		return ropeTable{}, fmt.Errorf("rope: %w", err)
	}
	return ropeTable{headDim: at.HeadDim, rotary: at.Rotary, freq: freq, m: m}, nil
}

// angles fills cos and sin (R/2 each) for position p: the angles p·f_j and
// m times their cosines and sines in float64, rounded to f32.
func (t *ropeTable) angles(p int, cos, sin []float32) {
	for j, f := range t.freq {
		s, c := math.Sincos(float64(p) * f)
		cos[j], sin[j] = float32(t.m*c), float32(t.m*s)
	}
}

// rotate applies the NeoX half-split rotation to every head of one row,
// y from x (y may be x); dims past Rotary are copied.
func (t *ropeTable) rotate(y, x, cos, sin []float32) {
	h := t.rotary / 2
	for o := 0; o+t.headDim <= len(x); o += t.headDim {
		xa, xb := x[o:o+h], x[o+h:o+2*h]
		ya, yb := y[o:o+h], y[o+h:o+2*h]
		for j := range xa {
			a, b := xa[j], xb[j]
			ya[j] = a*cos[j] - b*sin[j]
			yb[j] = b*cos[j] + a*sin[j]
		}
		copy(y[o+t.rotary:o+t.headDim], x[o+t.rotary:o+t.headDim])
	}
}

// bindRope binds rope (norm false) and norm_rope (norm true: then each head is
// l2-normalized with eps and multiplied by the optional scale input 2).
func bindRope(be *Backend, n *graph.Node, in, out []*Buffer, at ops.RopeAttrs, norm bool, eps float32) (ops.Step, error) {
	x, y, err := xAndOutput(in[0], out[0])
	if err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	tab, err := newRopeTable(at, w)
	if err != nil {
		return nil, err
	}
	if len(x) != len(y) || len(x)%w != 0 {
		return nil, fmt.Errorf("x of %d elements, output of %d, rows of %d", len(x), len(y), w)
	}
	var scale []float32
	if norm && len(in) == 3 {
		if scale, err = f32s("scale", in[2]); err != nil {
			return nil, err
		}
		if len(scale) != w {
			return nil, fmt.Errorf("scale has %d elements, want %d", len(scale), w)
		}
	}
	call, rows := in[1], len(x)/w
	hd := at.HeadDim
	return ops.StepFunc(func() error {
		pos, _, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		parallelFor(rows, be.threadsFor(len(x)), func(lo, hi int) {
			sp := be.borrow(at.Rotary)
			defer be.giveBack(sp)
			cos, sin := (*sp)[:at.Rotary/2], (*sp)[at.Rotary/2:]
			for r := lo; r < hi; r++ {
				tab.angles(pos+r, cos, sin)
				yr := y[r*w : (r+1)*w]
				tab.rotate(yr, x[r*w:(r+1)*w], cos, sin)
				if !norm {
					continue
				}
				for o := 0; o < w; o += hd {
					l2normalize(yr[o:o+hd], yr[o:o+hd], eps)
				}
				if scale != nil {
					for i, s := range scale {
						yr[i] *= s
					}
				}
			}
		})
		return nil
	}), nil
}

func ropeKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.RopeAttrs](n)
	if err != nil {
		return nil, err
	}
	return bindRope(be, n, in, out, at, false, 0)
}

func normRopeKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.NormRopeAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 2 && len(in) != 3 {
		return nil, fmt.Errorf("norm_rope takes x, call and an optional scale, got %d inputs", len(in))
	}
	return bindRope(be, n, in, out, at.Rope, true, at.Eps)
}
