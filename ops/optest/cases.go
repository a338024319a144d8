package optest

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Cases lists every case of the table: several shapes per op, odd sizes
// (1, 3, 7, 33, 65, 129), every weight type, sizes large enough for a
// backend's parallel paths, and the error cases. The list is built anew on
// each call, with the same data every time.
func Cases() []Case {
	var cs []Case
	for _, gen := range []func() []Case{
		embedCases, matmulCases, groupedCases,
		binaryCases, unaryCases, normCases,
		ropeCases, kvWriteCases, attentionCases,
		rowCases, storeCases, fusedCases, plannerCases, blockCases, decodeCases, slerpCases,
		familyCases, quantCases, quantFusedCases, windowCases,
	} {
		cs = append(cs, gen()...)
	}
	return cs
}

var weightTypes = []graph.DType{graph.F32, graph.BF16, graph.F16}

func embedCases() []Case {
	var cs []Case
	for _, dt := range weightTypes {
		for _, s := range [][3]int{{7, 1, 1}, {33, 65, 5}, {256, 3, 4}, {129, 33, 9}} {
			vocab, h, rows := s[0], s[1], s[2]
			name := fmt.Sprintf("embed/%s/%dx%d/rows=%d", dt, vocab, h, rows)
			m := newMaker(name)
			ids := m.ids("ids", rows, vocab)
			ids.Data[0] = float64(vocab - 1) // the last row is reachable
			cs = append(cs, Case{
				Name:   name,
				Inputs: []Tensor{m.weight("table", dt, vocab, h), ids},
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					return []*graph.Value{ops.Embed(b, in[0], in[1])}
				},
				Ref: func(in [][]float64) [][]float64 { return [][]float64{refEmbed(in[0], h, in[1])} },
				Tol: TolF32, // a gather: exact
			})
		}
	}
	for _, bad := range []struct {
		id   int
		want string
	}{
		{300, "embed: row 3: token id 300 outside the vocabulary of 256"},
		{-1, "embed: row 3: token id -1 outside the vocabulary of 256"},
		{256, "token id 256"},
	} {
		name := fmt.Sprintf("embed/error/id=%d", bad.id)
		m := newMaker(name)
		ids := m.ids("ids", 5, 256)
		ids.Data[3] = float64(bad.id)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.weight("table", graph.BF16, 256, 3), ids},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.Embed(b, in[0], in[1])}
			},
			WantErr: bad.want,
		})
	}
	return cs
}

func matmulCases() []Case {
	var cs []Case
	// rows, in features, out features: matvecs, small row counts, GEMM sizes
	// (8 and more rows) with out features across several weight blocks.
	shapes := [][3]int{{1, 1, 1}, {1, 33, 7}, {1, 257, 300}, {3, 65, 129}, {7, 129, 33}, {8, 64, 17}, {33, 65, 70}, {65, 129, 130}}
	for _, dt := range weightTypes {
		for _, s := range shapes {
			rows, k, n := s[0], s[1], s[2]
			name := fmt.Sprintf("matmul/%s/%dx%dx%d", dt, rows, k, n)
			m := newMaker(name)
			cs = append(cs, Case{
				Name:   name,
				Inputs: []Tensor{m.in("x", rows, k), m.weight("w", dt, n, k)},
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					return []*graph.Value{ops.MatMul(b, in[0], in[1])}
				},
				Ref: func(in [][]float64) [][]float64 { return [][]float64{RefMatMul(in[0], k, in[1])} },
				Tol: tolFor(dt),
			})
		}
	}
	// x with two leading dimensions.
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		name := fmt.Sprintf("matmul/%s/2x5x33x7", dt)
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", 2, 5, 33), m.weight("w", dt, 7, 33)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.MatMul(b, in[0], in[1])}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{RefMatMul(in[0], 33, in[1])} },
			Tol: tolFor(dt),
		})
	}
	// A weight that the graph computes (twice an f32 input), written by the
	// kernel just before the product: a backend may read loaded weights
	// early (CUDA before its wait on the previous kernel), never this one.
	for _, rows := range []int{1, 3} {
		name := fmt.Sprintf("matmul/computed_weight/%dx300x257", rows)
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", rows, 300), m.in("w", 257, 300)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.MatMul(b, in[0], ops.Scale(b, in[1], 2))}
			},
			Ref: func(in [][]float64) [][]float64 {
				w := make([]float64, len(in[1]))
				for i, v := range in[1] {
					w[i] = 2 * v
				}
				return [][]float64{RefMatMul(in[0], 300, w)}
			},
			Tol: TolF32,
		})
	}
	return cs
}

func groupedCases() []Case {
	var cs []Case
	for _, rows := range []int{1, 3, 9} {
		name := fmt.Sprintf("grouped_matmul/mixed/rows=%d", rows)
		m := newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("x", rows, 65),
				m.weight("wq", graph.F32, 33, 65), m.weight("wk", graph.BF16, 7, 65), m.weight("wv", graph.F16, 129, 65)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return ops.GroupedMatMul(b, in[0], in[1:]...)
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{RefMatMul(in[0], 65, in[1]), RefMatMul(in[0], 65, in[2]), RefMatMul(in[0], 65, in[3])}
			},
			Tol: TolBF16,
		})
	}
	// q/k/v/g as Dory groups them: two pairs of one shape, which a backend
	// may multiply as batches (rows past the matvecs).
	for _, s := range []struct {
		rows int
		dt   graph.DType
	}{{16, graph.BF16}, {33, graph.BF16}, {20, graph.F16}} {
		name := fmt.Sprintf("grouped_matmul/qkvg/%s/rows=%d", s.dt, s.rows)
		m := newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("x", s.rows, 65), m.weight("wq", s.dt, 40, 65), m.weight("wk", s.dt, 9, 65),
				m.weight("wv", s.dt, 9, 65), m.weight("wg", s.dt, 40, 65)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return ops.GroupedMatMul(b, in[0], in[1:]...)
			},
			Ref: func(in [][]float64) [][]float64 {
				out := make([][]float64, 4)
				for i := range out {
					out[i] = RefMatMul(in[0], 65, in[1+i])
				}
				return out
			},
			Tol: tolFor(s.dt),
		})
	}
	return cs
}

func binaryCases() []Case {
	var cs []Case
	type shapes struct{ a, b []int }
	for _, op := range []string{"add", "sub", "mul"} {
		for _, s := range []shapes{
			{[]int{1}, []int{1}},
			{[]int{7, 33}, []int{33}},
			{[]int{3, 65}, []int{3, 65}},
			{[]int{2, 3, 5}, []int{3, 5}},
			{[]int{129, 257}, []int{257}},
			{[]int{40, 1000}, []int{40, 1000}},
		} {
			name := fmt.Sprintf("%s/%v/%v", op, graph.Shape(s.a), graph.Shape(s.b))
			m := newMaker(name)
			op := op
			cs = append(cs, Case{
				Name:   name,
				Inputs: []Tensor{m.in("a", s.a...), m.in("b", s.b...)},
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					f := map[string]func(*graph.Builder, *graph.Value, *graph.Value) *graph.Value{"add": ops.Add, "sub": ops.Sub, "mul": ops.Mul}[op]
					return []*graph.Value{f(b, in[0], in[1])}
				},
				Ref: func(in [][]float64) [][]float64 { return [][]float64{refBinary(op, in[0], in[1])} },
				Tol: TolF32,
			})
		}
	}
	return cs
}

func unaryCases() []Case {
	var cs []Case
	type unary struct {
		op    string
		build func(*graph.Builder, *graph.Value) *graph.Value
		ref   func(float64) float64
	}
	for _, u := range []unary{
		{"sigmoid", ops.Sigmoid, refSigmoid},
		{"silu", ops.SiLU, refSiLU},
		{"scale", func(b *graph.Builder, x *graph.Value) *graph.Value { return ops.Scale(b, x, -0.3125) }, func(x float64) float64 { return -0.3125 * x }},
	} {
		for _, shape := range [][]int{{1}, {7, 33}, {3, 12000}} {
			name := fmt.Sprintf("%s/%v", u.op, graph.Shape(shape))
			m := newMaker(name)
			x := m.tensor("x", graph.Input, graph.F32, 12, shape...)
			// Saturating and extreme inputs where the exponential overflows.
			for i, v := range []float64{0, -1000, 1000, -88.5, 89.5, 30, -30} {
				if i < len(x.Data) {
					x.Data[len(x.Data)-1-i] = v
				}
			}
			cs = append(cs, Case{
				Name:   name,
				Inputs: []Tensor{x},
				Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
					return []*graph.Value{u.build(b, in[0])}
				},
				Ref: func(in [][]float64) [][]float64 { return [][]float64{refMap(in[0], u.ref)} },
				Tol: TolF32,
			})
		}
	}
	return cs
}

func normCases() []Case {
	var cs []Case
	type norm struct {
		shape []int
		group int
		eps   float32
	}
	for _, s := range []norm{
		{[]int{1, 1}, 0, 1e-6},
		{[]int{3, 65}, 0, 1e-6},
		{[]int{5, 4 * 33}, 33, 1e-5},
		{[]int{2, 64}, 0, 1e-6}, // row 1 is all zeros
		{[]int{129, 257}, 0, 0},
		{[]int{2, 3, 16}, 8, 1e-6},
	} {
		last := s.shape[len(s.shape)-1]
		g := s.group
		if g == 0 {
			g = last
		}
		l2Eps, rmsEps := s.eps, s.eps
		if rmsEps == 0 {
			rmsEps = 1e-6 // rmsnorm of a zero row needs an eps; an eps of 0 is for l2norm only
		}
		group := s.group
		zeroRow := func(t *Tensor) {
			if len(s.shape) == 2 && s.shape[0] == 2 && s.shape[1] == 64 {
				clear(t.Data[64:])
			}
		}
		name := fmt.Sprintf("l2norm/%v/group=%d/eps=%g", graph.Shape(s.shape), group, l2Eps)
		m := newMaker(name)
		x := m.in("x", s.shape...)
		zeroRow(&x)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{x},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.L2Norm(b, in[0], group, l2Eps)}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{refL2Norm(in[0], g, float64(l2Eps))} },
			Tol: TolF32,
		})
		name = fmt.Sprintf("rmsnorm/%v/group=%d/eps=%g", graph.Shape(s.shape), group, rmsEps)
		m = newMaker(name)
		x = m.in("x", s.shape...)
		zeroRow(&x)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{x, m.tensor("w", graph.Input, graph.F32, 2, g)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.RMSNorm(b, in[0], in[1], group, rmsEps)}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{refRMSNorm(in[0], in[1], g, float64(rmsEps))} },
			Tol: TolF32,
		})
	}
	// weights of every type, one per run or one per element of the row
	const eps = 1e-6
	type wnorm struct {
		rows, width, group, wlen int
		dt                       graph.DType
	}
	for _, s := range []wnorm{
		{1, 1, 0, 1, graph.F32}, {3, 65, 0, 65, graph.BF16}, {4, 132, 33, 33, graph.F32},
		{2, 132, 33, 132, graph.F16}, {1, 64, 16, 64, graph.BF16}, {40, 1000, 250, 1000, graph.F32},
		// rows of 8K to 32K elements: CUDA's wide row kernel (32 a thread),
		// in a full block of 1024 threads and in a partial one
		{3, 32768, 0, 32768, graph.F32}, {2, 10240, 0, 10240, graph.BF16},
		// a row longer than a block's registers hold (CUDA reads it twice)
		{2, 40000, 0, 40000, graph.BF16},
	} {
		name := fmt.Sprintf("rmsnorm/%s/%dx%d/group=%d/w=%d", s.dt, s.rows, s.width, s.group, s.wlen)
		m := newMaker(name)
		g := s.group
		if g == 0 {
			g = s.width
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.tensor("x", graph.Input, graph.F32, 3, s.rows, s.width), m.tensor("w", graph.Weight, s.dt, 0.5, s.wlen)},
			Build:  applyAll(ops.OpRMSNorm, ops.NormAttrs{Group: s.group, Eps: eps}, 1),
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{refRMSNorm(in[0], in[1], g, float64(float32(eps)))}
			},
			Tol: TolF32,
		})
	}
	return cs
}

// ropeShape is a rope test shape.
type ropeShape struct {
	rows, heads, hd, rot int
	theta                float64
	pos, used            int
	scaling              ops.RopeScaling
}

// ropeScalings are rope scalings whose tables are not the default's nor a
// multiple of it, and whose attention factors are not 1, for the shapes
// below: yarn interpolates dims 1 to 3 of 8 (a ramp of 1/3, 2/3) with
// m = 0.1 ln 4 + 1; llama3 leaves dims 0-5 of 32, divides 10-31 by the
// factor and smooths 6-9; the second yarn has no rounding of its range and
// m from mscale and mscale_all_dim.
var ropeScalings = map[string]ops.RopeScaling{
	"yarn":       {Type: ops.RopeYarn, Factor: 4, OriginalMaxPositions: 64},
	"llama3":     {Type: ops.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 256},
	"yarn-exact": {Type: ops.RopeYarn, Factor: 16, OriginalMaxPositions: 512, BetaFast: 16, BetaSlow: 2, MScale: 1, MScaleAllDim: 0.5, NoTruncate: true},
	"linear":     {Type: ops.RopeLinear, Factor: 2.5},
}

var ropeShapes = []ropeShape{
	{1, 1, 8, 8, 1e4, 0, 0, ops.RopeScaling{}},
	{5, 3, 16, 8, 1e4, 7, 0, ops.RopeScaling{}},
	{3, 2, 66, 64, 1e6, 1000, 0, ops.RopeScaling{}},
	{2, 1, 4, 2, 500, 123456, 0, ops.RopeScaling{}},
	{40, 16, 64, 64, 1e4, 3, 0, ops.RopeScaling{}},
	{4, 2, 16, 16, 1e4, 9, 2, ops.RopeScaling{}},
	{3, 2, 16, 16, 1e4, 5000, 0, ropeScalings["yarn"]},
	{2, 2, 66, 64, 5e5, 3000, 0, ropeScalings["llama3"]},
	{5, 1, 64, 32, 1e6, 70000, 3, ropeScalings["yarn-exact"]},
	{2, 3, 8, 8, 1e4, 17, 0, ropeScalings["linear"]},
}

// ropeName is a rope's part of a case name: its scaling type, if any.
func ropeName(s ops.RopeScaling) string {
	if s == (ops.RopeScaling{}) {
		return ""
	}
	for name, r := range ropeScalings {
		if r == s {
			return "/scaling=" + name
		}
	}
	return "/scaling=" + s.Type
}

func ropeCases() []Case {
	var cs []Case
	for _, s := range ropeShapes {
		name := fmt.Sprintf("rope/%dx%dx%d/rot=%d/theta=%g/pos=%d/rows=%d", s.rows, s.heads, s.hd, s.rot, s.theta, s.pos, s.used) + ropeName(s.scaling)
		m := newMaker(name)
		at := ops.RopeAttrs{HeadDim: s.hd, Rotary: s.rot, Theta: s.theta, Scaling: s.scaling}
		w := s.heads * s.hd
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", s.rows, w), call(s.pos, s.used)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.Rope(b, in[0], in[1], at)}
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, _ := callRows(in[1], s.rows)
				return [][]float64{refRope(in[0], w, at, pos)}
			},
			Tol: TolF32,
		})
	}
	return cs
}

func kvWriteCases() []Case {
	var cs []Case
	type kv struct {
		rows, width, capacity, pos, used int
		ring                             bool
		err                              string
	}
	for _, s := range []kv{
		{3, 32, 8, 0, 0, false, ""},
		{3, 32, 8, 5, 0, false, ""}, // up to the last row
		{1, 33, 16, 9, 0, false, ""},
		{3, 16, 4, 6, 0, true, ""}, // wraps
		{6, 8, 4, 1, 0, true, ""},  // more rows than the ring holds
		{4, 8, 8, 6, 2, false, ""}, // padded: only two rows are real
		// a plan built for a bucket of rows: the call's rows fit the
		// slot, the plan's would not; a ring of fewer rows than the plan's
		{40, 32, 24, 0, 23, false, ""},
		{40, 16, 32, 50, 29, true, ""},
		{6, 8, 4, 1, 3, true, ""},
		{3, 32, 8, 6, 0, false, "capacity"},
		{1, 8, 8, 8, 0, false, "capacity"},
	} {
		kind := "linear"
		if s.ring {
			kind = "ring"
		}
		name := fmt.Sprintf("kv_write/%s/%dx%d/cap=%d/pos=%d/rows=%d", kind, s.rows, s.width, s.capacity, s.pos, s.used)
		if s.err != "" {
			name = "kv_write/error/" + name[len("kv_write/"):]
		}
		m := newMaker(name)
		at := ops.SlotAttrs{Ring: s.ring}
		c := Case{
			Name:   name,
			Inputs: []Tensor{m.in("rows", s.rows, s.width), m.slot("slot", s.capacity, s.width), call(s.pos, s.used)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				ops.KVWrite(b, in[0], in[1], in[2], at)
				return nil
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[2], s.rows)
				return [][]float64{refKVWrite(in[1], in[0], s.width, pos, used, s.ring)}
			},
			Tol:     TolF32,
			WantErr: s.err,
		}
		cs = append(cs, c)
	}
	return cs
}

// attnShape is an attention test shape.
type attnShape struct {
	heads, kvHeads, hd  int
	rows, pos, capacity int
	window, used        int
	ring, unscaled      bool
	err                 string
}

func attentionCases() []Case {
	var cs []Case
	for _, s := range []attnShape{
		{heads: 2, kvHeads: 2, hd: 8, rows: 1, pos: 0, capacity: 4},
		{heads: 4, kvHeads: 2, hd: 16, rows: 1, pos: 9, capacity: 16},
		{heads: 8, kvHeads: 2, hd: 8, rows: 5, pos: 3, capacity: 12},
		{heads: 4, kvHeads: 1, hd: 33, rows: 7, pos: 0, capacity: 7},
		{heads: 3, kvHeads: 3, hd: 7, rows: 2, pos: 30, capacity: 33, unscaled: true},
		{heads: 4, kvHeads: 2, hd: 8, rows: 3, pos: 10, capacity: 16, window: 4},
		{heads: 4, kvHeads: 4, hd: 8, rows: 2, pos: 2, capacity: 8, window: 100},
		{heads: 4, kvHeads: 1, hd: 16, rows: 1, pos: 0, capacity: 1, window: 1},
		{heads: 4, kvHeads: 2, hd: 8, rows: 1, pos: 20, capacity: 5, window: 5, ring: true},
		{heads: 4, kvHeads: 2, hd: 8, rows: 3, pos: 17, capacity: 8, window: 6, ring: true},
		{heads: 8, kvHeads: 2, hd: 16, rows: 2, pos: 1, capacity: 8, window: 3, ring: true},
		{heads: 2, kvHeads: 1, hd: 8, rows: 2, pos: 3, capacity: 8, ring: true},
		{heads: 4, kvHeads: 2, hd: 8, rows: 4, pos: 5, capacity: 8, used: 2},
		{heads: 16, kvHeads: 4, hd: 64, rows: 1, pos: 300, capacity: 320},
		{heads: 8, kvHeads: 2, hd: 32, rows: 24, pos: 0, capacity: 24, window: 16},
		{heads: 16, kvHeads: 4, hd: 256, rows: 1, pos: 1500, capacity: 2048},
		{heads: 8, kvHeads: 2, hd: 128, rows: 3, pos: 40, capacity: 64},
		{heads: 16, kvHeads: 2, hd: 32, rows: 2, pos: 50, capacity: 64},
		{heads: 12, kvHeads: 4, hd: 16, rows: 1, pos: 70, capacity: 80},
		{heads: 16, kvHeads: 1, hd: 64, rows: 1, pos: 100, capacity: 128},
		// decode rows in one launch (CUDA's attn_dec: groups of 1, 2, 4
		// and 8, heads of 4 to 256 dimensions): most key chunks empty,
		// many chunks merged in groups, a wrapped ring with a group of 8,
		// rows left unused, a head not a multiple of 32 lanes' vectors,
		// and one too wide for it (attn_part)
		{heads: 16, kvHeads: 4, hd: 256, rows: 1, pos: 3, capacity: 2048},
		{heads: 16, kvHeads: 4, hd: 256, rows: 1, pos: 4095, capacity: 4096},
		{heads: 16, kvHeads: 2, hd: 256, rows: 3, pos: 700, capacity: 512, window: 300, ring: true},
		{heads: 8, kvHeads: 8, hd: 128, rows: 8, pos: 900, capacity: 1024, used: 6},
		{heads: 4, kvHeads: 2, hd: 252, rows: 2, pos: 77, capacity: 128},
		{heads: 4, kvHeads: 1, hd: 4, rows: 1, pos: 50, capacity: 64},
		{heads: 4, kvHeads: 2, hd: 260, rows: 1, pos: 20, capacity: 32},
		// a ring shorter than its window and a chunk need (one a session
		// grows with the sequence) is read as a linear slot: fine while
		// every position is below its capacity, an error past it
		{heads: 4, kvHeads: 2, hd: 8, rows: 3, pos: 0, capacity: 8, window: 7, ring: true},
		{heads: 4, kvHeads: 2, hd: 8, rows: 3, pos: 4, capacity: 8, window: 7, ring: true},
		{heads: 4, kvHeads: 2, hd: 8, rows: 3, pos: 6, capacity: 8, window: 7, ring: true, err: "capacity"},
		{heads: 2, kvHeads: 2, hd: 8, rows: 2, pos: 7, capacity: 8, err: "capacity"},
		{heads: 2, kvHeads: 2, hd: 8, rows: 1, pos: 8, capacity: 8, ring: true, err: "capacity"},
		// prompt chunks (CUDA's flash kernel): every head size padded to
		// 32, 64, 128 or 256, groups of 1 to 16 heads (12 does not divide
		// a block's 64 rows), windows, rings that wrap, rows left unused
		{heads: 16, kvHeads: 4, hd: 256, rows: 40, pos: 0, capacity: 64},
		{heads: 16, kvHeads: 4, hd: 256, rows: 33, pos: 100, capacity: 160, window: 64},
		{heads: 8, kvHeads: 2, hd: 128, rows: 70, pos: 30, capacity: 128, window: 50, ring: true},
		{heads: 8, kvHeads: 2, hd: 64, rows: 20, pos: 200, capacity: 48, window: 24, ring: true},
		{heads: 6, kvHeads: 3, hd: 24, rows: 17, pos: 5, capacity: 32},
		{heads: 4, kvHeads: 4, hd: 64, rows: 20, pos: 3, capacity: 32, used: 18},
		{heads: 12, kvHeads: 1, hd: 64, rows: 16, pos: 0, capacity: 16},
		{heads: 16, kvHeads: 1, hd: 40, rows: 19, pos: 60, capacity: 80, unscaled: true},
		// plans built for a bucket of rows: fewer rows in use than the
		// plan's (below 16 too), slots that hold the call's positions
		// but not the plan's, windows and rings
		{heads: 4, kvHeads: 2, hd: 32, rows: 16, pos: 5, capacity: 14, used: 9},
		{heads: 8, kvHeads: 2, hd: 64, rows: 48, pos: 90, capacity: 96, window: 40, ring: true, used: 37},
		{heads: 16, kvHeads: 4, hd: 128, rows: 64, pos: 0, capacity: 40, window: 32, used: 40},
		{heads: 12, kvHeads: 1, hd: 64, rows: 24, pos: 300, capacity: 317, used: 17},
		{heads: 4, kvHeads: 2, hd: 32, rows: 20, pos: 10, capacity: 24, err: "capacity"},
		// several blocks and tiles of keys: tiles every row of a block
		// sees whole (no mask), windows, a ring that wraps, rows left
		// unused, a group of 8
		{heads: 16, kvHeads: 4, hd: 256, rows: 150, pos: 0, capacity: 160},
		{heads: 8, kvHeads: 2, hd: 256, rows: 80, pos: 250, capacity: 300, window: 150, ring: true},
		{heads: 8, kvHeads: 2, hd: 256, rows: 48, pos: 5, capacity: 64, used: 35},
		{heads: 16, kvHeads: 2, hd: 128, rows: 90, pos: 0, capacity: 96},
		// a slot far longer than the keys read (kv_half converts those only)
		{heads: 8, kvHeads: 2, hd: 128, rows: 20, pos: 3, capacity: 400},
		// 256 dimensions in groups that leave a block's rows (64 or 128)
		// padded or not (12 and 16),
		// and one head to a group over several blocks of a window
		{heads: 12, kvHeads: 1, hd: 256, rows: 30, pos: 0, capacity: 32},
		{heads: 16, kvHeads: 1, hd: 256, rows: 40, pos: 20, capacity: 64, window: 30},
		{heads: 2, kvHeads: 2, hd: 200, rows: 130, pos: 70, capacity: 256, window: 100},
		// many tiles of keys a block (the tile buffers reused several
		// times over, the softmax's maxima moving across tiles): 256
		// dimensions and 128 (the wgmma variant's two sizes)
		{heads: 8, kvHeads: 2, hd: 256, rows: 40, pos: 600, capacity: 640},
		{heads: 4, kvHeads: 1, hd: 128, rows: 24, pos: 400, capacity: 424},
	} {
		cs = append(cs, attentionCase(s))
	}
	return cs
}

func attentionCase(s attnShape) Case {
	kind := "linear"
	if s.ring {
		kind = "ring"
	}
	name := fmt.Sprintf("attention/%s/q%d-kv%d-d%d/rows=%d/pos=%d/cap=%d/window=%d/used=%d", kind, s.heads, s.kvHeads, s.hd, s.rows, s.pos, s.capacity, s.window, s.used)
	if s.err != "" {
		name = "attention/error/" + name[len("attention/"):]
	}
	m := newMaker(name)
	at := ops.AttentionAttrs{Heads: s.heads, KVHeads: s.kvHeads, HeadDim: s.hd, Window: s.window, Ring: s.ring,
		Scale: float32(1 / math.Sqrt(float64(s.hd)))}
	if s.unscaled {
		at.Scale = 1
	}
	// Queries and keys of a few units give peaked softmaxes as trained models do.
	q := m.tensor("q", graph.Input, graph.F32, 2, s.rows, s.heads*s.hd)
	k := m.slot("k", s.capacity, s.kvHeads*s.hd)
	for i := range k.Data {
		k.Data[i] = round(graph.F32, 2*k.Data[i])
	}
	v := m.slot("v", s.capacity, s.kvHeads*s.hd)
	return Case{
		Name:   name,
		Inputs: []Tensor{q, k, v, call(s.pos, s.used)},
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return []*graph.Value{ops.Attention(b, in[0], in[1], in[2], in[3], at)}
		},
		Ref: func(in [][]float64) [][]float64 {
			pos, used := callRows(in[3], s.rows)
			return [][]float64{refAttention(in[0], in[1], in[2], at, pos, used), in[1], in[2]}
		},
		Tol:     attnTol(s.rows),
		WantErr: s.err,
	}
}

// attnTol is the NMSE allowed an attention of rows query rows: f32 for a
// few rows, f16 rounding from ops.AttentionChunkRows (a backend may then
// take tensor cores, CUDA's flash kernel).
func attnTol(rows int) float64 {
	if rows >= ops.AttentionChunkRows {
		return TolF16
	}
	return TolF32
}

func rowCases() []Case {
	var cs []Case
	for _, s := range [][4]int{{5, 33, 1, 4}, {1, 7, 0, 1}, {9, 65, 8, 9}, {3, 1, 0, 3}} {
		rows, n, from, to := s[0], s[1], s[2], s[3]
		name := fmt.Sprintf("slice_rows/%dx%d/%d-%d", rows, n, from, to)
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", rows, n)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.SliceRows(b, in[0], from, to)}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{append([]float64(nil), in[0][from*n:to*n]...)} },
			Tol: 0,
		})
	}
	// last_row: every row in use (0), fewer (a bucket's plan), one row, and
	// a record asking for more rows than the plan has
	for _, s := range []struct {
		rows, n, pos, used int
		err                string
	}{
		{5, 33, 0, 0, ""}, {5, 33, 7, 3, ""}, {1, 7, 0, 0, ""}, {1, 7, 4, 1, ""},
		{16, 65, 0, 9, ""}, {48, 129, 100, 37, ""}, {24, 4099, 3, 24, ""},
		{5, 33, 0, 6, "asks for 6 rows of a 5-row plan"},
	} {
		name := fmt.Sprintf("last_row/%dx%d/pos=%d/used=%d", s.rows, s.n, s.pos, s.used)
		if s.err != "" {
			name = "last_row/error/" + name[len("last_row/"):]
		}
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", s.rows, s.n), call(s.pos, s.used)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.LastRow(b, in[0], in[1])}
			},
			Ref: func(in [][]float64) [][]float64 {
				_, used := callRows(in[1], s.rows)
				return [][]float64{append([]float64(nil), in[0][(used-1)*s.n:used*s.n]...)}
			},
			Tol:     0,
			WantErr: s.err,
		})
	}
	for _, s := range [][2]int{{1, 1}, {5, 33}, {3, 129}, {2, 20000}} {
		rows, n := s[0], s[1]
		name := fmt.Sprintf("argmax/%dx%d", rows, n)
		m := newMaker(name)
		x := m.in("x", rows, n)
		if rows == 5 {
			r := x.Data[n : 2*n] // ties: the lowest index wins
			r[3], r[10], r[20] = 5, 5, 5
			r = x.Data[2*n : 3*n] // NaNs are skipped, even in front
			r[0], r[5], r[7] = nan, nan, 3
			r = x.Data[3*n : 4*n] // only NaNs
			for i := range r {
				r[i] = nan
			}
			r = x.Data[4*n : 5*n] // -Inf everywhere but one NaN: the first -Inf
			for i := range r {
				r[i] = math.Inf(-1)
			}
			r[0] = nan
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{x},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.Argmax(b, in[0])}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{refArgmax(in[0], n)} },
			Tol: 0,
		})
	}
	return cs
}

// fusedCases build each fused op as its single node (the runner also runs
// its decomposition).
func fusedCases() []Case {
	var cs []Case
	// 10240 and 32768: CUDA's wide row kernel, part of a block and all of it
	for _, s := range [][2]int{{1, 1}, {3, 65}, {7, 129}, {40, 1000}, {2, 10240}, {2, 32768}} {
		rows, n := s[0], s[1]
		const eps = 1e-6
		name := fmt.Sprintf("slerp/%dx%d", rows, n)
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", rows, n), m.in("y", rows, n), m.in("alpha", n)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpSlerp, ops.EpsAttrs{Eps: eps}, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{refSlerp(in[0], in[1], in[2], float64(float32(eps)))}
			},
			Tol: TolF32,
		})
		name = fmt.Sprintf("mix/%dx%d", rows, n)
		m = newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("a", rows, n), m.in("b", rows, n)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpMix, ops.EpsAttrs{Eps: eps}, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{refL2Norm(refBinary("add", in[0], in[1]), n, float64(float32(eps)))}
			},
			Tol: TolF32,
		})
		name = fmt.Sprintf("swiglu/%dx%d", rows, n)
		m = newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("g", graph.Input, graph.F32, 6, rows, n), m.in("u", rows, n),
				m.tensor("sg", graph.Input, graph.F32, 2, n), m.tensor("su", graph.Input, graph.F32, 2, n)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpSwiGLU, nil, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{refSwiGLU(in[0], in[1], in[2], in[3])} },
			Tol: TolF32,
		})
		name = fmt.Sprintf("gated_norm/%dx%d", rows, n)
		m = newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("y", rows, n), m.tensor("g", graph.Input, graph.F32, 4, rows, n), m.tensor("s", graph.Input, graph.F32, 2, n)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpGatedNorm, ops.EpsAttrs{Eps: eps}, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{refGatedNorm(in[0], in[1], in[2], float64(float32(eps)))}
			},
			Tol: TolF32,
		})
	}
	for i, s := range ropeShapes {
		scaled := i%2 == 1
		name := fmt.Sprintf("norm_rope/%dx%dx%d/rot=%d/theta=%g/pos=%d/scaled=%v", s.rows, s.heads, s.hd, s.rot, s.theta, s.pos, scaled) + ropeName(s.scaling)
		m := newMaker(name)
		at := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: s.hd, Rotary: s.rot, Theta: s.theta, Scaling: s.scaling}, Eps: 1e-6}
		w := s.heads * s.hd
		inputs := []Tensor{m.tensor("x", graph.Input, graph.F32, 3, s.rows, w), call(s.pos, s.used)}
		if scaled {
			inputs = append(inputs, m.tensor("s", graph.Input, graph.F32, 2, w))
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpNormRope, at, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, _ := callRows(in[1], s.rows)
				var scale []float64
				if scaled {
					scale = in[2]
				}
				return [][]float64{refNormRope(in[0], w, at.Rope, pos, float64(float32(1e-6)), scale)}
			},
			Tol: TolF32,
		})
	}
	return cs
}

// blockCases are whole patterns of several ops: an attention sub-layer
// (projections, query and key preparation, KV writes, attention, output gate,
// output projection, residual slerp) over bf16 weights.
func blockCases() []Case {
	var cs []Case
	type block struct {
		rows, pos, capacity, window int
		ring                        bool
	}
	for _, s := range []block{{1, 5, 8, 0, false}, {4, 0, 8, 0, false}, {3, 9, 6, 4, true}} {
		const hidden, heads, kvHeads, hd = 32, 4, 2, 8
		name := fmt.Sprintf("block/attention/rows=%d/pos=%d/cap=%d/window=%d/ring=%v", s.rows, s.pos, s.capacity, s.window, s.ring)
		m := newMaker(name)
		nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: hd, Rotary: hd / 2, Theta: 1e4}, Eps: 1e-6}
		at := ops.AttentionAttrs{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Window: s.window, Ring: s.ring, Scale: 1.5}
		slot := ops.SlotAttrs{Ring: s.ring}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{
				m.in("x", s.rows, hidden), call(s.pos, 0),
				m.tensor("wq", graph.Weight, graph.BF16, 0.3, heads*hd, hidden),
				m.tensor("wk", graph.Weight, graph.BF16, 0.3, kvHeads*hd, hidden),
				m.tensor("wv", graph.Weight, graph.BF16, 0.3, kvHeads*hd, hidden),
				m.tensor("wg", graph.Weight, graph.BF16, 0.3, heads*hd, hidden),
				m.tensor("wo", graph.Weight, graph.BF16, 0.3, hidden, heads*hd),
				m.in("sq", heads*hd), m.in("sg", heads*hd), m.in("alpha", hidden),
				m.slot("k", s.capacity, kvHeads*hd), m.slot("v", s.capacity, kvHeads*hd),
			},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				x, c := in[0], in[1]
				qkvg := ops.GroupedMatMul(b, x, in[2], in[3], in[4], in[5])
				q := b.Apply(ops.OpNormRope, nr, 1, qkvg[0], c, in[7])[0]
				k := b.Apply(ops.OpNormRope, nr, 1, qkvg[1], c)[0]
				ops.KVWrite(b, k, in[10], c, slot)
				ops.KVWrite(b, qkvg[2], in[11], c, slot)
				y := ops.Attention(b, q, in[10], in[11], c, at)
				y = b.Apply(ops.OpGatedNorm, ops.EpsAttrs{Eps: 1e-6}, 1, y, qkvg[3], in[8])[0]
				o := ops.MatMul(b, y, in[6])
				return b.Apply(ops.OpSlerp, ops.EpsAttrs{Eps: 1e-6}, 1, x, o, in[9])
			},
			Ref: func(in [][]float64) [][]float64 {
				eps := float64(float32(1e-6))
				x, pos := in[0], int(in[1][ops.CallPos])
				q := RefMatMul(x, hidden, in[2])
				k := RefMatMul(x, hidden, in[3])
				v := RefMatMul(x, hidden, in[4])
				g := RefMatMul(x, hidden, in[5])
				q = refNormRope(q, heads*hd, nr.Rope, pos, eps, in[7])
				k = refNormRope(k, kvHeads*hd, nr.Rope, pos, eps, nil)
				ks := refKVWrite(in[10], k, kvHeads*hd, pos, s.rows, s.ring)
				vs := refKVWrite(in[11], v, kvHeads*hd, pos, s.rows, s.ring)
				y := refAttention(q, ks, vs, at, pos, s.rows)
				y = refGatedNorm(y, g, in[8], eps)
				o := RefMatMul(y, heads*hd, in[6])
				return [][]float64{refSlerp(x, o, in[9], eps), ks, vs}
			},
			Tol: TolBF16,
		})
	}
	return cs
}

func storeCases() []Case {
	var cs []Case
	for _, shape := range [][]int{{1}, {3, 65}} {
		name := fmt.Sprintf("store/%v", graph.Shape(shape))
		m := newMaker(name)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", shape...), m.tensor("s", graph.State, graph.F32, 1, shape...)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				ops.Store(b, in[0], in[1])
				return nil
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{in[0]} },
			Tol: 0,
		})
	}
	return cs
}

// matmulSwiGLUCase is matmul_swiglu of rows x k through gate and up
// weights of f features stored as dt, with per-feature scales, within tol.
func matmulSwiGLUCase(name string, dt graph.DType, rows, k, f int, tol float64) Case {
	m := newMaker(name)
	return Case{
		Name: name,
		Inputs: []Tensor{m.in("x", rows, k), m.weight("wg", dt, f, k), m.weight("wu", dt, f, k),
			m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f)},
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return b.Apply(ops.OpMatMulSwiGLU, nil, 1, in...)
		},
		Ref: func(in [][]float64) [][]float64 {
			return [][]float64{refSwiGLU(RefMatMul(in[0], k, in[1]), RefMatMul(in[0], k, in[2]), in[3], in[4])}
		},
		Tol: tol,
	}
}

// normMatMulCase is norm_matmul (eps 1e-6) of rows x k to n features
// stored as dt, within tol; row zero of x, unless negative, is zero (and
// stays zero).
func normMatMulCase(name string, dt graph.DType, rows, k, n, zero int, tol float64) Case {
	const eps = 1e-6
	m := newMaker(name)
	x := m.tensor("x", graph.Input, graph.F32, 5, rows, k)
	if zero >= 0 {
		clear(x.Data[zero*k : (zero+1)*k])
	}
	return Case{
		Name:   name,
		Inputs: []Tensor{x, m.weight("w", dt, n, k)},
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return b.Apply(ops.OpNormMatMul, ops.EpsAttrs{Eps: eps}, 1, in...)
		},
		Ref: func(in [][]float64) [][]float64 {
			return [][]float64{RefMatMul(refL2Norm(in[0], k, float64(float32(eps))), k, in[1])}
		},
		Tol: tol,
	}
}

// plannerCases are the fused ops only the planner makes, each as its single
// node (the runner also runs its decomposition).
func plannerCases() []Case {
	var cs []Case
	for _, s := range [][3]int{{1, 65, 33}, {9, 33, 70}} {
		rows, k, f := s[0], s[1], s[2]
		for _, dt := range []graph.DType{graph.F32, graph.BF16} {
			cs = append(cs, matmulSwiGLUCase(fmt.Sprintf("matmul_swiglu/%s/%dx%dx%d", dt, rows, k, f), dt, rows, k, f, tolFor(dt)))
		}
	}
	cs = append(cs, swigluNormMatMulCases()...)
	for i, s := range []struct {
		rows, heads, hd, rot, pos, capacity, used int
		ring                                      bool
		scaling                                   ops.RopeScaling
	}{
		{1, 2, 16, 16, 5, 8, 0, false, ops.RopeScaling{}}, {3, 1, 66, 32, 9, 4, 0, true, ops.RopeScaling{}}, {4, 4, 8, 8, 0, 4, 0, false, ops.RopeScaling{}},
		{2, 2, 16, 16, 6, 8, 0, false, ropeScalings["yarn"]}, {3, 1, 66, 64, 9, 4, 0, true, ropeScalings["llama3"]},
		// padded: a plan built for a bucket of rows, the slot holding the
		// call's positions only; a ring of fewer rows than the plan's
		{6, 2, 16, 16, 5, 8, 3, false, ops.RopeScaling{}}, {40, 2, 64, 32, 10, 36, 25, false, ops.RopeScaling{}},
		{24, 1, 32, 32, 50, 16, 19, true, ops.RopeScaling{}},
	} {
		scaled := i != 1
		name := fmt.Sprintf("norm_rope_kv/%dx%dx%d/rot=%d/pos=%d/cap=%d/ring=%v/scaled=%v", s.rows, s.heads, s.hd, s.rot, s.pos, s.capacity, s.ring, scaled) +
			ropeName(s.scaling)
		if s.used > 0 {
			name += fmt.Sprintf("/used=%d", s.used)
		}
		m := newMaker(name)
		w := s.heads * s.hd
		at := ops.NormRopeKVAttrs{
			NormRope: ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: s.hd, Rotary: s.rot, Theta: 1e4, Scaling: s.scaling}, Eps: 1e-6},
			Slot:     ops.SlotAttrs{Ring: s.ring},
		}
		inputs := []Tensor{m.tensor("x", graph.Input, graph.F32, 3, s.rows, w), call(s.pos, s.used), m.slot("slot", s.capacity, w)}
		if scaled {
			inputs = append(inputs, m.tensor("s", graph.Input, graph.F32, 2, w))
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				b.Apply(ops.OpNormRopeKV, at, 0, in...)
				return nil
			},
			Ref: func(in [][]float64) [][]float64 {
				var scale []float64
				if scaled {
					scale = in[3]
				}
				y := refNormRope(in[0], w, at.NormRope.Rope, s.pos, float64(float32(1e-6)), scale)
				pos, used := callRows(in[1], s.rows)
				return [][]float64{refKVWrite(in[2], y, w, pos, used, s.ring)}
			},
			Tol: TolF32,
		})
	}
	// A gated residual chain: add(scale(silu(mul(x, g)), c), y), g broadcast over the rows.
	for _, s := range [][2]int{{1, 7}, {5, 33}, {40, 1000}} {
		rows, n := s[0], s[1]
		name := fmt.Sprintf("elementwise_chain/%dx%d", rows, n)
		m := newMaker(name)
		at := ops.ChainAttrs{Steps: []ops.ChainStep{
			{Op: "mul", Args: []int{0, 1}},
			{Op: "silu", Args: []int{ops.StepArg(0)}},
			{Op: "scale", Args: []int{ops.StepArg(1)}, Factor: 0.75},
			{Op: "sigmoid", Args: []int{2}},
			{Op: "sub", Args: []int{ops.StepArg(2), ops.StepArg(3)}},
		}}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.tensor("x", graph.Input, graph.F32, 4, rows, n), m.in("g", n), m.in("y", rows, n)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpElementwiseChain, at, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				u := refMap(refMap(refBinary("mul", in[0], in[1]), refSiLU), func(v float64) float64 { return 0.75 * v })
				return [][]float64{refBinary("sub", u, refMap(in[2], refSigmoid))}
			},
			Tol: TolF32,
		})
	}
	return cs
}

// swigluNormMatMulCases are a SwiGLU MLP with its activation's norm in the
// down projection: decode rows (matvecs), prompt rows (the 16-bit row
// kernel between the products on the card), odd sizes, a row too long for
// the kernel's registers (f > 8192), mixed weight types and a zero row.
func swigluNormMatMulCases() []Case {
	var cs []Case
	for _, s := range []struct {
		rows, k, f, n int
		gate, down    graph.DType
	}{
		{1, 65, 33, 17, graph.BF16, graph.BF16}, {3, 32, 70, 9, graph.F16, graph.F16}, {8, 40, 64, 24, graph.BF16, graph.BF16},
		{9, 33, 70, 40, graph.F32, graph.F32}, {9, 33, 70, 40, graph.BF16, graph.BF16}, {16, 64, 96, 48, graph.BF16, graph.BF16},
		{16, 64, 96, 48, graph.F16, graph.F16}, {33, 65, 130, 31, graph.BF16, graph.BF16}, {33, 65, 130, 31, graph.BF16, graph.F16},
		{17, 40, 8200, 24, graph.BF16, graph.BF16}, {40, 48, 7, 5, graph.F32, graph.BF16},
	} {
		const eps = 1e-6
		rows, k, f, n := s.rows, s.k, s.f, s.n
		name := fmt.Sprintf("swiglu_norm_matmul/%s-%s/%dx%dx%dx%d", s.gate, s.down, rows, k, f, n)
		m := newMaker(name)
		x := m.in("x", rows, k)
		if rows >= 16 {
			clear(x.Data[k : 2*k]) // a zero row stays zero
		}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{x, m.weight("wg", s.gate, f, k), m.weight("wu", s.gate, f, k),
				m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f), m.weight("wd", s.down, n, f)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpSwiGLUNormMatMul, ops.EpsAttrs{Eps: eps}, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				a := refSwiGLU(RefMatMul(in[0], k, in[1]), RefMatMul(in[0], k, in[2]), in[3], in[4])
				return [][]float64{RefMatMul(refL2Norm(a, f, float64(float32(eps))), f, in[5])}
			},
			Tol: max(tolFor(s.gate), tolFor(s.down)),
		})
	}
	return cs
}
