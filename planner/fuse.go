package planner

import (
	"fmt"
	"sort"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Rule is one fusion rule: it finds places in a graph where a fused op can
// stand for a group of nodes. Every fused op has a Decompose, so a fused plan
// is checked against the unfused one on the same inputs.
type Rule interface {
	// Name is the rule's name in reports and in Options.Skip.
	Name() string
	// Match lists the replacements the rule makes in g; no node may be in
	// two of them.
	Match(g *graph.Graph, u *Uses) []Replacement
}

// Replacement is one fused node in place of some nodes of a graph.
type Replacement struct {
	// Members are the nodes replaced.
	Members []*graph.Node
	// Op, Attrs and Inputs make the fused node; Inputs are values of the graph.
	Op     *ops.Def
	Attrs  any
	Inputs []*graph.Value
	// Outputs are the members' values the fused node's outputs stand for, in
	// the op's output order; every other output of a member must be read by
	// members only.
	Outputs []*graph.Value
	// At is the member at whose place in build order the fused node goes.
	At *graph.Node
	// Scope, when not empty, is the fused node's scope; else the longest
	// scope its members share.
	Scope string
}

// Fuse runs the fusion rules in order, each over the graph the previous one
// left; a rule's replacements become fused nodes of a new graph.
type Fuse struct {
	Rules []Rule
	// Off says fusion is turned off (Options.Fuse false); the pass then only
	// reports so.
	Off bool
}

// Name is "fuse".
func (Fuse) Name() string { return "fuse" }

// Run replaces p.Graph by its fused form and records each fusion.
func (f Fuse) Run(p *Planned) (string, error) {
	if f.Off {
		return "off", nil
	}
	before := len(p.Graph.Nodes)
	var parts []string
	for _, r := range f.Rules {
		reps, err := match(r, p.Graph)
		if err != nil {
			return "", err
		}
		if len(reps) == 0 {
			continue
		}
		absorbed := 0
		for _, rep := range reps {
			absorbed += len(rep.Members)
		}
		if err := rewrite(p, r.Name(), reps); err != nil {
			return "", fmt.Errorf("rule %s: %w", r.Name(), err)
		}
		parts = append(parts, fmt.Sprintf("%s %d (%d nodes)", r.Name(), len(reps), absorbed))
	}
	s := fmt.Sprintf("%d -> %d nodes", before, len(p.Graph.Nodes))
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s, nil
}

// match runs one rule, turning a panic inside it into an error.
func match(r Rule, g *graph.Graph) (reps []Replacement, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rule %s panicked: %v", r.Name(), p)
		}
	}()
	return r.Match(g, NewUses(g)), nil
}

// Uses indexes who reads each value of a graph.
type Uses struct {
	readers [][]*graph.Node // by value ID, with repeats for a node reading twice
	output  []bool
}

// NewUses indexes g's readers.
func NewUses(g *graph.Graph) *Uses {
	u := &Uses{readers: make([][]*graph.Node, len(g.Values)), output: make([]bool, len(g.Values))}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			u.readers[v.ID] = append(u.readers[v.ID], n)
		}
	}
	for _, v := range g.Outputs {
		u.output[v.ID] = true
	}
	return u
}

// single reports whether v is read exactly once, by a node, and is not a
// graph output; it gives that reader.
func (u *Uses) single(v *graph.Value) (*graph.Node, bool) {
	if u.output[v.ID] || len(u.readers[v.ID]) != 1 {
		return nil, false
	}
	return u.readers[v.ID][0], true
}

// eligible checks a replacement against the rules every fusion keeps
// (ggml's, extended to trees): an output of a member that the fused node
// does not give is read only by members and is not a graph output; the
// fused node's outputs are read only after At (or by members); and no member is moved
// across a node that writes a state it reads (or reads a state it writes).
func eligible(g *graph.Graph, u *Uses, r *Replacement) bool {
	in := map[*graph.Node]bool{}
	for _, m := range r.Members {
		in[m] = true
	}
	given := map[*graph.Value]bool{}
	for _, v := range r.Outputs {
		given[v] = true
	}
	for _, m := range r.Members {
		for _, v := range m.Outputs {
			if given[v] {
				// a member may read a value the fused node gives (it is
				// computed inside it: moe_inject_norm's new hyper-state)
				for _, rd := range u.readers[v.ID] {
					if !in[rd] && rd.ID <= r.At.ID {
						return false
					}
				}
				continue
			}
			if u.output[v.ID] {
				return false
			}
			for _, rd := range u.readers[v.ID] {
				if !in[rd] {
					return false
				}
			}
		}
	}
	for _, m := range r.Members {
		if m == r.At {
			continue
		}
		lo, hi := m.ID, r.At.ID
		if lo > hi {
			lo, hi = hi, lo
		}
		for _, v := range m.Inputs {
			if v.Kind != graph.State {
				continue
			}
			writes := false
			for _, w := range m.Writes {
				writes = writes || w == v
			}
			for _, n := range g.Nodes[lo+1 : hi] {
				if in[n] {
					continue
				}
				for _, x := range n.Inputs {
					if x != v {
						continue
					}
					for _, w := range n.Writes {
						if w == v {
							return false
						}
					}
					if writes {
						return false
					}
				}
			}
		}
	}
	return true
}

// rewrite builds the graph with each replacement's fused node in place of
// its members and makes it p.Graph, carrying names, scopes and origins.
func rewrite(p *Planned, rule string, reps []Replacement) error {
	g := p.Graph
	repOf := map[*graph.Node]*Replacement{}
	for i := range reps {
		r := &reps[i]
		for _, m := range r.Members {
			if repOf[m] != nil {
				return fmt.Errorf("%s is in two replacements", m)
			}
			repOf[m] = r
		}
		if repOf[r.At] != r {
			return fmt.Errorf("the place of a %s fusion, %s, is not a member", r.Op.Op, r.At)
		}
	}
	b := graph.NewBuilder(g.Name)
	vmap := make([]*graph.Value, len(g.Values))
	for _, v := range g.Values {
		switch v.Kind {
		case graph.Input:
			vmap[v.ID] = b.Input(v.Name, v.DType, v.Shape...)
		case graph.Weight:
			vmap[v.ID] = b.Weight(v.Name, v.DType, v.Shape...)
		case graph.State:
			vmap[v.ID] = b.State(v.Name, v.DType, v.Shape...)
		}
	}
	mapped := func(vs []*graph.Value) ([]*graph.Value, error) {
		out := make([]*graph.Value, len(vs))
		for i, v := range vs {
			if out[i] = vmap[v.ID]; out[i] == nil {
				return nil, fmt.Errorf("value %s is used before it is made", v)
			}
		}
		return out, nil
	}
	type made struct {
		origin []*graph.Node
		fusion *Fusion
	}
	var emitted []made
	srcOf := map[*graph.Value]*graph.Value{}
	emit := func(op graph.Op, attrs any, scope string, in, olds []*graph.Value) error {
		mi, err := mapped(in)
		if err != nil {
			return err
		}
		pop := func() {}
		if scope != "" {
			pop = b.Push("%s", scope)
		}
		outs := b.Apply(op, attrs, len(olds), mi...)
		pop()
		if err := b.Err(); err != nil {
			return err
		}
		for i, o := range olds {
			vmap[o.ID] = outs[i]
			srcOf[outs[i]] = p.srcOf[o]
			if o.Name != fmt.Sprintf("t%d", o.ID) {
				b.Label(outs[i], o.Name)
			}
		}
		return nil
	}
	for _, n := range g.Nodes {
		r := repOf[n]
		if r == nil {
			def, ok := ops.Lookup(n.Op)
			if !ok {
				return fmt.Errorf("%s: unknown op", n)
			}
			if err := emit(def, n.Attrs, n.Scope, n.Inputs, n.Outputs); err != nil {
				return err
			}
			emitted = append(emitted, made{origin: p.origin[n], fusion: p.Fusions[n]})
			continue
		}
		if n != r.At {
			continue
		}
		scope := r.Scope
		if scope == "" {
			scope = commonScope(r.Members)
		}
		if err := emit(r.Op, r.Attrs, scope, r.Inputs, r.Outputs); err != nil {
			return fmt.Errorf("fusing %d nodes at %s into %s: %w", len(r.Members), n, r.Op.Op, err)
		}
		var origin []*graph.Node
		for _, m := range r.Members {
			origin = append(origin, p.origin[m]...)
		}
		sort.Slice(origin, func(i, j int) bool { return origin[i].ID < origin[j].ID })
		emitted = append(emitted, made{origin: origin, fusion: &Fusion{Rule: rule, Members: origin}})
	}
	outs, err := mapped(g.Outputs)
	if err != nil {
		return err
	}
	b.Output(outs...)
	ng, err := b.Graph()
	if err != nil {
		return err
	}
	if len(ng.Nodes) != len(emitted) {
		return fmt.Errorf("rewrite made %d nodes, expected %d", len(ng.Nodes), len(emitted))
	}
	origin := map[*graph.Node][]*graph.Node{}
	fusions := map[*graph.Node]*Fusion{}
	for i, n := range ng.Nodes {
		origin[n] = emitted[i].origin
		if f := emitted[i].fusion; f != nil {
			fusions[n] = f
		}
	}
	leafOf := map[*graph.Value]*graph.Value{}
	for src, cur := range p.leafOf {
		leafOf[src] = vmap[cur.ID]
	}
	p.Graph, p.origin, p.Fusions, p.leafOf, p.srcOf = ng, origin, fusions, leafOf, srcOf
	return nil
}

// commonScope is the longest scope prefix the nodes share.
func commonScope(ns []*graph.Node) string {
	if len(ns) == 0 {
		return ""
	}
	parts := strings.Split(ns[0].Scope, " / ")
	for _, n := range ns[1:] {
		q := strings.Split(n.Scope, " / ")
		k := 0
		for k < len(parts) && k < len(q) && parts[k] == q[k] {
			k++
		}
		parts = parts[:k]
	}
	return strings.Join(parts, " / ")
}
