package planner

import (
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Rule names, as reports print them and Options.Skip takes them.
const (
	RuleMatMulSwiGLU = "matmul_swiglu"
	// RuleSwiGLUNormMatMul fuses a SwiGLU MLP whose activation is
	// l2-normalized before the down projection (Dory's) into one node.
	RuleSwiGLUNormMatMul = "swiglu_norm_matmul"
	RuleNormRopeKV       = "norm_rope_kv"
	RuleSlerp            = "slerp"
	RuleGatedNorm        = "gated_norm"
	RuleNormRope         = "norm_rope"
	RuleSwiGLU           = "swiglu"
	RuleMix              = "mix"
	RuleGroupMatMul      = "grouped_matmul"
	RuleChain            = "elementwise_chain"
	// The fused decode ops' rules (ops/fused_decode.go).
	RuleQKVPrep       = "qkv_prep"
	RuleAttentionGate = "attention_gate"
	RuleNormMatMul    = "norm_matmul"
	// The fused quantized products' rules (ops/quant_fused.go): the
	// grouping, SwiGLU and norm rules over quant_matmul.
	RuleQuantMatMulSwiGLU = "quant_matmul_swiglu"
	RuleQuantNormMatMul   = "quant_norm_matmul"
	RuleQuantGroupMatMul  = "quant_grouped_matmul"
	// RuleQuantSwiGLUNormMatMul is RuleSwiGLUNormMatMul over quantized
	// weights.
	RuleQuantSwiGLUNormMatMul = "quant_swiglu_norm_matmul"
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
	slot4 := ExampleInput{Kind: graph.State, DType: graph.F32, Shape: graph.Shape{graph.Dyn, 4}}
	eps := ops.EpsAttrs{Eps: 1e-6}
	nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: 4, Rotary: 4, Theta: 1e4}, Eps: 1e-6}
	nrkv := ops.NormRopeKVAttrs{NormRope: nr}
	lastEps := func(m *Match) (any, bool) {
		if a, ok := attrsOf[ops.NormAttrs](m.t.root, m); ok && a.Group == 0 {
			return ops.EpsAttrs{Eps: a.Eps}, true
		}
		return nil, false
	}
	// normEps reads the epsilon of a match's first l2norm, over whole rows.
	normEps := func(m *Match) (any, bool) {
		if a, ok := attrsOf[ops.NormAttrs](firstTemplate(m, ops.OpL2Norm.Op), m); ok && a.Group == 0 {
			return ops.EpsAttrs{Eps: a.Eps}, true
		}
		return nil, false
	}
	normRope := func(m *Match) (ops.NormRopeAttrs, bool) {
		r, ok1 := attrsOf[ops.RopeAttrs](firstTemplate(m, ops.OpRope.Op), m)
		n, ok2 := attrsOf[ops.NormAttrs](firstTemplate(m, ops.OpL2Norm.Op), m)
		return ops.NormRopeAttrs{Rope: r, Eps: n.Eps}, ok1 && ok2
	}
	nrkvRule := &TemplateRule{Op: ops.OpNormRopeKV,
		Variants: []Example{
			{Inputs: []ExampleInput{f32(2, 8), call, slot, f32(8)}, Attrs: nrkv},
			{Inputs: []ExampleInput{f32(2, 8), call, slot}, Attrs: nrkv},
		},
		Attrs: func(m *Match) (any, bool) {
			a, ok := normRope(m)
			s, ok2 := attrsOf[ops.SlotAttrs](m.t.root, m)
			return ops.NormRopeKVAttrs{NormRope: a, Slot: s}, ok && ok2
		}}
	nrRule := &TemplateRule{Op: ops.OpNormRope,
		Variants: []Example{
			{Inputs: []ExampleInput{f32(2, 8), call, f32(8)}, Attrs: nr},
			{Inputs: []ExampleInput{f32(2, 8), call}, Attrs: nr},
		},
		Attrs: func(m *Match) (any, bool) { return normRope(m) }}
	attn := ops.AttentionAttrs{Heads: 2, KVHeads: 1, HeadDim: 4, Scale: 0.5}
	// A quantized weight's codes (i8 groups of 32) and scales, for the
	// templates of the fused quantized products; a match is rebuilt with
	// the graph's own dtypes and blocks.
	qw := func(shape ...int) ExampleInput {
		return ExampleInput{Kind: graph.Weight, DType: graph.I8, Shape: shape}
	}
	qs := func(shape ...int) ExampleInput {
		return ExampleInput{Kind: graph.Weight, DType: graph.F16, Shape: shape}
	}
	blocks := ops.QuantAttrs{BlockRows: 1, BlockCols: 32}
	// quantBlocks reads the blocks of a match's first quant_matmul.
	quantBlocks := func(m *Match) (any, bool) {
		return attrsOf[ops.QuantAttrs](firstTemplate(m, ops.OpQuantMatMul.Op), m)
	}
	all := []Rule{
		&TemplateRule{Op: ops.OpSwiGLUNormMatMul,
			Variants: []Example{{Inputs: []ExampleInput{f32(ops.AttentionChunkRows, 4), w(6, 4), w(6, 4), f32(6), f32(6), w(5, 6)}, Attrs: eps}},
			Attrs: func(m *Match) (any, bool) {
				// Prompt rows only: it saves a pass over the SwiGLU's output
				// there, while decode rows run it as two matvecs anyway.
				if x := m.bind[0]; len(x.Shape) == 0 || x.Shape[0] < ops.AttentionChunkRows {
					return nil, false
				}
				return normEps(m)
			}},
		&TemplateRule{Op: ops.OpQuantSwiGLUNormMatMul,
			Variants: []Example{{Inputs: []ExampleInput{f32(ops.AttentionChunkRows, 64), qw(64, 64), qs(64, 2), qw(64, 64), qs(64, 2),
				f32(64), f32(64), qw(5, 64), qs(5, 2)}, Attrs: ops.QuantNormAttrs{Blocks: blocks, Eps: 1e-6}}},
			Attrs: func(m *Match) (any, bool) {
				// Prompt rows only, as swiglu_norm_matmul.
				if x := m.bind[0]; len(x.Shape) == 0 || x.Shape[0] < ops.AttentionChunkRows {
					return nil, false
				}
				b, ok1 := quantBlocks(m)
				e, ok2 := normEps(m)
				if !ok1 || !ok2 {
					return nil, false
				}
				return ops.QuantNormAttrs{Blocks: b.(ops.QuantAttrs), Eps: e.(ops.EpsAttrs).Eps}, true
			}},
		&TemplateRule{Op: ops.OpMatMulSwiGLU,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 4), w(6, 4), w(6, 4), f32(6), f32(6)}}},
			Attrs:    func(*Match) (any, bool) { return nil, true }},
		&TemplateRule{Op: ops.OpQuantMatMulSwiGLU,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 64), qw(6, 64), qs(6, 2), qw(6, 64), qs(6, 2), f32(6), f32(6)}, Attrs: blocks}},
			Attrs:    quantBlocks},
		&QKVRule{Q: nrRule, K: nrkvRule},
		nrkvRule,
		&TemplateRule{Op: ops.OpAttentionGate,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), slot4, slot4, call, f32(2, 8), f32(8)}, Attrs: attn}},
			Attrs: func(m *Match) (any, bool) {
				return attrsOf[ops.AttentionAttrs](firstTemplate(m, ops.OpAttention.Op), m)
			}},
		&TemplateRule{Op: ops.OpSlerp,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8), f32(8)}, Attrs: eps}},
			Attrs:    lastEps},
		&TemplateRule{Op: ops.OpGatedNorm,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8), f32(8)}, Attrs: eps}},
			Attrs:    lastEps},
		nrRule,
		&TemplateRule{Op: ops.OpSwiGLU,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8), f32(8), f32(8)}}},
			Attrs:    func(*Match) (any, bool) { return nil, true }},
		&TemplateRule{Op: ops.OpMix,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), f32(2, 8)}, Attrs: eps}},
			Attrs:    lastEps},
		&TemplateRule{Op: ops.OpNormMatMul,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 8), w(6, 8)}, Attrs: eps}},
			Attrs:    normEps},
		&TemplateRule{Op: ops.OpQuantNormMatMul,
			Variants: []Example{{Inputs: []ExampleInput{f32(2, 64), qw(6, 64), qs(6, 2)}, Attrs: ops.QuantNormAttrs{Blocks: blocks, Eps: 1e-6}}},
			Attrs: func(m *Match) (any, bool) {
				b, ok1 := quantBlocks(m)
				e, ok2 := normEps(m)
				if !ok1 || !ok2 {
					return nil, false
				}
				return ops.QuantNormAttrs{Blocks: b.(ops.QuantAttrs), Eps: e.(ops.EpsAttrs).Eps}, true
			}},
		GDNPrepRule{},
		ExpertGLURule(),
		HCMixMatMulRule(),
		MoEInjectNormRule{},
		SiblingRule{},
		QuantSiblingRule{},
		ChainRule{},
		SlerpProductRule{},
		QKVAttentionRule{},
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

// Match groups siblings by input, whatever scope each was built in (a
// residual's products on the normed rows may sit beside the block's own:
// Qwen4-Exp's block_inject in a layer's scope and input_mix_down in its
// moe scope read one input); the group takes their common scope.
func (SiblingRule) Match(g *graph.Graph, u *Uses) []Replacement {
	return siblings(g, u, ops.OpGroupedMatMul, func(n *graph.Node) (any, any, bool) {
		return nil, nil, n.Op == ops.OpMatMul.Op && n.Inputs[1].Kind == graph.Weight
	})
}

// QuantSiblingRule is SiblingRule for quant_matmul: the quantized products
// that read one input, with weights of one format (codes and scales of one
// dtype each, one set of blocks), become one quant_grouped_matmul.
type QuantSiblingRule struct{}

// Name is "quant_grouped_matmul".
func (QuantSiblingRule) Name() string { return RuleQuantGroupMatMul }

// Match groups quantized siblings by input and format.
func (QuantSiblingRule) Match(g *graph.Graph, u *Uses) []Replacement {
	type format struct {
		codes, scales graph.DType
		blocks        ops.QuantAttrs
	}
	return siblings(g, u, ops.OpQuantGroupedMatMul, func(n *graph.Node) (any, any, bool) {
		if n.Op != ops.OpQuantMatMul.Op || n.Inputs[1].Kind != graph.Weight || n.Inputs[2].Kind != graph.Weight {
			return nil, nil, false
		}
		a, ok := attrsValue[ops.QuantAttrs](n.Attrs)
		return format{n.Inputs[1].DType, n.Inputs[2].DType, a}, a, ok
	})
}

// siblings groups the nodes that accept takes (each with a comparable key
// and the fused node's attributes: nodes of one group have equal keys) by
// their first input into nodes of op, whose inputs are that input and
// every member's other inputs in order.
func siblings(g *graph.Graph, u *Uses, op *ops.Def, accept func(*graph.Node) (key, attrs any, ok bool)) []Replacement {
	type key struct {
		x   *graph.Value
		key any
	}
	groups := map[key][]*graph.Node{}
	attrs := map[key]any{}
	var keys []key
	for _, n := range g.Nodes {
		kk, a, ok := accept(n)
		if !ok {
			continue
		}
		k := key{n.Inputs[0], kk}
		if groups[k] == nil {
			keys = append(keys, k)
			attrs[k] = a
		}
		groups[k] = append(groups[k], n)
	}
	var reps []Replacement
	for _, k := range keys {
		ms := groups[k]
		if len(ms) < 2 {
			continue
		}
		rep := Replacement{Op: op, Attrs: attrs[k], Members: ms, At: ms[0], Inputs: []*graph.Value{k.x}}
		for _, m := range ms {
			rep.Inputs = append(rep.Inputs, m.Inputs[1:]...)
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

// QKVRule fuses an attention layer's query and key preparation and both of
// its KV row writes into one qkv_prep. It starts from each attention (or
// attention_gate) node and finds what feeds it: the norm_rope that makes its
// queries, the norm_rope_kv that last wrote its key slot and the kv_write
// that last wrote its value slot, with the same call record, rotary and
// norm, no key scale, and one slot layout. Those parts are found as
// primitive chains (through the norm_rope and norm_rope_kv rules' templates)
// or as those rules' fused nodes.
type QKVRule struct {
	// Q and K find the query and key chains: the norm_rope and
	// norm_rope_kv rules.
	Q, K *TemplateRule
}

// Name is "qkv_prep".
func (*QKVRule) Name() string { return RuleQKVPrep }

// qkvPart is a query or key chain: the nodes it is made of, its inputs and
// attributes as its fused op takes them, and its output (queries only).
type qkvPart struct {
	members []*graph.Node
	in      []*graph.Value
	attrs   any
	out     *graph.Value
}

// last is the part's member latest in build order.
func (p qkvPart) last() *graph.Node {
	l := p.members[0]
	for _, m := range p.members[1:] {
		if m.ID > l.ID {
			l = m
		}
	}
	return l
}

// Match pairs each attention with its parts.
func (r *QKVRule) Match(g *graph.Graph, u *Uses) []Replacement {
	qs := map[*graph.Value]qkvPart{}   // query chains by output
	ks := map[*graph.Value][]qkvPart{} // key chains by slot
	vs := map[*graph.Value][]*graph.Node{}
	for _, rep := range r.Q.Match(g, u) {
		qs[rep.Outputs[0]] = qkvPart{members: rep.Members, in: rep.Inputs, attrs: rep.Attrs, out: rep.Outputs[0]}
	}
	for _, rep := range r.K.Match(g, u) {
		ks[rep.Inputs[2]] = append(ks[rep.Inputs[2]], qkvPart{members: rep.Members, in: rep.Inputs, attrs: rep.Attrs})
	}
	var attns []*graph.Node
	for _, n := range g.Nodes {
		switch n.Op {
		case ops.OpNormRope.Op:
			qs[n.Outputs[0]] = qkvPart{members: []*graph.Node{n}, in: n.Inputs, attrs: n.Attrs, out: n.Outputs[0]}
		case ops.OpNormRopeKV.Op:
			ks[n.Inputs[2]] = append(ks[n.Inputs[2]], qkvPart{members: []*graph.Node{n}, in: n.Inputs, attrs: n.Attrs})
		case ops.OpKVWrite.Op:
			vs[n.Inputs[1]] = append(vs[n.Inputs[1]], n)
		case ops.OpAttention.Op, ops.OpAttentionGate.Op:
			attns = append(attns, n)
		}
	}
	claimed := map[*graph.Node]bool{}
	var reps []Replacement
	for _, a := range attns {
		rep, ok := r.pair(a, qs, ks, vs)
		if !ok {
			continue
		}
		free := true
		for _, m := range rep.Members {
			free = free && !claimed[m]
		}
		if !free || !eligible(g, u, &rep) {
			continue
		}
		for _, m := range rep.Members {
			claimed[m] = true
		}
		reps = append(reps, rep)
	}
	return reps
}

// pair builds the replacement for attention a, if its parts agree.
func (r *QKVRule) pair(a *graph.Node, qs map[*graph.Value]qkvPart, ks map[*graph.Value][]qkvPart, vs map[*graph.Value][]*graph.Node) (Replacement, bool) {
	q, ok := qs[a.Inputs[0]]
	if !ok {
		return Replacement{}, false
	}
	var k *qkvPart
	for i, p := range ks[a.Inputs[1]] {
		if l := p.last(); l.ID < a.ID && (k == nil || l.ID > k.last().ID) {
			k = &ks[a.Inputs[1]][i]
		}
	}
	var v *graph.Node
	for _, n := range vs[a.Inputs[2]] {
		if n.ID < a.ID && (v == nil || n.ID > v.ID) {
			v = n
		}
	}
	if k == nil || v == nil {
		return Replacement{}, false
	}
	call := a.Inputs[3]
	qa, ok1 := attrsValue[ops.NormRopeAttrs](q.attrs)
	ka, ok2 := attrsValue[ops.NormRopeKVAttrs](k.attrs)
	va, ok3 := attrsValue[ops.SlotAttrs](v.Attrs)
	if !ok1 || !ok2 || !ok3 || qa != ka.NormRope || ka.Slot != va || len(k.in) != 3 ||
		q.in[1] != call || k.in[1] != call || v.Inputs[2] != call {
		return Replacement{}, false
	}
	attrs := ops.QKVPrepAttrs{NormRope: qa, Slot: va}
	in := append([]*graph.Value{q.in[0], k.in[0], v.Inputs[0], call, k.in[2], v.Inputs[1]}, q.in[2:]...)
	if _, err := ops.OpQKVPrep.Infer(attrs, in); err != nil {
		return Replacement{}, false
	}
	rep := Replacement{Op: ops.OpQKVPrep, Attrs: attrs, Inputs: in, Outputs: []*graph.Value{q.out}}
	rep.Members = append(append(append(rep.Members, q.members...), k.members...), v)
	rep.At = rep.Members[0]
	for _, m := range rep.Members[1:] {
		if m.ID > rep.At.ID {
			rep.At = m
		}
	}
	return rep, true
}

// attrsValue reads attributes held as T or *T.
func attrsValue[T any](a any) (T, bool) {
	switch v := a.(type) {
	case T:
		return v, true
	case *T:
		if v != nil {
			return *v, true
		}
	}
	var zero T
	return zero, false
}
