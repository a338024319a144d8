package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Norms and the fused ops built around them. Sums of squares are taken in
// float64 (four partial sums), which costs nothing next to reading the row.
// Each kernel reads a row's elements before it writes them, so running in
// place (output = input 0) is correct.

// sumSquares is Σ x² in float64.
func sumSquares(x []float32) float64 {
	var s0, s1, s2, s3 float64
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		v := x[i : i+4 : i+4]
		a, b, c, d := float64(v[0]), float64(v[1]), float64(v[2]), float64(v[3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for _, v := range x[n:] {
		s0 += float64(v) * float64(v)
	}
	return (s0 + s1) + (s2 + s3)
}

// l2normalize sets y = x / sqrt(Σx² + eps) (y may be x).
func l2normalize(y, x []float32, eps float32) {
	inv := 1 / math.Sqrt(sumSquares(x)+float64(eps))
	y = y[:len(x)]
	for i, v := range x {
		y[i] = float32(float64(v) * inv)
	}
}

// normGroup reads a norm's attributes and gives its group length.
func normGroup(n *graph.Node, x []float32) (ops.NormAttrs, int, error) {
	at, err := ops.NodeAttrs[ops.NormAttrs](n)
	if err != nil {
		return at, 0, err
	}
	last := n.Inputs[0].Shape.Last()
	g := at.Group
	if g == 0 {
		g = last
	}
	if g <= 0 || last%g != 0 || len(x)%g != 0 {
		return at, 0, fmt.Errorf("group %d does not divide rows of %d", at.Group, last)
	}
	return at, g, nil
}

// rmsNormRun sets y = x / sqrt(mean x² + eps) ⊙ w over one run (y may be x).
func rmsNormRun(y, x, w []float32, eps float64) {
	inv := 1 / math.Sqrt(sumSquares(x)/float64(len(x))+eps)
	for i, v := range x {
		y[i] = float32(float64(v) * inv * float64(w[i]))
	}
}

// normKernel is l2norm (rms false) or rmsnorm (rms true, with a weight of
// the group or of the whole row, of any weight type).
func normKernel(rms bool) kernelFunc {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
		x, y, err := xAndOutput(in[0], out[0])
		if err != nil {
			return nil, err
		}
		at, g, err := normGroup(n, x)
		if err != nil {
			return nil, err
		}
		if len(y) != len(x) {
			return nil, fmt.Errorf("x of %d elements, output of %d", len(x), len(y))
		}
		if !rms {
			return ops.StepFunc(func() error {
				be.rowwise(len(x)/g, g, func(r int) { l2normalize(y[r*g:(r+1)*g], x[r*g:(r+1)*g], at.Eps) })
				return nil
			}), nil
		}
		last := n.Inputs[0].Shape.Last()
		wn := n.Inputs[1].Shape.Elems()
		if wn != g && wn != last {
			return nil, fmt.Errorf("w has %d elements, want %d (the group) or %d (the row)", wn, g, last)
		}
		w, err := weightVecOf("w", in[1], wn)
		if err != nil {
			return nil, err
		}
		eps := float64(at.Eps)
		return ops.StepFunc(func() error {
			sp := be.borrow(wn)
			defer be.giveBack(sp)
			ws := w.values(*sp)
			be.rowwise(len(x)/g, g, func(r int) {
				o := r * g
				wo := o % last % wn
				rmsNormRun(y[o:o+g], x[o:o+g], ws[wo:wo+g], eps)
			})
			return nil
		}), nil
	}
}

// rowOp is the per-row body of a fused row-wise op: it writes row y from the
// same rows of the row inputs (rows[i]) and the vectors (vecs[i], one per
// element of a row).
type rowOp func(y []float32, rows, vecs [][]float32)

// fusedRowKernel binds a fused op whose inputs are nRows row tensors shaped
// like the output followed by vectors of one row's length.
func fusedRowKernel(nRows int, mk func(n *graph.Node) (rowOp, error)) kernelFunc {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
		f, err := mk(n)
		if err != nil {
			return nil, err
		}
		y, err := f32s("output", out[0])
		if err != nil {
			return nil, err
		}
		w := n.Outputs[0].Shape.Last()
		if w <= 0 || len(y)%w != 0 {
			return nil, fmt.Errorf("output of %d elements in rows of %d", len(y), w)
		}
		ins := make([][]float32, len(in))
		for i := range in {
			if ins[i], err = f32s(fmt.Sprintf("input %d", i), in[i]); err != nil {
				return nil, err
			}
			want := len(y)
			if i >= nRows {
				want = w
			}
			if len(ins[i]) != want {
				return nil, fmt.Errorf("input %d has %d elements, want %d", i, len(ins[i]), want)
			}
		}
		vecs := ins[nRows:]
		return ops.StepFunc(func() error {
			parallelFor(len(y)/w, be.threadsFor(len(y)), func(lo, hi int) {
				rows := make([][]float32, nRows)
				for r := lo; r < hi; r++ {
					for i := range rows {
						rows[i] = ins[i][r*w : (r+1)*w]
					}
					f(y[r*w:(r+1)*w], rows, vecs)
				}
			})
			return nil
		}), nil
	}
}

var (
	// slerpKernel is n(n(x) + α ⊙ (n(y) − n(x))).
	slerpKernel = fusedRowKernel(2, func(n *graph.Node) (rowOp, error) {
		at, err := ops.NodeAttrs[ops.EpsAttrs](n)
		if err != nil {
			return nil, err
		}
		eps := float64(at.Eps)
		return func(out []float32, rows, vecs [][]float32) {
			x, y, alpha := rows[0], rows[1], vecs[0]
			nx := 1 / math.Sqrt(sumSquares(x)+eps)
			ny := 1 / math.Sqrt(sumSquares(y)+eps)
			for i := range out {
				a := float64(x[i]) * nx
				out[i] = float32(a + float64(alpha[i])*(float64(y[i])*ny-a))
			}
			l2normalize(out, out, at.Eps)
		}, nil
	})

	// mixKernel is l2norm(a + b).
	mixKernel = fusedRowKernel(2, func(n *graph.Node) (rowOp, error) {
		at, err := ops.NodeAttrs[ops.EpsAttrs](n)
		if err != nil {
			return nil, err
		}
		return func(out []float32, rows, _ [][]float32) {
			a, b := rows[0], rows[1]
			for i := range out {
				out[i] = a[i] + b[i]
			}
			l2normalize(out, out, at.Eps)
		}, nil
	})

	// gatedNormKernel is l2norm(y ⊙ sigmoid(g ⊙ s)).
	gatedNormKernel = fusedRowKernel(2, func(n *graph.Node) (rowOp, error) {
		at, err := ops.NodeAttrs[ops.EpsAttrs](n)
		if err != nil {
			return nil, err
		}
		return func(out []float32, rows, vecs [][]float32) {
			y, g, s := rows[0], rows[1], vecs[0]
			for i := range out {
				out[i] = y[i] * float32(sigmoid64(float64(g[i]*s[i])))
			}
			l2normalize(out, out, at.Eps)
		}, nil
	})
)
