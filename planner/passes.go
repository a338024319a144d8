package planner

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Validate is the first pass: the graph is well formed (graph.Validate with
// the op registry) and every temporary has a fixed size.
type Validate struct{}

// Name is "validate".
func (Validate) Name() string { return "validate" }

// Run checks p.Graph.
func (Validate) Run(p *Planned) (string, error) {
	g := p.Graph
	if err := g.Validate(ops.LookupOp); err != nil {
		return "", err
	}
	for _, v := range g.Values {
		if v.Kind == graph.Temp && v.Bytes() < 0 {
			return "", fmt.Errorf("temp %s made by %s has no fixed size", v, v.Producer)
		}
	}
	counts := map[graph.Kind]int{}
	for _, v := range g.Values {
		counts[v.Kind]++
	}
	return fmt.Sprintf("ok: %d nodes, %d values (%d inputs, %d weights, %d states, %d temps), %d outputs",
		len(g.Nodes), len(g.Values), counts[graph.Input], counts[graph.Weight], counts[graph.State], counts[graph.Temp], len(g.Outputs)), nil
}

// Schedule orders the nodes: a topological order that keeps every state
// access in build order (graph.Order), deterministic, build order where it
// can.
type Schedule struct{}

// Name is "schedule".
func (Schedule) Name() string { return "schedule" }

// Run sets p.Schedule.
func (Schedule) Run(p *Planned) (string, error) {
	order, err := p.Graph.Order()
	if err != nil {
		return "", err
	}
	p.Schedule = order
	moved := 0
	for i, n := range order {
		if n.ID != i {
			moved++
		}
	}
	return fmt.Sprintf("%d launches, %d out of build order", len(order), moved), nil
}
