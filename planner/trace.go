package planner

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Trace instruments a plan for debugging (reel trace): the outputs of the
// nodes of the planned graph whose names Match accepts stay in the arena
// until the plan has run, each an output edge of its own kept apart from
// the graph's outputs (Planned.Traced, Lowered.Traced), so the caller that
// reads Outputs sees the plan it always did. With fusion on, the nodes are
// the launches: a fused node's values are named after the members' values
// they stand for. Kernels and their order are those of the plan without
// the trace: only the arena's layout changes, so the numbers do not.
//
// Observe, when set, is called by whoever runs the plan (capture.Engine)
// after each run, once the traced values can be read.
type Trace struct {
	// Match says whether to keep the value of a name (Planned.TraceName);
	// nil keeps every one.
	Match func(name string) bool
	// Observe receives the plan after each run; an error fails the run.
	Observe func(pl *Lowered) error
}

// TracePoint is one value an instrumented plan keeps.
type TracePoint struct {
	// Name is the path of the value of Source it stands for
	// (graph.Graph.Paths: "layer 3 / attn / attn_out"), the same with
	// fusion on or off.
	Name string
	// Node is the node of Graph that makes it; Value is that node's output.
	Node  *graph.Node
	Value *graph.Value
}

// TracePass is the trace pass: it lists the outputs of scheduled nodes
// whose names Match accepts (every one when nil) as Planned.Traced; the
// memory pass then keeps them to the end of the run. It needs p.Schedule.
type TracePass struct {
	Match func(name string) bool
}

// Name is "trace".
func (TracePass) Name() string { return "trace" }

// Run sets p.Traced.
func (t TracePass) Run(p *Planned) (string, error) {
	if len(p.Schedule) != len(p.Graph.Nodes) {
		return "", fmt.Errorf("the schedule has %d nodes, the graph %d: schedule first", len(p.Schedule), len(p.Graph.Nodes))
	}
	paths := p.Source.Paths()
	p.Traced = nil
	var bytes int
	for _, n := range p.Schedule {
		for _, v := range n.Outputs {
			src := p.SourceValue(v)
			if src == nil {
				return "", fmt.Errorf("%s: output %s stands for no value of the source graph", n, v)
			}
			name := paths[src.ID]
			if t.Match != nil && !t.Match(name) {
				continue
			}
			p.Traced = append(p.Traced, TracePoint{Name: name, Node: n, Value: v})
			bytes += v.Bytes()
		}
	}
	return fmt.Sprintf("%d values kept (%d bytes)", len(p.Traced), bytes), nil
}
