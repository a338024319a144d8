package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of the gated residual streams: hc_expand, hc_mix, hc_inject and
// reshape. Each reads a row's elements before writing them, so
// running in place (output = input 0) is correct.

// hcDims reads the streams of an hc op and the width H of one stream from
// its input 0 ([T, C·H]).
func hcDims(n *graph.Node) (c, h, rows int, err error) {
	at, err := ops.NodeAttrs[ops.StreamAttrs](n)
	if err != nil {
		return 0, 0, 0, err
	}
	s := n.Inputs[0].Shape
	if at.Streams <= 0 || len(s) != 2 || s[1]%at.Streams != 0 {
		return 0, 0, 0, fmt.Errorf("%d streams do not divide %v", at.Streams, s)
	}
	return at.Streams, s[1] / at.Streams, s[0], nil
}

// hcExpandKernel tiles x[T, H] into C streams.
func hcExpandKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.StreamAttrs](n)
	if err != nil {
		return nil, err
	}
	h := n.Inputs[0].Shape.Last()
	x, y, err := xAndOutput(in[0], out[0])
	if err != nil {
		return nil, err
	}
	c := at.Streams
	if h <= 0 || len(y) != c*len(x) {
		return nil, fmt.Errorf("x of %d elements, output of %d for %d streams", len(x), len(y), c)
	}
	return ops.StepFunc(func() error {
		be.rowwise(len(x)/h, c*h, func(r int) {
			for s := 0; s < c; s++ {
				copy(y[(r*c+s)*h:(r*c+s+1)*h], x[r*h:(r+1)*h])
			}
		})
		return nil
	}), nil
}

// hcMixKernel is u = (1/C) Σ_c sigmoid(g_c) ⊙ xn_c.
func hcMixKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	c, h, rows, err := hcDims(n)
	if err != nil {
		return nil, err
	}
	v, err := f32Bufs([]string{"xn", "g", "output"}, []*Buffer{in[0], in[1], out[0]}, rows*c*h, rows*c*h, rows*h)
	if err != nil {
		return nil, err
	}
	xn, g, u := v[0], v[1], v[2]
	inv := 1 / float64(c)
	return ops.StepFunc(func() error {
		be.rowwise(rows, c*h, func(r int) {
			for i := 0; i < h; i++ {
				var s float64
				for k := 0; k < c; k++ {
					o := (r*c+k)*h + i
					s += sigmoid64(float64(g[o])) * float64(xn[o])
				}
				u[r*h+i] = float32(s * inv)
			}
		})
		return nil
	}), nil
}

// hcInjectKernel is x_c + 2·sigmoid(l_c / C) · y per stream.
func hcInjectKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	c, h, rows, err := hcDims(n)
	if err != nil {
		return nil, err
	}
	v, err := f32Bufs([]string{"x", "y", "l", "output"}, []*Buffer{in[0], in[1], in[2], out[0]}, rows*c*h, rows*h, rows*c, rows*c*h)
	if err != nil {
		return nil, err
	}
	x, y, l, o := v[0], v[1], v[2], v[3]
	return ops.StepFunc(func() error {
		be.rowwise(rows, c*h, func(r int) {
			yr := y[r*h : (r+1)*h]
			for k := 0; k < c; k++ {
				s := float32(2 * sigmoid64(float64(l[r*c+k])/float64(c)))
				base := (r*c + k) * h
				xs, os := x[base:base+h], o[base:base+h]
				for i, yv := range yr {
					os[i] = xs[i] + s*yv
				}
			}
		})
		return nil
	}), nil
}

// reshapeKernel copies the bytes (nothing when the output shares the input's memory).
func reshapeKernel(_ *Backend, _ *graph.Node, in, out []*Buffer) (ops.Step, error) {
	src, dst := in[0], out[0]
	if len(src.Raw) != len(dst.Raw) {
		return nil, fmt.Errorf("input of %d bytes, output of %d", len(src.Raw), len(dst.Raw))
	}
	return ops.StepFunc(func() error {
		if len(dst.Raw) > 0 && &dst.Raw[0] != &src.Raw[0] {
			copy(dst.Raw, src.Raw)
		}
		return nil
	}), nil
}

// sigmoid32 is sigmoid in float64, rounded to f32.
func sigmoid32(x float32) float32 { return float32(sigmoid64(float64(x))) }
