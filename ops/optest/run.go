package optest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// Variant is a way to run a case.
type Variant int

const (
	// Plain runs the graph as built, each value in its own guarded buffer.
	Plain Variant = iota
	// InPlace binds the output of each node that may run in place to the
	// buffer of the input it may share (when that input is an Input leaf read
	// by that node only), as the planner may.
	InPlace
	// Unfused replaces each fused node by its decomposition.
	Unfused
)

// String names the variant.
func (v Variant) String() string {
	switch v {
	case Plain:
		return "plain"
	case InPlace:
		return "in place"
	case Unfused:
		return "unfused"
	}
	return fmt.Sprintf("variant(%d)", int(v))
}

// ErrNotApplicable is Run's answer for a variant that changes nothing in a
// case (no node that may run in place, no fused node).
var ErrNotApplicable = errors.New("variant does not apply to the case")

// Result is what a case's run gave.
type Result struct {
	// Outputs are the graph's outputs, then the final contents of each State
	// leaf in Inputs order, as float64.
	Outputs [][]float64
	// DTypes are the outputs' element types.
	DTypes []graph.DType
	// Err is the error binding or running returned (what WantErr matches).
	Err error
}

// guardBytes is the sentinel margin on each side of a guarded buffer.
const guardBytes = 64

// guardByte fills the margins.
const guardByte = 0xA5

// guarded is a buffer placed in the middle of a larger block with sentinel margins.
type guarded struct {
	name  string
	arena ops.Buffer
	view  ops.Buffer
	bytes int // the view's bytes
	// original holds an input's bytes, to check that it was not written.
	original []byte
}

// runner holds one run's memory.
type runner struct {
	be     ops.Backend
	guards []*guarded
	owned  []ops.Buffer
}

func (r *runner) free() {
	for _, b := range r.owned {
		_ = r.be.Free(b)
	}
}

// alloc makes a guarded buffer of n elements holding data (nil: poison,
// NaN for floats).
func (r *runner) alloc(name string, dt graph.DType, n int, data []byte) (*guarded, error) {
	nb := n * dt.Size()
	size := guardBytes + (nb+7)/8*8 + guardBytes
	arena, err := r.be.Arena(size)
	if err != nil {
		return nil, fmt.Errorf("%s: arena of %d bytes: %w", name, size, err)
	}
	r.owned = append(r.owned, arena)
	if err := r.be.Write(arena, bytes.Repeat([]byte{guardByte}, size)); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	view, err := r.be.View(arena, guardBytes, dt, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if data == nil {
		data = poison(dt, n)
	}
	if err := r.be.Write(view, data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	g := &guarded{name: name, arena: arena, view: view, bytes: nb}
	r.guards = append(r.guards, g)
	return g, nil
}

// check reports a written margin, or a changed input.
func (r *runner) check() error {
	for _, g := range r.guards {
		size := guardBytes + (g.bytes+7)/8*8 + guardBytes
		all := make([]byte, size)
		if err := r.be.Read(g.arena, all); err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
		for i, c := range all {
			if (i < guardBytes || i >= guardBytes+g.bytes) && c != guardByte {
				return fmt.Errorf("%s: byte %d outside the buffer (of %d bytes) was written", g.name, i-guardBytes, g.bytes)
			}
		}
		if g.original != nil && !bytes.Equal(all[guardBytes:guardBytes+g.bytes], g.original) {
			return fmt.Errorf("input %s was written", g.name)
		}
	}
	return nil
}

// Run runs a case on a backend in one variant. The error is a failure of
// the harness or a fault the guards found (a write outside a buffer, a
// written input); the backend's own error from binding or running is
// Result.Err.
func Run(be ops.Backend, c Case, v Variant) (Result, error) {
	g, leaves, err := c.build()
	if err != nil {
		return Result{}, err
	}
	if v == Unfused {
		if g, leaves, err = unfuse(c, g, leaves); err != nil {
			return Result{}, err
		}
	}
	bufs := make([]ops.Buffer, len(g.Values))
	r := &runner{be: be}
	defer r.free()
	for i, t := range c.Inputs {
		data, err := Encode(t.DType, t.Data)
		if err != nil {
			return Result{}, fmt.Errorf("leaf %s: %w", t.Name, err)
		}
		if t.Kind == graph.Weight {
			buf, err := be.Load(t.DType, t.Len(), data)
			if err != nil {
				return Result{}, fmt.Errorf("leaf %s: %w", t.Name, err)
			}
			r.owned = append(r.owned, buf)
			bufs[leaves[i].ID] = buf
			continue
		}
		gb, err := r.alloc(t.Name, t.DType, t.Len(), data)
		if err != nil {
			return Result{}, err
		}
		if t.Kind == graph.Input {
			gb.original = data
		}
		bufs[leaves[i].ID] = gb.view
	}
	if v == InPlace && !alias(g, bufs, r.guards) {
		return Result{}, ErrNotApplicable
	}
	for _, val := range g.Values {
		if val.Kind != graph.Temp || bufs[val.ID] != nil {
			continue
		}
		gb, err := r.alloc(val.String(), val.DType, val.Shape.Elems(), nil)
		if err != nil {
			return Result{}, err
		}
		bufs[val.ID] = gb.view
	}
	order, err := g.Order()
	if err != nil {
		return Result{}, err
	}
	res := Result{Err: execute(be, order, bufs)}
	if err := r.check(); err != nil {
		return Result{}, err
	}
	if res.Err != nil {
		return res, nil
	}
	read := func(val *graph.Value) error {
		n := bufs[val.ID].Len()
		raw := make([]byte, n*val.DType.Size())
		if err := be.Read(bufs[val.ID], raw); err != nil {
			return fmt.Errorf("read %s: %w", val, err)
		}
		out, err := decode(val.DType, raw)
		if err != nil {
			return fmt.Errorf("read %s: %w", val, err)
		}
		res.Outputs = append(res.Outputs, out)
		res.DTypes = append(res.DTypes, val.DType)
		return nil
	}
	for _, o := range g.Outputs {
		if err := read(o); err != nil {
			return Result{}, err
		}
	}
	for i, t := range c.Inputs {
		if t.Kind == graph.State {
			if err := read(leaves[i]); err != nil {
				return Result{}, err
			}
		}
	}
	return res, nil
}

// execute binds every node, then runs every step, then syncs.
func execute(be ops.Backend, order []*graph.Node, bufs []ops.Buffer) error {
	steps := make([]ops.Step, 0, len(order))
	for _, n := range order {
		st, err := ops.BindNode(be, n, bufs)
		if err != nil {
			return err
		}
		steps = append(steps, st)
	}
	for _, st := range steps {
		if err := st.Run(); err != nil {
			return err
		}
	}
	return be.Sync()
}

// alias gives, for the InPlace variant, each node's output that may share an
// input the buffer of that input, where the input is an Input leaf read by
// that node only and of the output's dtype and length. It reports whether
// any output was so bound.
func alias(g *graph.Graph, bufs []ops.Buffer, guards []*guarded) bool {
	uses := g.Uses()
	found := false
	for _, n := range g.Nodes {
		d, ok := ops.Lookup(n.Op)
		if !ok {
			continue
		}
		for o, i := range d.InPlace {
			if i < 0 || o >= len(n.Outputs) || i >= len(n.Inputs) {
				continue
			}
			in, out := n.Inputs[i], n.Outputs[o]
			if in.Kind != graph.Input || uses[in.ID] != 1 || in.DType != out.DType || in.Shape.Elems() != out.Shape.Elems() || g.IsOutput(in) {
				continue
			}
			bufs[out.ID] = bufs[in.ID]
			for _, gb := range guards {
				if gb.view == bufs[in.ID] {
					gb.original = nil // it is the output now
				}
			}
			found = true
		}
	}
	return found
}

// unfuse rebuilds a case's graph with every fused node replaced by its
// decomposition; ErrNotApplicable when it has none.
func unfuse(c Case, g *graph.Graph, leaves []*graph.Value) (*graph.Graph, []*graph.Value, error) {
	b := graph.NewBuilder(g.Name + " unfused")
	m := make([]*graph.Value, len(g.Values))
	nl := make([]*graph.Value, len(leaves))
	for i, t := range c.Inputs {
		var v *graph.Value
		switch t.Kind {
		case graph.Input:
			v = b.Input(t.Name, t.DType, t.Shape...)
		case graph.Weight:
			v = b.Weight(t.Name, t.DType, t.Shape...)
		default:
			v = b.State(t.Name, t.DType, t.Shape...)
		}
		m[leaves[i].ID], nl[i] = v, v
	}
	fused := false
	for _, n := range g.Nodes {
		d, ok := ops.Lookup(n.Op)
		if !ok {
			return nil, nil, fmt.Errorf("case %s: %s: unknown op", c.Name, n)
		}
		in := make([]*graph.Value, len(n.Inputs))
		for i, v := range n.Inputs {
			in[i] = m[v.ID]
		}
		var outs []*graph.Value
		if d.Fused() {
			fused = true
			outs = d.Decompose(b, n.Attrs, in)
		} else {
			outs = b.Apply(d, n.Attrs, len(n.Outputs), in...)
		}
		if len(outs) != len(n.Outputs) {
			return nil, nil, fmt.Errorf("case %s: %s decomposes into %d outputs, want %d", c.Name, n, len(outs), len(n.Outputs))
		}
		for i, v := range n.Outputs {
			m[v.ID] = outs[i]
		}
	}
	if !fused {
		return nil, nil, ErrNotApplicable
	}
	for _, o := range g.Outputs {
		b.Output(m[o.ID])
	}
	ng, err := b.Graph()
	if err != nil {
		return nil, nil, fmt.Errorf("case %s unfused: %w", c.Name, err)
	}
	return ng, nl, nil
}

// Encode writes values as little-endian elements of dt (f32, bf16, f16,
// i32, or the codes of a quantized weight: f8_e4m3, i8, u8), as a case's
// leaves are bound.
func Encode(dt graph.DType, vals []float64) ([]byte, error) {
	out := make([]byte, len(vals)*dt.Size())
	for i, v := range vals {
		switch dt {
		case graph.F32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(v)))
		case graph.BF16:
			binary.LittleEndian.PutUint16(out[2*i:], half.F32ToBF16(float32(v)))
		case graph.F16:
			binary.LittleEndian.PutUint16(out[2*i:], half.F32ToF16(float32(v)))
		case graph.I32:
			binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(v)))
		case graph.F8E4M3:
			out[i] = half.F32ToE4M3(float32(v))
		case graph.I8:
			out[i] = byte(int8(v))
		case graph.U8:
			out[i] = byte(v)
		default:
			return nil, fmt.Errorf("no encoding for %s", dt)
		}
	}
	return out, nil
}

// decode reads little-endian elements of dt as float64.
func decode(dt graph.DType, raw []byte) ([]float64, error) {
	n := len(raw) / dt.Size()
	out := make([]float64, n)
	for i := range out {
		switch dt {
		case graph.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		case graph.BF16:
			out[i] = float64(half.BF16ToF32(binary.LittleEndian.Uint16(raw[2*i:])))
		case graph.F16:
			out[i] = float64(half.F16ToF32(binary.LittleEndian.Uint16(raw[2*i:])))
		case graph.I32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		case graph.F8E4M3:
			out[i] = float64(half.E4M3ToF32(raw[i]))
		case graph.I8:
			out[i] = float64(int8(raw[i]))
		case graph.U8:
			out[i] = float64(raw[i])
		default:
			return nil, fmt.Errorf("no decoding for %s", dt)
		}
	}
	return out, nil
}

// poison is what an output holds before it is written: NaN for floats,
// a large odd pattern for integers.
func poison(dt graph.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	fill := byte(0xFF) // NaN in f32, bf16 and f16
	if !dt.IsFloat() {
		fill = 0x7B
	}
	for i := range b {
		b[i] = fill
	}
	return b
}
