package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Runner runs a graph node by node on a backend, each temporary in its own
// allocation: the plain reference execution that golden tests use to compare
// backends and that the planner's plans are compared against.
type Runner struct {
	be     Backend
	g      *graph.Graph
	bufs   []Buffer
	owned  []Buffer
	steps  []Step
	order  []*graph.Node
	closed bool
}

// CheckBinding verifies that a buffer fits a value: same dtype and, for a
// value with a Dyn extent, a length that is a whole number of rows.
func CheckBinding(v *graph.Value, buf Buffer) error {
	if buf == nil {
		return fmt.Errorf("%s %s is not bound", v.Kind, v)
	}
	if buf.DType() != v.DType {
		return fmt.Errorf("%s %s bound to a %s buffer", v.Kind, v, buf.DType())
	}
	if n := v.Shape.Elems(); n >= 0 {
		if buf.Len() != n {
			return fmt.Errorf("%s %s bound to a buffer of %d elements, want %d", v.Kind, v, buf.Len(), n)
		}
		return nil
	}
	row := graph.Shape(v.Shape[1:]).Elems()
	if row <= 0 || buf.Len()%row != 0 {
		return fmt.Errorf("%s %s bound to a buffer of %d elements, not whole rows of %d", v.Kind, v, buf.Len(), row)
	}
	return nil
}

// NewRunner binds every node of g on be. bound gives the buffers of the
// graph's inputs, weights and states; temporaries are allocated here and
// freed by Close.
func NewRunner(be Backend, g *graph.Graph, bound map[*graph.Value]Buffer) (*Runner, error) {
	order, err := g.Order()
	if err != nil {
		return nil, err
	}
	r := &Runner{be: be, g: g, bufs: make([]Buffer, len(g.Values)), order: order}
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			continue
		}
		buf := bound[v]
		if err := CheckBinding(v, buf); err != nil {
			return nil, fmt.Errorf("graph %s: %w", g.Name, err)
		}
		r.bufs[v.ID] = buf
	}
	for _, v := range g.Values {
		if v.Kind != graph.Temp {
			continue
		}
		buf, err := be.Alloc(v.DType, v.Shape.Elems())
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("graph %s: temp %s: %w", g.Name, v, err)
		}
		r.bufs[v.ID] = buf
		r.owned = append(r.owned, buf)
	}
	for _, n := range order {
		st, err := BindNode(be, n, r.bufs)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("graph %s: %w", g.Name, err)
		}
		r.steps = append(r.steps, st)
	}
	return r, nil
}

// BindNode binds one node on a backend, given the buffers of every value by
// ID. A missing kernel or a panic inside Bind is an error naming the node.
func BindNode(be Backend, n *graph.Node, bufs []Buffer) (st Step, err error) {
	k, ok := be.Kernel(n.Op)
	if !ok {
		return nil, fmt.Errorf("%s: backend %s has no kernel for op %q", n, be.Name(), n.Op)
	}
	in := make([]Buffer, len(n.Inputs))
	for i, v := range n.Inputs {
		in[i] = bufs[v.ID]
	}
	out := make([]Buffer, len(n.Outputs))
	for i, v := range n.Outputs {
		out[i] = bufs[v.ID]
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: binding panicked: %v", n, p)
		}
	}()
	st, err = k.Bind(n, in, out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n, err)
	}
	return guard{n: n, s: st}, nil
}

// guard turns a panic inside a step into an error naming its node.
type guard struct {
	n *graph.Node
	s Step
}

func (g guard) Run() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: kernel panicked: %v", g.n, p)
		}
	}()
	if err := g.s.Run(); err != nil {
		return fmt.Errorf("%s: %w", g.n, err)
	}
	return nil
}

// Run executes every step in order.
func (r *Runner) Run() error {
	if r.closed {
		return fmt.Errorf("graph %s: runner is closed", r.g.Name)
	}
	for _, st := range r.steps {
		if err := st.Run(); err != nil {
			return fmt.Errorf("graph %s: %w", r.g.Name, err)
		}
	}
	return nil
}

// Buffer is the buffer holding a value of the graph.
func (r *Runner) Buffer(v *graph.Value) Buffer { return r.bufs[v.ID] }

// Close frees the temporaries.
func (r *Runner) Close() error {
	var first error
	for _, b := range r.owned {
		if err := r.be.Free(b); err != nil && first == nil {
			first = err
		}
	}
	r.owned, r.closed = nil, true
	return first
}
