package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// KV slots: the capacity of a slot is its bound buffer's rows (len / width),
// positions come from the call record. Both kernels compute only the rows the
// call record asks for (CallRows; 0 means every row of the plan): kv_write
// stores no padding rows, and attention writes zeros for them.

// kvWriteKernel stores rows at their positions in a slot.
func kvWriteKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.SlotAttrs](n)
	if err != nil {
		return nil, err
	}
	rows, err := f32s("rows", in[0])
	if err != nil {
		return nil, err
	}
	slot, err := f32s("slot", in[1])
	if err != nil {
		return nil, err
	}
	w := n.Inputs[1].Shape.Last()
	if w <= 0 || len(rows)%w != 0 || len(slot)%w != 0 {
		return nil, fmt.Errorf("rows of %d and a slot of %d elements are not whole rows of %d", len(rows), len(slot), w)
	}
	t, capacity, call := len(rows)/w, len(slot)/w, in[2]
	return ops.StepFunc(func() error {
		pos, used, err := callRecord("kv_write", call, t)
		if err != nil {
			return err
		}
		if capacity == 0 {
			return fmt.Errorf("kv_write: the slot has no rows")
		}
		if last := pos + used - 1; !at.Ring && last >= capacity {
			return fmt.Errorf("kv_write: position %d past the slot's capacity of %d", last, capacity)
		}
		for r := 0; r < used; r++ {
			p := pos + r
			if at.Ring {
				p %= capacity
			}
			copy(slot[p*w:(p+1)*w], rows[r*w:(r+1)*w])
		}
		return nil
	}), nil
}

// attention is a bound attention node.
type attention struct {
	be             *Backend
	at             ops.AttentionAttrs
	q, k, v, y     []float32
	rows, capacity int
	// ring: the slot is read as a ring (rows by position mod capacity).
	// A ring shorter than its window and a chunk need is read as a linear
	// slot: it holds positions below its capacity only (a ring a session
	// grows with the sequence, as Dory's sliding layers' are).
	ring                    bool
	call                    *Buffer
	qWidth, kvWidth, groups int
}

func attentionKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.AttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	a := &attention{be: be, at: at, call: in[3]}
	if a.q, err = f32s("q", in[0]); err != nil {
		return nil, err
	}
	if a.k, err = f32s("k", in[1]); err != nil {
		return nil, err
	}
	if a.v, err = f32s("v", in[2]); err != nil {
		return nil, err
	}
	if a.y, err = f32s("output", out[0]); err != nil {
		return nil, err
	}
	d := at.HeadDim
	if at.Heads <= 0 || at.KVHeads <= 0 || d <= 0 || at.Heads%at.KVHeads != 0 || at.Window < 0 {
		return nil, fmt.Errorf("attention: heads %d over kv heads %d of %d, window %d", at.Heads, at.KVHeads, d, at.Window)
	}
	a.qWidth, a.kvWidth, a.groups = at.Heads*d, at.KVHeads*d, at.Heads/at.KVHeads
	if len(a.q)%a.qWidth != 0 || len(a.y) != len(a.q) || len(a.k)%a.kvWidth != 0 || len(a.v) != len(a.k) {
		return nil, fmt.Errorf("attention: q of %d, output of %d, k of %d, v of %d elements do not fit %d query and %d kv heads of %d",
			len(a.q), len(a.y), len(a.k), len(a.v), at.Heads, at.KVHeads, d)
	}
	a.rows, a.capacity = len(a.q)/a.qWidth, len(a.k)/a.kvWidth
	a.ring = ops.RingHolds(at, a.capacity, a.rows)
	return ops.StepFunc(a.run), nil
}

func (a *attention) run() error {
	pos, used, err := callRecord("attention", a.call, a.rows)
	if err != nil {
		return err
	}
	// Every position the rows read must still be stored: below the capacity
	// of a linear slot (or of a ring too short to wrap); in a ring, not
	// overwritten by the chunk's last row, which its size ensures.
	if end := pos + used; (!a.ring || a.at.Window == 0) && end > a.capacity {
		return fmt.Errorf("attention: position %d past the slot's capacity of %d", end-1, a.capacity)
	}
	clear(a.y[used*a.qWidth:])
	tasks := used * a.at.KVHeads
	span := pos + used
	if a.at.Window > 0 {
		span = min(span, a.at.Window)
	}
	a.be.rowwiseTasks(tasks, span*a.groups*a.at.HeadDim*2, func(lo, hi int) {
		sp := a.be.borrow(a.groups * span)
		defer a.be.giveBack(sp)
		for task := lo; task < hi; task++ {
			a.head(pos, task/a.at.KVHeads, task%a.at.KVHeads, *sp)
		}
	})
	return nil
}

// rowwiseTasks runs tasks units of about cost work each, in parallel when
// the total is large.
func (be *Backend) rowwiseTasks(tasks, cost int, f func(lo, hi int)) {
	parallelFor(tasks, be.threadsFor(tasks*cost), f)
}

// head computes row t's query heads that read KV head kh: scores of the
// group's heads against each key in the window (each key row read once for
// the group), a softmax per head with its maximum subtracted (exponentials
// and their sum in float64), then the weighted sum of the value rows.
func (a *attention) head(pos, t, kh int, scratch []float32) {
	d, g := a.at.HeadDim, a.groups
	p := pos + t
	lo := 0
	if a.at.Window > 0 {
		lo = max(0, p-a.at.Window+1)
	}
	nk := p - lo + 1
	scores := scratch[:g*nk]
	q := a.q[t*a.qWidth+kh*g*d : t*a.qWidth+(kh+1)*g*d]
	y := a.y[t*a.qWidth+kh*g*d : t*a.qWidth+(kh+1)*g*d]
	row := func(j int) int {
		if a.ring {
			j %= a.capacity
		}
		return j*a.kvWidth + kh*d
	}
	for j := 0; j < nk; j++ {
		o := row(lo + j)
		kr := a.k[o : o+d]
		for h := 0; h < g; h++ {
			scores[h*nk+j] = a.at.Scale * dot(q[h*d:(h+1)*d], kr)
		}
	}
	for h := 0; h < g; h++ {
		s := scores[h*nk : (h+1)*nk]
		m := float32(math.Inf(-1))
		for _, v := range s {
			m = max(m, v)
		}
		var sum float64
		for j, v := range s {
			e := math.Exp(float64(v - m))
			s[j] = float32(e)
			sum += e
		}
		inv := 1 / sum
		for j := range s {
			s[j] = float32(float64(s[j]) * inv)
		}
		clear(y[h*d : (h+1)*d])
	}
	for j := 0; j < nk; j++ {
		o := row(lo + j)
		vr := a.v[o : o+d]
		for h := 0; h < g; h++ {
			axpy(scores[h*nk+j], vr, y[h*d:(h+1)*d])
		}
	}
}
