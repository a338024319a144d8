package planner

import (
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Rule names, as reports print them and Options.Skip takes them.
const (
	RuleMatMulSwiGLU = "matmul_swiglu"
	RuleNormRopeKV   = "norm_rope_kv"
	RuleSlerp        = "slerp"
	RuleGatedNorm    = "gated_norm"
	RuleNormRope     = "norm_rope"
	RuleSwiGLU       = "swiglu"
	RuleMix          = "mix"
	RuleGroupMatMul  = "grouped_matmul"
	RuleChain        = "elementwise_chain"
)

// Rules gives the fusion rules in the order they run, leaving out those
// named in skip. Larger patterns go first, so that a SwiGLU whose gate and
// up projections share an input fuses with them rather than alone, and the
// generic elementwise chains take only what no other rule took.
func Rules(skip []string) []Rule {
	f32 := func(shape ...int) ExampleInput {
		return ExampleInput{Kind: graph.Input, DType: graph.F32, Shape: shape}
	}
	w := func(shape ...int) ExampleInput {
		return ExampleInput{Kind: graph.Weight, DType: graph.F32, Shape: shape}
	}
	call := ExampleInput{Kind: graph.Input, DType: graph.I32, Shape: graph.Shape{ops.CallLen}}
	slot := ExampleInput{Kind: graph.State, DType: graph.F32, Shape: graph.Shape{graph.Dyn, 8}}
	eps := ops.EpsAttrs{Eps: 1e-6}
	nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: 4, Rotary: 4, Theta: 1e4}, Eps: 1e-6}
	nrkv := ops.NormRopeKVAttrs{NormRope: nr}
	lastEps := func(m *Match) (any, bool) {
		if a, ok := attrsOf[ops.NormAttrs](m.t.root, m); ok && a.Group == 0 {
			return ops.EpsAttrs{Eps: a.Eps}, true
		}
		return nil, false
	}
	normRope := func(m *Match) (ops.NormRopeAttrs, bool) {
		r, ok1 := attrsOf[ops.RopeAttrs](firstTemplate(m, ops.OpRope.Op), m)
		n, ok2 := attrsOf[ops.NormAttrs](firstTemplate(m, ops.OpL2Norm.Op), m)
		return ops.NormRopeAttrs{Rope: r, Eps: n.Eps}, ok1 && ok2
	}
	all := []Rule{
		&TemplateRule{Op: ops.OpMatMulSwiGLU,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 4), w(6, 4), w(6, 4), f32(6), f32(6)}}},
			Attrs:    func(*Match) (any, bool) { return nil, true }},
		&TemplateRule{Op: ops.OpNormRopeKV,
			Variants: []Example{
				{Inputs: []ExampleInput{f32(2, 8), call, slot, f32(8)}, Attrs: nrkv},
				{Inputs: []ExampleInput{f32(2, 8), call, slot}, Attrs: nrkv},
			},
			Attrs: func(m *Match) (any, bool) {
				a, ok := normRope(m)
				s, ok2 := attrsOf[ops.SlotAttrs](m.t.root, m)
				return ops.NormRopeKVAttrs{NormRope: a, Slot: s}, ok && ok2
			}},
		&TemplateRule{Op: ops.OpSlerp,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8), f32(8)}, Attrs: eps}},
			Attrs:    lastEps},
		&TemplateRule{Op: ops.OpGatedNorm,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8), f32(8)}, Attrs: eps}},
			Attrs:    lastEps},
		&TemplateRule{Op: ops.OpNormRope,
			Variants: []Example{
				{Inputs: []ExampleInput{f32(2, 8), call, f32(8)}, Attrs: nr},
				{Inputs: []ExampleInput{f32(2, 8), call}, Attrs: nr},
			},
			Attrs: func(m *Match) (any, bool) { return normRope(m) }},
		&TemplateRule{Op: ops.OpSwiGLU,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8), f32(8), f32(8)}}},
			Attrs:    func(*Match) (any, bool) { return nil, true }},
		&TemplateRule{Op: ops.OpMix,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8)}, Attrs: eps}},
			Attrs:    lastEps},
		SiblingRule{},
		ChainRule{},
	}
	off := map[string]bool{}
	for _, s := range skip {
		off[s] = true
	}
	var out []Rule
	for _, r := range all {
		if !off[r.Name()] {
			out = append(out, r)
		}
	}
	return out
}

// firstTemplate is the first template node of op, in build order.
func firstTemplate(m *Match, op string) *graph.Node {
	for _, tn := range m.t.g.Nodes {
		if tn.Op == op {
			return tn
		}
	}
	return nil
}

// attrsOf reads the attributes of the graph node matched to template node
// tn as T (a value or a pointer to one).
func attrsOf[T any](tn *graph.Node, m *Match) (T, bool) {
	var zero T
	if tn == nil {
		return zero, false
	}
	gn := m.nodes[tn]
	if gn == nil {
		return zero, false
	}
	switch a := gn.Attrs.(type) {
	case T:
		return a, true
	case *T:
		if a != nil {
			return *a, true
		}
	}
	return zero, false
}

// SiblingRule groups the matmuls that read one input with weights (Dory's
// q/k/v/g projections) into one grouped_matmul: one pass over the input,
// one launch. Only siblings built in the same scope are grouped, so a value
// read by projections far apart in the model does not keep their outputs
// alive from the first to the last; the group goes where the first sibling was.
type SiblingRule struct{}

// Name is "grouped_matmul".
func (SiblingRule) Name() string { return RuleGroupMatMul }

// Match groups siblings by input and scope.
func (SiblingRule) Match(g *graph.Graph, u *Uses) []Replacement {
	type key struct {
		x     *graph.Value
		scope string
	}
	groups := map[key][]*graph.Node{}
	var keys []key
	for _, n := range g.Nodes {
		if n.Op != ops.OpMatMul.Op || n.Inputs[1].Kind != graph.Weight {
			continue
		}
		k := key{n.Inputs[0], n.Scope}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], n)
	}
	var reps []Replacement
	for _, k := range keys {
		ms := groups[k]
		if len(ms) < 2 {
			continue
		}
		rep := Replacement{Op: ops.OpGroupedMatMul, Members: ms, At: ms[0], Inputs: []*graph.Value{k.x}}
		for _, m := range ms {
			rep.Inputs = append(rep.Inputs, m.Inputs[1])
			rep.Outputs = append(rep.Outputs, m.Outputs[0])
		}
		if eligible(g, u, &rep) {
			reps = append(reps, rep)
		}
	}
	return reps
}

// ChainRule fuses trees of elementwise ops (add, sub, mul, sigmoid, silu,
// scale) into one elementwise_chain: an op is absorbed into its reader when
// its result is read once, by that elementwise op, and is not a graph
// output. A tree of one op stays as it is.
type ChainRule struct{}

// Name is "elementwise_chain".
func (ChainRule) Name() string { return RuleChain }

// Match finds the roots (elementwise ops not absorbed by a reader) and
// collects each one's tree.
func (ChainRule) Match(g *graph.Graph, u *Uses) []Replacement {
	isEW := func(n *graph.Node) bool { return n != nil && ops.ChainOps[n.Op] != nil && len(n.Outputs) == 1 }
	absorbed := func(n *graph.Node) bool {
		r, ok := u.single(n.Outputs[0])
		return ok && isEW(r)
	}
	var reps []Replacement
	for _, root := range g.Nodes {
		if !isEW(root) || absorbed(root) {
			continue
		}
		var c chainBuilder
		c.add(root, isEW, absorbed)
		if len(c.steps) < 2 {
			continue
		}
		rep := Replacement{Op: ops.OpElementwiseChain, Attrs: ops.ChainAttrs{Steps: c.steps}, Inputs: c.inputs,
			Members: c.members, Outputs: root.Outputs, At: root}
		if eligible(g, u, &rep) {
			reps = append(reps, rep)
		}
	}
	return reps
}

// chainBuilder turns a tree of elementwise nodes into chain steps, operands
// first (so input 0 is the leftmost leaf, of the output's shape).
type chainBuilder struct {
	steps   []ops.ChainStep
	inputs  []*graph.Value
	members []*graph.Node
}

func (c *chainBuilder) add(n *graph.Node, isEW, absorbed func(*graph.Node) bool) int {
	args := make([]int, len(n.Inputs))
	for i, v := range n.Inputs {
		if p := v.Producer; isEW(p) && absorbed(p) {
			args[i] = ops.StepArg(c.add(p, isEW, absorbed))
			continue
		}
		idx := -1
		for j, x := range c.inputs {
			if x == v {
				idx = j
			}
		}
		if idx < 0 {
			idx = len(c.inputs)
			c.inputs = append(c.inputs, v)
		}
		args[i] = idx
	}
	st := ops.ChainStep{Op: n.Op, Args: args}
	if n.Op == ops.OpScale.Op {
		if a, ok := n.Attrs.(ops.ScaleAttrs); ok {
			st.Factor = a.Factor
		} else if a, ok := n.Attrs.(*ops.ScaleAttrs); ok && a != nil {
			st.Factor = a.Factor
		}
	}
	c.steps = append(c.steps, st)
	c.members = append(c.members, n)
	return len(c.steps) - 1
}
