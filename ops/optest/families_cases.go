package optest

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// familyBlockCases are whole patterns of the families' ops (a gated
// residual, a GDN mixer, a QSA mixer, a MoE block, PLE, the MTP input)
// against float64 references of the whole.
func familyBlockCases() []Case {
	var cs []Case
	const eps = 1e-6
	feps := epsOf(eps)
	w16 := func(m *maker, name string, amp float64, shape ...int) Tensor {
		return m.tensor(name, graph.Weight, graph.BF16, amp, shape...)
	}

	// A gated residual around a stand-in block y = u·W_blkᵀ.
	for _, s := range [][4]int{{1, 4, 16, 8}, {3, 2, 32, 12}} {
		rows, c, h, r := s[0], s[1], s[2], s[3]
		name := fmt.Sprintf("block/gated_residual/rows=%d/streams=%d/h=%d/rank=%d", rows, c, h, r)
		m := newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("x", rows, c*h), m.tensor("hc_norm", graph.Weight, graph.F32, 0.3, c*h),
				w16(m, "down", 0.3, r, c*h), w16(m, "up", 0.5, c*h, r), w16(m, "inject", 0.3, c, c*h), w16(m, "block", 0.3, h, h)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				xn := ops.RMSNorm(b, in[0], in[1], h, eps)
				t := ops.SiLU(b, ops.Scale(b, ops.MatMul(b, xn, in[2]), 1/float32(c)))
				u := ops.HCMix(b, xn, ops.MatMul(b, t, in[3]), c)
				y := ops.MatMul(b, u, in[5])
				return []*graph.Value{ops.HCInject(b, in[0], y, ops.MatMul(b, xn, in[4]), c), u}
			},
			Ref: func(in [][]float64) [][]float64 {
				xn := refRMSNorm(in[0], in[1], h, feps)
				t := refMap(RefMatMul(xn, c*h, in[2]), func(v float64) float64 { return refSiLU(v / float64(c)) })
				u := refHCMix(xn, RefMatMul(t, r, in[3]), c, h)
				y := RefMatMul(u, h, in[5])
				return [][]float64{refHCInject(in[0], y, RefMatMul(xn, c*h, in[4]), c, h), u}
			},
			Tol: TolBF16,
		})
	}

	// A GDN mixer: projections, conv, prep, gates, scan, gated norm, output.
	for _, s := range [][3]int{{1, 5, 0}, {4, 0, 0}, {3, 2, 2}} {
		rows, pos, used := s[0], s[1], s[2]
		const h, nk, dk, nv, dv, k = 32, 2, 8, 4, 8, 4
		cd := 2*nk*dk + nv*dv
		name := fmt.Sprintf("block/gdn/rows=%d/pos=%d/used=%d", rows, pos, used)
		m := newMaker(name)
		prep := ops.GDNPrepAttrs{KeyHeads: nk, KeyDim: dk, ValueHeads: nv, ValueDim: dv, Eps: 1e-6}
		norm := ops.GatedRMSNormAttrs{Group: dv, Eps: eps, Act: ops.ActSigmoid}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{
				m.in("u", rows, h), w16(m, "qkv", 0.3, cd, h), w16(m, "conv", 0.5, cd, 1, k),
				m.tensor("ring", graph.State, graph.F32, 1, k-1, cd),
				w16(m, "z", 0.3, nv*dv, h), w16(m, "a", 0.3, nv, h), w16(m, "b", 0.3, nv, h),
				m.tensor("A_log", graph.Weight, graph.F32, 1, nv), m.weight("dt_bias", graph.F32, nv),
				m.tensor("S", graph.State, graph.F32, 0.3, nv, dk, dv), m.tensor("norm", graph.Weight, graph.F32, 1, dv),
				w16(m, "out", 0.3, h, nv*dv), call(pos, used),
			},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				u, c := in[0], in[12]
				mix := ops.CausalConv(b, ops.MatMul(b, u, in[1]), in[2], in[3], c, ops.ConvAttrs{Dilation: 1, Act: ops.ActSiLU})
				q, kk, v := ops.GDNPrep(b, mix, prep)
				g, beta := ops.GDNGates(b, ops.MatMul(b, u, in[5]), ops.MatMul(b, u, in[6]), in[7], in[8])
				o := ops.GDNScan(b, q, kk, v, g, beta, in[9], c)
				return []*graph.Value{ops.MatMul(b, ops.GatedRMSNorm(b, o, ops.MatMul(b, u, in[4]), in[10], norm), in[11])}
			},
			Ref: func(in [][]float64) [][]float64 {
				u := in[0]
				p0, n := callRows(in[12], rows)
				mix, ring := refConv(RefMatMul(u, h, in[1]), in[2], in[3], cd, k, 1, p0, n, true)
				q, kk, v := refGDNPrep(mix, prep)
				g, beta := refGates(RefMatMul(u, h, in[5]), RefMatMul(u, h, in[6]), in[7], in[8])
				o, st := refScan(q, kk, v, g, beta, in[9], nk, nv, dk, dv, p0, n)
				y := RefMatMul(refGatedRMSNorm(o, RefMatMul(u, h, in[4]), in[10], feps, ops.ActSigmoid), nv*dv, in[11])
				return [][]float64{y, ring, st}
			},
			Tol: TolBF16,
		})
	}

	// A MoE block with its shared expert.
	for _, rows := range []int{1, 4, 7} {
		const h, e, f, k = 32, 8, 16, 2
		name := fmt.Sprintf("block/moe/rows=%d/e=%d/k=%d", rows, e, k)
		var inputs []Tensor
		for try := 0; ; try++ {
			m := newMaker(fmt.Sprintf("%s#%d", name, try))
			inputs = []Tensor{m.in("x", rows, h), m.weight("router", graph.F32, e, h), w16(m, "gate_up", 0.3, e, 2*f, h),
				w16(m, "down", 0.3, e, h, f), w16(m, "sg", 0.3, f, h), w16(m, "su", 0.3, f, h), w16(m, "sd", 0.3, h, f), w16(m, "sgate", 0.3, 1, h)}
			if _, _, gap := refRoute(RefMatMul(inputs[0].Data, h, inputs[1].Data), e, k, true); gap > minScoreGap {
				break
			}
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				x := in[0]
				ids, w := ops.MoERoute(b, ops.MatMul(b, x, in[1]), k, true)
				y := ops.ExpertMatMul(b, ops.SiLUGLU(b, ops.ExpertMatMul(b, x, in[2], ids)), in[3], ids)
				gu := ops.GroupedMatMul(b, x, in[4], in[5])
				s := ops.MatMul(b, ops.Mul(b, ops.SiLU(b, gu[0]), gu[1]), in[6])
				return []*graph.Value{ops.MoECombine(b, y, w, s, ops.MatMul(b, x, in[7])), ids}
			},
			Ref: func(in [][]float64) [][]float64 {
				x := in[0]
				ids, w, _ := refRoute(RefMatMul(x, h, in[1]), e, k, true)
				y := refExpert(refSiLUGLU(refExpert(x, in[2], ids, 2*f, h, false), f), in[3], ids, h, f, true)
				g, u := RefMatMul(x, h, in[4]), RefMatMul(x, h, in[5])
				for i := range g {
					g[i] = refSiLU(g[i]) * u[i]
				}
				s := RefMatMul(g, f, in[6])
				return [][]float64{refCombine(y, w, s, RefMatMul(x, h, in[7]), k, h), ids}
			},
			Tol: TolBF16,
		})
	}

	// A QSA mixer: projections, per-head norms, rope, KV writes, the indexer,
	// block keys, the selection, sparse attention, the gate and o_proj.
	for _, s := range [][2]int{{3, 6}, {1, 9}, {4, 0}} {
		rows, pos := s[0], s[1]
		const h, nq, nkv, hd, rot, ih, idim, cr, keep, capacity = 32, 4, 2, 16, 8, 2, 16, 2, 2, 16
		const theta = 1e7
		name := fmt.Sprintf("block/qsa/rows=%d/pos=%d", rows, pos)
		rope := ops.RopeAttrs{HeadDim: hd, Rotary: rot, Theta: theta}
		irope := ops.RopeAttrs{HeadDim: idim, Rotary: rot, Theta: theta}
		bk := ops.BlockKeyAttrs{Block: cr, Rope: irope, Eps: eps}
		sa := ops.SelectAttrs{Heads: ih, Block: cr, Keep: keep}
		at := ops.SparseAttentionAttrs{Heads: nq, KVHeads: nkv, HeadDim: hd, Block: cr, Scale: float32(1 / math.Sqrt(hd))}
		// ref computes every result; with check it also gives the selection's margin.
		ref := func(in [][]float64) ([][]float64, float64) {
			u := in[0]
			p0, n := callRows(in[13], rows)
			qg := refSplit(RefMatMul(u, h, in[1]), nq, []int{hd, hd})
			q := refRope(refRMSNorm(qg[0], in[5], hd, feps), nq*hd, rope, p0)
			kk := refRope(refRMSNorm(RefMatMul(u, h, in[2]), in[6], hd, feps), nkv*hd, rope, p0)
			ks := refKVWrite(in[9], kk, nkv*hd, p0, n, false)
			vs := refKVWrite(in[10], RefMatMul(u, h, in[3]), nkv*hd, p0, n, false)
			ik := refSplit(RefMatMul(u, h, in[7]), 1, []int{ih * idim, idim})
			qi := refRope(refRMSNorm(ik[0], in[8], idim, feps), ih*idim, irope, p0)
			slot, keys := refBlockKeys(ik[1], in[14], in[11], in[12], bk, p0, n)
			sel, gap := refSelect(qi, keys, idim, sa, p0, n)
			y := refSparseAttention(q, ks, vs, sel, at, p0, n)
			for i := range y {
				y[i] *= refSigmoid(qg[1][i])
			}
			return [][]float64{RefMatMul(y, nq*hd, in[4]), sel, ks, vs, slot, keys}, gap
		}
		var inputs []Tensor
		for try := 0; ; try++ {
			m := newMaker(fmt.Sprintf("%s#%d", name, try))
			inputs = []Tensor{
				m.in("u", rows, h), w16(m, "q", 0.3, nq*2*hd, h), w16(m, "k", 0.3, nkv*hd, h), w16(m, "v", 0.3, nkv*hd, h),
				w16(m, "o", 0.3, h, nq*hd), m.tensor("q_norm", graph.Weight, graph.F32, 0.3, hd),
				m.tensor("k_norm", graph.Weight, graph.F32, 0.3, hd), w16(m, "index", 0.5, (ih+1)*idim, h),
				m.tensor("index_q_norm", graph.Weight, graph.F32, 0.3, idim),
				m.slot("K", capacity, nkv*hd), m.slot("V", capacity, nkv*hd), m.slot("Kraw", capacity, idim),
				m.slot("B", capacity/cr, idim), call(pos, 0), m.tensor("index_k_norm", graph.Weight, graph.F32, 0.3, idim),
			}
			data := make([][]float64, len(inputs))
			for i, t := range inputs {
				data[i] = t.Data
			}
			if _, gap := ref(data); gap > minScoreGap {
				break
			}
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				u, c := in[0], in[13]
				qg := ops.Split(b, ops.MatMul(b, u, in[1]), nq, hd, hd)
				q := ops.Rope(b, ops.RMSNorm(b, qg[0], in[5], hd, eps), c, rope)
				kk := ops.Rope(b, ops.RMSNorm(b, ops.MatMul(b, u, in[2]), in[6], hd, eps), c, rope)
				ops.KVWrite(b, kk, in[9], c, ops.SlotAttrs{})
				ops.KVWrite(b, ops.MatMul(b, u, in[3]), in[10], c, ops.SlotAttrs{})
				ik := ops.Split(b, ops.MatMul(b, u, in[7]), 1, ih*idim, idim)
				qi := ops.Rope(b, ops.RMSNorm(b, ik[0], in[8], idim, eps), c, irope)
				ops.QSABlockKeys(b, ik[1], in[14], in[11], in[12], c, bk)
				sel := ops.QSASelect(b, qi, in[12], c, sa)
				y := ops.QSAAttention(b, q, in[9], in[10], sel, c, at)
				return []*graph.Value{ops.MatMul(b, ops.GateMerge(b, y, qg[1]), in[4]), sel}
			},
			Ref: func(in [][]float64) [][]float64 {
				out, _ := ref(in)
				return out
			},
			Tol: TolBF16,
		})
	}

	// PLE: the hash, the table rows, the gate per stream and the dilated conv.
	tiny := pleHashAttrs(3, 2, 1, 128, 0, 1234, []int64{101, 103, 107, 109})
	for _, s := range [][2]int{{5, 0}, {1, 7}, {3, 2}} {
		rows, pos := s[0], s[1]
		const c, h, w, ck, dil = 2, 16, 8, 4, 3
		const nh, pin = 4, 32
		name := fmt.Sprintf("block/ple/rows=%d/pos=%d", rows, pos)
		m := newMaker(name)
		ids := m.ids("ids", rows, 128)
		ids.Data[0] = 1 // an EOS
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{
				m.in("x", rows, c*h), ids, intLeaf("hist", graph.State, []int{5, 9}, 2),
				w16(m, "shard_0", 1, 256, w), w16(m, "shard_1", 1, 256, w), w16(m, "key", 0.3, c*h, pin), w16(m, "value", 0.3, h, pin),
				m.tensor("norm_key", graph.Weight, graph.F32, 0.3, c*h), m.tensor("norm_query", graph.Weight, graph.F32, 0.3, c*h),
				m.tensor("norm_conv", graph.Weight, graph.F32, 0.3, c*h), w16(m, "conv", 0.5, c*h, 1, ck),
				m.tensor("ring", graph.State, graph.F32, 1, (ck-1)*dil, c*h), call(pos, 0),
			},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				x, call := in[0], in[12]
				r := ops.PLEHash(b, in[1], in[2], call, tiny)
				e := ops.NGramEmbed(b, r, in[3], in[4])
				kn := ops.RMSNorm(b, ops.MatMul(b, e, in[5]), in[7], h, eps)
				qn := ops.RMSNorm(b, x, in[8], h, eps)
				gv := ops.PLEGate(b, kn, qn, ops.MatMul(b, e, in[6]), c)
				cv := ops.CausalConv(b, ops.RMSNorm(b, gv, in[9], h, eps), in[10], in[11], call, ops.ConvAttrs{Dilation: dil, Act: ops.ActSiLU})
				return []*graph.Value{ops.Add(b, ops.Add(b, x, gv), cv), r}
			},
			Ref: func(in [][]float64) [][]float64 {
				x := in[0]
				p0, n := callRows(in[12], rows)
				r, hist := refPLEHash(in[1], in[2], tiny, p0, n)
				e := refNGramEmbed(r, w, in[3], in[4])
				kn := refRMSNorm(RefMatMul(e, nh*w, in[5]), in[7], h, feps)
				qn := refRMSNorm(x, in[8], h, feps)
				gv := refPLEGate(kn, qn, RefMatMul(e, nh*w, in[6]), c, h)
				cv, ring := refConv(refRMSNorm(gv, in[9], h, feps), in[10], in[11], c*h, ck, dil, p0, n, true)
				out := make([]float64, len(x))
				for i := range out {
					out[i] = x[i] + gv[i] + cv[i]
				}
				return [][]float64{out, r, hist, ring}
			},
			Tol: TolBF16,
		})
	}

	// The MTP head's input: the next token's embedding and the hidden streams.
	for _, rows := range []int{1, 3} {
		const c, h, vocab = 2, 16, 32
		name := fmt.Sprintf("block/mtp_input/rows=%d", rows)
		m := newMaker(name)
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("hidden", rows, c*h), m.ids("ids", rows, vocab), w16(m, "embed", 1, vocab, h),
				m.tensor("enorm", graph.Weight, graph.F32, 0.3, h), m.tensor("hnorm", graph.Weight, graph.F32, 0.3, c*h),
				w16(m, "fc_embedding", 0.3, h, h), w16(m, "fc_hidden", 0.3, h, h)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				e := ops.MatMul(b, ops.RMSNorm(b, ops.Embed(b, in[2], in[1]), in[3], 0, eps), in[5])
				hn := ops.RMSNorm(b, in[0], in[4], 0, eps)
				hs := ops.Reshape(b, ops.MatMul(b, ops.Reshape(b, hn, rows*c, h), in[6]), rows, c*h)
				return []*graph.Value{ops.Add(b, hs, ops.HCExpand(b, e, c))}
			},
			Ref: func(in [][]float64) [][]float64 {
				e := RefMatMul(refRMSNorm(refEmbed(in[2], h, in[1]), in[3], h, feps), h, in[5])
				hs := RefMatMul(refRMSNorm(in[0], in[4], c*h, feps), h, in[6])
				ex := refHCExpand(e, c, h)
				for i := range hs {
					hs[i] += ex[i]
				}
				return [][]float64{hs}
			},
			Tol: TolBF16,
		})
	}
	return cs
}
