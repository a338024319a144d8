package graph

import (
	"encoding/json"
	"fmt"
	"io"
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

// WriteDOT writes the graph for Graphviz: a box per node labelled with op,
// scope and attributes; an ellipse per input, weight and state; edges labelled
// with shapes; dashed red edges for state writes.
func WriteDOT(w io.Writer, g *Graph) error {
	ew := &errWriter{w: w}
	ew.printf("digraph %q {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n", g.Name)
	for _, k := range []Kind{Input, Weight, State} {
		for _, v := range g.OfKind(k) {
			ew.printf("  v%d [shape=ellipse, label=%q];\n", v.ID, fmt.Sprintf("%s %s\n%s%s", k, v.Name, v.DType, v.Shape))
		}
	}
	for _, n := range g.Nodes {
		label := n.Op
		if a := AttrString(n.Attrs); a != "" {
			label += "\n" + a
		}
		if n.Scope != "" {
			label += "\n@ " + n.Scope
		}
		ew.printf("  n%d [shape=box, label=%q];\n", n.ID, label)
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			from := fmt.Sprintf("v%d", v.ID)
			if v.Producer != nil {
				from = fmt.Sprintf("n%d", v.Producer.ID)
			}
			ew.printf("  %s -> n%d [label=%q];\n", from, n.ID, v.DType.String()+v.Shape.String())
		}
		for _, v := range n.Writes {
			ew.printf("  n%d -> v%d [style=dashed, color=red, label=\"writes\"];\n", n.ID, v.ID)
		}
	}
	for i, v := range g.Outputs {
		ew.printf("  out%d [shape=doublecircle, label=%q];\n", i, "out "+v.Name)
		from := fmt.Sprintf("v%d", v.ID)
		if v.Producer != nil {
			from = fmt.Sprintf("n%d", v.Producer.ID)
		}
		ew.printf("  %s -> out%d [label=%q];\n", from, i, v.DType.String()+v.Shape.String())
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
