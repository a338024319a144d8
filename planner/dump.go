package planner

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/reel-runtime/reel/graph"
)

// The passes `reel dump --pass` shows.
const (
	PassGraph = "graph" // the graph as the model built it
	PassFused = "fused" // after fusion
	PassPlan  = "plan"  // the launches with their fused members and arena offsets
)

// DumpPasses lists the passes Dump takes, for flag help.
func DumpPasses() []string { return []string{PassGraph, PassFused, PassPlan} }

// DumpFormats lists the formats Dump takes.
func DumpFormats() []string { return []string{"text", "dot", "json"} }

// Dump writes g after a pass ("graph", "fused" or "plan") in a format
// ("text", "dot" or "json"), planning it with opts when the pass needs it:
// what `reel dump --pass P --format F` prints.
func Dump(w io.Writer, g *graph.Graph, pass, format string, opts Options) error {
	if pass == PassGraph {
		switch format {
		case "text":
			return graph.WriteText(w, g)
		case "dot":
			return graph.WriteDOT(w, g)
		case "json":
			return graph.WriteJSON(w, g)
		}
		return fmt.Errorf("unknown dump format %q: want text, dot or json", format)
	}
	if pass != PassFused && pass != PassPlan {
		return fmt.Errorf("unknown pass %q: want graph, fused or plan", pass)
	}
	p, _, err := Plan(g, opts)
	if err != nil {
		return err
	}
	if pass == PassFused {
		return Dump(w, p.Graph, PassGraph, format, opts)
	}
	switch format {
	case "text":
		return WriteText(w, p)
	case "dot":
		return WriteDOT(w, p)
	case "json":
		return WriteJSON(w, p)
	}
	return fmt.Errorf("unknown dump format %q: want text, dot or json", format)
}

// WriteStats writes what `reel dump --stats` prints: the report's pass lines,
// nodes, launches, arena bytes, temporaries' bytes and fusions by rule.
func WriteStats(w io.Writer, r Report) error {
	_, err := io.WriteString(w, r.String())
	return err
}

// JSONBuffer is one buffer of a launch in the JSON plan dump.
type JSONBuffer struct {
	Value int    `json:"value"`
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	// Offset and Bytes place a temporary in the arena.
	Offset *int `json:"offset,omitempty"`
	Bytes  int  `json:"bytes,omitempty"`
	// InPlaceOf names the input a temporary reuses.
	InPlaceOf *int `json:"in_place_of,omitempty"`
}

// JSONMember is one source node a launch stands for.
type JSONMember struct {
	Node  int    `json:"node"`
	Op    string `json:"op"`
	Scope string `json:"scope,omitempty"`
}

// JSONLaunch is one launch of the JSON plan dump.
type JSONLaunch struct {
	Step    int          `json:"step"`
	Node    int          `json:"node"`
	Op      string       `json:"op"`
	Scope   string       `json:"scope,omitempty"`
	Attrs   any          `json:"attrs,omitempty"`
	Rule    string       `json:"rule,omitempty"`
	Members []JSONMember `json:"members,omitempty"`
	Inputs  []JSONBuffer `json:"inputs"`
	Outputs []JSONBuffer `json:"outputs"`
	Writes  []int        `json:"writes,omitempty"`
}

// JSONPlan is the whole JSON plan dump.
type JSONPlan struct {
	Graph      string       `json:"graph"`
	ArenaBytes int          `json:"arena_bytes"`
	TempBytes  int          `json:"temp_bytes"`
	Launches   []JSONLaunch `json:"launches"`
	Outputs    []int        `json:"outputs"`
}

func (p *Planned) jsonBuffer(v *graph.Value) JSONBuffer {
	b := JSONBuffer{Value: v.ID, Name: v.Name, Kind: v.Kind.String(), DType: v.DType.String(), Shape: append([]int{}, v.Shape...)}
	if a, ok := p.Alloc(v); ok {
		off := a.Offset
		b.Offset, b.Bytes = &off, a.Bytes
		if a.Alias != nil {
			id := a.Alias.ID
			b.InPlaceOf = &id
		}
	}
	return b
}

// ToJSON converts a plan to its JSON form.
func ToJSON(p *Planned) JSONPlan {
	j := JSONPlan{Graph: p.Graph.Name, ArenaBytes: p.ArenaBytes, TempBytes: p.TempBytes}
	for i, n := range p.Schedule {
		l := JSONLaunch{Step: i, Node: n.ID, Op: n.Op, Scope: n.Scope, Attrs: n.Attrs}
		if f := p.Fusions[n]; f != nil {
			l.Rule = f.Rule
			for _, m := range f.Members {
				l.Members = append(l.Members, JSONMember{Node: m.ID, Op: m.Op, Scope: m.Scope})
			}
		}
		for _, v := range n.Inputs {
			l.Inputs = append(l.Inputs, p.jsonBuffer(v))
		}
		l.Outputs = []JSONBuffer{}
		for _, v := range n.Outputs {
			l.Outputs = append(l.Outputs, p.jsonBuffer(v))
		}
		for _, v := range n.Writes {
			l.Writes = append(l.Writes, v.ID)
		}
		j.Launches = append(j.Launches, l)
	}
	for _, v := range p.Graph.Outputs {
		j.Outputs = append(j.Outputs, v.ID)
	}
	return j
}

// WriteJSON writes the plan as indented JSON.
func WriteJSON(w io.Writer, p *Planned) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(ToJSON(p))
}

// bufString writes a value as the text plan shows it: %id name:dtype[shape],
// with its arena range for a temporary.
func (p *Planned) bufString(v *graph.Value) string {
	s := fmt.Sprintf("%%%d %s", v.ID, v)
	if a, ok := p.Alloc(v); ok {
		s += fmt.Sprintf(" @%d+%d", a.Offset, a.Bytes)
		if a.Alias != nil {
			s += fmt.Sprintf(" (in place of %%%d)", a.Alias.ID)
		}
	} else {
		s += " " + v.Kind.String()
	}
	return s
}

// WriteText writes the plan: a header with the arena and temporaries'
// bytes, then one launch a line in schedule order (op, outputs with their
// arena ranges, inputs, state writes, attributes, scope), each fused launch
// followed by the source nodes it stands for.
func WriteText(w io.Writer, p *Planned) error {
	ew := &errWriter{w: w}
	ew.printf("plan %s: %d launches for %d nodes, arena %d bytes, temporaries %d bytes\n",
		p.Graph.Name, len(p.Schedule), len(p.Source.Nodes), p.ArenaBytes, p.TempBytes)
	for i, n := range p.Schedule {
		outs := make([]string, len(n.Outputs))
		for j, v := range n.Outputs {
			outs[j] = p.bufString(v)
		}
		ins := make([]string, len(n.Inputs))
		for j, v := range n.Inputs {
			ins[j] = p.bufString(v)
		}
		line := fmt.Sprintf("  %4d %-18s [%s] = (%s)", i, n.Op, strings.Join(outs, ", "), strings.Join(ins, ", "))
		if len(n.Writes) > 0 {
			ws := make([]string, len(n.Writes))
			for j, v := range n.Writes {
				ws[j] = fmt.Sprintf("%%%d", v.ID)
			}
			line += " writes " + strings.Join(ws, ", ")
		}
		if a := graph.AttrString(n.Attrs); a != "" {
			line += " " + a
		}
		if n.Scope != "" {
			line += "  @ " + n.Scope
		}
		ew.printf("%s\n", line)
		if f := p.Fusions[n]; f != nil {
			ms := make([]string, len(f.Members))
			for j, m := range f.Members {
				ms[j] = fmt.Sprintf("#%d %s", m.ID, m.Op)
			}
			ew.printf("       %s fuses %s\n", f.Rule, strings.Join(ms, ", "))
		}
	}
	outs := make([]string, len(p.Graph.Outputs))
	for i, v := range p.Graph.Outputs {
		outs[i] = p.bufString(v)
	}
	ew.printf("  outputs: %s\n", strings.Join(outs, ", "))
	return ew.err
}

// WriteDOT writes the plan for Graphviz as graph.WriteDOT draws a graph
// (clusters per scope, no edges from a leaf nearly every launch reads): a
// box per launch (step, op, rule and members; fused launches filled), an
// ellipse per input, weight and state, edges labelled with the value and
// its arena range, dashed red edges for state writes.
func WriteDOT(w io.Writer, p *Planned) error {
	index := make(map[*graph.Node]int, len(p.Schedule))
	for i, n := range p.Schedule {
		index[n] = i
	}
	return graph.WriteDOTWith(w, p.Graph, graph.DOTOptions{
		Name:  "plan " + p.Graph.Name,
		Title: fmt.Sprintf("arena %d bytes, temporaries %d bytes", p.ArenaBytes, p.TempBytes),
		Nodes: p.Schedule,
		Label: func(n *graph.Node) string {
			label := fmt.Sprintf("%d: %s", index[n], n.Op)
			if f := p.Fusions[n]; f != nil {
				ops := make([]string, len(f.Members))
				for j, m := range f.Members {
					ops[j] = m.Op
				}
				label += "\n" + f.Rule + ": " + strings.Join(ops, " ")
			}
			return label
		},
		Style: func(n *graph.Node) string {
			if p.Fusions[n] != nil {
				return ", style=filled, fillcolor=lightblue"
			}
			return ""
		},
		EdgeLabel: func(v *graph.Value) string {
			s := v.Name + " " + v.DType.String() + v.Shape.String()
			if a, ok := p.Alloc(v); ok {
				s += fmt.Sprintf("\n@%d+%d", a.Offset, a.Bytes)
			}
			return s
		},
	})
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
