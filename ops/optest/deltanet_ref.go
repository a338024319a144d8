package optest

import (
	"math"

	"github.com/reel-runtime/reel/ops"
)

// Float64 references of the Gated DeltaNet ops.

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

// refGatedRMSNorm is rmsnorm(o; w) ⊙ act(z) over runs of len(w).
func refGatedRMSNorm(o, z, w []float64, eps float64, act ops.Activation) []float64 {
	f := refAct(act)
	y := refRMSNorm(o, w, len(w), eps)
	for i := range y {
		y[i] *= f(z[i])
	}
	return y
}
