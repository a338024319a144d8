package optest

import (
	"fmt"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// slerpCases are the fused slerp ops (ops/fused_slerp.go): decode rows (1
// to 8: the planner fuses prompt rows only, but the op takes any; CUDA's
// slerp row kernel then its matvec), prompt rows (the slerp row kernel with
// the 16-bit copy the products read), K a multiple of the 16-byte vectors
// and odd (one row of 520 spreads its products over many blocks), one to
// five weights of one or mixed stored types.
func slerpCases() []Case {
	const eps = 1e-6
	var cs []Case
	for _, s := range []struct {
		rows, k int
		dts     []graph.DType
		ns      []int
	}{
		{1, 64, []graph.DType{graph.BF16, graph.BF16, graph.BF16, graph.BF16}, []int{33, 7, 9, 40}},
		{1, 65, []graph.DType{graph.F32}, []int{17}},
		{1, 520, []graph.DType{graph.BF16, graph.BF16}, []int{300, 44}},
		{1, 128, []graph.DType{graph.F16}, []int{70}},
		{1, 64, []graph.DType{graph.F32, graph.BF16}, []int{12, 20}},
		{1, 64, []graph.DType{graph.BF16, graph.BF16, graph.BF16, graph.BF16, graph.BF16}, []int{8, 8, 8, 8, 8}},
		{3, 65, []graph.DType{graph.BF16, graph.BF16}, []int{16, 5}},
		{4, 128, []graph.DType{graph.F16, graph.F16, graph.F16}, []int{24, 8, 8}},
		{5, 64, []graph.DType{graph.F32, graph.BF16}, []int{12, 20}},
		{8, 256, []graph.DType{graph.BF16, graph.BF16}, []int{64, 16}},
		{2, 64, []graph.DType{graph.BF16, graph.BF16, graph.BF16, graph.BF16, graph.BF16}, []int{8, 8, 8, 8, 8}},
		{17, 64, []graph.DType{graph.BF16, graph.BF16, graph.BF16, graph.BF16}, []int{32, 8, 8, 32}},
		{20, 65, []graph.DType{graph.BF16}, []int{21}},
		{16, 64, []graph.DType{graph.F32, graph.F32}, []int{9, 10}},
		{24, 64, []graph.DType{graph.F16, graph.BF16}, []int{9, 10}},
	} {
		rows, k := s.rows, s.k
		var dn []string
		for i, dt := range s.dts {
			dn = append(dn, fmt.Sprintf("%s:%d", dt, s.ns[i]))
		}
		name := fmt.Sprintf("slerp_matmul/%dx%d/%s", rows, k, strings.Join(dn, ","))
		m := newMaker(name)
		in := []Tensor{m.in("x", rows, k), m.in("y", rows, k), m.in("alpha", k)}
		tol := TolF32
		for i, dt := range s.dts {
			in = append(in, m.weight(fmt.Sprintf("w%d", i), dt, s.ns[i], k))
			tol = max(tol, tolFor(dt))
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: in,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return ops.SlerpMatMul(b, in[0], in[1], in[2], eps, in[3:]...)
			},
			Ref: func(in [][]float64) [][]float64 {
				h := refSlerp(in[0], in[1], in[2], float64(float32(eps)))
				out := [][]float64{h}
				for _, w := range in[3:] {
					out = append(out, RefMatMul(h, k, w))
				}
				return out
			},
			Tol: tol,
		})
	}
	for _, s := range []struct {
		rows, k, f int
		dt         graph.DType
	}{
		{1, 64, 48, graph.BF16}, {1, 33, 20, graph.F32}, {1, 520, 130, graph.BF16}, {1, 64, 24, graph.F16},
		{4, 65, 33, graph.F32}, {8, 128, 70, graph.BF16},
		{17, 64, 40, graph.BF16}, {16, 33, 20, graph.F16}, {18, 64, 24, graph.F32},
	} {
		rows, k, f := s.rows, s.k, s.f
		name := fmt.Sprintf("slerp_matmul_swiglu/%s/%dx%dx%d", s.dt, rows, k, f)
		m := newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("x", rows, k), m.in("y", rows, k), m.in("alpha", k),
				m.weight("wg", s.dt, f, k), m.weight("wu", s.dt, f, k),
				m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return ops.SlerpMatMulSwiGLU(b, in[0], in[1], in[2], eps, in[3], in[4], in[5], in[6])
			},
			Ref: func(in [][]float64) [][]float64 {
				h := refSlerp(in[0], in[1], in[2], float64(float32(eps)))
				return [][]float64{h, refSwiGLU(RefMatMul(h, k, in[3]), RefMatMul(h, k, in[4]), in[5], in[6])}
			},
			Tol: tolFor(s.dt),
		})
	}
	return cs
}
