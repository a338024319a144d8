package optest

import (
	"math"
	"sort"

	"github.com/reel-runtime/reel/ops"
)

// Float64 references of the QSA sparse attention ops.

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
