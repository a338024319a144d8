package optest

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// windowCases are products of decode windows (2 to 8 rows) with 16-bit
// weights, at decode's bound (TolSplit, not TolBF16: a window is decode
// rows, which a backend keeps near f32): matmul with K a multiple of 4 or
// odd, activations far from 1 (f16's range), grouped weights of two shapes
// (pairs a backend may batch), matmul_swiglu, norm_matmul with a zero row,
// and swiglu_norm_matmul (both products of the MLP as windows).
func windowCases() []Case {
	var cs []Case
	for _, dt := range []graph.DType{graph.BF16, graph.F16} {
		for _, s := range []struct {
			rows, k, n int
			amp        float64
		}{{2, 520, 300, 1}, {3, 131, 40, 1}, {5, 264, 129, 3e5}, {8, 96, 70, 1e-6}, {7, 1030, 33, 1}} {
			rows, k, n := s.rows, s.k, s.n
			name := fmt.Sprintf("window/matmul/%s/%dx%dx%d/amp=%g", dt, rows, k, n, s.amp)
			m := newMaker(name)
			cs = append(cs, Case{
				Name:   name,
				Inputs: []Tensor{m.tensor("x", graph.Input, graph.F32, s.amp, rows, k), m.weight("w", dt, n, k)},
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					return []*graph.Value{ops.MatMul(b, in[0], in[1])}
				},
				Ref: func(in [][]float64) [][]float64 { return [][]float64{RefMatMul(in[0], k, in[1])} },
				Tol: TolSplit,
			})
		}
		{
			const rows, k = 5, 136
			ns := []int{40, 9, 9, 40}
			name := fmt.Sprintf("window/grouped_matmul/%s/%dx%dx%v", dt, rows, k, ns)
			m := newMaker(name)
			in := []Tensor{m.in("x", rows, k)}
			for i, n := range ns {
				in = append(in, m.weight(fmt.Sprintf("w%d", i), dt, n, k))
			}
			cs = append(cs, Case{
				Name:   name,
				Inputs: in,
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					return ops.GroupedMatMul(b, in[0], in[1:]...)
				},
				Ref: func(in [][]float64) [][]float64 {
					out := make([][]float64, len(ns))
					for i := range out {
						out[i] = RefMatMul(in[0], k, in[1+i])
					}
					return out
				},
				Tol: TolSplit,
			})
		}
		for _, s := range [][3]int{{4, 264, 70}, {8, 33, 17}} {
			rows, k, f := s[0], s[1], s[2]
			cs = append(cs, matmulSwiGLUCase(fmt.Sprintf("window/matmul_swiglu/%s/%dx%dx%d", dt, rows, k, f), dt, rows, k, f, TolSplit))
		}
		{
			const rows, k, n = 6, 130, 50
			cs = append(cs, normMatMulCase(fmt.Sprintf("window/norm_matmul/%s/%dx%dx%d", dt, rows, k, n), dt, rows, k, n, 2, TolSplit))
		}
		{
			const rows, k, f, n, eps = 7, 64, 96, 40, 1e-6
			name := fmt.Sprintf("window/swiglu_norm_matmul/%s/%dx%dx%dx%d", dt, rows, k, f, n)
			m := newMaker(name)
			cs = append(cs, Case{
				Name: name,
				Inputs: []Tensor{m.in("x", rows, k), m.weight("wg", dt, f, k), m.weight("wu", dt, f, k),
					m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f), m.weight("wd", dt, n, f)},
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					return b.Apply(ops.OpSwiGLUNormMatMul, ops.EpsAttrs{Eps: eps}, 1, in...)
				},
				Ref: func(in [][]float64) [][]float64 {
					a := refSwiGLU(RefMatMul(in[0], k, in[1]), RefMatMul(in[0], k, in[2]), in[3], in[4])
					return [][]float64{RefMatMul(refL2Norm(a, f, float64(float32(eps))), f, in[5])}
				},
				Tol: TolSplit,
			})
		}
	}
	return cs
}
