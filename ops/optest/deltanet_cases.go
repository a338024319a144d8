package optest

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Cases of the Gated DeltaNet ops (split, reshape, causal_conv, gdn_prep,
// gdn_gates, gdn_scan, gated_rmsnorm).

func gatedNormCases() []Case {
	var cs []Case
	const eps = 1e-6
	type gated struct {
		rows, heads, group int
		act                ops.Activation
		dt                 graph.DType
	}
	for _, s := range []gated{
		{1, 1, 16, ops.ActSigmoid, graph.F32}, {3, 4, 16, ops.ActSiLU, graph.BF16},
		{2, 3, 33, ops.ActSigmoid, graph.F16}, {30, 8, 32, ops.ActSigmoid, graph.BF16},
	} {
		name := fmt.Sprintf("gated_rmsnorm/%s/%dx%dx%d/%s", s.dt, s.rows, s.heads, s.group, s.act)
		m := newMaker(name)
		at := ops.GatedRMSNormAttrs{Group: s.group, Eps: eps, Act: s.act}
		w := s.heads * s.group
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("o", graph.Input, graph.F32, 2, s.rows, w), m.tensor("z", graph.Input, graph.F32, 4, s.rows, w),
				m.weight("w", s.dt, s.group)},
			Build: applyAll(ops.OpGatedRMSNorm, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{refGatedRMSNorm(in[0], in[1], in[2], epsOf(eps), s.act)}
			},
			Tol: TolF32,
		})
	}
	return cs
}

func splitReshapeCases() []Case {
	var cs []Case
	type split struct {
		rows, heads int
		parts       []int
	}
	for _, s := range []split{{1, 1, []int{5, 5, 7}}, {3, 3, []int{4, 4}}, {2, 4, []int{1, 2, 3}}, {10, 8, []int{32, 32}}} {
		per := 0
		for _, p := range s.parts {
			per += p
		}
		name := fmt.Sprintf("split/%dx%dx%v", s.rows, s.heads, s.parts)
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", s.rows, s.heads*per)},
			Build:  applyAll(ops.OpSplit, ops.SplitAttrs{Heads: s.heads, Parts: s.parts}, len(s.parts)),
			Ref:    func(in [][]float64) [][]float64 { return refSplit(in[0], s.heads, s.parts) },
			Tol:    0,
		})
	}
	type reshape struct {
		from, to []int
		dt       graph.DType
	}
	for _, s := range []reshape{{[]int{6, 10}, []int{3, 20}, graph.F32}, {[]int{1, 7}, []int{7}, graph.F32}, {[]int{2, 3}, []int{6}, graph.I32}, {[]int{4, 2048}, []int{8, 2, 512}, graph.F32}} {
		name := fmt.Sprintf("reshape/%s/%v/%v", s.dt, graph.Shape(s.from), graph.Shape(s.to))
		m := newMaker(name)
		x := m.tensor("x", graph.Input, s.dt, 100, s.from...)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{x},
			Build:  applyAll(ops.OpReshape, ops.ReshapeAttrs{Shape: s.to}, 1),
			Ref:    func(in [][]float64) [][]float64 { return [][]float64{in[0]} },
			Tol:    0,
		})
	}
	for _, s := range [][]int{{1, 1}, {3, 65}, {20, 300}} {
		name := fmt.Sprintf("gate_merge/%v", graph.Shape(s))
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.tensor("y", graph.Input, graph.F32, 2, s...), m.tensor("g", graph.Input, graph.F32, 6, s...)},
			Build:  applyAll(ops.OpGateMerge, nil, 1),
			Ref: func(in [][]float64) [][]float64 {
				y := make([]float64, len(in[0]))
				for i := range y {
					y[i] = in[0][i] * refSigmoid(in[1][i])
				}
				return [][]float64{y}
			},
			Tol: TolF32,
		})
	}
	for _, s := range [][]int{{1, 2}, {3, 14}, {2, 3, 32}, {40, 128}} {
		name := fmt.Sprintf("silu_glu/%v", graph.Shape(s))
		m := newMaker(name)
		f := s[len(s)-1] / 2
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.tensor("x", graph.Input, graph.F32, 6, s...)},
			Build:  applyAll(ops.OpSiLUGLU, nil, 1),
			Ref:    func(in [][]float64) [][]float64 { return [][]float64{refSiLUGLU(in[0], f)} },
			Tol:    TolF32,
		})
	}
	return cs
}

func convCases() []Case {
	var cs []Case
	type conv struct {
		rows, c, k, dil, pos, used int
		act                        ops.Activation
		dt                         graph.DType
		w3                         bool // w is [C, 1, K] as checkpoints store it
	}
	for _, s := range []conv{
		{1, 7, 4, 1, 0, 0, ops.ActSiLU, graph.F32, true},
		{5, 33, 4, 1, 0, 0, ops.ActSiLU, graph.BF16, true},
		{3, 16, 4, 1, 7, 0, ops.ActSiLU, graph.F32, false}, // the history from the ring
		{2, 9, 4, 3, 5, 0, ops.ActSiLU, graph.F16, true},   // dilated, partly before position 0
		{6, 8, 4, 3, 2, 0, ops.ActIdentity, graph.F32, false},
		{4, 8, 4, 1, 3, 2, ops.ActSiLU, graph.BF16, true},  // padded: two rows are real
		{12, 8, 2, 2, 40, 0, ops.ActSiLU, graph.F32, true}, // more rows than the ring holds
		{1, 65, 4, 3, 100, 0, ops.ActSiLU, graph.BF16, true},
		{40, 130, 4, 1, 10, 0, ops.ActSiLU, graph.BF16, true},
		// plans built for a bucket of rows: the ring takes the call's
		// last rows (a GDN conv, a PLE conv dilated by the n-gram)
		{40, 24, 4, 1, 10, 27, ops.ActSiLU, graph.BF16, true},
		{32, 16, 2, 3, 5, 11, ops.ActSiLU, graph.F32, true},
		{16, 8, 4, 1, 0, 2, ops.ActSiLU, graph.F32, true},
	} {
		name := fmt.Sprintf("causal_conv/%s/%dx%d/k=%d/dil=%d/pos=%d/used=%d/act=%s", s.dt, s.rows, s.c, s.k, s.dil, s.pos, s.used, s.act)
		m := newMaker(name)
		wshape := []int{s.c, s.k}
		if s.w3 {
			wshape = []int{s.c, 1, s.k}
		}
		at := ops.ConvAttrs{Dilation: s.dil, Act: s.act}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("x", graph.Input, graph.F32, 2, s.rows, s.c), m.weight("w", s.dt, wshape...),
				m.tensor("ring", graph.State, graph.F32, 2, (s.k-1)*s.dil, s.c), call(s.pos, s.used)},
			Build: applyAll(ops.OpCausalConv, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[3], s.rows)
				y, ring := refConv(in[0], in[1], in[2], s.c, s.k, s.dil, pos, used, s.act == ops.ActSiLU)
				return [][]float64{y, ring}
			},
			Tol: TolF32,
		})
	}
	return cs
}

func deltanetCases() []Case {
	var cs []Case
	for _, s := range [][5]int{{1, 1, 4, 1, 3}, {3, 2, 16, 4, 16}, {2, 1, 8, 3, 5}, {20, 2, 32, 4, 32}} {
		rows := s[0]
		at := ops.GDNPrepAttrs{KeyHeads: s[1], KeyDim: s[2], ValueHeads: s[3], ValueDim: s[4], Eps: 1e-6}
		name := fmt.Sprintf("gdn_prep/rows=%d/k=%dx%d/v=%dx%d", rows, s[1], s[2], s[3], s[4])
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.tensor("mix", graph.Input, graph.F32, 2, rows, 2*s[1]*s[2]+s[3]*s[4])},
			Build:  applyAll(ops.OpGDNPrep, at, 3),
			Ref: func(in [][]float64) [][]float64 {
				q, k, v := refGDNPrep(in[0], at)
				return [][]float64{q, k, v}
			},
			Tol: TolF32,
		})
	}
	for _, s := range []struct {
		rows, nv int
		dt       graph.DType
	}{{1, 1, graph.F32}, {3, 48, graph.BF16}, {7, 5, graph.F16}} {
		name := fmt.Sprintf("gdn_gates/%s/%dx%d", s.dt, s.rows, s.nv)
		m := newMaker(name)
		a := m.tensor("a", graph.Input, graph.F32, 4, s.rows, s.nv)
		for i, v := range []float64{25, -30, 19.5, 20.5} { // both sides of softplus' threshold
			if i < len(a.Data) {
				a.Data[len(a.Data)-1-i] = v
			}
		}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{a, m.tensor("b", graph.Input, graph.F32, 6, s.rows, s.nv),
				m.tensor("A_log", graph.Weight, s.dt, 2, s.nv), m.weight("dt_bias", s.dt, s.nv)},
			Build: applyAll(ops.OpGDNGates, nil, 2),
			Ref: func(in [][]float64) [][]float64 {
				g, beta := refGates(in[0], in[1], in[2], in[3])
				return [][]float64{g, beta}
			},
			Tol: TolF32,
		})
	}
	for _, s := range scanShapes() {
		cs = append(cs, s.scanCase())
	}
	return cs
}

// scanShape is a gdn_scan case: key heads of dk, value heads of dv, the
// rows and the call record, and how the data is drawn.
type scanShape struct {
	nk, nv, dk, dv, rows, pos, used int
	// norm l2-normalizes q (then divides it by sqrt(dk)) and k per head, as
	// gdn_prep does: each row's update is then a contraction of the state,
	// which stays bounded over many rows (with raw keys of dk ≥ 4 it grows
	// by about dk/3 a row).
	norm bool
	// decay scales the log-decays, g = −decay·|x| (x uniform in [−1, 1)).
	decay float64
}

// scanShapes are the gdn_scan cases: a few rows of raw keys (decode and
// speculation windows), and many rows of normalized keys, past several
// chunks of a chunked backend (the CUDA kernels take 64 rows a chunk from
// 16 rows on), with groups of 1 and 3
// value heads a key head, slow and fast decay, the state from position 0
// and stored, and rows past the call's.
func scanShapes() []scanShape {
	return []scanShape{
		{1, 1, 4, 3, 1, 0, 0, false, 1.5}, {2, 4, 8, 5, 3, 0, 0, false, 1.5}, {2, 4, 8, 5, 3, 6, 0, false, 1.5},
		{1, 3, 16, 16, 5, 2, 3, false, 1.5}, {1, 2, 8, 8, 1, 9, 0, false, 1.5}, {2, 8, 32, 16, 12, 0, 0, false, 1.5},
		{1, 1, 16, 16, 16, 0, 0, true, 0.1}, {2, 2, 32, 32, 70, 0, 0, true, 0.05}, {1, 3, 64, 64, 130, 11, 0, true, 0.1},
		{2, 6, 32, 64, 200, 0, 0, true, 1.5}, {1, 3, 64, 32, 200, 300, 141, true, 0.02}, {2, 2, 36, 40, 129, 5, 0, true, 0.3},
		// plans built for a bucket of rows: fewer rows in use than a
		// chunk (the chunked form runs from 16 plan rows), or than the plan
		{1, 2, 16, 16, 32, 4, 9, true, 0.1}, {2, 4, 32, 32, 64, 7, 50, true, 0.1},
	}
}

// scanInputs draws the case's leaves.
func (s scanShape) scanInputs(m *maker) []Tensor {
	kd := s.nk * s.dk
	q, k := m.in("q", s.rows, kd), m.in("k", s.rows, kd)
	if s.norm {
		copy(q.Data, refMap(refL2Norm(q.Data, s.dk, 0), func(x float64) float64 { return round(graph.F32, x/math.Sqrt(float64(s.dk))) }))
		copy(k.Data, refMap(refL2Norm(k.Data, s.dk, 0), func(x float64) float64 { return round(graph.F32, x) }))
	}
	return []Tensor{
		q, k, m.tensor("v", graph.Input, graph.F32, 2, s.rows, s.nv*s.dv),
		mapLeaf(m.in("g", s.rows, s.nv), func(x float64) float64 { return -s.decay * math.Abs(x) }),
		mapLeaf(m.in("beta", s.rows, s.nv), func(x float64) float64 { return refSigmoid(3 * x) }),
		m.tensor("S", graph.State, graph.F32, 0.5, s.nv, s.dk, s.dv), call(s.pos, s.used),
	}
}

// scanCase is the case of the shape, against refScan.
func (s scanShape) scanCase() Case {
	name := fmt.Sprintf("gdn_scan/k=%dx%d/v=%dx%d/rows=%d/pos=%d/used=%d", s.nk, s.dk, s.nv, s.dv, s.rows, s.pos, s.used)
	if s.norm {
		name += fmt.Sprintf("/norm/decay=%g", s.decay)
	}
	return Case{
		Name:   name,
		Inputs: s.scanInputs(newMaker(name)),
		Build:  applyAll(ops.OpGDNScan, nil, 1),
		Ref: func(in [][]float64) [][]float64 {
			pos, used := callRows(in[6], s.rows)
			o, st := refScan(in[0], in[1], in[2], in[3], in[4], in[5], s.nk, s.nv, s.dk, s.dv, pos, used)
			return [][]float64{o, st}
		},
		Tol: TolF32,
	}
}

// GDNScanCase is a gdn_scan case of normalized keys (as gdn_prep makes
// them) at any shape, for a backend's tests at a model's: nk key heads of
// dk, nv value heads of dv, rows rows from position pos (the stored state
// when pos > 0), log-decays −decay·|x|. The float64 reference takes about
// 4·rows·nv·dk·dv operations.
func GDNScanCase(nk, nv, dk, dv, rows, pos int, decay float64) Case {
	return scanShape{nk, nv, dk, dv, rows, pos, 0, true, decay}.scanCase()
}
