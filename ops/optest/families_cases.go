package optest

import (
	"fmt"
	"math"
	"sort"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// The cases of the op families (ops/deltanet.go, hyperconn.go, moe.go,
// ngram.go, sparseattn.go), with their float64 references (the ref*
// functions: each op's Doc written out plainly, in the formulation of the
// reference PyTorch code where it differs from a kernel's), and whole patterns of several ops (a gated residual, a GDN
// mixer, a QSA mixer, a MoE block, PLE, the MTP input) against references of
// the whole.

// familyOpCases lists the family cases; familyCases (families.go) returns it.
func familyOpCases() []Case {
	var cs []Case
	for _, gen := range []func() []Case{
		gatedNormCases, hyperconnCases, splitReshapeCases, convCases, deltanetCases, blockKeyCases, selectCases, sparseAttentionCases,
		ngramCases, moeCases, familyBlockCases,
	} {
		cs = append(cs, gen()...)
	}
	return cs
}

// applyAll is a Build that applies one op over every leaf.
func applyAll(d *ops.Def, attrs any, nOut int) func(*graph.Builder, []*graph.Value) []*graph.Value {
	return func(b *graph.Builder, in []*graph.Value) []*graph.Value { return b.Apply(d, attrs, nOut, in...) }
}

// intLeaf is an i32 leaf holding vals.
func intLeaf(name string, kind graph.Kind, vals []int, shape ...int) Tensor {
	t := Tensor{Name: name, Kind: kind, DType: graph.I32, Shape: graph.Shape(shape), Data: make([]float64, len(vals))}
	for i, v := range vals {
		t.Data[i] = float64(v)
	}
	return t
}

// mapLeaf rounds f of every element of t to t's dtype, in place.
func mapLeaf(t Tensor, f func(float64) float64) Tensor {
	for i, v := range t.Data {
		t.Data[i] = round(t.DType, f(v))
	}
	return t
}

// epsOf is how an f32 epsilon attribute reaches a kernel.
func epsOf(eps float32) float64 { return float64(eps) }

// ---------------------------------------------------------------- references

// refHCMix is (1/C) Σ_c sigmoid(g_c) xn_c.
func refHCMix(xn, g []float64, c, h int) []float64 {
	rows := len(xn) / (c * h)
	u := make([]float64, rows*h)
	for t := 0; t < rows; t++ {
		for i := 0; i < h; i++ {
			for s := 0; s < c; s++ {
				o := t*c*h + s*h + i
				u[t*h+i] += refSigmoid(g[o]) * xn[o] / float64(c)
			}
		}
	}
	return u
}

// refHCInject is x_c + 2 sigmoid(l_c / C) y.
func refHCInject(x, y, l []float64, c, h int) []float64 {
	out := make([]float64, len(x))
	for i := range x {
		t, s, j := i/(c*h), i/h%c, i%h
		out[i] = x[i] + 2*refSigmoid(l[t*c+s]/float64(c))*y[t*h+j]
	}
	return out
}

// refHCExpand tiles rows of h c times.
func refHCExpand(x []float64, c, h int) []float64 {
	var out []float64
	for t := 0; t < len(x)/h; t++ {
		for s := 0; s < c; s++ {
			out = append(out, x[t*h:(t+1)*h]...)
		}
	}
	return out
}

// refSplit cuts rows of heads repetitions of parts.
func refSplit(x []float64, heads int, parts []int) [][]float64 {
	per := 0
	for _, p := range parts {
		per += p
	}
	out := make([][]float64, len(parts))
	for o := 0; o < len(x); o += per {
		at := o
		for i, p := range parts {
			out[i] = append(out[i], x[at:at+p]...)
			at += p
		}
	}
	return out
}

// refConv is the causal depthwise conv of the first used rows at positions
// pos.. over the history in ring (position j at row j mod R, zero before
// position 0), and the ring afterwards.
func refConv(x, w, ring []float64, c, k, dil, pos, used int, silu bool) (y, ring2 []float64) {
	r := (k - 1) * dil
	val := func(j, ch int) float64 {
		switch {
		case j >= pos:
			return x[(j-pos)*c+ch]
		case j >= 0:
			return ring[(j%r)*c+ch]
		}
		return 0
	}
	y = make([]float64, len(x))
	for t := 0; t < used; t++ {
		for ch := 0; ch < c; ch++ {
			var s float64
			for i := 0; i < k; i++ {
				s += w[ch*k+i] * val(pos+t-(k-1-i)*dil, ch)
			}
			if silu {
				s = refSiLU(s)
			}
			y[t*c+ch] = s
		}
	}
	ring2 = append([]float64(nil), ring...)
	for t := 0; t < used; t++ { // later positions overwrite earlier ones
		j := (pos + t) % r
		copy(ring2[j*c:(j+1)*c], x[t*c:(t+1)*c])
	}
	return y, ring2
}

// refGDNPrep splits [q | k | v] and l2-normalizes q (then / sqrt(dk)) and k per head.
func refGDNPrep(mix []float64, a ops.GDNPrepAttrs) (q, k, v []float64) {
	kd := a.KeyHeads * a.KeyDim
	p := refSplit(mix, 1, []int{kd, kd, a.ValueHeads * a.ValueDim})
	eps := epsOf(a.Eps)
	q = refMap(refL2Norm(p[0], a.KeyDim, eps), func(x float64) float64 { return x / math.Sqrt(float64(a.KeyDim)) })
	return q, refL2Norm(p[1], a.KeyDim, eps), p[2]
}

// refGates is g = −exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
func refGates(a, b, aLog, dtBias []float64) (g, beta []float64) {
	nv := len(aLog)
	g, beta = make([]float64, len(a)), make([]float64, len(a))
	for i := range a {
		x := a[i] + dtBias[i%nv]
		sp := math.Log1p(math.Exp(x))
		if x > 20 {
			sp = x
		}
		g[i] = -math.Exp(aLog[i%nv]) * sp
		beta[i] = refSigmoid(b[i])
	}
	return g, beta
}

// refScan is the gated delta rule over the first used rows, from the state
// s (zero when pos is 0); the other rows are zero.
func refScan(q, k, v, g, beta, s []float64, nk, nv, dk, dv, pos, used int) (o, s2 []float64) {
	s2 = append([]float64(nil), s...)
	if pos == 0 {
		clear(s2)
	}
	o = make([]float64, len(v))
	at := func(j, r, i int) *float64 { return &s2[(j*dk+r)*dv+i] }
	for t := 0; t < used; t++ {
		for j := 0; j < nv; j++ {
			kh := j / (nv / nk)
			qt, kt := q[t*nk*dk+kh*dk:], k[t*nk*dk+kh*dk:]
			vt := v[t*nv*dv+j*dv:]
			d, b := math.Exp(g[t*nv+j]), beta[t*nv+j]
			for r := 0; r < dk; r++ {
				for i := 0; i < dv; i++ {
					*at(j, r, i) *= d
				}
			}
			for i := 0; i < dv; i++ {
				var m float64
				for r := 0; r < dk; r++ {
					m += *at(j, r, i) * kt[r]
				}
				delta := b * (vt[i] - m)
				for r := 0; r < dk; r++ {
					*at(j, r, i) += kt[r] * delta
				}
				var y float64
				for r := 0; r < dk; r++ {
					y += *at(j, r, i) * qt[r]
				}
				o[t*nv*dv+j*dv+i] = y
			}
		}
	}
	return o, s2
}

// refAct is an activation by name.
func refAct(a ops.Activation) func(float64) float64 {
	switch a {
	case ops.ActSiLU:
		return refSiLU
	case ops.ActSigmoid:
		return refSigmoid
	}
	return func(x float64) float64 { return x }
}

// refGatedRMSNorm is w ⊙ o / sqrt(mean o² + eps) ⊙ act(z) over runs of len(w).
func refGatedRMSNorm(o, z, w []float64, eps float64, act ops.Activation) []float64 {
	f, g := refAct(act), len(w)
	y := make([]float64, len(o))
	for r := 0; r < len(o); r += g {
		var s float64
		for _, v := range o[r : r+g] {
			s += v * v
		}
		d := math.Sqrt(s/float64(g) + eps)
		for i := 0; i < g; i++ {
			y[r+i] = w[i] * o[r+i] / d * f(z[r+i])
		}
	}
	return y
}

// refBlockKeys gives the raw key slot and the block keys after a call.
func refBlockKeys(kraw, w, slot, keys []float64, a ops.BlockKeyAttrs, pos, used int) (slot2, keys2 []float64) {
	d, cr := len(w), a.Block
	capacity := len(slot) / d
	val := func(j int) []float64 {
		if j >= pos {
			return kraw[(j-pos)*d : (j-pos+1)*d]
		}
		if a.Ring {
			j %= capacity
		}
		return slot[j*d : (j+1)*d]
	}
	keys2 = append([]float64(nil), keys...)
	for b := 0; b < len(keys)/d; b++ {
		if last := b*cr + cr - 1; last < pos || last >= pos+used {
			continue
		}
		mean := make([]float64, d)
		for i := 0; i < cr; i++ {
			for c, x := range val(b*cr + i) {
				mean[c] += x / float64(cr)
			}
		}
		kb := refRope(refRMSNorm(mean, w, d, epsOf(a.Eps)), d, a.Rope, b*cr)
		copy(keys2[b*d:], kb)
	}
	return refKVWrite(slot, kraw, d, pos, used, a.Ring), keys2
}

// refBlockScores are σ_b = Σ_h ReLU(qi_h · keys[b]) / sqrt(d) for b < nb.
func refBlockScores(qi, keys []float64, heads, nb int) []float64 {
	d := len(qi) / heads
	sc := make([]float64, nb)
	for b := range sc {
		for h := 0; h < heads; h++ {
			var s float64
			for i := 0; i < d; i++ {
				s += qi[h*d+i] * keys[b*d+i]
			}
			sc[b] += math.Max(s, 0)
		}
		sc[b] /= math.Sqrt(float64(d))
	}
	return sc
}

// refSelect is the indexer's choice of blocks per row (keys of width d),
// and the smallest gap between a kept and a dropped score (+Inf where
// nothing was dropped or at exact ties, which every backend resolves alike).
func refSelect(qi, keys []float64, d int, a ops.SelectAttrs, pos, used int) (sel []float64, gap float64) {
	width := a.Heads * d
	rows := len(qi) / width
	gap = math.Inf(1)
	sel = make([]float64, rows*a.Keep)
	for i := range sel {
		sel[i] = -1
	}
	for t := 0; t < used; t++ {
		p := pos + t
		nb := (p + 1) / a.Block
		row := sel[t*a.Keep : (t+1)*a.Keep]
		if nb <= a.Keep {
			for b := 0; b < nb; b++ {
				row[b] = float64(b)
			}
			continue
		}
		sc := refBlockScores(qi[t*width:(t+1)*width], keys, a.Heads, nb)
		idx := make([]int, nb)
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return sc[idx[i]] > sc[idx[j]] })
		if sc[idx[a.Keep-1]] != sc[idx[a.Keep]] {
			gap = math.Min(gap, sc[idx[a.Keep-1]]-sc[idx[a.Keep]])
		}
		kept := append([]int(nil), idx[:a.Keep]...)
		sort.Ints(kept)
		for i, b := range kept {
			row[i] = float64(b)
		}
	}
	return sel, gap
}

// refSparseAttention is GQA attention of each row over its selected blocks
// and trailing keys.
func refSparseAttention(q, k, v, sel []float64, a ops.SparseAttentionAttrs, pos, used int) []float64 {
	d, cr := a.HeadDim, a.Block
	qw, kw := a.Heads*d, a.KVHeads*d
	keep := len(sel) / (len(q) / qw)
	y := make([]float64, len(q))
	for t := 0; t < used; t++ {
		p := pos + t
		nb := (p + 1) / cr
		var keys []int
		for _, b := range sel[t*keep : (t+1)*keep] {
			for j := 0; b >= 0 && j < cr; j++ {
				keys = append(keys, int(b)*cr+j)
			}
		}
		for j := nb * cr; j <= p; j++ {
			keys = append(keys, j)
		}
		for h := 0; h < a.Heads; h++ {
			kh := h / (a.Heads / a.KVHeads)
			s := make([]float64, len(keys))
			m := math.Inf(-1)
			for i, j := range keys {
				var dot float64
				for c := 0; c < d; c++ {
					dot += q[t*qw+h*d+c] * k[j*kw+kh*d+c]
				}
				s[i] = float64(a.Scale) * dot
				m = math.Max(m, s[i])
			}
			var sum float64
			for i := range s {
				s[i] = math.Exp(s[i] - m)
				sum += s[i]
			}
			for i, j := range keys {
				for c := 0; c < d; c++ {
					y[t*qw+h*d+c] += s[i] / sum * v[j*kw+kh*d+c]
				}
			}
		}
	}
	return y
}

// refPLEHash follows the reference code: the token history is the last n−1
// tokens before the call (EOS before position 0) and the call's ids; the
// token s steps back is replaced by EOS unless it lies in the current
// segment (after the last EOS before the token) and in the history.
func refPLEHash(ids, hist []float64, a ops.PLEHashAttrs, pos, used int) (rows, hist2 []float64) {
	n, hp := a.NGram, a.HeadsPerNGram
	ctx, nh := n-1, (n-1)*a.HeadsPerNGram
	eos := int64(a.EOS)
	var h []int64
	for j := pos - ctx; j < pos; j++ {
		if j < 0 {
			h = append(h, eos)
		} else {
			h = append(h, int64(hist[j%ctx]))
		}
	}
	for _, id := range ids[:used] {
		h = append(h, int64(id))
	}
	shifted := func(i, s int) int64 {
		start := 0 // the segment of i starts after the last EOS before i
		for j := 0; j < i; j++ {
			if h[j] == eos {
				start = j + 1
			}
		}
		if i-start >= s && i-s >= 0 {
			return h[i-s]
		}
		return eos
	}
	rows = make([]float64, len(ids)*nh)
	for t := 0; t < used; t++ {
		i := ctx + t
		mix := shifted(i, 0) * a.Mult[0]
		for o := 2; o <= n; o++ {
			mix ^= shifted(i, o-1) * a.Mult[o-1]
			for e := 0; e < hp; e++ {
				hd := (o-2)*hp + e
				r := ((mix % a.Sizes[hd]) + a.Sizes[hd]) % a.Sizes[hd]
				rows[t*nh+hd] = float64(r + a.Offsets[hd])
			}
		}
	}
	hist2 = append([]float64(nil), hist...)
	for t := 0; t < used; t++ {
		hist2[(pos+t)%ctx] = ids[t]
	}
	return rows, hist2
}

// refNGramEmbed gathers rows of the concatenated shards.
func refNGramEmbed(rows []float64, w int, shards ...[]float64) []float64 {
	var table []float64
	for _, s := range shards {
		table = append(table, s...)
	}
	return refEmbed(table, w, rows)
}

// refPLEGate is sigmoid(sign(γ) sqrt(max(|γ|, 1e-6))) v per stream, γ = kn_c·qn_c / sqrt(H).
func refPLEGate(kn, qn, v []float64, c, h int) []float64 {
	y := make([]float64, len(kn))
	for t := 0; t < len(v)/h; t++ {
		for s := 0; s < c; s++ {
			o := (t*c + s) * h
			var g float64
			for i := 0; i < h; i++ {
				g += kn[o+i] * qn[o+i]
			}
			g /= math.Sqrt(float64(h))
			sg := 0.0
			if g > 0 {
				sg = 1
			} else if g < 0 {
				sg = -1
			}
			g = sg * math.Sqrt(math.Max(math.Abs(g), 1e-6))
			for i := 0; i < h; i++ {
				y[o+i] = refSigmoid(g) * v[t*h+i]
			}
		}
	}
	return y
}

// refRoute is softmax, the k most likely experts (ties to the smaller id)
// and their weights, renormalized when norm; also the smallest gap between
// the k-th and the (k+1)-th probability (+Inf for k = E or exact ties).
func refRoute(logits []float64, e, k int, norm bool) (ids, w []float64, gap float64) {
	gap = math.Inf(1)
	for t := 0; t < len(logits)/e; t++ {
		l := logits[t*e : (t+1)*e]
		m := math.Inf(-1)
		for _, x := range l {
			m = math.Max(m, x)
		}
		p := make([]float64, e)
		var sum float64
		for i, x := range l {
			p[i] = math.Exp(x - m)
			sum += p[i]
		}
		idx := make([]int, e)
		for i := range idx {
			p[i] /= sum
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return p[idx[i]] > p[idx[j]] })
		if k < e && p[idx[k-1]] != p[idx[k]] {
			gap = math.Min(gap, p[idx[k-1]]-p[idx[k]])
		}
		var kept float64
		for _, i := range idx[:k] {
			kept += p[i]
		}
		for _, i := range idx[:k] {
			ids = append(ids, float64(i))
			if norm {
				w = append(w, p[i]/kept)
			} else {
				w = append(w, p[i])
			}
		}
	}
	return ids, w, gap
}

// refExpert is y[t, j] = w[ids[t, j]] · x[t] (or x[t, j]).
func refExpert(x, w, ids []float64, nOut, nIn int, perUnit bool) []float64 {
	y := make([]float64, len(ids)*nOut)
	k := len(ids) / (len(x) / nIn)
	if perUnit {
		k = 1
	}
	for u, id := range ids {
		xu := x[u/k*nIn : (u/k+1)*nIn]
		if perUnit {
			xu = x[u*nIn : (u+1)*nIn]
		}
		e := int(id)
		for o := 0; o < nOut; o++ {
			var s float64
			for i := 0; i < nIn; i++ {
				s += w[(e*nOut+o)*nIn+i] * xu[i]
			}
			y[u*nOut+o] = s
		}
	}
	return y
}

// refSiLUGLU is silu(x[:F]) x[F:] over rows of 2F.
func refSiLUGLU(x []float64, f int) []float64 {
	var y []float64
	for o := 0; o < len(x); o += 2 * f {
		for i := 0; i < f; i++ {
			y = append(y, refSiLU(x[o+i])*x[o+f+i])
		}
	}
	return y
}

// refCombine is Σ_j w_j y_j (+ sigmoid(sg) s).
func refCombine(y, w, s, sg []float64, k, h int) []float64 {
	rows := len(w) / k
	out := make([]float64, rows*h)
	for t := 0; t < rows; t++ {
		for i := 0; i < h; i++ {
			for j := 0; j < k; j++ {
				out[t*h+i] += w[t*k+j] * y[(t*k+j)*h+i]
			}
			if s != nil {
				out[t*h+i] += refSigmoid(sg[t]) * s[t*h+i]
			}
		}
	}
	return out
}

// ---------------------------------------------------------------- op cases

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
	type scan struct{ nk, nv, dk, dv, rows, pos, used int }
	for _, s := range []scan{
		{1, 1, 4, 3, 1, 0, 0}, {2, 4, 8, 5, 3, 0, 0}, {2, 4, 8, 5, 3, 6, 0}, {1, 3, 16, 16, 5, 2, 3},
		{1, 2, 8, 8, 1, 9, 0}, {2, 8, 32, 16, 12, 0, 0},
	} {
		name := fmt.Sprintf("gdn_scan/k=%dx%d/v=%dx%d/rows=%d/pos=%d/used=%d", s.nk, s.dk, s.nv, s.dv, s.rows, s.pos, s.used)
		m := newMaker(name)
		kd := s.nk * s.dk
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{
				m.in("q", s.rows, kd), m.in("k", s.rows, kd), m.tensor("v", graph.Input, graph.F32, 2, s.rows, s.nv*s.dv),
				mapLeaf(m.in("g", s.rows, s.nv), func(x float64) float64 { return -1.5 * math.Abs(x) }),
				mapLeaf(m.in("beta", s.rows, s.nv), func(x float64) float64 { return refSigmoid(3 * x) }),
				m.tensor("S", graph.State, graph.F32, 0.5, s.nv, s.dk, s.dv), call(s.pos, s.used),
			},
			Build: applyAll(ops.OpGDNScan, nil, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[6], s.rows)
				o, st := refScan(in[0], in[1], in[2], in[3], in[4], in[5], s.nk, s.nv, s.dk, s.dv, pos, used)
				return [][]float64{o, st}
			},
			Tol: TolF32,
		})
	}
	return cs
}

func blockKeyCases() []Case {
	var cs []Case
	type bk struct {
		rows, d, rot, cr, pos, used, slotCap, keyCap int
		ring                                         bool
		dt                                           graph.DType
		err                                          string
		scaling                                      string
	}
	for _, s := range []bk{
		{4, 16, 8, 2, 0, 0, 8, 6, false, graph.F32, "", ""},   // blocks 0 and 1
		{1, 16, 8, 4, 7, 0, 4, 3, true, graph.BF16, "", ""},   // completes block 1 from a ring
		{5, 8, 4, 4, 2, 0, 4, 3, true, graph.F32, "", ""},     // a ring smaller than the chunk
		{3, 8, 4, 4, 1, 0, 8, 2, false, graph.F16, "", ""},    // completes block 0
		{2, 8, 4, 4, 4, 0, 8, 2, false, graph.F32, "", ""},    // completes nothing
		{4, 16, 8, 2, 5, 2, 16, 8, false, graph.F32, "", ""},  // padded
		{9, 16, 16, 3, 0, 0, 9, 3, false, graph.BF16, "", ""}, // blocks of 3, full rotary
		{40, 64, 16, 4, 100, 0, 160, 40, false, graph.BF16, "", ""},
		{6, 16, 16, 2, 3, 0, 16, 8, false, graph.F32, "", "yarn"},
		{5, 64, 64, 4, 2, 0, 8, 4, true, graph.F32, "", "llama3"},
		{3, 8, 4, 2, 6, 0, 8, 4, false, graph.F32, "capacity", ""}, // positions past the slot
		{4, 8, 4, 2, 0, 0, 8, 1, false, graph.F32, "capacity", ""}, // blocks past the keys
	} {
		kind := "linear"
		if s.ring {
			kind = "ring"
		}
		scaling := ropeScalings[s.scaling]
		name := fmt.Sprintf("qsa_block_keys/%s/%s/%dx%d/rot=%d/block=%d/pos=%d/used=%d/cap=%d/keys=%d", kind, s.dt, s.rows, s.d, s.rot, s.cr, s.pos, s.used, s.slotCap, s.keyCap) +
			ropeName(scaling)
		if s.err != "" {
			name = "qsa_block_keys/error/" + name[len("qsa_block_keys/"):]
		}
		m := newMaker(name)
		at := ops.BlockKeyAttrs{Block: s.cr, Rope: ops.RopeAttrs{HeadDim: s.d, Rotary: s.rot, Theta: 1e7, Scaling: scaling}, Eps: 1e-6, Ring: s.ring}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("kraw", graph.Input, graph.F32, 2, s.rows, s.d), m.tensor("w", graph.Weight, s.dt, 0.5, s.d),
				m.slot("slot", s.slotCap, s.d), m.slot("keys", s.keyCap, s.d), call(s.pos, s.used)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				ops.QSABlockKeys(b, in[0], in[1], in[2], in[3], in[4], at)
				return nil
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[4], s.rows)
				slot, keys := refBlockKeys(in[0], in[1], in[2], in[3], at, pos, used)
				return [][]float64{slot, keys}
			},
			Tol:     TolF32,
			WantErr: s.err,
		})
	}
	return cs
}

// minScoreGap is the least score gap at the top-k boundary a case's data must
// keep, so that rounding in any backend cannot change a selection.
const minScoreGap = 1e-3

func selectCases() []Case {
	var cs []Case
	type sel struct {
		rows, heads, d, cr, keep, pos, used, keyCap int
		ties                                        bool
		err                                         string
	}
	for _, s := range []sel{
		{3, 4, 16, 2, 2, 0, 0, 4, false, ""}, // dense: every block is kept
		{1, 4, 16, 2, 3, 20, 0, 16, false, ""},
		{4, 2, 8, 4, 2, 9, 0, 4, false, ""},
		{2, 4, 16, 2, 3, 13, 0, 8, true, ""}, // equal scores: the smaller block wins
		{3, 1, 16, 4, 2, 15, 2, 8, false, ""},
		{1, 4, 16, 4, 8, 1199, 0, 300, false, ""},
		{2, 4, 16, 4, 8, 300, 0, 300, false, ""},
		{1, 4, 16, 2, 2, 20, 0, 8, false, "capacity"},
		{1, 2, 8, 2, 2, 9, 0, 8, false, "NaN"},
	} {
		name := fmt.Sprintf("qsa_select/%dx%dx%d/block=%d/keep=%d/pos=%d/used=%d/keys=%d/ties=%v", s.rows, s.heads, s.d, s.cr, s.keep, s.pos, s.used, s.keyCap, s.ties)
		if s.err != "" {
			name = "qsa_select/error/" + name[len("qsa_select/"):]
		}
		at := ops.SelectAttrs{Heads: s.heads, Block: s.cr, Keep: s.keep}
		var inputs []Tensor
		for try := 0; ; try++ {
			m := newMaker(fmt.Sprintf("%s#%d", name, try))
			qi, keys := m.in("qi", s.rows, s.heads*s.d), m.slot("keys", s.keyCap, s.d)
			if s.ties {
				for b := 1; b < s.keyCap; b++ {
					copy(keys.Data[b*s.d:(b+1)*s.d], keys.Data[:s.d])
				}
				for i := 0; i < s.d; i++ {
					keys.Data[5*s.d+i] *= 2
				}
			}
			if s.err == "NaN" {
				qi.Data[3] = nan
			}
			inputs = []Tensor{qi, keys, call(s.pos, s.used)}
			if s.err != "" {
				break
			}
			pos, used := callRows(inputs[2].Data, s.rows)
			if _, gap := refSelect(qi.Data, keys.Data, s.d, at, pos, used); gap > minScoreGap {
				break
			}
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build:  applyAll(ops.OpQSASelect, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[2], s.rows)
				sel, _ := refSelect(in[0], in[1], s.d, at, pos, used)
				return [][]float64{sel, in[1]}
			},
			Tol:     0,
			WantErr: s.err,
		})
	}
	return cs
}

func sparseAttentionCases() []Case {
	var cs []Case
	type sa struct {
		heads, kv, d, cr, keep, rows, pos, used, capacity int
		sel                                               []int
		err                                               string
	}
	// two rows at positions 100 and 101 (25 complete blocks), 8 blocks each
	big := []int{0, 3, 4, 9, 11, 17, 20, 24, 1, 2, 5, 8, 12, 13, 22, 23}
	for _, s := range []sa{
		{4, 2, 8, 2, 2, 3, 0, 0, 8, []int{-1, -1, 0, -1, 0, -1}, ""}, // dense from the start
		{4, 2, 8, 4, 2, 2, 17, 0, 24, []int{0, 2, 1, 3}, ""},
		{2, 1, 16, 2, 3, 1, 12, 0, 16, []int{1, 4, 5}, ""},
		{8, 2, 16, 4, 3, 3, 30, 2, 40, []int{0, 3, 6, 2, 5, 7, -1, -1, -1}, ""},
		{4, 4, 8, 2, 4, 2, 5, 0, 8, []int{0, 1, 2, -1, 0, 2, -1, -1}, ""},
		{16, 4, 32, 4, 8, 2, 100, 0, 128, big, ""},
		{4, 2, 8, 2, 2, 1, 9, 0, 16, []int{2, 1}, "not ascending"},
		{4, 2, 8, 2, 2, 1, 9, 0, 16, []int{1, 5}, "not ascending"},  // block 5 is not complete at position 9
		{4, 2, 8, 2, 2, 1, 9, 0, 16, []int{-1, 1}, "not ascending"}, // an id after the padding
		{4, 2, 8, 2, 2, 2, 7, 0, 8, []int{0, 1, 0, 1}, "capacity"},
	} {
		name := fmt.Sprintf("qsa_attention/q%d-kv%d-d%d/block=%d/keep=%d/rows=%d/pos=%d/used=%d/cap=%d", s.heads, s.kv, s.d, s.cr, s.keep, s.rows, s.pos, s.used, s.capacity)
		if s.err != "" {
			name = "qsa_attention/error/" + name[len("qsa_attention/"):] + fmt.Sprint(s.sel)
		}
		m := newMaker(name)
		at := ops.SparseAttentionAttrs{Heads: s.heads, KVHeads: s.kv, HeadDim: s.d, Block: s.cr, Scale: float32(1 / math.Sqrt(float64(s.d)))}
		k := m.slot("k", s.capacity, s.kv*s.d)
		for i := range k.Data {
			k.Data[i] = round(graph.F32, 2*k.Data[i])
		}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("q", graph.Input, graph.F32, 2, s.rows, s.heads*s.d), k, m.slot("v", s.capacity, s.kv*s.d),
				intLeaf("sel", graph.Input, s.sel, s.rows, s.keep), call(s.pos, s.used)},
			Build: applyAll(ops.OpQSAAttention, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[4], s.rows)
				return [][]float64{refSparseAttention(in[0], in[1], in[2], in[3], at, pos, used), in[1], in[2]}
			},
			Tol:     TolF32,
			WantErr: s.err,
		})
	}
	return cs
}

// splitMix64 is the splitmix64 finalizer of the PLE hash constants.
func splitMix64(v uint64) uint64 {
	v += 0x9E3779B97F4A7C15
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// pleHashAttrs are a layer's hash constants as the reference code makes them
// (the sizes need not be prime for the op; their sum fits i32).
func pleHashAttrs(n, hp int, eos int32, vocab, layer, seed uint64, sizes []int64) ops.PLEHashAttrs {
	at := ops.PLEHashAttrs{NGram: n, HeadsPerNGram: hp, EOS: eos, Sizes: sizes}
	half := (uint64(1)<<63 - 1) / vocab / 2
	for j := 0; j < n; j++ {
		v := seed + 10007*layer + 0x9E3779B97F4A7C15*uint64(j+1)
		at.Mult = append(at.Mult, int64(2*(splitMix64(v)%half)+1))
	}
	var off int64
	for _, s := range sizes {
		at.Offsets = append(at.Offsets, off)
		off += s
	}
	return at
}

func ngramCases() []Case {
	var cs []Case
	// the constants of the golden tiny models (vocabulary 128, seed 1234,
	// first PLE layer): multipliers 40323955908725927, 35454616657218691,
	// 55314113489879455, sizes the primes after 100
	tiny := pleHashAttrs(3, 2, 1, 128, 0, 1234, []int64{101, 103, 107, 109})
	release := pleHashAttrs(3, 8, 248044, 248320, 0, 1234, []int64{
		20000003, 20000023, 20000033, 20000039, 20000051, 20000069, 20000093, 20000099,
		20000113, 20000123, 20000129, 20000131, 20000159, 20000167, 20000173, 20000197})
	four := pleHashAttrs(4, 1, 0, 50, 1, 7, []int64{31, 37, 41})
	type ph struct {
		label     string
		at        ops.PLEHashAttrs
		ids, hist []int
		pos, used int
		vocab     int // > 0: random ids of this vocabulary, with EOS at every 7th
	}
	for _, s := range []ph{
		{"tiny", tiny, []int{5, 1, 7, 9, 1, 3}, []int{0, 0}, 0, 0, 0}, // EOS inside: new segments
		{"tiny", tiny, []int{42}, []int{17, 23}, 5, 0, 0},
		{"tiny", tiny, []int{1}, []int{9, 8}, 7, 0, 0},                         // the token itself is EOS
		{"tiny", tiny, []int{4, 5, 6, 7}, []int{1, 2}, 1, 3, 0},                // EOS in the history; padded
		{"tiny", tiny, make([]int, 20), []int{3, 4}, 33, 0, 128},               // a chunk
		{"release", release, make([]int, 20), []int{99, 248044}, 6, 0, 248320}, // large ids and products
		{"ngram4", four, []int{3, 0, 8, 8, 9, 0, 1}, []int{5, 6, 7}, 2, 0, 0},
	} {
		name := fmt.Sprintf("ple_hash/%s/rows=%d/pos=%d/used=%d/hist=%v", s.label, len(s.ids), s.pos, s.used, s.hist)
		m := newMaker(name)
		ids := intLeaf("ids", graph.Input, s.ids, len(s.ids))
		if s.vocab > 0 {
			for i := range ids.Data {
				ids.Data[i] = float64(m.r.intn(s.vocab))
				if i%7 == 3 {
					ids.Data[i] = float64(s.at.EOS)
				}
			}
		}
		at := s.at
		rows := len(s.ids)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{ids, intLeaf("hist", graph.State, s.hist, len(s.hist)), call(s.pos, s.used)},
			Build:  applyAll(ops.OpPLEHash, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[2], rows)
				r, h := refPLEHash(in[0], in[1], at, pos, used)
				return [][]float64{r, h}
			},
			Tol: 0,
		})
	}
	type emb struct {
		tokens, heads, w int
		shards           []int
		dt               graph.DType
		bad              int // > 0: this row id, outside the table
	}
	for _, s := range []emb{
		{3, 4, 8, []int{256, 256}, graph.F32, 0}, {1, 2, 5, []int{7}, graph.BF16, 0},
		{6, 3, 16, []int{100, 50, 70}, graph.F16, 0}, {64, 4, 16, []int{300, 300}, graph.BF16, 0},
		{2, 4, 8, []int{256, 256}, graph.F32, 512},
	} {
		total := 0
		for _, r := range s.shards {
			total += r
		}
		name := fmt.Sprintf("ngram_embed/%s/%dx%d/w=%d/shards=%v", s.dt, s.tokens, s.heads, s.w, s.shards)
		if s.bad > 0 {
			name = "ngram_embed/error/" + name[len("ngram_embed/"):]
		}
		m := newMaker(name)
		rows := make([]int, s.tokens*s.heads)
		for i := range rows {
			rows[i] = m.r.intn(total)
		}
		rows[0], rows[len(rows)-1] = total-1, 0
		if s.bad > 0 {
			rows[len(rows)-1] = s.bad
		}
		inputs := []Tensor{intLeaf("rows", graph.Input, rows, s.tokens, s.heads)}
		for i, r := range s.shards {
			inputs = append(inputs, m.weight(fmt.Sprintf("shard_%d", i), s.dt, r, s.w))
		}
		w := s.w
		c := Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.NGramEmbed(b, in[0], in[1:]...)}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{refNGramEmbed(in[0], w, in[1:]...)} },
			Tol: TolF32,
		}
		if s.bad > 0 {
			c.WantErr = fmt.Sprintf("row %d outside the table of %d rows", s.bad, total)
		}
		cs = append(cs, c)
	}
	return cs
}

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
	} {
		name := fmt.Sprintf("expert_matmul/%s/rows=%d/k=%d/e=%d/%dx%d/per_unit=%v", s.dt, s.rows, s.k, s.e, s.out, s.in, s.perUnit)
		if s.bad != 0 {
			name = "expert_matmul/error/" + name[len("expert_matmul/"):]
		}
		m := newMaker(name)
		ids := make([]int, s.rows*s.k)
		for i := range ids {
			ids[i] = m.r.intn(s.e)
		}
		ids[0] = s.e - 1
		if len(ids) > 2 {
			ids[2] = ids[0] // an expert taken by two rows
		}
		var want string
		if s.bad > 0 {
			ids[len(ids)-1] = s.e + s.bad - 1
			want = fmt.Sprintf("expert id %d outside [0, %d)", s.e+s.bad-1, s.e)
		} else if s.bad < 0 {
			ids[1] = -1
			want = fmt.Sprintf("expert id -1 outside [0, %d)", s.e)
		}
		xs := []int{s.rows, s.in}
		if s.perUnit {
			xs = []int{s.rows, s.k, s.in}
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", xs...), m.weight("w", s.dt, s.e, s.out, s.in), intLeaf("ids", graph.Input, ids, s.rows, s.k)},
			Build:  applyAll(ops.OpExpertMatMul, nil, 1),
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{refExpert(in[0], in[1], in[2], s.out, s.in, s.perUnit)}
			},
			Tol:     TolF32,
			WantErr: want,
		})
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

// ---------------------------------------------------------------- patterns

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
