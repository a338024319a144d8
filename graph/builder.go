package graph

import (
	"errors"
	"fmt"
	"strings"
)

// Builder assembles a graph. Model code calls it through the typed helpers of
// package ops, so it reads like the math; each node's rule runs as it is added.
//
// The first error sticks: later calls return placeholder values and add
// nothing, and Err or Graph report that first error, which names the node, its
// scope and the shapes involved. Model code can so build a whole stage and check
// once at the end.
type Builder struct {
	g      *Graph
	scope  []string
	err    error
	leaves map[string]*Value
}

// NewBuilder starts an empty graph with the given name.
func NewBuilder(name string) *Builder {
	return &Builder{g: &Graph{Name: name}, leaves: map[string]*Value{}}
}

// Err is the first error met so far, or nil.
func (b *Builder) Err() error { return b.err }

// Fail records an error found by model code (a config it cannot build), with
// the current scope; the first error sticks.
func (b *Builder) Fail(err error) {
	if b.err == nil && err != nil {
		if s := b.Scope(); s != "" {
			err = fmt.Errorf("%s: %w", s, err)
		}
		b.err = err
	}
}

// Push enters a scope ("layer %d", i) until the returned func is called.
func (b *Builder) Push(format string, args ...any) (pop func()) {
	b.scope = append(b.scope, fmt.Sprintf(format, args...))
	n := len(b.scope)
	return func() { b.scope = b.scope[:n-1] }
}

// Scope is the current scope path, "layer 3 / attn", or "" at the top.
func (b *Builder) Scope() string { return strings.Join(b.scope, " / ") }

// Input declares a value the caller uploads for each run. Declaring the same
// name twice gives the same value; with another dtype or shape it is an error.
func (b *Builder) Input(name string, dt DType, shape ...int) *Value {
	return b.leaf(Input, name, dt, shape)
}

// Weight declares a read-only value bound by checkpoint name.
func (b *Builder) Weight(name string, dt DType, shape ...int) *Value {
	return b.leaf(Weight, name, dt, shape)
}

// State declares a value that persists across runs; its first extent may be Dyn.
func (b *Builder) State(name string, dt DType, shape ...int) *Value {
	return b.leaf(State, name, dt, shape)
}

func (b *Builder) leaf(k Kind, name string, dt DType, shape []int) *Value {
	if b.err != nil {
		return placeholder()
	}
	if v, ok := b.leaves[name]; ok {
		if v.Kind != k || v.DType != dt || !v.Shape.Equal(shape) {
			b.Fail(fmt.Errorf("%s %q declared as %s %s%v, already %s %s%v", k, name, k, dt, Shape(shape), v.Kind, v.DType, v.Shape))
			return placeholder()
		}
		return v
	}
	if name == "" {
		b.Fail(fmt.Errorf("%s without a name", k))
		return placeholder()
	}
	if dt.Size() == 0 {
		b.Fail(fmt.Errorf("%s %q: invalid dtype %s", k, name, dt))
		return placeholder()
	}
	for i, d := range shape {
		if d < 0 && !(d == Dyn && i == 0 && k == State) {
			b.Fail(fmt.Errorf("%s %q: extent %d of shape %v is negative (only a state's first extent may be Dyn)", k, name, i, Shape(shape)))
			return placeholder()
		}
	}
	v := b.add(name, k, Spec{dt, append(Shape(nil), shape...)})
	b.leaves[name] = v
	return v
}

func (b *Builder) add(name string, k Kind, s Spec) *Value {
	v := &Value{ID: len(b.g.Values), Name: name, DType: s.DType, Shape: s.Shape, Kind: k}
	b.g.Values = append(b.g.Values, v)
	return v
}

// placeholder stands for a value that could not be made; it is never part of a graph.
func placeholder() *Value { return &Value{ID: -1, Name: "<error>"} }

// Apply adds a node of op over the inputs and returns its nOut outputs. A rule
// that fails, a nil or foreign input, or a count other than nOut is an error
// naming the node and its scope; the outputs are then placeholders.
func (b *Builder) Apply(op Op, attrs any, nOut int, in ...*Value) []*Value {
	out := make([]*Value, nOut)
	for i := range out {
		out[i] = placeholder()
	}
	if b.err != nil {
		return out
	}
	id := len(b.g.Nodes)
	where := fmt.Sprintf("node #%d %s", id, op.Name())
	if s := b.Scope(); s != "" {
		where += " (" + s + ")"
	}
	for i, v := range in {
		if v == nil {
			b.err = fmt.Errorf("%s: input %d is nil", where, i)
			return out
		}
		if v.ID < 0 || v.ID >= len(b.g.Values) || b.g.Values[v.ID] != v {
			b.err = fmt.Errorf("%s: input %d (%s) is not a value of this graph", where, i, v)
			return out
		}
	}
	sig, err := inferSafely(op, attrs, in)
	if err != nil {
		b.err = fmt.Errorf("%s: %w", where, err)
		return out
	}
	if len(sig.Outputs) != nOut {
		b.err = fmt.Errorf("%s: the op makes %d outputs, the caller takes %d", where, len(sig.Outputs), nOut)
		return out
	}
	n := &Node{ID: id, Op: op.Name(), Attrs: attrs, Inputs: append([]*Value(nil), in...), Scope: b.Scope()}
	for _, wi := range sig.Writes {
		if wi < 0 || wi >= len(in) || in[wi].Kind != State {
			b.err = fmt.Errorf("%s: writes input %d, which is not a state value", where, wi)
			return out
		}
		n.Writes = append(n.Writes, in[wi])
	}
	for i, s := range sig.Outputs { // all checked before any is added
		if s.DType.Size() == 0 || s.Shape.Elems() < 0 {
			b.err = fmt.Errorf("%s: output %d has an invalid spec %s", where, i, s)
			return out
		}
	}
	for i, s := range sig.Outputs {
		v := b.add(fmt.Sprintf("t%d", len(b.g.Values)), Temp, Spec{s.DType, append(Shape(nil), s.Shape...)})
		v.Producer = n
		n.Outputs = append(n.Outputs, v)
		out[i] = v
	}
	b.g.Nodes = append(b.g.Nodes, n)
	return out
}

// inferSafely runs a rule and turns a panic inside it into an error, so a bad
// rule never takes the process down while a model is being built.
func inferSafely(op Op, attrs any, in []*Value) (sig Signature, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rule of %s panicked: %v", op.Name(), r)
		}
	}()
	return op.Infer(attrs, in)
}

// Label names a value for dumps ("q", "attn_out"); it returns v.
func (b *Builder) Label(v *Value, name string) *Value {
	if v != nil && v.ID >= 0 && v.Kind == Temp {
		v.Name = name
	}
	return v
}

// Output marks values the caller reads after a run.
func (b *Builder) Output(vs ...*Value) {
	if b.err != nil {
		return
	}
	for _, v := range vs {
		if v == nil || v.ID < 0 || v.ID >= len(b.g.Values) || b.g.Values[v.ID] != v {
			b.Fail(fmt.Errorf("output %s is not a value of this graph", v))
			return
		}
		b.g.Outputs = append(b.g.Outputs, v)
	}
}

// ErrEmpty is returned by Graph for a builder that added no node.
var ErrEmpty = errors.New("graph has no nodes")

// Graph finishes the graph: the first error if any, else the graph with
// unique temp names and a checked order.
func (b *Builder) Graph() (*Graph, error) {
	if b.err != nil {
		return nil, fmt.Errorf("graph %s: %w", b.g.Name, b.err)
	}
	if len(b.g.Nodes) == 0 {
		return nil, fmt.Errorf("graph %s: %w", b.g.Name, ErrEmpty)
	}
	if _, err := b.g.Order(); err != nil {
		return nil, err
	}
	return b.g, nil
}
