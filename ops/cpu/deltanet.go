package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of Gated DeltaNet: split, causal_conv, gdn_prep, gdn_gates,
// gdn_scan and gated_rmsnorm.

// splitKernel copies each part of every repetition into its output.
func splitKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.SplitAttrs](n)
	if err != nil {
		return nil, err
	}
	x, err := f32s("x", in[0])
	if err != nil {
		return nil, err
	}
	if len(out) != len(at.Parts) || at.Heads <= 0 {
		return nil, fmt.Errorf("%d outputs for %d parts of %d heads", len(out), len(at.Parts), at.Heads)
	}
	width := n.Inputs[0].Shape.Last()
	if width <= 0 {
		return nil, fmt.Errorf("x %s has empty rows", n.Inputs[0])
	}
	rows := len(x) / width
	ys := make([][]float32, len(out))
	offs := make([]int, len(out))
	per := 0
	for i, p := range at.Parts {
		if ys[i], err = f32s(fmt.Sprintf("output %d", i), out[i]); err != nil {
			return nil, err
		}
		if len(ys[i]) != rows*at.Heads*p {
			return nil, fmt.Errorf("output %d has %d elements, want %d", i, len(ys[i]), rows*at.Heads*p)
		}
		offs[i] = per
		per += p
	}
	if per*at.Heads != width {
		return nil, fmt.Errorf("parts %v of %d heads do not make rows of %d", at.Parts, at.Heads, width)
	}
	return ops.StepFunc(func() error {
		be.rowwise(rows, width, func(r int) {
			for h := 0; h < at.Heads; h++ {
				src := x[r*width+h*per:]
				for i, p := range at.Parts {
					dst := ys[i][(r*at.Heads+h)*p:]
					copy(dst[:p], src[offs[i]:offs[i]+p])
				}
			}
		})
		return nil
	}), nil
}

// causalConvKernel is the depthwise causal convolution over a ring of the
// last (K−1)·dilation input rows, indexed by position.
func causalConvKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.ConvAttrs](n)
	if err != nil {
		return nil, err
	}
	act, err := activationFunc(at.Act)
	if err != nil {
		return nil, err
	}
	xs := n.Inputs[0].Shape
	rows, c := xs[0], xs[1]
	k := n.Inputs[1].Shape.Last()
	wm, err := matrixOf("w", in[1], c, k)
	if err != nil {
		return nil, err
	}
	dil := at.Dilation
	r := (k - 1) * dil
	if dil <= 0 || r <= 0 {
		return nil, fmt.Errorf("kernel %d with dilation %d", k, dil)
	}
	v, err := f32Bufs([]string{"x", "ring", "output"}, []*Buffer{in[0], in[2], out[0]}, rows*c, r*c, rows*c)
	if err != nil {
		return nil, err
	}
	x, ring, y := v[0], v[1], v[2]
	call := in[3]
	return ops.StepFunc(func() error {
		p0, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		sp := be.borrow(c * k)
		defer be.giveBack(sp)
		w := matrixValues(wm, *sp)
		// source row of position j: this call's input, the ring, or zeros
		src := func(j int) []float32 {
			switch {
			case j >= p0:
				return x[(j-p0)*c : (j-p0+1)*c]
			case j >= 0:
				s := j % r
				return ring[s*c : (s+1)*c]
			}
			return nil
		}
		be.rowwise(used, c*k, func(t int) {
			yr := y[t*c : (t+1)*c]
			clear(yr)
			p := p0 + t
			for tap := 0; tap < k; tap++ {
				s := src(p - (k-1-tap)*dil)
				if s == nil {
					continue
				}
				for ch, sv := range s {
					yr[ch] += w[ch*k+tap] * sv
				}
			}
			if at.Act != ops.ActIdentity {
				for ch, a := range yr {
					yr[ch] = float32(act(float64(a)))
				}
			}
		})
		zeroRows(y, used, c)
		for j := max(p0, p0+used-r); j < p0+used; j++ {
			s := j % r
			copy(ring[s*c:(s+1)*c], x[(j-p0)*c:(j-p0+1)*c])
		}
		return nil
	}), nil
}

// gdnPrepKernel splits [q | k | v] and normalizes the query and key heads.
func gdnPrepKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.GDNPrepAttrs](n)
	if err != nil {
		return nil, err
	}
	dk := at.KeyDim
	kd, vd := at.KeyHeads*dk, at.ValueHeads*at.ValueDim
	if kd <= 0 || vd <= 0 {
		return nil, fmt.Errorf("gdn_prep: key width %d, value width %d", kd, vd)
	}
	w := 2*kd + vd
	rows := n.Inputs[0].Shape[0]
	v, err := f32Bufs([]string{"mix", "q", "k", "v"}, []*Buffer{in[0], out[0], out[1], out[2]}, rows*w, rows*kd, rows*kd, rows*vd)
	if err != nil {
		return nil, err
	}
	mix, q, k, vv := v[0], v[1], v[2], v[3]
	scale := float32(1 / math.Sqrt(float64(dk)))
	return ops.StepFunc(func() error {
		be.rowwise(rows, w, func(t int) {
			m := mix[t*w : (t+1)*w]
			qr, kr := q[t*kd:(t+1)*kd], k[t*kd:(t+1)*kd]
			for o := 0; o < kd; o += dk {
				l2normalize(qr[o:o+dk], m[o:o+dk], at.Eps)
				for i := o; i < o+dk; i++ {
					qr[i] *= scale
				}
				l2normalize(kr[o:o+dk], m[kd+o:kd+o+dk], at.Eps)
			}
			copy(vv[t*vd:(t+1)*vd], m[2*kd:])
		})
		return nil
	}), nil
}

// softplus is log(1 + eˣ), x itself past 20 as torch computes it.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// gdnGatesKernel gives g = −exp(A_log)·softplus(a + dt_bias) and beta = sigmoid(b).
func gdnGatesKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	s := n.Inputs[0].Shape
	rows, nv := s[0], s[1]
	v, err := f32Bufs([]string{"a", "b", "g", "beta"}, []*Buffer{in[0], in[1], out[0], out[1]}, rows*nv, rows*nv, rows*nv, rows*nv)
	if err != nil {
		return nil, err
	}
	a, b, g, beta := v[0], v[1], v[2], v[3]
	aLog, err := weightVecOf("A_log", in[2], nv)
	if err != nil {
		return nil, err
	}
	dtBias, err := weightVecOf("dt_bias", in[3], nv)
	if err != nil {
		return nil, err
	}
	return ops.StepFunc(func() error {
		sp := be.borrow(2 * nv)
		defer be.giveBack(sp)
		al, db := aLog.values((*sp)[:nv]), dtBias.values((*sp)[nv:])
		for t := 0; t < rows; t++ {
			for j := 0; j < nv; j++ {
				i := t*nv + j
				g[i] = float32(-math.Exp(float64(al[j])) * softplus(float64(a[i])+float64(db[j])))
				beta[i] = float32(sigmoid64(float64(b[i])))
			}
		}
		return nil
	}), nil
}

// gdnScanKernel runs the gated delta rule, one goroutine per group of value
// heads (a head's tokens are sequential).
func gdnScanKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	ss := n.Inputs[5].Shape
	nv, dk, dv := ss[0], ss[1], ss[2]
	rows, kd := n.Inputs[0].Shape[0], n.Inputs[0].Shape[1]
	if dk <= 0 || kd%dk != 0 || kd == 0 || nv%(kd/dk) != 0 {
		return nil, fmt.Errorf("q of %d per row does not fit state %v", kd, ss)
	}
	ratio := nv / (kd / dk)
	names := []string{"q", "k", "v", "g", "beta", "S", "output"}
	v, err := f32Bufs(names, []*Buffer{in[0], in[1], in[2], in[3], in[4], in[5], out[0]},
		rows*kd, rows*kd, rows*nv*dv, rows*nv, rows*nv, nv*dk*dv, rows*nv*dv)
	if err != nil {
		return nil, err
	}
	q, k, vv, g, beta, st, o := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	call := in[6]
	vd := nv * dv
	return ops.StepFunc(func() error {
		p0, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		if p0 == 0 {
			clear(st)
		}
		parallelFor(nv, be.threadsFor(3*used*nv*dk*dv), func(lo, hi int) {
			sp := be.borrow(dv)
			defer be.giveBack(sp)
			m := *sp
			for j := lo; j < hi; j++ {
				s := st[j*dk*dv : (j+1)*dk*dv]
				kh := j / ratio
				for t := 0; t < used; t++ {
					qt := q[t*kd+kh*dk : t*kd+(kh+1)*dk]
					kt := k[t*kd+kh*dk : t*kd+(kh+1)*dk]
					vt := vv[t*vd+j*dv : t*vd+(j+1)*dv]
					ot := o[t*vd+j*dv : t*vd+(j+1)*dv]
					decay := float32(math.Exp(float64(g[t*nv+j])))
					b := beta[t*nv+j]
					// decay the state and read it at the key: m = Sᵀk
					clear(m)
					for r := 0; r < dk; r++ {
						row := s[r*dv : (r+1)*dv]
						for i := range row {
							row[i] *= decay
						}
						axpy(kt[r], row, m)
					}
					// m becomes delta = beta (v − m); write it, read the query
					for i := range m {
						m[i] = b * (vt[i] - m[i])
					}
					clear(ot)
					for r := 0; r < dk; r++ {
						row := s[r*dv : (r+1)*dv]
						axpy(kt[r], m, row)
						axpy(qt[r], row, ot)
					}
				}
			}
		})
		zeroRows(o, used, vd)
		return nil
	}), nil
}

// gatedRMSNormKernel is w ⊙ o / sqrt(mean o² + eps) ⊙ act(z) per group.
func gatedRMSNormKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.GatedRMSNormAttrs](n)
	if err != nil {
		return nil, err
	}
	act, err := activationFunc(at.Act)
	if err != nil {
		return nil, err
	}
	total := n.Inputs[0].Shape.Elems()
	g := at.Group
	if g <= 0 || total%g != 0 {
		return nil, fmt.Errorf("group %d does not divide %d elements", g, total)
	}
	v, err := f32Bufs([]string{"o", "z", "output"}, []*Buffer{in[0], in[1], out[0]}, total, total, total)
	if err != nil {
		return nil, err
	}
	o, z, y := v[0], v[1], v[2]
	w, err := weightVecOf("w", in[2], g)
	if err != nil {
		return nil, err
	}
	eps := float64(at.Eps)
	return ops.StepFunc(func() error {
		sp := be.borrow(g)
		defer be.giveBack(sp)
		ws := w.values(*sp)
		be.rowwise(total/g, g, func(r int) {
			os, zs, ys := o[r*g:(r+1)*g], z[r*g:(r+1)*g], y[r*g:(r+1)*g]
			inv := 1 / math.Sqrt(sumSquares(os)/float64(g)+eps)
			for i, ov := range os {
				ys[i] = float32(float64(ws[i]) * float64(ov) * inv * act(float64(zs[i])))
			}
		})
		return nil
	}), nil
}
