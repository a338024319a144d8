package optest

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Cases of the mixture-of-experts ops.

func moeCases() []Case {
	var cs []Case
	type route struct {
		rows, e, k int
		norm       bool
		err        string
	}
	for _, s := range []route{
		{1, 8, 2, true, ""}, {5, 64, 10, true, ""}, {3, 7, 7, false, ""}, {2, 512, 10, true, ""}, {4, 6, 1, false, ""},
		{2, 16, 4, true, "NaN"},
	} {
		name := fmt.Sprintf("moe_route/%dx%d/k=%d/norm=%v", s.rows, s.e, s.k, s.norm)
		if s.err != "" {
			name = "moe_route/error/" + name[len("moe_route/"):]
		}
		m := newMaker(name)
		l := m.tensor("logits", graph.Input, graph.F32, 4, s.rows, s.e)
		if s.rows >= 3 { // ties in row 1, at the top: the smaller id comes first
			for _, j := range []int{3, 5, s.e - 1} {
				l.Data[s.e+j] = 9
			}
		}
		if s.err != "" {
			l.Data[s.e+1] = nan
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{l},
			Build:  applyAll(ops.OpMoERoute, ops.RouteAttrs{K: s.k, Norm: s.norm}, 2),
			Ref: func(in [][]float64) [][]float64 {
				ids, w, _ := refRoute(in[0], s.e, s.k, s.norm)
				return [][]float64{ids, w}
			},
			Tol:     TolF32,
			WantErr: s.err,
		})
	}
	type expert struct {
		rows, k, e, out, in int
		dt                  graph.DType
		perUnit             bool
		bad                 int // != 0: an id of e + bad − 1 (bad > 0) or −1
	}
	// expertCase is an expert product of shape s: expert_matmul, or with glu
	// expert_matmul_glu (the out rows of an expert its gate and up halves);
	// same gives every row the first row's ids (each chosen expert has a
	// unit in every row).
	expertCase := func(s expert, glu, same bool) Case {
		op, d := "expert_matmul", ops.OpExpertMatMul
		if glu {
			op, d = "expert_matmul_glu", ops.OpExpertMatMulGLU
		}
		name := fmt.Sprintf("%s/%s/rows=%d/k=%d/e=%d/%dx%d/per_unit=%v", op, s.dt, s.rows, s.k, s.e, s.out, s.in, s.perUnit)
		if same {
			name += "/same_ids"
		}
		if s.bad != 0 {
			name = op + "/error/" + name[len(op)+1:]
		}
		m := newMaker(name)
		x := m.expertRows(s.rows, s.k, s.in, s.perUnit)
		w := m.weight("w", s.dt, s.e, s.out, s.in)
		ids, want := m.expertIDs(s.rows, s.k, s.e, s.bad)
		if same {
			for i := s.k; i < len(ids.Data); i++ {
				ids.Data[i] = ids.Data[i%s.k]
			}
		}
		return Case{
			Name:   name,
			Inputs: []Tensor{x, w, ids},
			Build:  applyAll(d, nil, 1),
			Ref: func(in [][]float64) [][]float64 {
				y := refExpert(in[0], in[1], in[2], s.out, s.in, s.perUnit)
				if glu {
					y = refSiLUGLU(y, s.out/2)
				}
				return [][]float64{y}
			},
			Tol:     expertTol(s.rows, s.dt),
			WantErr: want,
		}
	}
	for _, s := range []expert{
		{1, 2, 8, 16, 32, graph.F32, false, 0}, {3, 2, 4, 7, 33, graph.BF16, false, 0},
		{2, 3, 5, 9, 17, graph.F16, true, 0}, {5, 10, 16, 65, 40, graph.BF16, false, 0},
		{8, 4, 6, 130, 64, graph.F32, false, 0},
		{2, 2, 4, 8, 8, graph.BF16, false, 1}, {2, 2, 4, 8, 8, graph.F32, true, -1},
		// decode shapes (no more units than experts: CUDA's warp path) with
		// f16, rows of an odd length and a wider expert; a bad id where the
		// units outnumber the experts (CUDA's grouped path)
		{1, 2, 8, 16, 64, graph.F16, false, 0}, {1, 3, 8, 12, 33, graph.BF16, false, 0},
		{1, 10, 64, 64, 256, graph.BF16, false, 0}, {4, 3, 4, 8, 16, graph.BF16, false, 1},
		// prompt shapes (more than 8 rows: CUDA's tensor-core path for bf16
		// and f16, in tiles of 64 units by 128 features by 32 inputs): inputs
		// of odd lengths and not a whole step, features over one tile,
		// experts with more units than a tile, both layouts of x; f32
		// weights; a bad id
		{40, 3, 7, 50, 72, graph.BF16, false, 0}, {130, 4, 9, 72, 50, graph.F16, true, 0},
		{130, 4, 5, 130, 64, graph.BF16, false, 0}, {40, 2, 5, 129, 33, graph.F16, false, 0},
		{40, 3, 6, 140, 96, graph.BF16, true, 0}, {9, 2, 8, 20, 16, graph.BF16, false, 0},
		{40, 2, 5, 24, 40, graph.F32, true, 0}, {40, 2, 5, 16, 24, graph.BF16, false, 1},
	} {
		cs = append(cs, expertCase(s, false, false))
	}
	// expert_matmul_glu: decode shapes (CUDA's fused warp form) with bf16,
	// f16 and f32 weights, qwen4-12l's 10 of 64 experts, inputs of odd
	// length, a bad id; more units than experts, and more than 8 rows (the
	// products into scratch, then silu_glu), a bad id there
	for _, s := range []expert{
		{1, 10, 64, 128, 256, graph.BF16, false, 0}, {1, 3, 8, 24, 33, graph.F16, false, 0},
		{2, 2, 8, 16, 32, graph.F32, false, 0}, {1, 2, 8, 16, 64, graph.BF16, false, 1},
		{4, 3, 4, 16, 16, graph.BF16, false, 0}, {3, 2, 4, 8, 8, graph.F32, true, 0},
		{40, 3, 7, 50, 72, graph.BF16, false, 0}, {40, 2, 5, 24, 40, graph.F32, true, 0},
		{40, 2, 5, 16, 24, graph.BF16, false, 1},
	} {
		cs = append(cs, expertCase(s, true, false))
	}
	// decode windows of 2 to 8 rows (CUDA's window form: a block per chosen
	// expert, its rows read once for the window's units routed to it), in
	// both ops: qwen4-12l's 10 of 64 experts (more units than experts at 8
	// rows, more than a warp's 32 ids at 5), both layouts of x, inputs of
	// odd length (no vector loads), f16 and f32; experts with more units
	// than a pass takes (8); over 1024 experts (ids past the first 32 words
	// of the kernel's bitmap: the first pick is the last expert); every row
	// routed alike; bad ids
	window := []expert{
		{2, 10, 64, 24, 64, graph.BF16, false, 0}, {5, 10, 64, 16, 40, graph.BF16, true, 0},
		{8, 10, 64, 20, 33, graph.F16, false, 0}, {7, 3, 9, 12, 24, graph.F32, true, 0},
		{8, 4, 3, 12, 16, graph.F32, false, 0}, {8, 4, 4, 8, 24, graph.BF16, true, 0},
		{6, 2, 1100, 8, 16, graph.BF16, false, 0},
		{3, 4, 8, 8, 16, graph.BF16, false, 2}, {4, 2, 5, 8, 8, graph.F32, true, -1},
	}
	for _, glu := range []bool{false, true} {
		for _, s := range window {
			cs = append(cs, expertCase(s, glu, false))
		}
		cs = append(cs, expertCase(expert{8, 10, 64, 16, 64, graph.BF16, false, 0}, glu, true),
			expertCase(expert{3, 4, 6, 8, 24, graph.F16, true, 0}, glu, true))
	}
	for _, s := range []struct {
		rows, k, h int
		shared     bool
	}{{1, 2, 16, true}, {3, 10, 33, false}, {5, 4, 64, true}, {20, 8, 64, true}} {
		name := fmt.Sprintf("moe_combine/rows=%d/k=%d/h=%d/shared=%v", s.rows, s.k, s.h, s.shared)
		m := newMaker(name)
		inputs := []Tensor{m.tensor("y", graph.Input, graph.F32, 2, s.rows, s.k, s.h), m.in("w", s.rows, s.k)}
		if s.shared {
			inputs = append(inputs, m.in("s", s.rows, s.h), m.tensor("sg", graph.Input, graph.F32, 4, s.rows, 1))
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build:  applyAll(ops.OpMoECombine, nil, 1),
			Ref: func(in [][]float64) [][]float64 {
				var sh, sg []float64
				if s.shared {
					sh, sg = in[2], in[3]
				}
				return [][]float64{refCombine(in[0], in[1], sh, sg, s.k, s.h)}
			},
			Tol: TolF32,
		})
	}
	return cs
}

// expertTol is the bound of an expert_matmul case of rows rows with weights
// of dt: TolF32 up to 8 rows (decode: backends multiply in f32), else that
// of dt, which allows the one rounding of the activations to the weights'
// 16-bit type that prompt products on tensor cores make (an NMSE of about
// 3e-6 for bf16, 5e-8 for f16).
func expertTol(rows int, dt graph.DType) float64 {
	if rows <= 8 {
		return TolF32
	}
	return tolFor(dt)
}

// expertRows are the rows of an expert product: x [rows, in], or [rows, k,
// in] per unit.
func (m *maker) expertRows(rows, k, in int, perUnit bool) Tensor {
	if perUnit {
		return m.in("x", rows, k, in)
	}
	return m.in("x", rows, in)
}

// expertIDs are the ids [rows, k] of an expert product over e experts:
// random, with the last expert in the first pick and an expert taken by
// two rows; bad != 0 puts in an id of e + bad − 1 (bad > 0, the last pick)
// or −1 (the second pick), and want is then the error it gives.
func (m *maker) expertIDs(rows, k, e, bad int) (ids Tensor, want string) {
	v := make([]int, rows*k)
	for i := range v {
		v[i] = m.r.intn(e)
	}
	v[0] = e - 1
	if len(v) > 2 {
		v[2] = v[0] // an expert taken by two rows
	}
	if bad > 0 {
		v[len(v)-1] = e + bad - 1
		want = fmt.Sprintf("expert id %d outside [0, %d)", e+bad-1, e)
	} else if bad < 0 {
		v[1] = -1
		want = fmt.Sprintf("expert id -1 outside [0, %d)", e)
	}
	return intLeaf("ids", graph.Input, v, rows, k), want
}
