package graph

import "fmt"

// Op is what the graph needs to know of an operation: its name and its rule,
// which checks the inputs and says what the node produces. Package ops defines
// the operations; graph knows none of them.
type Op interface {
	Name() string
	// Infer checks the inputs against the attributes and gives the outputs'
	// dtypes and shapes and which inputs (State values) the node writes. An
	// error says what is wrong in terms of the inputs, naming their shapes.
	Infer(attrs any, in []*Value) (Signature, error)
}

// Signature is the result of an op's rule for one node.
type Signature struct {
	Outputs []Spec
	// Writes lists the indices of the inputs the node mutates in place. Each must
	// be a State value.
	Writes []int
}

// OpLookup finds an op by name; validation uses it to re-run every node's rule.
type OpLookup func(name string) (Op, bool)

// Node is one operation applied to values.
type Node struct {
	// ID is the node's index in Graph.Nodes: the order it was built in.
	ID int
	Op string
	// Attrs are the op's typed attributes (a struct the op defines), or nil.
	Attrs   any
	Inputs  []*Value
	Outputs []*Value
	// Writes are the State values the node mutates; each is also among Inputs.
	Writes []*Value
	// Scope is where in the model the node was built ("layer 12 / attn").
	Scope string
}

// String names the node as errors do: #12 matmul (layer 3 / attn).
func (n *Node) String() string {
	if n.Scope == "" {
		return fmt.Sprintf("#%d %s", n.ID, n.Op)
	}
	return fmt.Sprintf("#%d %s (%s)", n.ID, n.Op, n.Scope)
}

// Graph is a static dataflow graph: values, the nodes over them, and the values a
// caller reads after a run.
type Graph struct {
	Name    string
	Values  []*Value
	Nodes   []*Node
	Outputs []*Value
}

// Lookup finds a value that is not a Temp by name (an input, weight or state).
func (g *Graph) Lookup(name string) *Value {
	for _, v := range g.Values {
		if v.Kind != Temp && v.Name == name {
			return v
		}
	}
	return nil
}

// OfKind lists the values of one kind, in ID order.
func (g *Graph) OfKind(k Kind) []*Value {
	var out []*Value
	for _, v := range g.Values {
		if v.Kind == k {
			out = append(out, v)
		}
	}
	return out
}

// Uses counts, for each value ID, the nodes that read it, plus one for each
// graph output it is.
func (g *Graph) Uses() []int {
	u := make([]int, len(g.Values))
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			u[v.ID]++
		}
	}
	for _, v := range g.Outputs {
		u[v.ID]++
	}
	return u
}

// IsOutput reports whether v is among the graph's outputs.
func (g *Graph) IsOutput(v *Value) bool {
	for _, o := range g.Outputs {
		if o == v {
			return true
		}
	}
	return false
}

// Path names a value by where it was made, as traces do: the scope of the
// node that made it and the value's name ("layer 3 / attn / attn_out"; a
// temporary nobody labelled is "layer 3 / attn / t41"). An input, weight or
// state is its name.
func (v *Value) Path() string {
	if v == nil || v.Kind != Temp || v.Producer == nil || v.Producer.Scope == "" {
		if v == nil {
			return ""
		}
		return v.Name
	}
	return v.Producer.Scope + " / " + v.Name
}

// Paths gives every value's Path by value ID, made unique: a path that
// repeats (a label used twice in one scope) takes " (2)", " (3)", ... from
// its second use on, in build order.
func (g *Graph) Paths() []string {
	out := make([]string, len(g.Values))
	seen := make(map[string]int, len(g.Values))
	for i, v := range g.Values {
		p := v.Path()
		seen[p]++
		if n := seen[p]; n > 1 {
			p = fmt.Sprintf("%s (%d)", p, n)
		}
		out[i] = p
	}
	return out
}
