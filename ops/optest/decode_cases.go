package optest

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// decodeCases are the fused decode ops (ops/fused_decode.go), each as its
// single node (the runner also runs its decomposition), and a Dory-like
// attention and MLP sub-layer built from them.
func decodeCases() []Case {
	var cs []Case
	cs = append(cs, qkvPrepCases()...)
	cs = append(cs, attentionGateCases()...)
	cs = append(cs, normMatMulCases()...)
	cs = append(cs, qkvAttentionCases()...)
	return append(cs, decodeBlockCases()...)
}

// qkvAttentionCases are qkv_attention_gate: one decode row (on CUDA the
// attention's blocks prepare their own queries, the block holding the
// row's key writes the key and value rows) at Dory 4B's shapes (a partial
// rotary, a wrapped ring window), the first position, one query head a KV
// head, a head of odd width and a window of three rows (the two launches'
// route), and a position past the slot (an error).
func qkvAttentionCases() []Case {
	var cs []Case
	for _, s := range []struct {
		rows, hq, hk, hd, rot, pos, capacity, window int
		ring                                         bool
		err                                          string
	}{
		{rows: 1, hq: 16, hk: 4, hd: 256, rot: 128, pos: 2047, capacity: 2048},
		{rows: 1, hq: 16, hk: 4, hd: 256, rot: 256, pos: 5000, capacity: 1024, window: 1024, ring: true},
		{rows: 1, hq: 4, hk: 2, hd: 16, rot: 16, pos: 5, capacity: 8},
		{rows: 1, hq: 8, hk: 2, hd: 64, rot: 32, pos: 0, capacity: 16},
		{rows: 1, hq: 8, hk: 8, hd: 128, rot: 128, pos: 100, capacity: 128},
		{rows: 1, hq: 4, hk: 1, hd: 34, rot: 32, pos: 9, capacity: 16},
		{rows: 3, hq: 4, hk: 2, hd: 16, rot: 16, pos: 6, capacity: 16},
		{rows: 1, hq: 4, hk: 2, hd: 16, rot: 16, pos: 8, capacity: 8, err: "capacity"},
	} {
		kind := "linear"
		if s.ring {
			kind = "ring"
		}
		name := fmt.Sprintf("qkv_attention_gate/%s/q%d-kv%d-d%d/rot=%d/rows=%d/pos=%d/cap=%d/window=%d", kind, s.hq, s.hk, s.hd, s.rot, s.rows, s.pos, s.capacity, s.window)
		if s.err != "" {
			name = "qkv_attention_gate/error/" + name[len("qkv_attention_gate/"):]
		}
		m := newMaker(name)
		const theta, eps = 1e4, 1e-6
		qw, kw := s.hq*s.hd, s.hk*s.hd
		at := ops.QKVAttentionAttrs{
			Prep: ops.QKVPrepAttrs{
				NormRope: ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: s.hd, Rotary: s.rot, Theta: theta}, Eps: eps},
				Slot:     ops.SlotAttrs{Ring: s.ring},
			},
			Attention: ops.AttentionAttrs{Heads: s.hq, KVHeads: s.hk, HeadDim: s.hd, Window: s.window, Ring: s.ring,
				Scale: float32(1 / math.Sqrt(float64(s.hd)))},
		}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{
				m.tensor("q", graph.Input, graph.F32, 3, s.rows, qw), m.tensor("k", graph.Input, graph.F32, 3, s.rows, kw), m.in("v", s.rows, kw),
				call(s.pos, 0), m.slot("kslot", s.capacity, kw), m.slot("vslot", s.capacity, kw),
				m.tensor("s", graph.Input, graph.F32, 2, qw), m.tensor("g", graph.Input, graph.F32, 4, s.rows, qw), m.tensor("sg", graph.Input, graph.F32, 2, qw),
			},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpQKVAttentionGate, at, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[3], s.rows)
				e := float64(float32(eps))
				q := refNormRope(in[0], qw, at.Prep.NormRope.Rope, pos, e, in[6])
				k := refNormRope(in[1], kw, at.Prep.NormRope.Rope, pos, e, nil)
				ks := refKVWrite(in[4], k, kw, pos, used, s.ring)
				vs := refKVWrite(in[5], in[2], kw, pos, used, s.ring)
				y := refAttention(q, ks, vs, at.Attention, pos, used)
				for i := range y {
					y[i] *= refSigmoid(in[7][i] * in[8][i%qw])
				}
				return [][]float64{y, ks, vs}
			},
			Tol:     attnTol(s.rows),
			WantErr: s.err,
		})
	}
	return cs
}

func qkvPrepCases() []Case {
	var cs []Case
	for _, s := range []struct {
		rows, hq, hk, hd, rot, pos, capacity, used int
		ring, scaled                               bool
		err                                        string
		scaling                                    ops.RopeScaling
	}{
		{rows: 1, hq: 4, hk: 2, hd: 16, rot: 16, pos: 5, capacity: 8, scaled: true},
		{rows: 3, hq: 2, hk: 1, hd: 66, rot: 32, pos: 9, capacity: 4, ring: true},
		{rows: 6, hq: 2, hk: 2, hd: 8, rot: 8, pos: 1, capacity: 4, ring: true, scaled: true}, // more rows than the ring holds
		{rows: 4, hq: 4, hk: 2, hd: 16, rot: 8, pos: 6, capacity: 8, used: 2, scaled: true},   // padded
		{rows: 1, hq: 16, hk: 4, hd: 64, rot: 64, pos: 300, capacity: 320, scaled: true},
		{rows: 2, hq: 4, hk: 2, hd: 256, rot: 256, pos: 1000, capacity: 1024, ring: true, scaled: true},
		{rows: 2, hq: 4, hk: 2, hd: 16, rot: 16, pos: 40, capacity: 64, scaled: true, scaling: ropeScalings["yarn"]},
		{rows: 3, hq: 2, hk: 1, hd: 66, rot: 64, pos: 9, capacity: 4, ring: true, scaling: ropeScalings["llama3"]},
		{rows: 3, hq: 2, hk: 2, hd: 8, rot: 8, pos: 6, capacity: 8, scaled: true, err: "capacity"},
		// prompt chunks: several heads a block on CUDA (13 heads: the last
		// block has fewer), a padded chunk, a ring chunk
		{rows: 20, hq: 9, hk: 2, hd: 32, rot: 16, pos: 3, capacity: 32, scaled: true},
		{rows: 18, hq: 8, hk: 4, hd: 64, rot: 64, pos: 0, capacity: 24, used: 17},
		{rows: 16, hq: 4, hk: 2, hd: 16, rot: 16, pos: 40, capacity: 24, ring: true, scaled: true},
		// a plan built for a bucket of rows: the slot holds the call's
		// positions, not the plan's; a padded ring chunk
		{rows: 32, hq: 8, hk: 2, hd: 64, rot: 32, pos: 3, capacity: 24, used: 21, scaled: true},
		{rows: 24, hq: 4, hk: 2, hd: 32, rot: 32, pos: 70, capacity: 16, used: 19, ring: true},
	} {
		kind := "linear"
		if s.ring {
			kind = "ring"
		}
		name := fmt.Sprintf("qkv_prep/%s/q%d-kv%d-d%d/rot=%d/rows=%d/pos=%d/cap=%d/used=%d/scaled=%v",
			kind, s.hq, s.hk, s.hd, s.rot, s.rows, s.pos, s.capacity, s.used, s.scaled) + ropeName(s.scaling)
		if s.err != "" {
			name = "qkv_prep/error/" + name[len("qkv_prep/"):]
		}
		m := newMaker(name)
		const theta, eps = 1e4, 1e-6
		at := ops.QKVPrepAttrs{
			NormRope: ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: s.hd, Rotary: s.rot, Theta: theta, Scaling: s.scaling}, Eps: eps},
			Slot:     ops.SlotAttrs{Ring: s.ring},
		}
		qw, kw := s.hq*s.hd, s.hk*s.hd
		inputs := []Tensor{
			m.tensor("q", graph.Input, graph.F32, 3, s.rows, qw), m.tensor("k", graph.Input, graph.F32, 3, s.rows, kw), m.in("v", s.rows, kw),
			call(s.pos, s.used), m.slot("kslot", s.capacity, kw), m.slot("vslot", s.capacity, kw),
		}
		if s.scaled {
			inputs = append(inputs, m.tensor("s", graph.Input, graph.F32, 2, qw))
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpQKVPrep, at, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[3], s.rows)
				var scale []float64
				if s.scaled {
					scale = in[6]
				}
				e := float64(float32(eps))
				q := refNormRope(in[0], qw, at.NormRope.Rope, pos, e, scale)
				k := refNormRope(in[1], kw, at.NormRope.Rope, pos, e, nil)
				return [][]float64{q, refKVWrite(in[4], k, kw, pos, used, s.ring), refKVWrite(in[5], in[2], kw, pos, used, s.ring)}
			},
			Tol:     TolF32,
			WantErr: s.err,
		})
	}
	return cs
}

func attentionGateCases() []Case {
	var cs []Case
	for _, s := range []attnShape{
		{heads: 2, kvHeads: 2, hd: 8, rows: 1, pos: 0, capacity: 4},
		{heads: 8, kvHeads: 2, hd: 8, rows: 5, pos: 3, capacity: 12},
		{heads: 4, kvHeads: 1, hd: 33, rows: 7, pos: 0, capacity: 7},
		{heads: 4, kvHeads: 2, hd: 8, rows: 3, pos: 17, capacity: 8, window: 6, ring: true},
		{heads: 4, kvHeads: 2, hd: 8, rows: 4, pos: 5, capacity: 8, used: 2},
		{heads: 16, kvHeads: 4, hd: 64, rows: 1, pos: 300, capacity: 320},
		{heads: 16, kvHeads: 4, hd: 64, rows: 1, pos: 900, capacity: 1024, window: 512, ring: true},
		{heads: 16, kvHeads: 4, hd: 256, rows: 1, pos: 2100, capacity: 1024, window: 1024, ring: true},
		{heads: 2, kvHeads: 2, hd: 8, rows: 2, pos: 7, capacity: 8, err: "capacity"},
		// Dory 4B's decode: a global layer, a window on its wrapped ring,
		// and a window of rows of which some are unused (gated zeros)
		{heads: 16, kvHeads: 4, hd: 256, rows: 1, pos: 2047, capacity: 2048},
		{heads: 16, kvHeads: 4, hd: 256, rows: 2, pos: 5000, capacity: 1983, window: 1024, ring: true},
		{heads: 16, kvHeads: 4, hd: 256, rows: 5, pos: 100, capacity: 512, used: 3},
		{heads: 16, kvHeads: 4, hd: 256, rows: 24, pos: 8, capacity: 64, window: 16},
		{heads: 8, kvHeads: 2, hd: 64, rows: 21, pos: 40, capacity: 32, window: 12, ring: true},
		{heads: 16, kvHeads: 4, hd: 256, rows: 70, pos: 30, capacity: 128, window: 64},
	} {
		base := attentionCase(s)
		name := "attention_gate/" + base.Name[len("attention/"):]
		m := newMaker(name)
		w := s.heads * s.hd
		at := ops.AttentionAttrs{Heads: s.heads, KVHeads: s.kvHeads, HeadDim: s.hd, Window: s.window, Ring: s.ring,
			Scale: float32(1 / math.Sqrt(float64(s.hd)))}
		cs = append(cs, Case{
			Name:   name,
			Inputs: append(base.Inputs, m.tensor("g", graph.Input, graph.F32, 4, s.rows, w), m.tensor("s", graph.Input, graph.F32, 2, w)),
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return b.Apply(ops.OpAttentionGate, at, 1, in...)
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[3], s.rows)
				y := refAttention(in[0], in[1], in[2], at, pos, used)
				for i := range y {
					y[i] *= refSigmoid(in[4][i] * in[5][i%w])
				}
				return [][]float64{y, in[1], in[2]}
			},
			Tol:     attnTol(s.rows),
			WantErr: s.err,
		})
	}
	return cs
}

func normMatMulCases() []Case {
	var cs []Case
	// rows, in features, out features: matvecs (odd widths take the
	// element-wise path; long rows are split across warps), windows of 2
	// to 8 rows (CUDA's cuBLAS window for 16-bit weights, else its
	// matvec kernels; K not a multiple of 32), the row bucket's last size
	// and GEMM sizes.
	shapes := [][3]int{{1, 1, 1}, {1, 33, 7}, {1, 256, 300}, {1, 999, 45}, {1, 4096, 300}, {3, 64, 129}, {2, 2048, 64},
		{8, 256, 17}, {9, 65, 70}, {33, 128, 40}, {5, 2560, 24}, {4, 1000, 9}}
	for _, dt := range weightTypes {
		for _, s := range shapes {
			rows, k, n := s[0], s[1], s[2]
			zero := -1
			if rows == 3 {
				zero = 1
			}
			cs = append(cs, normMatMulCase(fmt.Sprintf("norm_matmul/%s/%dx%dx%d", dt, rows, k, n), dt, rows, k, n, zero, tolFor(dt)))
		}
	}
	return cs
}

// decodeBlockCases are an attention sub-layer (q/k/v/g projections,
// qkv_prep, attention_gate, the gate's norm in the output projection,
// slerp) and a SwiGLU sub-layer (matmul_swiglu, its norm in the down
// projection, slerp) over bf16 weights, as the planner fuses Dory.
func decodeBlockCases() []Case {
	var cs []Case
	for _, s := range []struct {
		rows, pos, capacity, window int
		ring                        bool
	}{{1, 5, 8, 0, false}, {3, 9, 6, 4, true}} {
		const hidden, heads, kvHeads, hd, ffn = 32, 4, 2, 8, 48
		name := fmt.Sprintf("block/decode/rows=%d/pos=%d/cap=%d/window=%d/ring=%v", s.rows, s.pos, s.capacity, s.window, s.ring)
		m := newMaker(name)
		const eps = 1e-6
		nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: hd, Rotary: hd / 2, Theta: 1e4}, Eps: eps}
		at := ops.AttentionAttrs{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Window: s.window, Ring: s.ring, Scale: 1.5}
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
				m.tensor("wgate", graph.Weight, graph.BF16, 0.3, ffn, hidden),
				m.tensor("wup", graph.Weight, graph.BF16, 0.3, ffn, hidden),
				m.tensor("wdown", graph.Weight, graph.BF16, 0.3, hidden, ffn),
				m.tensor("sgate", graph.Input, graph.F32, 2, ffn), m.tensor("sup", graph.Input, graph.F32, 2, ffn),
				m.in("alpha2", hidden),
			},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				x, c := in[0], in[1]
				qkvg := ops.GroupedMatMul(b, x, in[2], in[3], in[4], in[5])
				q := b.Apply(ops.OpQKVPrep, ops.QKVPrepAttrs{NormRope: nr, Slot: ops.SlotAttrs{Ring: s.ring}}, 1,
					qkvg[0], qkvg[1], qkvg[2], c, in[10], in[11], in[7])[0]
				y := b.Apply(ops.OpAttentionGate, at, 1, q, in[10], in[11], c, qkvg[3], in[8])[0]
				o := b.Apply(ops.OpNormMatMul, ops.EpsAttrs{Eps: eps}, 1, y, in[6])[0]
				h := b.Apply(ops.OpSlerp, ops.EpsAttrs{Eps: eps}, 1, x, o, in[9])[0]
				a := b.Apply(ops.OpMatMulSwiGLU, nil, 1, h, in[12], in[13], in[15], in[16])[0]
				d := b.Apply(ops.OpNormMatMul, ops.EpsAttrs{Eps: eps}, 1, a, in[14])[0]
				return b.Apply(ops.OpSlerp, ops.EpsAttrs{Eps: eps}, 1, h, d, in[17])
			},
			Ref: func(in [][]float64) [][]float64 {
				e := float64(float32(eps))
				x, pos := in[0], int(in[1][ops.CallPos])
				q := refNormRope(RefMatMul(x, hidden, in[2]), heads*hd, nr.Rope, pos, e, in[7])
				k := refNormRope(RefMatMul(x, hidden, in[3]), kvHeads*hd, nr.Rope, pos, e, nil)
				ks := refKVWrite(in[10], k, kvHeads*hd, pos, s.rows, s.ring)
				vs := refKVWrite(in[11], RefMatMul(x, hidden, in[4]), kvHeads*hd, pos, s.rows, s.ring)
				y := refGatedNorm(refAttention(q, ks, vs, at, pos, s.rows), RefMatMul(x, hidden, in[5]), in[8], e)
				h := refSlerp(x, RefMatMul(y, heads*hd, in[6]), in[9], e)
				a := refSwiGLU(RefMatMul(h, hidden, in[12]), RefMatMul(h, hidden, in[13]), in[15], in[16])
				d := RefMatMul(refL2Norm(a, ffn, e), ffn, in[14])
				return [][]float64{refSlerp(h, d, in[17], e), ks, vs}
			},
			Tol: TolBF16,
		})
	}
	return cs
}
