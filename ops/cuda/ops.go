package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// binder binds one op: it checks the node's buffers, does the work that does
// not depend on the data (launch shapes, tables, scratch) and returns the
// step that enqueues the op.
type binder func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error)

// binders is every op this backend runs, by op name; built at start-up
// (families.go adds the op families'), never changed after.
var binders = map[string]binder{
	"embed":             bindEmbed,
	"matmul":            bindMatMul,
	"grouped_matmul":    bindMatMul,
	"add":               bindBinary(ewCode("add")),
	"sub":               bindBinary(ewCode("sub")),
	"mul":               bindBinary(ewCode("mul")),
	"sigmoid":           bindUnary(ewCode("sigmoid")),
	"silu":              bindUnary(ewCode("silu")),
	"scale":             bindUnary(ewCode("scale")),
	"l2norm":            bindNorm(false),
	"rmsnorm":           bindNorm(true),
	"rope":              bindRope,
	"norm_rope":         bindRope,
	"norm_rope_kv":      bindRope,
	"kv_write":          bindKVWrite,
	"attention":         bindAttention,
	"attention_gate":    bindAttentionGate,
	"qkv_prep":          bindQKVPrep,
	"norm_matmul":       bindNormMatMul,
	"slice_rows":        bindSliceRows,
	"argmax":            bindArgmax,
	"store":             bindStore,
	"slerp":             bindRowFuse(0),
	"mix":               bindRowFuse(1),
	"gated_norm":        bindRowFuse(2),
	"swiglu":            bindSwiGLU,
	"matmul_swiglu":     bindMatMulSwiGLU,
	"elementwise_chain": bindChain,
}

// HasKernel reports whether the CUDA backend has a kernel for op; it needs
// no driver (reel ops lists it).
func HasKernel(op string) bool {
	_, ok := binders[op]
	return ok
}

// Kernel gives the kernel of an op, or false when this backend has none.
func (be *Backend) Kernel(op string) (ops.Kernel, bool) {
	f, ok := binders[op]
	if !ok {
		return nil, false
	}
	return ops.KernelFunc(func(n *graph.Node, in, out []ops.Buffer) (ops.Step, error) {
		if err := be.check(); err != nil {
			return nil, err
		}
		ib, err := be.buffers("input", in)
		if err != nil {
			return nil, err
		}
		ob, err := be.buffers("output", out)
		if err != nil {
			return nil, err
		}
		if len(ib) != len(n.Inputs) || len(ob) != len(n.Outputs) {
			return nil, fmt.Errorf("%d inputs and %d outputs bound for %d and %d", len(ib), len(ob), len(n.Inputs), len(n.Outputs))
		}
		for i, v := range n.Inputs {
			if err := ops.CheckBinding(v, ib[i]); err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
		}
		for i, v := range n.Outputs {
			if err := ops.CheckBinding(v, ob[i]); err != nil {
				return nil, fmt.Errorf("output %d: %w", i, err)
			}
		}
		return f(be, n, ib, ob)
	}), true
}

// Ops lists the ops this backend has kernels for.
func Ops() []string {
	out := make([]string, 0, len(binders))
	for k := range binders {
		out = append(out, k)
	}
	return out
}

func (be *Backend) buffers(what string, bs []ops.Buffer) ([]*Buffer, error) {
	out := make([]*Buffer, len(bs))
	for i, b := range bs {
		cb, err := be.buffer(fmt.Sprintf("%s %d", what, i), b)
		if err != nil {
			return nil, err
		}
		out[i] = cb
	}
	return out, nil
}

// f32 checks that b holds f32 elements as f32 (not a converted weight).
func f32(what string, b *Buffer) error {
	if b.dt != graph.F32 || b.store != graph.F32 {
		return fmt.Errorf("%s is a %s buffer (stored %s), want f32", what, b.dt, b.store)
	}
	return nil
}

func f32All(names []string, bs []*Buffer) error {
	for i, b := range bs {
		if err := f32(names[i], b); err != nil {
			return err
		}
	}
	return nil
}

func (be *Backend) newSteps() *steps { return &steps{be: be} }

// checkCall checks the call record buffer a kernel reads the position and
// rows of a run from.
func checkCall(call *Buffer) error {
	if call.dt != graph.I32 || call.n < ops.CallLen {
		return fmt.Errorf("call record is a %s buffer of %d elements, want i32 of at least %d", call.dt, call.n, ops.CallLen)
	}
	return nil
}

// wtype is the kernels' code of a weight's stored type.
func wtype(b *Buffer) (int32, error) {
	switch b.store {
	case graph.F32:
		return 0, nil
	case graph.BF16:
		return 1, nil
	case graph.F16:
		return 2, nil
	}
	return 0, fmt.Errorf("weight stored as %s: want f32, bf16 or f16", b.store)
}

func bindEmbed(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	table, ids, y := in[0], in[1], out[0]
	tv := n.Inputs[0]
	wt, err := wtype(table)
	if err != nil {
		return nil, err
	}
	if ids.dt != graph.I32 {
		return nil, fmt.Errorf("ids are %s, want i32", ids.dt)
	}
	if err := f32("output", y); err != nil {
		return nil, err
	}
	vocab, h, rows := tv.Shape[0], tv.Shape[1], ids.n
	if y.n != rows*h || table.n != vocab*h {
		return nil, fmt.Errorf("embed: table of %d, %d ids, output of %d elements", table.n, rows, y.n)
	}
	s := be.newSteps()
	if rows*h == 0 {
		return s, nil
	}
	g, b := grid1(int64(rows * h))
	s.add("embed", g, b, 0, table.ptr, wt, ids.ptr, y.ptr, int32(rows), int32(h), int32(vocab), be.errRec)
	return s, nil
}

func bindBinary(op int32) binder {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
		if err := f32All([]string{"a", "b", "output"}, []*Buffer{in[0], in[1], out[0]}); err != nil {
			return nil, err
		}
		a, b, y := in[0], in[1], out[0]
		if y.n != a.n || (b.n == 0) != (a.n == 0) || (b.n > 0 && a.n%b.n != 0) {
			return nil, fmt.Errorf("a of %d elements, b of %d, output of %d do not broadcast", a.n, b.n, y.n)
		}
		s := be.newSteps()
		if a.n == 0 {
			return s, nil
		}
		g, bl := grid1(int64(a.n))
		s.add("binary", g, bl, 0, op, a.ptr, b.ptr, y.ptr, int64(a.n), int64(b.n))
		return s, nil
	}
}

func bindUnary(op int32) binder {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
		var factor float32
		if op == ewCode("scale") {
			at, err := ops.NodeAttrs[ops.ScaleAttrs](n)
			if err != nil {
				return nil, err
			}
			factor = at.Factor
		}
		x, y := in[0], out[0]
		if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
			return nil, err
		}
		if y.n != x.n {
			return nil, fmt.Errorf("x of %d elements, output of %d", x.n, y.n)
		}
		s := be.newSteps()
		if x.n == 0 {
			return s, nil
		}
		g, b := grid1(int64(x.n))
		s.add("unary", g, b, 0, op, x.ptr, y.ptr, int64(x.n), factor)
		return s, nil
	}
}

// ewCode is the kernels' code of an elementwise op (ops.ElementwiseCode,
// the OP_* constants of the program); it panics on a name that is not one,
// a mistake in this package's tables.
func ewCode(op string) int32 {
	c, ok := ops.ElementwiseCode(op)
	if !ok {
		panic(fmt.Sprintf("cuda: %q is not an elementwise op", op))
	}
	return c
}

// chainMax is CHAIN_MAX in elementwise.cu.
const chainMax = 16

func bindChain(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.ChainAttrs](n)
	if err != nil {
		return nil, err
	}
	if _, err := ops.ChainShapes(at, n.Inputs); err != nil {
		return nil, err
	}
	if len(at.Steps) > chainMax {
		return nil, fmt.Errorf("elementwise_chain of %d steps: this backend runs at most %d", len(at.Steps), chainMax)
	}
	y := out[0]
	if err := f32("output", y); err != nil {
		return nil, err
	}
	table := make([]byte, 0, 4*3*len(at.Steps))
	factors := make([]byte, 0, 4*len(at.Steps))
	for _, st := range at.Steps {
		code, ok := ops.ElementwiseCode(st.Op)
		if !ok {
			return nil, fmt.Errorf("elementwise_chain: op %q", st.Op)
		}
		args := [2]int32{}
		for j, a := range st.Args {
			args[j] = int32(a)
		}
		table = binary.LittleEndian.AppendUint32(table, uint32(code))
		table = binary.LittleEndian.AppendUint32(table, uint32(args[0]))
		table = binary.LittleEndian.AppendUint32(table, uint32(args[1]))
		factors = binary.LittleEndian.AppendUint32(factors, math.Float32bits(st.Factor))
	}
	var ptrs, lens []byte
	for i, b := range in {
		if err := f32(fmt.Sprintf("input %d", i), b); err != nil {
			return nil, err
		}
		if (b.n == 0) != (y.n == 0) || (b.n > 0 && y.n%b.n != 0) {
			return nil, fmt.Errorf("input %d of %d elements does not broadcast to %d", i, b.n, y.n)
		}
		ptrs = binary.LittleEndian.AppendUint64(ptrs, uint64(b.ptr))
		lens = binary.LittleEndian.AppendUint64(lens, uint64(max(b.n, 1)))
	}
	s := be.newSteps()
	if y.n == 0 {
		return s, nil
	}
	var dev [4]cu.DevicePtr
	for i, d := range [][]byte{table, factors, ptrs, lens} {
		if dev[i], err = be.upload(d); err != nil {
			return nil, err
		}
	}
	g, b := grid1(int64(y.n))
	s.add("chain", g, b, 0, dev[0], dev[1], int32(len(at.Steps)), dev[2], dev[3], y.ptr, int64(y.n))
	return s, nil
}

func bindSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if err := f32All([]string{"g", "u", "sg", "su", "output"}, []*Buffer{in[0], in[1], in[2], in[3], out[0]}); err != nil {
		return nil, err
	}
	return be.swiglu(in[0], in[1], in[2], in[3], out[0], be.newSteps())
}

func (be *Backend) swiglu(g, u, sg, su, y *Buffer, s *steps) (*steps, error) {
	f := sg.n
	if f == 0 || su.n != f || g.n%f != 0 || u.n != g.n || y.n != g.n {
		return nil, fmt.Errorf("g %d, u %d, scales %d and %d, output %d elements do not fit", g.n, u.n, sg.n, su.n, y.n)
	}
	gr, b := grid1(int64(g.n))
	s.add("swiglu", gr, b, 0, g.ptr, u.ptr, sg.ptr, su.ptr, y.ptr, int64(g.n), int32(f))
	return s, nil
}

// bindNorm binds l2norm (rms false) or rmsnorm (rms true): one block per
// run of the group (norm_rows, its _wide variant, or _long for runs past the
// register kernels' reach); rmsnorm's weight is [group] or [row], of any
// weight type.
func bindNorm(rms bool) binder {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
		at, err := ops.NodeAttrs[ops.NormAttrs](n)
		if err != nil {
			return nil, err
		}
		x, y := in[0], out[0]
		if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
			return nil, err
		}
		last := n.Inputs[0].Shape.Last()
		g := at.Group
		if g == 0 {
			g = last
		}
		if g <= 0 || last%g != 0 || x.n%g != 0 || y.n != x.n || last > math.MaxInt32 {
			return nil, fmt.Errorf("group %d does not divide rows of %d (x %d, output %d elements)", at.Group, last, x.n, y.n)
		}
		var (
			w      cu.DevicePtr
			wt, wn int32
			r      int32
		)
		if rms {
			if wt, err = wtype(in[1]); err != nil {
				return nil, fmt.Errorf("w: %w", err)
			}
			if in[1].n != g && in[1].n != last {
				return nil, fmt.Errorf("w has %d elements, want %d (the group) or %d (the row)", in[1].n, g, last)
			}
			w, wn, r = in[1].ptr, int32(in[1].n), 1
		}
		s := be.newSteps()
		if x.n == 0 {
			return s, nil
		}
		runs := x.n / g
		if runs > math.MaxInt32 {
			return nil, fmt.Errorf("%d runs of %d elements: more than one launch takes", runs, g)
		}
		name, threads := "norm_rows_long", uint32(1024)
		if g <= 1024*32 {
			if name, threads, err = rowKernel("norm_rows", g); err != nil {
				return nil, err
			}
		}
		s.add(name, [3]uint32{uint32(runs), 1, 1}, [3]uint32{threads, 1, 1}, 0,
			x.ptr, w, wt, y.ptr, int32(g), int32(last), wn, at.Eps, r)
		return s, nil
	}
}

// rowKernel picks the variant of a row kernel (norm_rows, rowfuse) for rows
// of n and its block size: each thread keeps up to 8 elements in registers
// (the _wide variant 32), with at least four per thread so reductions stay
// short.
func rowKernel(base string, n int) (string, uint32, error) {
	switch {
	case n <= 1024*8:
		return base, threadsFor((n+3)/4, 1024), nil
	case n <= 1024*32:
		return base + "_wide", 1024, nil
	}
	return "", 0, fmt.Errorf("rows of %d elements: the row kernels take at most %d", n, 1024*32)
}

func bindRowFuse(kind int32) binder {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
		at, err := ops.NodeAttrs[ops.EpsAttrs](n)
		if err != nil {
			return nil, err
		}
		y := out[0]
		if err := f32("output", y); err != nil {
			return nil, err
		}
		w := n.Outputs[0].Shape.Last()
		if w <= 0 || y.n%w != 0 {
			return nil, fmt.Errorf("output of %d elements in rows of %d", y.n, w)
		}
		nRows := 2
		for i, b := range in {
			if err := f32(fmt.Sprintf("input %d", i), b); err != nil {
				return nil, err
			}
			want := y.n
			if i >= nRows {
				want = w
			}
			if b.n != want {
				return nil, fmt.Errorf("input %d has %d elements, want %d", i, b.n, want)
			}
		}
		var v cu.DevicePtr
		if len(in) > 2 {
			v = in[2].ptr
		}
		s := be.newSteps()
		if y.n == 0 {
			return s, nil
		}
		name, threads, err := rowKernel("rowfuse", w)
		if err != nil {
			return nil, err
		}
		s.add(name, [3]uint32{uint32(y.n / w), 1, 1}, [3]uint32{threads, 1, 1}, 0,
			kind, in[0].ptr, in[1].ptr, v, y.ptr, int32(w), at.Eps)
		return s, nil
	}
}

func bindRope(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	var (
		rope     ops.RopeAttrs
		norm     bool
		eps      float32
		slot     *Buffer
		scale    *Buffer
		ring     bool
		optScale int
	)
	switch n.Op {
	case "rope":
		at, err := ops.NodeAttrs[ops.RopeAttrs](n)
		if err != nil {
			return nil, err
		}
		rope = at
	case "norm_rope":
		at, err := ops.NodeAttrs[ops.NormRopeAttrs](n)
		if err != nil {
			return nil, err
		}
		rope, norm, eps, optScale = at.Rope, true, at.Eps, 2
	default: // norm_rope_kv: x, call, slot[, scale]
		at, err := ops.NodeAttrs[ops.NormRopeKVAttrs](n)
		if err != nil {
			return nil, err
		}
		rope, norm, eps, ring, optScale = at.NormRope.Rope, true, at.NormRope.Eps, at.Slot.Ring, 3
		slot = in[2]
		if err := f32("slot", slot); err != nil {
			return nil, err
		}
	}
	if optScale > 0 && len(in) == optScale+1 {
		scale = in[optScale]
	}
	x := in[0]
	if err := f32("x", x); err != nil {
		return nil, err
	}
	call := in[1]
	if err := checkCall(call); err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	if err := rope.CheckWidth(w); err != nil {
		return nil, fmt.Errorf("rope: %w", err)
	}
	if x.n%w != 0 {
		return nil, fmt.Errorf("x of %d elements, rows of %d", x.n, w)
	}
	rows := x.n / w
	var y, sc, sl cu.DevicePtr
	capacity := 0
	if slot == nil {
		if err := f32("output", out[0]); err != nil {
			return nil, err
		}
		if out[0].n != x.n {
			return nil, fmt.Errorf("x of %d elements, output of %d", x.n, out[0].n)
		}
		y = out[0].ptr
	} else {
		if slot.n%w != 0 {
			return nil, fmt.Errorf("a slot of %d elements is not whole rows of %d", slot.n, w)
		}
		sl, capacity = slot.ptr, slot.n/w
	}
	if scale != nil {
		if err := f32("scale", scale); err != nil {
			return nil, err
		}
		if scale.n != w {
			return nil, fmt.Errorf("scale has %d elements, want %d", scale.n, w)
		}
		sc = scale.ptr
	}
	h := rope.Rotary / 2
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	fp, m, err := be.uploadRope(rope)
	if err != nil {
		return nil, err
	}
	nb, rg := int32(0), int32(0)
	if norm {
		nb = 1
	}
	if ring {
		rg = 1
	}
	s.add("rope", [3]uint32{uint32(rows), uint32(w / rope.HeadDim), 1}, [3]uint32{threadsFor(max(h, rope.HeadDim-rope.Rotary), 128), 1, 1}, 0,
		x.ptr, y, call.ptr, be.errRec, fp, m, sc, sl, int32(rows), int32(w), int32(rope.HeadDim), int32(rope.Rotary), nb, eps, int32(capacity), rg)
	return s, nil
}

// uploadRope uploads rope's table of frequencies f_j, j < Rotary/2, as f64
// into scratch the bound steps keep, and gives it with the attention factor
// m (ops.RopeAttrs.Frequencies).
func (be *Backend) uploadRope(rope ops.RopeAttrs) (cu.DevicePtr, float64, error) {
	f, m, err := rope.Frequencies()
	if err != nil {
		return 0, 0, fmt.Errorf("rope: %w", err)
	}
	freq := make([]byte, 8*len(f))
	for j, v := range f {
		binary.LittleEndian.PutUint64(freq[8*j:], math.Float64bits(v))
	}
	p, err := be.upload(freq)
	if err != nil {
		return 0, 0, err
	}
	return p, m, nil
}

func bindKVWrite(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.SlotAttrs](n)
	if err != nil {
		return nil, err
	}
	rows, slot, call := in[0], in[1], in[2]
	if err := f32All([]string{"rows", "slot"}, []*Buffer{rows, slot}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	w := n.Inputs[1].Shape.Last()
	if w <= 0 || rows.n%w != 0 || slot.n%w != 0 {
		return nil, fmt.Errorf("rows of %d and a slot of %d elements are not whole rows of %d", rows.n, slot.n, w)
	}
	t := rows.n / w
	s := be.newSteps()
	if t == 0 {
		return s, nil
	}
	ring := int32(0)
	if at.Ring {
		ring = 1
	}
	s.add("kv_write", [3]uint32{uint32(t), 1, 1}, [3]uint32{threadsFor(w, 256), 1, 1}, 0,
		rows.ptr, slot.ptr, call.ptr, be.errRec, int32(t), int32(w), int32(slot.n/w), ring)
	return s, nil
}

// attnMaxGroup is ATTN_MAX_GROUP of attention.cu: the most query heads per
// KV head.
const attnMaxGroup = 16

// attnChunkMax is the most keys one attn_part block scores.
const attnChunkMax = 1024

// attnChunkMin is the fewest keys per chunk the split aims at (a chunk has
// fewer only when the span itself is shorter).
const attnChunkMin = 16

// attnBlocksPerSM is the attn_part blocks per multiprocessor the split aims
// at (the kernels' __launch_bounds__ let two be resident).
const attnBlocksPerSM = 2

// attnFinishDims is the dimensions of a head one attn_finish block merges
// when the head divides into them.
const attnFinishDims = 64

// attnThreads is the block size of attn_part and attn_finish (attn_part's
// __launch_bounds__).
const attnThreads = 256

func bindAttention(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.AttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	return be.attention(at, in[0], in[1], in[2], in[3], out[0], nil, nil)
}

// attention binds attention, or attention_gate when the gate g and its
// scale sg are not nil: attn_part over (row, kv head, key chunk), then
// attn_finish merging the chunks of each (row, head) and gating them.
func (be *Backend) attention(at ops.AttentionAttrs, q, k, v, call, y, g, sg *Buffer) (*steps, error) {
	var gp, sp cu.DevicePtr
	if g != nil {
		if err := f32All([]string{"g", "s"}, []*Buffer{g, sg}); err != nil {
			return nil, err
		}
		if g.n != q.n || sg.n != at.Heads*at.HeadDim {
			return nil, fmt.Errorf("attention_gate: g of %d and s of %d elements for q of %d in rows of %d", g.n, sg.n, q.n, at.Heads*at.HeadDim)
		}
		gp, sp = g.ptr, sg.ptr
	}
	if err := f32All([]string{"q", "k", "v", "output"}, []*Buffer{q, k, v, y}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	d := at.HeadDim
	if at.Heads <= 0 || at.KVHeads <= 0 || d <= 0 || at.Heads%at.KVHeads != 0 || at.Window < 0 {
		return nil, fmt.Errorf("attention: heads %d over kv heads %d of %d, window %d", at.Heads, at.KVHeads, d, at.Window)
	}
	qw, kw, groups := at.Heads*d, at.KVHeads*d, at.Heads/at.KVHeads
	if groups > attnMaxGroup {
		return nil, fmt.Errorf("attention: %d query heads per kv head: the kernel takes at most %d", groups, attnMaxGroup)
	}
	if q.n%qw != 0 || y.n != q.n || k.n%kw != 0 || v.n != k.n {
		return nil, fmt.Errorf("attention: q of %d, output of %d, k of %d, v of %d elements do not fit %d query and %d kv heads of %d",
			q.n, y.n, k.n, v.n, at.Heads, at.KVHeads, d)
	}
	rows, capacity := q.n/qw, k.n/kw
	if at.Ring && at.Window > 0 && at.Window > capacity-(rows-1) {
		return nil, fmt.Errorf("attention: window %d over a ring of %d rows with %d query rows: the first row would read keys overwritten by the last (the window may be at most %d)",
			at.Window, capacity, rows, capacity-(rows-1))
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	span := capacity
	if at.Window > 0 {
		span = min(at.Window, capacity)
	}
	span = max(span, 1)
	// Chunks: enough blocks to fill the SMs twice, each at most attnChunkMax
	// keys and within 48 KiB of shared memory with the group's queries, and
	// at least attnChunkMin keys, so that a block's loads are many and the
	// partials the finish reads few. The kernel splits each row's keys
	// evenly over the chunks at run time.
	blocks := rows * at.KVHeads
	splits := max(1, min((span+attnChunkMin-1)/attnChunkMin, (attnBlocksPerSM*be.kernels.sms+blocks-1)/blocks))
	chunk := (span + splits - 1) / splits
	limit := (48*1024/4 - groups*d) / (groups + 1)
	if limit < 32 {
		return nil, fmt.Errorf("attention: %d query heads per kv head of %d do not fit in shared memory", groups, d)
	}
	chunk = min(chunk, attnChunkMax, limit)
	splits = (span + chunk - 1) / chunk
	parts := rows * at.Heads * splits
	// m and l, then the sums 16-byte aligned for the kernels' vector loads.
	mlBytes := (8*parts + 15) &^ 15
	pm, err := be.scratchAlloc(mlBytes + 4*parts*d)
	if err != nil {
		return nil, err
	}
	pl, pacc := pm.Offset(uint64(4*parts)), pm.Offset(uint64(mlBytes))
	ring := int32(0)
	if at.Ring {
		ring = 1
	}
	vec := d%4 == 0 && aligned16(q.ptr, k.ptr, v.ptr, pacc)
	part := "attn_part_s"
	if vec {
		part = "attn_part_vx"
		if groups == 1 || groups == 2 || groups == 4 || groups == 8 {
			part = fmt.Sprintf("attn_part_v%d", groups)
		}
	}
	shared := uint32(4 * (groups*d + groups*chunk + chunk))
	s.add(part, [3]uint32{uint32(rows), uint32(at.KVHeads), uint32(splits)}, [3]uint32{attnThreads, 1, 1}, shared,
		q.ptr, k.ptr, v.ptr, call.ptr, be.errRec, pm, pl, pacc, int32(rows), int32(at.Heads), int32(at.KVHeads), int32(d),
		int32(capacity), int32(at.Window), ring, at.Scale, int32(chunk))
	// The finish splits each head's dimensions over blocks of 64 when
	// they divide evenly, so that many blocks share the partials' reads.
	dsplit := 1
	if d%attnFinishDims == 0 {
		dsplit = d / attnFinishDims
	}
	fvec := int32(0)
	if vec && (d/dsplit)%4 == 0 {
		fvec = 1
	}
	s.add("attn_finish", [3]uint32{uint32(rows), uint32(at.Heads), uint32(dsplit)}, [3]uint32{attnThreads, 1, 1}, uint32(4*(2*splits+d/dsplit)),
		pm, pl, pacc, y.ptr, call.ptr, int32(rows), int32(at.Heads), int32(d), int32(splits), gp, sp, fvec)
	return s, nil
}

// aligned16 reports whether every pointer is 16-byte aligned.
func aligned16(ps ...cu.DevicePtr) bool {
	for _, p := range ps {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

func bindSliceRows(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.SliceAttrs](n)
	if err != nil {
		return nil, err
	}
	x, y := in[0], out[0]
	if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	if at.From < 0 || at.To < at.From || at.To*w > x.n || y.n != (at.To-at.From)*w {
		return nil, fmt.Errorf("rows [%d, %d) of %d-element rows: x has %d elements, output %d", at.From, at.To, w, x.n, y.n)
	}
	s := be.newSteps()
	s.copyBytes(y.ptr, x.ptr.Offset(uint64(4*at.From*w)), 4*y.n)
	return s, nil
}

func bindStore(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	src, dst := in[0], in[1]
	if src.dt != dst.dt || src.store != dst.store || src.n != dst.n {
		return nil, fmt.Errorf("store of %d %s elements into %d %s elements", src.n, src.dt, dst.n, dst.dt)
	}
	s := be.newSteps()
	s.copyBytes(dst.ptr, src.ptr, src.n*src.store.Size())
	return s, nil
}

func bindArgmax(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, y := in[0], out[0]
	if err := f32("x", x); err != nil {
		return nil, err
	}
	if y.dt != graph.I32 {
		return nil, fmt.Errorf("output is a %s buffer, want i32", y.dt)
	}
	w := n.Inputs[0].Shape.Last()
	if w <= 0 || x.n != y.n*w {
		return nil, fmt.Errorf("x of %d elements for %d rows", x.n, y.n)
	}
	s := be.newSteps()
	if y.n == 0 {
		return s, nil
	}
	s.add("argmax", [3]uint32{uint32(y.n), 1, 1}, [3]uint32{threadsFor(w, 512), 1, 1}, 0, x.ptr, y.ptr, int32(w))
	return s, nil
}
