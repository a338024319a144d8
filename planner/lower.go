package planner

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Lowered is a Planned bound on one backend: an arena holding every temporary,
// and one step per scheduled node with its buffers fixed.
type Lowered struct {
	p      *Planned
	be     ops.Backend
	arena  ops.Buffer
	bufs   []ops.Buffer // by value ID of p.Graph
	steps  []ops.Step
	closed bool
}

// Lower binds p on be. bind gives the buffers of the graph's inputs,
// weights and states, keyed by the values of p.Graph or of p.Source; every
// one must be bound (a Dyn extent takes its capacity from the buffer's
// length). The arena comes from be.Arena and each temporary is a view of it
// at its planned offset.
func Lower(p *Planned, be ops.Backend, bind map[*graph.Value]ops.Buffer) (*Lowered, error) {
	if p == nil || be == nil {
		return nil, fmt.Errorf("planner: lower needs a plan and a backend")
	}
	if len(p.Schedule) != len(p.Graph.Nodes) || len(p.Offsets) != len(p.Graph.Values) {
		return nil, fmt.Errorf("planner: graph %s is not planned", p.Graph.Name)
	}
	pl := &Lowered{p: p, be: be, bufs: make([]ops.Buffer, len(p.Graph.Values))}
	arena, err := be.Arena(p.ArenaBytes)
	if err != nil {
		return nil, fmt.Errorf("graph %s: arena of %d bytes: %w", p.Graph.Name, p.ArenaBytes, err)
	}
	pl.arena = arena
	for _, v := range p.Graph.Values {
		if v.Kind != graph.Temp {
			continue
		}
		a := p.Offsets[v.ID]
		buf, err := be.View(arena, a.Offset, v.DType, v.Shape.Elems())
		if err != nil {
			pl.Close()
			return nil, fmt.Errorf("graph %s: temp %s at %d: %w", p.Graph.Name, v, a.Offset, err)
		}
		pl.bufs[v.ID] = buf
	}
	if err := pl.Rebind(bind); err != nil {
		pl.Close()
		return nil, err
	}
	return pl, nil
}

// Rebind binds the plan's steps anew with other buffers for the inputs,
// weights and states (a grown KV slot, a new input buffer), keeping the
// arena. bind is as for Lower.
func (pl *Lowered) Rebind(bind map[*graph.Value]ops.Buffer) error {
	if pl.closed {
		return fmt.Errorf("graph %s: plan is closed", pl.p.Graph.Name)
	}
	p := pl.p
	src := map[*graph.Value]*graph.Value{}
	for s, cur := range p.leafOf {
		src[cur] = s
	}
	bufs := append([]ops.Buffer(nil), pl.bufs...)
	for _, v := range p.Graph.Values {
		if v.Kind == graph.Temp {
			continue
		}
		buf, ok := bind[v]
		if !ok {
			buf = bind[src[v]]
		}
		if err := ops.CheckBinding(v, buf); err != nil {
			return fmt.Errorf("graph %s: %w", p.Graph.Name, err)
		}
		bufs[v.ID] = buf
	}
	steps := make([]ops.Step, 0, len(p.Schedule))
	for _, n := range p.Schedule {
		st, err := ops.BindNode(pl.be, n, bufs)
		if err != nil {
			return fmt.Errorf("graph %s: %w", p.Graph.Name, err)
		}
		steps = append(steps, st)
	}
	pl.bufs, pl.steps = bufs, steps
	return nil
}

// BindByName keys buffers given by value name (as a model's weights and
// states are kept) by the inputs, weights and states of p.Graph; names the
// graph does not use are ignored, and a missing one is an error.
func BindByName(p *Planned, byName map[string]ops.Buffer) (map[*graph.Value]ops.Buffer, error) {
	out := map[*graph.Value]ops.Buffer{}
	for _, v := range p.Graph.Values {
		if v.Kind == graph.Temp {
			continue
		}
		buf, ok := byName[v.Name]
		if !ok || buf == nil {
			return nil, fmt.Errorf("graph %s: %s %s is not bound", p.Graph.Name, v.Kind, v)
		}
		out[v] = buf
	}
	return out, nil
}

// Planned is the plan's Planned.
func (pl *Lowered) Planned() *Planned { return pl.p }

// Steps are the bound launches in schedule order (what a recording holds).
func (pl *Lowered) Steps() []ops.Step { return pl.steps }

// Run runs every step in order.
func (pl *Lowered) Run() error {
	if pl.closed {
		return fmt.Errorf("graph %s: plan is closed", pl.p.Graph.Name)
	}
	for _, st := range pl.steps {
		if err := st.Run(); err != nil {
			return fmt.Errorf("graph %s: %w", pl.p.Graph.Name, err)
		}
	}
	return nil
}

// Output is the buffer of the graph's i-th output (an arena view for a
// temporary: valid until the plan runs again), nil when i is out of range.
func (pl *Lowered) Output(i int) ops.Buffer {
	if i < 0 || i >= len(pl.p.Graph.Outputs) {
		return nil
	}
	return pl.bufs[pl.p.Graph.Outputs[i].ID]
}

// Outputs are the buffers of every graph output.
func (pl *Lowered) Outputs() []ops.Buffer {
	out := make([]ops.Buffer, len(pl.p.Graph.Outputs))
	for i := range out {
		out[i] = pl.Output(i)
	}
	return out
}

// Traced are the buffers of the values an instrumented plan keeps, in the
// order of Planned.Traced (arena views: valid until the plan runs again).
func (pl *Lowered) Traced() []ops.Buffer {
	out := make([]ops.Buffer, len(pl.p.Traced))
	for i, t := range pl.p.Traced {
		out[i] = pl.bufs[t.Value.ID]
	}
	return out
}

// Backend is the backend the plan is bound on (to read its buffers).
func (pl *Lowered) Backend() ops.Backend { return pl.be }

// Buffer is the buffer of a value of p.Graph (or a leaf of p.Source).
func (pl *Lowered) Buffer(v *graph.Value) ops.Buffer {
	if l := pl.p.Leaf(v); l != nil {
		return pl.bufs[l.ID]
	}
	if _, ok := pl.p.Alloc(v); ok {
		return pl.bufs[v.ID]
	}
	return nil
}

// Close frees the arena; the plan cannot run afterwards.
func (pl *Lowered) Close() error {
	if pl.closed {
		return nil
	}
	pl.closed = true
	pl.steps = nil
	if pl.arena == nil {
		return nil
	}
	return pl.be.Free(pl.arena)
}
