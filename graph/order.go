package graph

import (
	"container/heap"
	"fmt"
)

// Deps gives, for each node ID, the IDs of the nodes it must follow: the
// producers of its inputs, and for every State value it touches, the accesses
// that came before it in build order (a write follows every earlier read and
// write; a read follows the last earlier write). Build order is thus the
// program order of state accesses, and any schedule that honours Deps reads
// and writes state exactly as the model code said.
func (g *Graph) Deps() [][]int {
	deps := make([][]int, len(g.Nodes))
	type access struct {
		lastWrite int
		reads     []int // since lastWrite
	}
	state := map[*Value]*access{}
	add := func(n, d int) {
		if d < 0 || d == n {
			return
		}
		for _, x := range deps[n] {
			if x == d {
				return
			}
		}
		deps[n] = append(deps[n], d)
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v.Producer != nil {
				add(n.ID, v.Producer.ID)
			}
		}
		written := map[*Value]bool{}
		for _, w := range n.Writes {
			written[w] = true
		}
		for _, v := range n.Inputs {
			if v.Kind != State {
				continue
			}
			a := state[v]
			if a == nil {
				a = &access{lastWrite: -1}
				state[v] = a
			}
			add(n.ID, a.lastWrite)
			if written[v] {
				for _, r := range a.reads {
					add(n.ID, r)
				}
			}
		}
		for _, v := range n.Inputs {
			if v.Kind != State {
				continue
			}
			a := state[v]
			if written[v] {
				a.lastWrite, a.reads = n.ID, nil
			} else {
				a.reads = append(a.reads, n.ID)
			}
		}
	}
	return deps
}

// Order is a topological order of the nodes that honours Deps, taking the
// lowest node ID among the ready ones, so it is deterministic and keeps build
// order where it can. A cycle is an error naming a node on it.
func (g *Graph) Order() ([]*Node, error) {
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v.Producer == n {
				return nil, fmt.Errorf("graph %s: %s is on a dependency cycle: it reads its own output %s", g.Name, n, v)
			}
		}
	}
	deps := g.Deps()
	waiting := make([]int, len(g.Nodes))
	next := make([][]int, len(g.Nodes))
	for i, ds := range deps {
		waiting[i] = len(ds)
		for _, d := range ds {
			next[d] = append(next[d], i)
		}
	}
	ready := &intHeap{}
	for i, w := range waiting {
		if w == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]*Node, 0, len(g.Nodes))
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, g.Nodes[i])
		for _, j := range next[i] {
			if waiting[j]--; waiting[j] == 0 {
				heap.Push(ready, j)
			}
		}
	}
	if len(order) != len(g.Nodes) {
		for i, w := range waiting {
			if w > 0 {
				return nil, fmt.Errorf("graph %s: %s is on a dependency cycle", g.Name, g.Nodes[i])
			}
		}
	}
	return order, nil
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Validate checks a graph built or rewritten by anyone: values and nodes
// indexed by ID, each node's op known and its rule agreeing with the recorded
// outputs, Temps produced exactly once, writes only to State inputs, outputs
// part of the graph, and an order that exists. Errors name the node and scope.
func (g *Graph) Validate(lookup OpLookup) error {
	for i, v := range g.Values {
		if v == nil || v.ID != i {
			return fmt.Errorf("graph %s: value %d has ID mismatch", g.Name, i)
		}
		if v.Kind == Temp && v.Producer == nil {
			return fmt.Errorf("graph %s: temp %s has no producer", g.Name, v)
		}
		if v.Kind != Temp && v.Producer != nil {
			return fmt.Errorf("graph %s: %s %s is produced by %s", g.Name, v.Kind, v, v.Producer)
		}
	}
	has := func(v *Value) bool { return v != nil && v.ID >= 0 && v.ID < len(g.Values) && g.Values[v.ID] == v }
	for i, n := range g.Nodes {
		if n == nil || n.ID != i {
			return fmt.Errorf("graph %s: node %d has ID mismatch", g.Name, i)
		}
		op, ok := lookup(n.Op)
		if !ok {
			return fmt.Errorf("graph %s: %s: unknown op %q", g.Name, n, n.Op)
		}
		for j, v := range n.Inputs {
			if !has(v) {
				return fmt.Errorf("graph %s: %s: input %d is not in the graph", g.Name, n, j)
			}
		}
		sig, err := inferSafely(op, n.Attrs, n.Inputs)
		if err != nil {
			return fmt.Errorf("graph %s: %s: %w", g.Name, n, err)
		}
		if len(sig.Outputs) != len(n.Outputs) {
			return fmt.Errorf("graph %s: %s: rule gives %d outputs, node has %d", g.Name, n, len(sig.Outputs), len(n.Outputs))
		}
		for j, s := range sig.Outputs {
			o := n.Outputs[j]
			if !has(o) || o.Producer != n {
				return fmt.Errorf("graph %s: %s: output %d is not produced by it", g.Name, n, j)
			}
			if o.DType != s.DType || !o.Shape.Equal(s.Shape) {
				return fmt.Errorf("graph %s: %s: output %d is %s%s, the rule says %s", g.Name, n, j, o.DType, o.Shape, s)
			}
		}
		if len(sig.Writes) != len(n.Writes) {
			return fmt.Errorf("graph %s: %s: rule writes %d states, node %d", g.Name, n, len(sig.Writes), len(n.Writes))
		}
		for j, wi := range sig.Writes {
			if wi < 0 || wi >= len(n.Inputs) || n.Inputs[wi] != n.Writes[j] || n.Writes[j].Kind != State {
				return fmt.Errorf("graph %s: %s: write %d is not the state input the rule names", g.Name, n, j)
			}
		}
	}
	produced := make([]int, len(g.Values))
	for _, n := range g.Nodes {
		if n == nil {
			continue
		}
		for _, o := range n.Outputs {
			if has(o) {
				produced[o.ID]++
			}
		}
	}
	for _, v := range g.Values {
		if v.Kind == Temp && produced[v.ID] != 1 {
			return fmt.Errorf("graph %s: temp %s is an output of %d nodes, want exactly one (its producer)", g.Name, v, produced[v.ID])
		}
	}
	for _, v := range g.Outputs {
		if !has(v) {
			return fmt.Errorf("graph %s: output %s is not in the graph", g.Name, v)
		}
	}
	_, err := g.Order()
	return err
}
