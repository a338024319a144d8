package planner

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// TemplateRule fuses the exact decomposition of a fused op. The chain is
// found by structure: the op's Decompose, run once on example inputs, gives a
// template whose last node is the root; for a candidate root in the graph the
// template is unified with the graph backwards from it (same ops, same input
// order and output index, one graph node per template node), which binds the
// template's inputs to graph values. The attributes are then read off the
// matched nodes and the decomposition is rebuilt with the real inputs and
// attributes on a scratch builder and unified again, attributes included: a
// match is exactly what Decompose would have built.
type TemplateRule struct {
	// RuleName names the rule (the fused op's name when empty).
	RuleName string
	Op       *ops.Def
	// Variants are example inputs of each form of the op (norm_rope with and
	// without a scale), with the attributes to build the template with.
	Variants []Example
	// Attrs reads the fused op's attributes off a match.
	Attrs func(m *Match) (any, bool)

	once      sync.Once
	templates []*template
	initErr   error
}

// Example is one set of example inputs of a fused op.
type Example struct {
	Inputs []ExampleInput
	Attrs  any
}

// ExampleInput is one example input: its kind, dtype and shape.
type ExampleInput struct {
	Kind  graph.Kind
	DType graph.DType
	Shape graph.Shape
}

// Match is a template unified with a graph.
type Match struct {
	t     *template
	nodes map[*graph.Node]*graph.Node // template node -> graph node
	used  map[*graph.Node]bool
	bind  []*graph.Value
	attrs bool // compare attributes too
}

// First is the graph node matched to the first template node of op, in
// template build order, or nil.
func (m *Match) First(op string) *graph.Node {
	for _, tn := range m.t.g.Nodes {
		if tn.Op == op {
			return m.nodes[tn]
		}
	}
	return nil
}

// template is a decomposition built on example inputs.
type template struct {
	g      *graph.Graph
	leaves []*graph.Value
	outs   []*graph.Value
	root   *graph.Node
}

// buildTemplate runs d's Decompose on leaves of the given specs; a panic or
// builder error is an error.
func buildTemplate(d *ops.Def, attrs any, in []ExampleInput) (t *template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decompose of %s panicked: %v", d.Op, r)
		}
	}()
	b := graph.NewBuilder("template " + d.Op)
	t = &template{}
	for i, e := range in {
		name := fmt.Sprintf("in%d", i)
		var v *graph.Value
		switch e.Kind {
		case graph.State:
			v = b.State(name, e.DType, e.Shape...)
		case graph.Weight:
			v = b.Weight(name, e.DType, e.Shape...)
		default:
			v = b.Input(name, e.DType, e.Shape...)
		}
		t.leaves = append(t.leaves, v)
	}
	t.outs = d.Decompose(b, attrs, t.leaves)
	g, err := b.Graph()
	if err != nil {
		return nil, err
	}
	t.g = g
	t.root = g.Nodes[len(g.Nodes)-1]
	// every node must feed the root, so matching from it finds them all
	seen := map[*graph.Node]bool{}
	var walk func(n *graph.Node)
	walk = func(n *graph.Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, v := range n.Inputs {
			if v.Producer != nil {
				walk(v.Producer)
			}
		}
	}
	walk(t.root)
	if len(seen) != len(g.Nodes) {
		return nil, fmt.Errorf("decompose of %s: %d of %d nodes do not feed the last one", d.Op, len(g.Nodes)-len(seen), len(g.Nodes))
	}
	for _, o := range t.outs {
		if o.Producer == nil {
			return nil, fmt.Errorf("decompose of %s returns an input", d.Op)
		}
	}
	return t, nil
}

// Name gives the rule's name.
func (r *TemplateRule) Name() string {
	if r.RuleName != "" {
		return r.RuleName
	}
	return r.Op.Op
}

// init builds the templates once; an error is a bug in the rule's examples.
func (r *TemplateRule) init() error {
	r.once.Do(func() {
		for _, ex := range r.Variants {
			t, err := buildTemplate(r.Op, ex.Attrs, ex.Inputs)
			if err != nil {
				r.initErr = fmt.Errorf("rule %s: %w", r.Name(), err)
				return
			}
			r.templates = append(r.templates, t)
		}
	})
	return r.initErr
}

// Match finds every eligible instance, trying roots from the end of the
// graph backwards.
func (r *TemplateRule) Match(g *graph.Graph, u *Uses) []Replacement {
	if err := r.init(); err != nil {
		panic(err) // a bug in the rule's examples; Fuse turns it into an error
	}
	claimed := map[*graph.Node]bool{}
	var reps []Replacement
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if claimed[n] {
			continue
		}
		for _, t := range r.templates {
			rep, ok := r.try(g, u, t, n, claimed)
			if !ok {
				continue
			}
			for _, m := range rep.Members {
				claimed[m] = true
			}
			reps = append(reps, rep)
			break
		}
	}
	return reps
}

// try unifies template t at root n and checks the match.
func (r *TemplateRule) try(g *graph.Graph, u *Uses, t *template, n *graph.Node, claimed map[*graph.Node]bool) (Replacement, bool) {
	if n.Op != t.root.Op {
		return Replacement{}, false
	}
	m := unify(t, n, false)
	if m == nil {
		return Replacement{}, false
	}
	attrs, ok := r.Attrs(m)
	if !ok {
		return Replacement{}, false
	}
	// rebuild the decomposition on the real inputs and attributes
	ex := make([]ExampleInput, len(m.bind))
	for i, v := range m.bind {
		k := v.Kind
		if k == graph.Temp {
			k = graph.Input
		}
		ex[i] = ExampleInput{Kind: k, DType: v.DType, Shape: v.Shape}
	}
	exact, err := buildTemplate(r.Op, attrs, ex)
	if err != nil || len(exact.g.Nodes) != len(t.g.Nodes) {
		return Replacement{}, false
	}
	m2 := unify(exact, n, true)
	if m2 == nil {
		return Replacement{}, false
	}
	for i := range m.bind {
		if m.bind[i] != m2.bind[i] {
			return Replacement{}, false
		}
	}
	rep := Replacement{Op: r.Op, Attrs: attrs, Inputs: m2.bind, At: n}
	for _, tn := range exact.g.Nodes {
		gn := m2.nodes[tn]
		if claimed[gn] {
			return Replacement{}, false
		}
		rep.Members = append(rep.Members, gn)
		if gn.ID > rep.At.ID {
			rep.At = gn
		}
	}
	// An input must come from outside the match: a graph that feeds a
	// member's own result to the template's input (slerp(t, t) after the
	// product that makes t) has the same shape but not the same meaning.
	made := map[*graph.Value]bool{}
	for _, gn := range rep.Members {
		for _, v := range gn.Outputs {
			made[v] = true
		}
	}
	for _, v := range rep.Inputs {
		if made[v] {
			return Replacement{}, false
		}
	}
	for _, o := range exact.outs {
		gn := m2.nodes[o.Producer]
		rep.Outputs = append(rep.Outputs, gn.Outputs[outIndex(o)])
	}
	// the fused node must make what the members made
	sig, err := r.Op.Infer(attrs, rep.Inputs)
	if err != nil || len(sig.Outputs) != len(rep.Outputs) {
		return Replacement{}, false
	}
	for i, s := range sig.Outputs {
		if o := rep.Outputs[i]; o.DType != s.DType || !o.Shape.Equal(s.Shape) {
			return Replacement{}, false
		}
	}
	if !eligible(g, u, &rep) {
		return Replacement{}, false
	}
	return rep, true
}

func outIndex(v *graph.Value) int {
	for i, o := range v.Producer.Outputs {
		if o == v {
			return i
		}
	}
	return -1
}

// unify matches template t to the graph backwards from root n; nil when the
// structure (or, with attrs, an attribute) differs.
func unify(t *template, n *graph.Node, attrs bool) *Match {
	m := &Match{t: t, nodes: map[*graph.Node]*graph.Node{}, used: map[*graph.Node]bool{}, bind: make([]*graph.Value, len(t.leaves)), attrs: attrs}
	if !m.node(t.root, n) {
		return nil
	}
	for _, v := range m.bind {
		if v == nil {
			return nil
		}
	}
	return m
}

func (m *Match) node(tn, gn *graph.Node) bool {
	if got, ok := m.nodes[tn]; ok {
		return got == gn
	}
	if m.used[gn] || tn.Op != gn.Op || len(tn.Inputs) != len(gn.Inputs) || len(tn.Outputs) != len(gn.Outputs) || len(tn.Writes) != len(gn.Writes) {
		return false
	}
	if m.attrs && !reflect.DeepEqual(tn.Attrs, gn.Attrs) {
		return false
	}
	m.nodes[tn], m.used[gn] = gn, true
	for i, tv := range tn.Inputs {
		if !m.value(tv, gn.Inputs[i]) {
			return false
		}
	}
	return true
}

func (m *Match) value(tv, gv *graph.Value) bool {
	if tv.Producer == nil {
		i := tv.ID // leaves are declared first, so a leaf's ID is its input index
		if m.bind[i] != nil {
			return m.bind[i] == gv
		}
		m.bind[i] = gv
		return true
	}
	if gv.Producer == nil || outIndex(tv) != outIndex(gv) {
		return false
	}
	return m.node(tv.Producer, gv.Producer)
}
