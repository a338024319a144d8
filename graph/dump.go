package graph

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// AttrString formats attributes for text and DOT dumps: a Stringer's String,
// else the struct's fields as {Name:value ...}, "" for none. fmt calls the
// String method itself, so a panicking one (a nil pointer to a type with a
// value String method) prints "<nil>" instead of taking the dump down.
func AttrString(a any) string {
	if a == nil {
		return ""
	}
	return fmt.Sprintf("%+v", a)
}

// WriteText writes one line per node in build order, with its scope, op,
// outputs, inputs, state writes and attributes, after a header that lists the
// graph's inputs, weights and states. The output is stable: the same graph
// always gives the same bytes.
func WriteText(w io.Writer, g *Graph) error {
	ew := &errWriter{w: w}
	ew.printf("graph %s: %d values, %d nodes\n", g.Name, len(g.Values), len(g.Nodes))
	for _, k := range []Kind{Input, Weight, State} {
		for _, v := range g.OfKind(k) {
			ew.printf("  %-6s %%%d %s\n", k, v.ID, v)
		}
	}
	for _, n := range g.Nodes {
		outs := make([]string, len(n.Outputs))
		for i, v := range n.Outputs {
			outs[i] = fmt.Sprintf("%%%d %s", v.ID, v)
		}
		ins := make([]string, len(n.Inputs))
		for i, v := range n.Inputs {
			ins[i] = fmt.Sprintf("%%%d", v.ID)
		}
		line := fmt.Sprintf("  #%-4d %-14s %s = (%s)", n.ID, n.Op, strings.Join(outs, ", "), strings.Join(ins, ", "))
		if len(n.Writes) > 0 {
			ws := make([]string, len(n.Writes))
			for i, v := range n.Writes {
				ws[i] = fmt.Sprintf("%%%d", v.ID)
			}
			line += " writes " + strings.Join(ws, ", ")
		}
		if a := AttrString(n.Attrs); a != "" {
			line += " " + a
		}
		if n.Scope != "" {
			line += "  @ " + n.Scope
		}
		ew.printf("%s\n", line)
	}
	outs := make([]string, len(g.Outputs))
	for i, v := range g.Outputs {
		outs[i] = fmt.Sprintf("%%%d", v.ID)
	}
	ew.printf("  outputs: %s\n", strings.Join(outs, ", "))
	return ew.err
}

// DOTFanOut is the most nodes a leaf's edges go to in a DOT dump. A leaf
// read by more (the call record, which nearly every node of a model reads)
// is drawn once, without edges, and each node that reads it names it in
// its label: its edges would run the length of the graph, and Graphviz
// took over ten minutes to lay out a whole model's 453 nodes with them
// (a tenth of a second without).
const DOTFanOut = 4

// WriteDOT writes the graph for Graphviz's dot: a box per node labelled
// with its op and attributes, inside a cluster per scope (labelled with
// the scope: "layer 3 / attn"); an ellipse per input, weight and state,
// inside the cluster of the first node that reads it; an edge per input
// labelled with its dtype and shape, except from a leaf with more than
// DOTFanOut readers, which the readers' labels name instead ("reads
// call"); dashed red edges for state writes; a double circle per graph
// output. A whole model's graph of hundreds of nodes lays out in under a
// second. The output is stable: the same graph gives the same bytes.
func WriteDOT(w io.Writer, g *Graph) error { return WriteDOTWith(w, g, DOTOptions{}) }

// DOTOptions change what WriteDOTWith draws; the zero value draws as
// WriteDOT does.
type DOTOptions struct {
	// Name names the digraph; "": the graph's name.
	Name string
	// Title labels the whole drawing; "": none.
	Title string
	// Nodes are the nodes to draw, in order; nil: the graph's. Their
	// inputs' producers must be among them.
	Nodes []*Node
	// Label is a node's label before the leaves it reads unconnected;
	// nil: its op and attributes.
	Label func(n *Node) string
	// Style adds DOT attributes to a node's box (", style=filled").
	Style func(n *Node) string
	// EdgeLabel labels an edge carrying v; nil: its dtype and shape.
	EdgeLabel func(v *Value) string
}

// WriteDOTWith is WriteDOT with the nodes, labels and styles of o (a
// planner's launches, say).
func WriteDOTWith(w io.Writer, g *Graph, o DOTOptions) error {
	if o.Name == "" {
		o.Name = g.Name
	}
	if o.Nodes == nil {
		o.Nodes = g.Nodes
	}
	if o.Label == nil {
		o.Label = func(n *Node) string {
			if a := AttrString(n.Attrs); a != "" {
				return n.Op + "\n" + a
			}
			return n.Op
		}
	}
	if o.EdgeLabel == nil {
		o.EdgeLabel = func(v *Value) string { return v.DType.String() + v.Shape.String() }
	}
	ew := &errWriter{w: w}
	readers := map[*Value]int{} // distinct nodes that read a leaf
	first := map[*Value]*Node{} // a leaf's first reader
	for _, n := range o.Nodes {
		for i, v := range n.Inputs {
			if v.Producer != nil || slices.Contains(n.Inputs[:i], v) {
				continue
			}
			readers[v]++
			if first[v] == nil {
				first[v] = n
			}
		}
	}
	wide := func(v *Value) bool { return v.Producer == nil && readers[v] > DOTFanOut }

	// The clusters, by scope in order of first use ("" is the top level).
	var scopes []string
	lines := map[string][]string{}
	add := func(scope, line string) {
		if _, ok := lines[scope]; !ok {
			scopes = append(scopes, scope)
		}
		lines[scope] = append(lines[scope], line)
	}
	for _, k := range []Kind{Input, Weight, State} {
		for _, v := range g.OfKind(k) {
			label := fmt.Sprintf("%s %s\n%s%s", k, v.Name, v.DType, v.Shape)
			scope := ""
			if wide(v) {
				label += fmt.Sprintf("\n(read by %d nodes: not drawn)", readers[v])
			} else if n := first[v]; n != nil {
				scope = n.Scope
			}
			add(scope, fmt.Sprintf("v%d [shape=ellipse, label=%q];", v.ID, label))
		}
	}
	for _, n := range o.Nodes {
		label := o.Label(n)
		var named []string
		for _, v := range n.Inputs {
			if wide(v) && !slices.Contains(named, v.Name) {
				named = append(named, v.Name)
			}
		}
		if len(named) > 0 {
			label += "\nreads " + strings.Join(named, ", ")
		}
		style := ""
		if o.Style != nil {
			style = o.Style(n)
		}
		add(n.Scope, fmt.Sprintf("n%d [shape=box, label=%q%s];", n.ID, label, style))
	}

	ew.printf("digraph %q {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n", o.Name)
	if o.Title != "" {
		ew.printf("  label=%q;\n", o.Title)
	}
	for i, scope := range scopes {
		if scope == "" {
			for _, l := range lines[scope] {
				ew.printf("  %s\n", l)
			}
			continue
		}
		ew.printf("  subgraph cluster_%d {\n    label=%q;\n", i, scope)
		for _, l := range lines[scope] {
			ew.printf("    %s\n", l)
		}
		ew.printf("  }\n")
	}
	from := func(v *Value) string {
		if v.Producer != nil {
			return fmt.Sprintf("n%d", v.Producer.ID)
		}
		return fmt.Sprintf("v%d", v.ID)
	}
	for _, n := range o.Nodes {
		for _, v := range n.Inputs {
			if !wide(v) {
				ew.printf("  %s -> n%d [label=%q];\n", from(v), n.ID, o.EdgeLabel(v))
			}
		}
		for _, v := range n.Writes {
			ew.printf("  n%d -> v%d [style=dashed, color=red, label=\"writes\"];\n", n.ID, v.ID)
		}
	}
	for i, v := range g.Outputs {
		ew.printf("  out%d [shape=doublecircle, label=%q];\n", i, "out "+v.Name)
		ew.printf("  %s -> out%d [label=%q];\n", from(v), i, o.EdgeLabel(v))
	}
	ew.printf("}\n")
	return ew.err
}

// JSONValue is a value as the JSON dump writes it.
type JSONValue struct {
	ID       int    `json:"id"`
	Name     string `json:"name"`
	DType    DType  `json:"dtype"`
	Shape    []int  `json:"shape"`
	Kind     Kind   `json:"kind"`
	Producer *int   `json:"producer,omitempty"`
}

// JSONNode is a node as the JSON dump writes it.
type JSONNode struct {
	ID      int    `json:"id"`
	Op      string `json:"op"`
	Scope   string `json:"scope,omitempty"`
	Attrs   any    `json:"attrs,omitempty"`
	Inputs  []int  `json:"inputs"`
	Outputs []int  `json:"outputs"`
	Writes  []int  `json:"writes,omitempty"`
}

// JSONGraph is the whole JSON dump.
type JSONGraph struct {
	Name    string      `json:"name"`
	Values  []JSONValue `json:"values"`
	Nodes   []JSONNode  `json:"nodes"`
	Outputs []int       `json:"outputs"`
}

// ToJSON converts a graph to its JSON form.
func ToJSON(g *Graph) JSONGraph {
	ids := func(vs []*Value) []int {
		out := make([]int, len(vs))
		for i, v := range vs {
			out[i] = v.ID
		}
		return out
	}
	j := JSONGraph{Name: g.Name, Outputs: ids(g.Outputs)}
	for _, v := range g.Values {
		jv := JSONValue{ID: v.ID, Name: v.Name, DType: v.DType, Shape: append([]int{}, v.Shape...), Kind: v.Kind}
		if v.Producer != nil {
			p := v.Producer.ID
			jv.Producer = &p
		}
		j.Values = append(j.Values, jv)
	}
	for _, n := range g.Nodes {
		var attrs any = n.Attrs
		if n.Attrs != nil {
			if _, err := json.Marshal(n.Attrs); err != nil {
				// Attributes JSON cannot hold (a NaN factor) are written as text.
				attrs = AttrString(n.Attrs)
			}
		}
		j.Nodes = append(j.Nodes, JSONNode{ID: n.ID, Op: n.Op, Scope: n.Scope, Attrs: attrs, Inputs: ids(n.Inputs), Outputs: ids(n.Outputs), Writes: ids(n.Writes)})
	}
	return j
}

// WriteJSON writes the graph as indented JSON; field order is fixed, so dumps
// of the same graph diff clean.
func WriteJSON(w io.Writer, g *Graph) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(ToJSON(g))
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
