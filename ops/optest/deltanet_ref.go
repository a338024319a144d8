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

// refScanChunked is refScan in the chunked (WY) form a backend may use for
// many rows (flash-linear-attention's chunk_gated_delta_rule), in float64:
// refScan's results up to rounding. Rows are taken c at a time; see
// scanChunked.
func refScanChunked(q, k, v, g, beta, s []float64, nk, nv, dk, dv, pos, used, c int) (o, s2 []float64) {
	return scanChunked[float64](q, k, v, g, beta, s, nk, nv, dk, dv, pos, used, c)
}

// scanChunked is the gated delta rule over the first used rows in chunks
// of c rows, its arithmetic in F (the cumulative log-decays in float64), in
// the order of the CUDA kernels gdn_chunk_prep and gdn_chunk_scan: with
// F = float32 it shows the rounding error of the chunked form.
//
// Within a chunk of L rows entering with state S₀, with γ_t = Σ_{s≤t} g_s
// (t counted from the chunk's first row) and Γ_ti = exp(γ_t − γ_i), the
// recurrence gives S_t = e^{γ_t} S₀ + Σ_{i≤t} Γ_ti k_i u_iᵀ, where the
// written values u_t = β_t (v_t − e^{γ_t} S₀ᵀk_t − Σ_{i<t} Γ_ti (k_t·k_i) u_i)
// solve the unit lower-triangular system (I + A) U = X with
// A_ti = β_t (k_t·k_i) Γ_ti (i < t) and X_t = β_t (v_t − e^{γ_t} S₀ᵀk_t):
// U = T X for T = (I + A)⁻¹ (forward substitution, column by column). Then
// o_t = e^{γ_t} S₀ᵀq_t + Σ_{i≤t} (q_t·k_i) Γ_ti u_i and the state leaving
// the chunk is e^{γ_L} S₀ + Σ_i k_i (Γ_Li u_i)ᵀ, all decay factors ≤ 1.
func scanChunked[F float32 | float64](q, k, v, g, beta, s []float64, nk, nv, dk, dv, pos, used, c int) (o, s2 []float64) {
	st := make([]F, len(s))
	if pos != 0 {
		for i, x := range s {
			st[i] = F(x)
		}
	}
	o = make([]float64, len(v))
	kd, vd := nk*dk, nv*dv
	dot := func(a, b []float64) F {
		var d F
		for r := range dk {
			d += F(a[r]) * F(b[r])
		}
		return d
	}
	gam := make([]float64, c)
	eg, ek := make([]F, c), make([]F, c)
	a, tm, p := make([]F, c*c), make([]F, c*c), make([]F, c*c)
	y, z, x, u := make([]F, c*dv), make([]F, c*dv), make([]F, c*dv), make([]F, c*dv)
	for j := range nv {
		kh := j / (nv / nk)
		sj := st[j*dk*dv : (j+1)*dk*dv]
		key := func(t int) []float64 { return k[t*kd+kh*dk : t*kd+(kh+1)*dk] }
		qry := func(t int) []float64 { return q[t*kd+kh*dk : t*kd+(kh+1)*dk] }
		for c0 := 0; c0 < used; c0 += c {
			l := min(c, used-c0)
			var acc float64
			for t := range l {
				acc += g[(c0+t)*nv+j]
				gam[t] = acc
			}
			for t := range l {
				eg[t], ek[t] = F(math.Exp(gam[t])), F(math.Exp(gam[l-1]-gam[t]))
			}
			// A, P and T = (I + A)⁻¹, as gdn_chunk_prep.
			clear(a)
			clear(tm)
			clear(p)
			for t := range l {
				bt := F(beta[(c0+t)*nv+j])
				for i := 0; i <= t; i++ {
					d := F(math.Exp(gam[t] - gam[i]))
					if i < t {
						a[t*c+i] = bt * dot(key(c0+t), key(c0+i)) * d
					}
					p[t*c+i] = dot(qry(c0+t), key(c0+i)) * d
				}
			}
			for i := range l {
				tm[i*c+i] = 1
				for t := i + 1; t < l; t++ {
					var sum F
					for m := i; m < t; m++ {
						sum += a[t*c+m] * tm[m*c+i]
					}
					tm[t*c+i] = -sum
				}
			}
			// The chunk's rows against the entering state, as gdn_chunk_scan.
			clear(y)
			clear(z)
			for t := range l {
				kt, qt := key(c0+t), qry(c0+t)
				for r := range dk {
					row := sj[r*dv : (r+1)*dv]
					for i := range dv {
						y[t*dv+i] += F(kt[r]) * row[i]
						z[t*dv+i] += F(qt[r]) * row[i]
					}
				}
				bt := F(beta[(c0+t)*nv+j])
				for i := range dv {
					x[t*dv+i] = bt * (F(v[(c0+t)*vd+j*dv+i]) - eg[t]*y[t*dv+i])
				}
			}
			for t := range l {
				for i := range dv {
					var sum F
					for m := 0; m <= t; m++ {
						sum += tm[t*c+m] * x[m*dv+i]
					}
					u[t*dv+i] = sum
				}
			}
			for t := range l {
				for i := range dv {
					sum := eg[t] * z[t*dv+i]
					for m := 0; m <= t; m++ {
						sum += p[t*c+m] * u[m*dv+i]
					}
					o[(c0+t)*vd+j*dv+i] = float64(sum)
				}
			}
			for r := range dk {
				row := sj[r*dv : (r+1)*dv]
				for i := range dv {
					sum := eg[l-1] * row[i]
					for t := range l {
						sum += F(key(c0 + t)[r]) * (u[t*dv+i] * ek[t])
					}
					row[i] = sum
				}
			}
		}
	}
	s2 = make([]float64, len(s))
	for i, x := range st {
		s2[i] = float64(x)
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
