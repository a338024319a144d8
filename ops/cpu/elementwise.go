package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Elementwise kernels. Each output element depends only on the input
// elements at its own index (and on a broadcast operand), and each is read
// before it is written, so they run in place (output = input 0) as they are.

// elementwise runs f over [0, n) in contiguous chunks, in parallel when n is large.
func (be *Backend) elementwise(n int, f func(lo, hi int)) {
	parallelFor(n, be.threadsFor(n), f)
}

// rowwise runs f on each of rows rows of n elements, in parallel when the
// total is large.
func (be *Backend) rowwise(rows, n int, f func(r int)) {
	parallelFor(rows, be.threadsFor(rows*n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			f(r)
		}
	})
}

// binOp is the arithmetic of add, sub and mul.
type binOp uint8

const (
	opAdd binOp = iota
	opSub
	opMul
)

// applyBinary sets y = a op b elementwise over equal-length slices.
func applyBinary(op binOp, y, a, b []float32) {
	a, b = a[:len(y)], b[:len(y)]
	switch op {
	case opAdd:
		for i := range y {
			y[i] = a[i] + b[i]
		}
	case opSub:
		for i := range y {
			y[i] = a[i] - b[i]
		}
	case opMul:
		for i := range y {
			y[i] = a[i] * b[i]
		}
	}
}

// binaryKernel is add, sub or mul, with b broadcast over a's leading dimensions.
func binaryKernel(op binOp) kernelFunc {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
		a, err := f32s("a", in[0])
		if err != nil {
			return nil, err
		}
		b, err := f32s("b", in[1])
		if err != nil {
			return nil, err
		}
		y, err := f32s("output", out[0])
		if err != nil {
			return nil, err
		}
		nb := len(b)
		if len(y) != len(a) || (nb == 0) != (len(a) == 0) || (nb > 0 && len(a)%nb != 0) {
			return nil, fmt.Errorf("a of %d elements, b of %d, output of %d do not broadcast", len(a), nb, len(y))
		}
		return ops.StepFunc(func() error {
			be.elementwise(len(a), func(lo, hi int) {
				for i := lo; i < hi; {
					j := i % nb
					e := min(hi, i+nb-j)
					applyBinary(op, y[i:e], a[i:e], b[j:j+e-i])
					i = e
				}
			})
			return nil
		}), nil
	}
}

// sigmoid64 is 1 / (1 + e^-x) in float64.
func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// silu64 is x · sigmoid(x) in float64.
func silu64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// unaryKernel is an elementwise map; mk gives, from the node's attributes,
// the function that maps a chunk xs into ys (equal lengths, possibly the same
// slice).
func unaryKernel(mk func(n *graph.Node) (func(ys, xs []float32), error)) kernelFunc {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
		f, err := mk(n)
		if err != nil {
			return nil, err
		}
		x, y, err := xAndOutput(in[0], out[0])
		if err != nil {
			return nil, err
		}
		if len(y) != len(x) {
			return nil, fmt.Errorf("x of %d elements, output of %d", len(x), len(y))
		}
		return ops.StepFunc(func() error {
			be.elementwise(len(x), func(lo, hi int) { f(y[lo:hi], x[lo:hi]) })
			return nil
		}), nil
	}
}

var (
	sigmoidKernel = unaryKernel(func(*graph.Node) (func(ys, xs []float32), error) {
		return func(ys, xs []float32) {
			for i, v := range xs {
				ys[i] = float32(sigmoid64(float64(v)))
			}
		}, nil
	})
	siluKernel = unaryKernel(func(*graph.Node) (func(ys, xs []float32), error) {
		return func(ys, xs []float32) {
			for i, v := range xs {
				ys[i] = float32(silu64(float64(v)))
			}
		}, nil
	})
	scaleKernel = unaryKernel(func(n *graph.Node) (func(ys, xs []float32), error) {
		at, err := ops.NodeAttrs[ops.ScaleAttrs](n)
		if err != nil {
			return nil, err
		}
		c := at.Factor
		return func(ys, xs []float32) {
			for i, v := range xs {
				ys[i] = c * v
			}
		}, nil
	})
)

// swigluKernel is silu(g ⊙ sg) ⊙ (u ⊙ su), each product rounded to f32 as
// the primitive chain does, silu in float64.
func swigluKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	var xs [4][]float32
	for i, name := range []string{"g", "u", "sg", "su"} {
		v, err := f32s(name, in[i])
		if err != nil {
			return nil, err
		}
		xs[i] = v
	}
	g, u, sg, su := xs[0], xs[1], xs[2], xs[3]
	y, err := f32s("output", out[0])
	if err != nil {
		return nil, err
	}
	f := len(sg)
	if f == 0 || len(su) != f || len(g)%f != 0 || len(u) != len(g) || len(y) != len(g) {
		return nil, fmt.Errorf("g %d, u %d, scales %d and %d, output %d elements do not fit", len(g), len(u), len(sg), len(su), len(y))
	}
	rows := len(g) / f
	return ops.StepFunc(func() error {
		be.rowwise(rows, f, func(r int) {
			o := r * f
			gr, ur, yr := g[o:o+f], u[o:o+f], y[o:o+f]
			for i := range yr {
				yr[i] = float32(silu64(float64(gr[i]*sg[i]))) * (ur[i] * su[i])
			}
		})
		return nil
	}), nil
}

// sliceRowsKernel copies rows [From, To).
func sliceRowsKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.SliceAttrs](n)
	if err != nil {
		return nil, err
	}
	x, y, err := xAndOutput(in[0], out[0])
	if err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	if at.From < 0 || at.To < at.From || at.To*w > len(x) || len(y) != (at.To-at.From)*w {
		return nil, fmt.Errorf("rows [%d, %d) of %d-element rows: x has %d elements, output %d", at.From, at.To, w, len(x), len(y))
	}
	src := x[at.From*w : at.To*w]
	return ops.StepFunc(func() error {
		copy(y, src)
		return nil
	}), nil
}

// lastRowKernel copies the last row the call record covers.
func lastRowKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	x, y, err := xAndOutput(in[0], out[0])
	if err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	if w <= 0 || len(x)%w != 0 || len(y) != w {
		return nil, fmt.Errorf("the last row of %d-element rows: x has %d elements, output %d", w, len(x), len(y))
	}
	rows, call := len(x)/w, in[1]
	return ops.StepFunc(func() error {
		_, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		if used == 0 {
			return fmt.Errorf("%s: a plan of no rows", n.Op)
		}
		copy(y, x[(used-1)*w:used*w])
		return nil
	}), nil
}

// argmaxKernel finds each row's largest entry: the lowest index on ties, NaN
// entries skipped, -1 for a row of NaNs only.
func argmaxKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	x, err := f32s("x", in[0])
	if err != nil {
		return nil, err
	}
	y := out[0].I32
	if out[0].dt != graph.I32 || len(y) != out[0].n {
		return nil, fmt.Errorf("output is a %s buffer, want i32", out[0].dt)
	}
	w := n.Inputs[0].Shape.Last()
	if w <= 0 || len(x) != len(y)*w {
		return nil, fmt.Errorf("x of %d elements for %d rows", len(x), len(y))
	}
	return ops.StepFunc(func() error {
		be.rowwise(len(y), w, func(r int) {
			best, at := float32(0), -1
			for i, v := range x[r*w : (r+1)*w] {
				if v != v {
					continue
				}
				if at < 0 || v > best {
					best, at = v, i
				}
			}
			y[r] = int32(at)
		})
		return nil
	}), nil
}
