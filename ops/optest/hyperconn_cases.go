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
	return cs
}
