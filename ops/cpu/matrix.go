package cpu

import (
	"fmt"

	"gonum.org/v1/gonum/blas/blas32"

	"github.com/reel-runtime/reel/graph"
)

// matrix reads the rows of a 2-D weight or table stored as f32, bf16 or f16,
// as f32. Every kernel that reads weights goes through it, so each kernel is
// written once for all weight types.
type matrix struct {
	dt         graph.DType
	rows, cols int
	f32        []float32 // the elements, for f32
	raw        []byte    // the little-endian elements, for bf16 and f16
	q          *quantized
}

// matrixOf views a buffer as a rows x cols matrix.
func matrixOf(what string, b *Buffer, rows, cols int) (matrix, error) {
	m := matrix{dt: b.dt, rows: rows, cols: cols}
	if b.n != rows*cols {
		return m, fmt.Errorf("%s has %d elements, want %d x %d", what, b.n, rows, cols)
	}
	switch b.dt {
	case graph.F32:
		if len(b.F32) != b.n {
			return m, fmt.Errorf("%s: f32 buffer without its elements", what)
		}
		m.f32 = b.F32
	case graph.BF16, graph.F16:
		if len(b.decoded) == b.n {
			// Decoded at load: read as f32 (the values are the same).
			m.dt, m.f32 = graph.F32, b.decoded
			return m, nil
		}
		if len(b.Raw) < 2*b.n {
			return m, fmt.Errorf("%s: %s buffer of %d bytes for %d elements", what, b.dt, len(b.Raw), b.n)
		}
		m.raw = b.Raw[:2*b.n]
	default:
		return m, fmt.Errorf("%s: dtype %s is not a weight type (f32, bf16, f16)", what, b.dt)
	}
	return m, nil
}

// block gives rows [lo, hi) as consecutive f32 rows: the weight's own memory
// for f32 (which must not be written), else decoded (a quantized weight:
// dequantized) into scratch, which must hold (hi-lo)·cols elements.
func (m *matrix) block(lo, hi int, scratch []float32) []float32 {
	a, b := lo*m.cols, hi*m.cols
	switch {
	case m.q != nil:
		m.q.rows(lo, hi, m.cols, scratch[:b-a])
	case m.dt == graph.F32:
		return m.f32[a:b:b]
	default:
		m.dt.DecodeFloats(scratch[:b-a], m.raw[2*a:2*b])
	}
	return scratch[: b-a : b-a]
}

// decodes reports whether block needs scratch (the weight is not f32).
func (m *matrix) decodes() bool { return m.dt != graph.F32 }

// dot is the f32 inner product of two equal-length vectors (gonum's SIMD
// kernel, eight partial sums). Its sum is rounded by where y lies (the
// kernel takes y's elements before a 16-byte boundary apart), so a weight
// row goes in x and an activation row in y: a weight's bytes may lie
// anywhere in a file mapping, activations lie where the plan puts them,
// so the same weights give the same numbers wherever their file put them.
func dot(x, y []float32) float32 {
	return blas32.Dot(blas32.Vector{N: len(x), Inc: 1, Data: x}, blas32.Vector{N: len(x), Inc: 1, Data: y})
}

// axpy adds a·x to y.
func axpy(a float32, x, y []float32) {
	blas32.Axpy(a, blas32.Vector{N: len(x), Inc: 1, Data: x}, blas32.Vector{N: len(x), Inc: 1, Data: y})
}
