package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Helpers shared by the family kernels (deltanet, hyperconn, moe, ngram,
// sparseattn).

// activationFunc gives the float64 function of an activation.
func activationFunc(a ops.Activation) (func(float64) float64, error) {
	switch a {
	case ops.ActIdentity:
		return func(x float64) float64 { return x }, nil
	case ops.ActSiLU:
		return silu64, nil
	case ops.ActSigmoid:
		return sigmoid64, nil
	}
	return nil, fmt.Errorf("unknown activation %q", a)
}

// weightVec is a weight vector of n elements (f32, bf16 or f16). Its values are
// decoded when a step runs, never at bind time, so a weight written after
// binding is read as it is then.
type weightVec struct{ m matrix }

func weightVecOf(what string, b *Buffer, n int) (weightVec, error) {
	m, err := matrixOf(what, b, 1, n)
	return weightVec{m}, err
}

// values gives the vector as f32: the weight's own memory for f32 (not to be
// written), else decoded into scratch of n elements.
func (v weightVec) values(scratch []float32) []float32 { return v.m.block(0, 1, scratch) }

// matrixValues decodes (or views) a whole matrix into scratch.
func matrixValues(m matrix, scratch []float32) []float32 { return m.block(0, m.rows, scratch) }

// i32Buf gives the i32 elements of a buffer, or an error naming it.
func i32Buf(what string, b *Buffer) ([]int32, error) {
	if b.dt != graph.I32 || len(b.I32) != b.n {
		return nil, fmt.Errorf("%s is a %s buffer of %d elements, want i32", what, b.dt, b.n)
	}
	return b.I32, nil
}

// f32Bufs gives the f32 elements of several buffers with the lengths wanted
// (a negative length: any).
func f32Bufs(names []string, bs []*Buffer, lens ...int) ([][]float32, error) {
	out := make([][]float32, len(bs))
	for i, b := range bs {
		x, err := f32s(names[i], b)
		if err != nil {
			return nil, err
		}
		if lens[i] >= 0 && len(x) != lens[i] {
			return nil, fmt.Errorf("%s has %d elements, want %d", names[i], len(x), lens[i])
		}
		out[i] = x
	}
	return out, nil
}

// zeroRows clears rows [from, rows) of a row-major matrix of width w.
func zeroRows(y []float32, from, w int) {
	clear(y[from*w:])
}
