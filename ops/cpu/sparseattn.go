package cpu

import (
	"fmt"
	"math"
	"sort"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of QSA sparse attention: qsa_block_keys, qsa_select,
// qsa_attention and gate_merge.

// qsaBlockKeysKernel stores raw indexer keys and compresses completed blocks.
func qsaBlockKeysKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.BlockKeyAttrs](n)
	if err != nil {
		return nil, err
	}
	rows, d := n.Inputs[0].Shape[0], n.Inputs[0].Shape[1]
	cr := at.Block
	if cr <= 0 || d <= 0 {
		return nil, fmt.Errorf("block %d over keys of %d", cr, d)
	}
	tab, err := newRopeTable(at.Rope, d)
	if err != nil {
		return nil, err
	}
	v, err := f32Bufs([]string{"kraw", "slot", "keys"}, []*Buffer{in[0], in[2], in[3]}, rows*d, -1, -1)
	if err != nil {
		return nil, err
	}
	kraw, slot, keys := v[0], v[1], v[2]
	if len(slot)%d != 0 || len(keys)%d != 0 {
		return nil, fmt.Errorf("slot of %d and keys of %d elements are not rows of %d", len(slot), len(keys), d)
	}
	slotCap, keyCap := len(slot)/d, len(keys)/d
	w, err := weightVecOf("w", in[1], d)
	if err != nil {
		return nil, err
	}
	call := in[4]
	eps := float64(at.Eps)
	return ops.StepFunc(func() error {
		p0, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		last := p0 + used - 1
		if !at.Ring && last >= slotCap {
			return fmt.Errorf("raw key position %d past the slot's capacity %d", last, slotCap)
		}
		if at.Ring && slotCap == 0 {
			return fmt.Errorf("raw key ring of no rows")
		}
		b0, b1 := p0/cr, (p0+used)/cr
		if b1 > keyCap {
			return fmt.Errorf("block %d past the block keys' capacity %d", b1-1, keyCap)
		}
		if at.Ring && b1 > b0 && p0-b0*cr > slotCap {
			return fmt.Errorf("raw key ring of %d rows cannot hold the %d earlier keys of block %d", slotCap, p0-b0*cr, b0)
		}
		sp := be.borrow(d + at.Rope.Rotary)
		defer be.giveBack(sp)
		ws := w.values((*sp)[:d])
		cos, sin := (*sp)[d:d+at.Rope.Rotary/2], (*sp)[d+at.Rope.Rotary/2:]
		row := func(j int) []float32 {
			if j >= p0 {
				return kraw[(j-p0)*d : (j-p0+1)*d]
			}
			if at.Ring {
				j %= slotCap
			}
			return slot[j*d : (j+1)*d]
		}
		mean := make([]float64, d)
		for b := b0; b < b1; b++ {
			clear(mean)
			for i := 0; i < cr; i++ {
				for c, x := range row(b*cr + i) {
					mean[c] += float64(x)
				}
			}
			kb := keys[b*d : (b+1)*d]
			for c := range kb {
				kb[c] = float32(mean[c] / float64(cr))
			}
			rmsNormRun(kb, kb, ws, eps)
			tab.angles(b*cr, cos, sin)
			tab.rotate(kb, kb, cos, sin)
		}
		for j := max(p0, p0+used-slotCap); j < p0+used; j++ {
			s := j
			if at.Ring {
				s %= slotCap
			}
			copy(slot[s*d:(s+1)*d], kraw[(j-p0)*d:(j-p0+1)*d])
		}
		return nil
	}), nil
}

// qsaSelectKernel scores the complete blocks of each row and keeps the best.
func qsaSelectKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.SelectAttrs](n)
	if err != nil {
		return nil, err
	}
	rows, width := n.Inputs[0].Shape[0], n.Inputs[0].Shape[1]
	if at.Heads <= 0 || width%at.Heads != 0 || at.Block <= 0 || at.Keep <= 0 {
		return nil, fmt.Errorf("qsa_select: %d heads, block %d, keep %d over rows of %d", at.Heads, at.Block, at.Keep, width)
	}
	d := width / at.Heads
	v, err := f32Bufs([]string{"qi", "keys"}, []*Buffer{in[0], in[1]}, rows*width, -1)
	if err != nil {
		return nil, err
	}
	qi, keys := v[0], v[1]
	keyCap := len(keys) / d
	sel, err := i32Buf("output", out[0])
	if err != nil {
		return nil, err
	}
	if len(sel) != rows*at.Keep {
		return nil, fmt.Errorf("output has %d elements, want %d", len(sel), rows*at.Keep)
	}
	call := in[2]
	inv := 1 / math.Sqrt(float64(d))
	var scores []float32
	return ops.StepFunc(func() error {
		p0, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		for i := range sel {
			sel[i] = -1
		}
		for t := 0; t < used; t++ {
			p := p0 + t
			nb := (p + 1) / at.Block
			row := sel[t*at.Keep : (t+1)*at.Keep]
			if nb <= at.Keep {
				for b := 0; b < nb; b++ {
					row[b] = int32(b)
				}
				continue
			}
			if nb > keyCap {
				return fmt.Errorf("row %d at position %d sees %d blocks, past the block keys' capacity %d", t, p, nb, keyCap)
			}
			if cap(scores) < nb {
				scores = make([]float32, nb)
			}
			sc := scores[:nb]
			q := qi[t*width : (t+1)*width]
			parallelFor(nb, be.threadsFor(nb*width), func(lo, hi int) {
				for b := lo; b < hi; b++ {
					kb := keys[b*d : (b+1)*d]
					var s float64
					for h := 0; h < at.Heads; h++ {
						// ReLU, letting a NaN through to be reported
						if x := dot(q[h*d:(h+1)*d], kb); !(x <= 0) {
							s += float64(x)
						}
					}
					sc[b] = float32(s * inv)
				}
			})
			for b, s := range sc {
				if math.IsNaN(float64(s)) {
					return fmt.Errorf("row %d: indexer score of block %d is NaN", t, b)
				}
			}
			topK(row, sc)
			sort.Slice(row, func(i, j int) bool { return row[i] < row[j] })
		}
		return nil
	}), nil
}

// topK writes into ids the indices of the len(ids) largest scores (ties
// to the smaller index), in no particular order. It keeps a heap whose root
// is the worst kept entry; scores are visited by ascending index, so an
// equal later score never displaces a kept one.
func topK(ids []int32, scores []float32) {
	k := len(ids)
	worse := func(a, b int32) bool { // a ranks below b
		sa, sb := scores[a], scores[b]
		return sa < sb || (sa == sb && a > b)
	}
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < k && worse(ids[l], ids[m]) {
				m = l
			}
			if r := l + 1; r < k && worse(ids[r], ids[m]) {
				m = r
			}
			if m == i {
				return
			}
			ids[i], ids[m] = ids[m], ids[i]
			i = m
		}
	}
	for i := 0; i < k; i++ {
		ids[i] = int32(i)
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for b := k; b < len(scores); b++ {
		if worse(ids[0], int32(b)) {
			ids[0] = int32(b)
			down(0)
		}
	}
}

// qsaAttentionKernel attends each row to its selected blocks and trailing keys.
func qsaAttentionKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.SparseAttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	if at.KVHeads <= 0 || at.Heads%at.KVHeads != 0 || at.HeadDim <= 0 || at.Block <= 0 {
		return nil, fmt.Errorf("qsa_attention: %d heads over %d kv heads of %d, block %d", at.Heads, at.KVHeads, at.HeadDim, at.Block)
	}
	rows := n.Inputs[0].Shape[0]
	keep := n.Inputs[3].Shape[1]
	d, qw, kvw := at.HeadDim, at.Heads*at.HeadDim, at.KVHeads*at.HeadDim
	v, err := f32Bufs([]string{"q", "k", "v", "output"}, []*Buffer{in[0], in[1], in[2], out[0]}, rows*qw, -1, -1, rows*qw)
	if err != nil {
		return nil, err
	}
	q, k, vs, y := v[0], v[1], v[2], v[3]
	if len(k) != len(vs) || len(k)%kvw != 0 {
		return nil, fmt.Errorf("k of %d and v of %d elements are not the same rows of %d", len(k), len(vs), kvw)
	}
	capacity := len(k) / kvw
	sel, err := i32Buf("sel", in[3])
	if err != nil {
		return nil, err
	}
	call, g, cr := in[4], at.Heads/at.KVHeads, at.Block
	maxKeys := keep*cr + cr - 1
	return ops.StepFunc(func() error {
		p0, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		if used > 0 && p0+used-1 >= capacity {
			return fmt.Errorf("position %d past the slots' capacity %d", p0+used-1, capacity)
		}
		// the key positions of every row, checked before any work
		pos := make([][]int32, used)
		for t := range pos {
			p := p0 + t
			nb := (p + 1) / cr
			row := sel[t*keep : (t+1)*keep]
			list := make([]int32, 0, min(maxKeys, p+1))
			prev, done := int32(-1), false
			for i, b := range row {
				switch {
				case b == -1:
					done = true
				case done || b < 0 || int(b) >= nb || b <= prev:
					return fmt.Errorf("row %d at position %d: selection %v (entry %d) is not ascending block ids below %d followed by -1", t, p, row, i, nb)
				default:
					for j := int(b) * cr; j < int(b+1)*cr; j++ {
						list = append(list, int32(j))
					}
					prev = b
				}
			}
			for j := nb * cr; j <= p; j++ {
				list = append(list, int32(j))
			}
			pos[t] = list
		}
		be.rowwiseTasks(used*at.KVHeads, g*maxKeys*d*2, func(lo, hi int) {
			sp := be.borrow(g * maxKeys)
			defer be.giveBack(sp)
			for task := lo; task < hi; task++ {
				t, kh := task/at.KVHeads, task%at.KVHeads
				list := pos[t]
				nk := len(list)
				sc := (*sp)[:g*nk]
				for h := 0; h < g; h++ {
					qh := q[t*qw+(kh*g+h)*d : t*qw+(kh*g+h+1)*d]
					yh := y[t*qw+(kh*g+h)*d : t*qw+(kh*g+h+1)*d]
					s := sc[h*nk : (h+1)*nk]
					mx := float32(math.Inf(-1))
					for j, p := range list {
						o := int(p)*kvw + kh*d
						s[j] = at.Scale * dot(qh, k[o:o+d])
						mx = max(mx, s[j])
					}
					var sum float64
					for j := range s {
						e := math.Exp(float64(s[j] - mx))
						s[j] = float32(e)
						sum += e
					}
					clear(yh)
					for j, p := range list {
						o := int(p)*kvw + kh*d
						axpy(float32(float64(s[j])/sum), vs[o:o+d], yh)
					}
				}
			}
		})
		zeroRows(y, used, qw)
		return nil
	}), nil
}

// gateMergeKernel is y ⊙ sigmoid(g).
func gateMergeKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	total := n.Inputs[0].Shape.Elems()
	v, err := f32Bufs([]string{"y", "g", "output"}, []*Buffer{in[0], in[1], out[0]}, total, total, total)
	if err != nil {
		return nil, err
	}
	y, g, o := v[0], v[1], v[2]
	return ops.StepFunc(func() error {
		be.elementwise(total, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				o[i] = y[i] * sigmoid32(g[i])
			}
		})
		return nil
	}), nil
}
