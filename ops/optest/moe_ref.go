package optest

import (
	"math"
	"sort"
)

// Float64 references of the mixture-of-experts ops.

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
