package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the elementwise ops (add, sub, mul, sigmoid, silu, scale, the
// fused elementwise_chain and swiglu) and of the row gathers slice_rows,
// last_row and argmax; the kernels are in kernels/elementwise.cu.

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

// bindLastRow copies the last row the call record covers (kernel
// last_row: the row is read on the device, so one recording serves every
// call of a bucket).
func bindLastRow(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, call, y := in[0], in[1], out[0]
	if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	if w <= 0 || x.n%w != 0 || x.n == 0 || y.n != w {
		return nil, fmt.Errorf("the last row of %d-element rows: x has %d elements, output %d", w, x.n, y.n)
	}
	s := be.newSteps()
	g, b := grid1(int64(w))
	s.add("last_row", g, b, 0, x.ptr, y.ptr, call.ptr, be.errRec, int32(x.n/w), int64(w))
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
