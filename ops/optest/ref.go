package optest

import (
	"math"

	"github.com/reel-runtime/reel/ops"
)

// The float64 references: each op's Doc written out as plainly as possible,
// with no shared code with any backend. Data that arrives as f32, bf16 or
// f16 is already exactly representable, so the references see the values
// the kernels see.

// refEmbed is out[t] = table[ids[t]] for a table with rows of h.
func refEmbed(table []float64, h int, ids []float64) []float64 {
	out := make([]float64, 0, len(ids)*h)
	for _, id := range ids {
		i := int(id)
		out = append(out, table[i*h:(i+1)*h]...)
	}
	return out
}

// RefMatMul is the float64 reference product y[r,n] = Σ_k x[r,k] w[n,k]
// (x rows of k, w [n, k]), for tests of backends' products.
func RefMatMul(x []float64, k int, w []float64) []float64 {
	rows, n := len(x)/k, len(w)/k
	y := make([]float64, rows*n)
	for r := 0; r < rows; r++ {
		for j := 0; j < n; j++ {
			var s float64
			for i := 0; i < k; i++ {
				s += x[r*k+i] * w[j*k+i]
			}
			y[r*n+j] = s
		}
	}
	return y
}

// refBinary is a op b with b repeated over a's leading dimensions.
func refBinary(op string, a, b []float64) []float64 {
	y := make([]float64, len(a))
	for i := range a {
		u, v := a[i], b[i%len(b)]
		switch op {
		case "add":
			y[i] = u + v
		case "sub":
			y[i] = u - v
		case "mul":
			y[i] = u * v
		}
	}
	return y
}

func refSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func refSiLU(x float64) float64 { return x * refSigmoid(x) }

// refMap applies f to each element.
func refMap(x []float64, f func(float64) float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = f(v)
	}
	return y
}

// refL2Norm is x / sqrt(Σx² + eps) over runs of g.
func refL2Norm(x []float64, g int, eps float64) []float64 {
	y := make([]float64, len(x))
	for o := 0; o < len(x); o += g {
		var s float64
		for _, v := range x[o : o+g] {
			s += v * v
		}
		d := math.Sqrt(s + eps)
		for i := o; i < o+g; i++ {
			y[i] = x[i] / d
		}
	}
	return y
}

// refRMSNorm is x / sqrt(mean x² + eps) ⊙ w over runs of g; w is a run's
// length or a row's (then element i of a row takes w[i]).
func refRMSNorm(x, w []float64, g int, eps float64) []float64 {
	y := make([]float64, len(x))
	for o := 0; o < len(x); o += g {
		var s float64
		for _, v := range x[o : o+g] {
			s += v * v
		}
		d := math.Sqrt(s/float64(g) + eps)
		for i := o; i < o+g; i++ {
			y[i] = x[i] / d * w[i%len(w)]
		}
	}
	return y
}

// refRope rotates the first Rotary dims of each head in rows of width, row
// t at position pos+t, NeoX half split: frequencies Theta^(-2j/Rotary), or
// with a Scaling its table (ops.RopeScaling, tested on its own) and its
// attention factor times the cosines and sines.
func refRope(x []float64, width int, at ops.RopeAttrs, pos int) []float64 {
	y := append([]float64(nil), x...)
	hd, rot, h := at.HeadDim, at.Rotary, at.Rotary/2
	freq, m := make([]float64, h), 1.0
	for j := range freq {
		freq[j] = math.Pow(at.Theta, -2*float64(j)/float64(rot))
	}
	if at.Scaling != (ops.RopeScaling{}) {
		var err error
		if freq, m, err = at.Scaling.Frequencies(at.Theta, rot); err != nil {
			panic(err)
		}
	}
	for t := 0; t < len(x)/width; t++ {
		p := float64(pos + t)
		for o := t * width; o < (t+1)*width; o += hd {
			for j := 0; j < h; j++ {
				a := p * freq[j]
				c, s := m*math.Cos(a), m*math.Sin(a)
				x0, x1 := x[o+j], x[o+j+h]
				y[o+j] = x0*c - x1*s
				y[o+j+h] = x1*c + x0*s
			}
		}
	}
	return y
}

// refNormRope is l2norm per head of rope(x), times scale when given.
func refNormRope(x []float64, width int, at ops.RopeAttrs, pos int, eps float64, scale []float64) []float64 {
	y := refL2Norm(refRope(x, width, at, pos), at.HeadDim, eps)
	if scale != nil {
		y = refBinary("mul", y, scale)
	}
	return y
}

// refKVWrite is the slot after writing the first used rows of width w at
// positions pos, pos+1, ... (ring: modulo the capacity).
func refKVWrite(slot, rows []float64, w, pos, used int, ring bool) []float64 {
	out := append([]float64(nil), slot...)
	capacity := len(slot) / w
	for t := 0; t < used; t++ {
		p := pos + t
		if ring {
			p %= capacity
		}
		copy(out[p*w:(p+1)*w], rows[t*w:(t+1)*w])
	}
	return out
}

// refAttention is causal GQA attention of the first used rows of q at
// positions pos, pos+1, ... over the slots k and v; the other rows are zero.
func refAttention(q, k, v []float64, at ops.AttentionAttrs, pos, used int) []float64 {
	d := at.HeadDim
	qw, kw := at.Heads*d, at.KVHeads*d
	capacity := len(k) / kw
	y := make([]float64, len(q))
	for t := 0; t < used; t++ {
		p := pos + t
		lo := 0
		if at.Window > 0 {
			lo = max(0, p-at.Window+1)
		}
		for h := 0; h < at.Heads; h++ {
			kh := h / (at.Heads / at.KVHeads)
			slot := func(j int) int {
				if at.Ring {
					j %= capacity
				}
				return j*kw + kh*d
			}
			qh := q[t*qw+h*d : t*qw+(h+1)*d]
			s := make([]float64, p-lo+1)
			m := math.Inf(-1)
			for j := lo; j <= p; j++ {
				var dot float64
				for i, qv := range qh {
					dot += qv * k[slot(j)+i]
				}
				s[j-lo] = float64(at.Scale) * dot
				m = math.Max(m, s[j-lo])
			}
			var sum float64
			for i := range s {
				s[i] = math.Exp(s[i] - m)
				sum += s[i]
			}
			out := y[t*qw+h*d : t*qw+(h+1)*d]
			for j := lo; j <= p; j++ {
				a := s[j-lo] / sum
				for i := range out {
					out[i] += a * v[slot(j)+i]
				}
			}
		}
	}
	return y
}

// refArgmax is each row's index of its largest non-NaN entry, the lowest on
// ties, -1 when the row has none.
func refArgmax(x []float64, n int) []float64 {
	y := make([]float64, len(x)/n)
	for r := range y {
		at, best := -1, 0.0
		for i, v := range x[r*n : (r+1)*n] {
			if math.IsNaN(v) {
				continue
			}
			if at < 0 || v > best {
				at, best = i, v
			}
		}
		y[r] = float64(at)
	}
	return y
}

// refSlerp is n(n(x) + α ⊙ (n(y) − n(x))) with n the l2norm of rows of len(α).
func refSlerp(x, y, alpha []float64, eps float64) []float64 {
	n := len(alpha)
	nx, ny := refL2Norm(x, n, eps), refL2Norm(y, n, eps)
	z := make([]float64, len(x))
	for i := range z {
		z[i] = nx[i] + alpha[i%n]*(ny[i]-nx[i])
	}
	return refL2Norm(z, n, eps)
}

// refSwiGLU is silu(g ⊙ sg) ⊙ (u ⊙ su).
func refSwiGLU(g, u, sg, su []float64) []float64 {
	y := make([]float64, len(g))
	for i := range y {
		f := i % len(sg)
		y[i] = refSiLU(g[i]*sg[f]) * (u[i] * su[f])
	}
	return y
}

// refGatedNorm is l2norm(y ⊙ sigmoid(g ⊙ s)) over rows of len(s).
func refGatedNorm(y, g, s []float64, eps float64) []float64 {
	z := make([]float64, len(y))
	for i := range z {
		z[i] = y[i] * refSigmoid(g[i]*s[i%len(s)])
	}
	return refL2Norm(z, len(s), eps)
}
