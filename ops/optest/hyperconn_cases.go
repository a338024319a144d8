package optest

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Cases of the gated residual (hyper-connection) stream ops.

func hyperconnCases() []Case {
	var cs []Case
	for _, s := range [][3]int{{1, 1, 1}, {3, 4, 33}, {5, 2, 65}, {20, 4, 64}} {
		rows, c, h := s[0], s[1], s[2]
		at := ops.StreamAttrs{Streams: c}
		name := fmt.Sprintf("hc_expand/%dx%d/streams=%d", rows, h, c)
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", rows, h)},
			Build:  applyAll(ops.OpHCExpand, at, 1),
			Ref:    func(in [][]float64) [][]float64 { return [][]float64{refHCExpand(in[0], c, h)} },
			Tol:    TolF32,
		})
		name = fmt.Sprintf("hc_mix/%dx%dx%d", rows, c, h)
		m = newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("xn", graph.Input, graph.F32, 2, rows, c*h),
				m.tensor("g", graph.Input, graph.F32, 4, rows, c*h)},
			Build: applyAll(ops.OpHCMix, at, 1),
			Ref:   func(in [][]float64) [][]float64 { return [][]float64{refHCMix(in[0], in[1], c, h)} },
			Tol:   TolF32,
		})
		name = fmt.Sprintf("hc_inject/%dx%dx%d", rows, c, h)
		m = newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("x", rows, c*h), m.tensor("y", graph.Input, graph.F32, 2, rows, h),
				m.tensor("l", graph.Input, graph.F32, 6, rows, c)},
			Build: applyAll(ops.OpHCInject, at, 1),
			Ref:   func(in [][]float64) [][]float64 { return [][]float64{refHCInject(in[0], in[1], in[2], c, h)} },
			Tol:   TolF32,
		})
		name = fmt.Sprintf("ple_gate/%dx%dx%d", rows, c, h)
		m = newMaker(name)
		kn := m.tensor("kn", graph.Input, graph.F32, 2, rows, c*h)
		if rows >= 3 {
			clear(kn.Data[c*h : c*h+h]) // γ = 0 in row 1's stream 0: the gate is sigmoid(0)
			for i := 2 * c * h; i < 2*c*h+h; i++ {
				kn.Data[i] = round(graph.F32, kn.Data[i]*1e-5) // |γ| < 1e-6: clamped
			}
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{kn, m.tensor("qn", graph.Input, graph.F32, 2, rows, c*h), m.in("v", rows, h)},
			Build:  applyAll(ops.OpPLEGate, at, 1),
			Ref:    func(in [][]float64) [][]float64 { return [][]float64{refPLEGate(in[0], in[1], in[2], c, h)} },
			Tol:    TolF32,
		})
	}
	return append(cs, fusedHCCases()...)
}

// fusedHCCases are the cases of the fused stream ops (ops/fused_hyperconn.go).
func fusedHCCases() []Case {
	var cs []Case
	// moe_inject_norm: qwen4-12l's 10 experts and shared expert at one row,
	// its 4 streams of 2560 normed per stream with a row weight; without a
	// shared expert, rows 1 to 8 and 20 (decode and prompt), a norm over
	// whole rows and over runs across streams, a group weight, bf16 and
	// f16 weights, rows of 8K to 32K a run (CUDA's wide kernel) and past a
	// block's registers (its parts)
	type moe struct {
		rows, c, h, k, group, wlen int
		dt                         graph.DType
		shared                     bool
	}
	for _, s := range []moe{
		{1, 4, 2560, 10, 2560, 10240, graph.F32, true}, {3, 4, 33, 2, 33, 132, graph.F32, false}, {8, 2, 64, 4, 0, 128, graph.BF16, true},
		{2, 3, 64, 3, 96, 96, graph.F32, true}, {20, 4, 40, 3, 40, 40, graph.F16, true}, {1, 1, 1, 1, 0, 1, graph.F32, false},
		{2, 4, 2560, 2, 0, 10240, graph.F32, true}, {1, 2, 20000, 2, 40000, 40000, graph.BF16, true},
	} {
		g := s.group
		if g == 0 {
			g = s.c * s.h
		}
		at := ops.MoEInjectNormAttrs{Streams: s.c, Norm: ops.NormAttrs{Group: s.group, Eps: 1e-6}}
		name := fmt.Sprintf("moe_inject_norm/%s/%dx%dx%d/k=%d/group=%d/w=%d/shared=%v", s.dt, s.rows, s.c, s.h, s.k, s.group, s.wlen, s.shared)
		m := newMaker(name)
		c, h, k, shared := s.c, s.h, s.k, s.shared
		inputs := []Tensor{m.in("x", s.rows, c*h), m.tensor("l", graph.Input, graph.F32, 6, s.rows, c),
			m.tensor("w", graph.Weight, s.dt, 1.5, s.wlen), m.tensor("y", graph.Input, graph.F32, 2, s.rows, k, h), m.in("p", s.rows, k)}
		if shared {
			inputs = append(inputs, m.in("s", s.rows, h), m.tensor("sg", graph.Input, graph.F32, 4, s.rows, 1))
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build:  applyAll(ops.OpMoEInjectNorm, at, 2),
			Ref: func(in [][]float64) [][]float64 {
				var sh, sg []float64
				if shared {
					sh, sg = in[5], in[6]
				}
				x := refHCInject(in[0], refCombine(in[3], in[4], sh, sg, k, h), in[1], c, h)
				return [][]float64{x, refRMSNorm(x, in[2], g, float64(float32(1e-6)))}
			},
			Tol: TolF32,
		})
	}
	// hc_mix_matmul: decode rows (1 to 8: CUDA's fused kernel) and prompt
	// rows (its parts), qwen4-12l's rank of 320 (16-byte loads), ranks of
	// odd length (element loads), f32, bf16 and f16 weights, 1 to 4
	// streams and 6 (past the fused kernel's 4: its parts)
	type mix struct {
		rows, c, h, r int
		dt            graph.DType
	}
	for _, s := range []mix{
		{1, 4, 2560, 320, graph.BF16}, {1, 4, 96, 320, graph.BF16}, {2, 2, 33, 17, graph.F32},
		{5, 4, 40, 64, graph.F16}, {8, 4, 64, 40, graph.BF16}, {8, 1, 7, 9, graph.F32},
		{3, 6, 16, 24, graph.BF16}, {20, 4, 48, 40, graph.BF16}, {17, 2, 33, 19, graph.F32},
	} {
		at := ops.HCMixMatMulAttrs{Streams: s.c, Scale: 1 / float32(s.c)}
		name := fmt.Sprintf("hc_mix_matmul/%s/%dx%dx%d/rank=%d", s.dt, s.rows, s.c, s.h, s.r)
		m := newMaker(name)
		c, h, r := s.c, s.h, s.r
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("xn", graph.Input, graph.F32, 2, s.rows, c*h), m.tensor("d", graph.Input, graph.F32, 4, s.rows, r),
				m.tensor("w", graph.Weight, s.dt, 0.5, c*h, r)},
			Build: applyAll(ops.OpHCMixMatMul, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				sc := float64(at.Scale)
				t := refMap(in[1], func(v float64) float64 { return refSiLU(sc * v) })
				return [][]float64{refHCMix(in[0], RefMatMul(t, r, in[2]), c, h)}
			},
			Tol: tolFor(s.dt),
		})
	}
	return cs
}
