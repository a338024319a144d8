package planner

import (
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Rules for Qwen4-Exp's decode step (each self-contained: a rule type and
// its name, listed in Rules).

// Rule names of Qwen4-Exp's decode step.
const (
	// RuleGDNPrep is the name of GDNPrepRule.
	RuleGDNPrep = "gdn_prep"
	// RuleExpertGLU is the name of ExpertGLURule's template rule.
	RuleExpertGLU = "expert_matmul_glu"
	// RuleMoEInjectNorm is the name of MoEInjectNormRule.
	RuleMoEInjectNorm = "moe_inject_norm"
	// RuleHCMixMatMul is the name of HCMixMatMulRule's template rule.
	RuleHCMixMatMul = "hc_mix_matmul"
)

// HCMixMatMulRule fuses a gated residual's block input from its down
// projection (scale, silu, the up projection's matmul and hc_mix) into
// hc_mix_matmul: three launches a residual become one.
func HCMixMatMulRule() Rule {
	return &TemplateRule{Op: ops.OpHCMixMatMul,
		Variants: []Example{{Inputs: []ExampleInput{
			{Kind: graph.Input, DType: graph.F32, Shape: graph.Shape{2, 8}},
			{Kind: graph.Input, DType: graph.F32, Shape: graph.Shape{2, 3}},
			{Kind: graph.Weight, DType: graph.F32, Shape: graph.Shape{8, 3}},
		}, Attrs: ops.HCMixMatMulAttrs{Streams: 2, Scale: 0.5}}},
		Attrs: func(m *Match) (any, bool) {
			s, ok1 := attrsOf[ops.ScaleAttrs](firstTemplate(m, ops.OpScale.Op), m)
			c, ok2 := attrsOf[ops.StreamAttrs](firstTemplate(m, ops.OpHCMix.Op), m)
			return ops.HCMixMatMulAttrs{Streams: c.Streams, Scale: s.Factor}, ok1 && ok2
		}}
}

// MoEInjectNormRule fuses a mixture of experts' moe_combine with the
// hc_inject that adds it into the streams and the rmsnorm of the result
// (the next gated residual's norm, or any rmsnorm of the new hyper-state:
// the first in build order) into moe_inject_norm, which gives both the new
// hyper-state and its norm. A template rule cannot find it: the
// hyper-state is read outside the match too (by the next hc_inject).
// An hc_inject of another block's output keeps its own launch and its
// norm's: fused alone (the rule hc_inject_norm, removed in session 6) the
// pair made Qwen4-Exp's decode slower on the H200.
type MoEInjectNormRule struct{}

// Name is "moe_inject_norm".
func (MoEInjectNormRule) Name() string { return RuleMoEInjectNorm }

// Match finds each hc_inject with the first rmsnorm of its result whose
// block output is a moe_combine read by the hc_inject only.
func (MoEInjectNormRule) Match(g *graph.Graph, u *Uses) []Replacement {
	var reps []Replacement
	for _, n := range g.Nodes {
		inj, norm, attrs, ok := injectNormAt(u, n)
		if !ok {
			continue
		}
		y := inj.Inputs[1]
		comb := y.Producer
		if r, ok := u.single(y); !ok || r != inj || comb == nil || comb.Op != ops.OpMoECombine.Op || len(comb.Outputs) != 1 {
			continue
		}
		rep := Replacement{Op: ops.OpMoEInjectNorm, Attrs: attrs,
			Inputs:  append([]*graph.Value{inj.Inputs[0], inj.Inputs[2], norm.Inputs[1]}, comb.Inputs...),
			Members: []*graph.Node{comb, inj, norm}, Outputs: []*graph.Value{inj.Outputs[0], norm.Outputs[0]}, At: norm}
		if fits(&rep) && eligible(g, u, &rep) {
			reps = append(reps, rep)
		}
	}
	return reps
}

// injectNormAt gives, when n is an hc_inject whose result an rmsnorm
// reads, n, the first such rmsnorm in build order and the attributes of
// their fused op.
func injectNormAt(u *Uses, n *graph.Node) (inj, norm *graph.Node, attrs ops.MoEInjectNormAttrs, ok bool) {
	if n.Op != ops.OpHCInject.Op || len(n.Inputs) != 3 || len(n.Outputs) != 1 {
		return nil, nil, attrs, false
	}
	sa, ok := attrsValue[ops.StreamAttrs](n.Attrs)
	if !ok {
		return nil, nil, attrs, false
	}
	x := n.Outputs[0]
	for _, r := range u.readers[x.ID] {
		if r.Op == ops.OpRMSNorm.Op && len(r.Inputs) == 2 && r.Inputs[0] == x && r.Inputs[1] != x && (norm == nil || r.ID < norm.ID) {
			norm = r
		}
	}
	if norm == nil {
		return nil, nil, attrs, false
	}
	na, ok := attrsValue[ops.NormAttrs](norm.Attrs)
	if !ok {
		return nil, nil, attrs, false
	}
	return n, norm, ops.MoEInjectNormAttrs{Streams: sa.Streams, Norm: na}, true
}

// fits checks that the fused node of rep makes what its members made.
func fits(rep *Replacement) bool {
	sig, err := rep.Op.Infer(rep.Attrs, rep.Inputs)
	if err != nil || len(sig.Outputs) != len(rep.Outputs) {
		return false
	}
	for i, s := range sig.Outputs {
		if o := rep.Outputs[i]; o.DType != s.DType || !o.Shape.Equal(s.Shape) {
			return false
		}
	}
	return true
}

// ExpertGLURule fuses a routed expert block's gate_up product with its
// activation (expert_matmul then silu_glu) into expert_matmul_glu.
func ExpertGLURule() Rule {
	return &TemplateRule{Op: ops.OpExpertMatMulGLU,
		Variants: []Example{{Inputs: []ExampleInput{
			{Kind: graph.Input, DType: graph.F32, Shape: graph.Shape{2, 4}},
			{Kind: graph.Weight, DType: graph.F32, Shape: graph.Shape{3, 6, 4}},
			{Kind: graph.Input, DType: graph.I32, Shape: graph.Shape{2, 2}},
		}}},
		Attrs: func(*Match) (any, bool) { return nil, true }}
}

// GDNPrepRule fuses Gated DeltaNet's query and key preparation, the chain
// ops.GDNPrep builds (split of the convolved projection into q, k and v,
// per-head l2norm of q and k, q scaled by 1/sqrt(dk)), into one gdn_prep:
// four launches a layer become one. A template rule cannot find it: its
// decomposition has three outputs, not one root that every node feeds.
// The value heads are read off the gdn_scan that reads v (the key heads
// where none does); gdn_prep only copies v, whatever its heads.
type GDNPrepRule struct{}

// Name is "gdn_prep".
func (GDNPrepRule) Name() string { return RuleGDNPrep }

// Match starts from each plain three-part split whose first two parts are
// equal and follows them to their norms.
func (GDNPrepRule) Match(g *graph.Graph, u *Uses) []Replacement {
	var reps []Replacement
	for _, n := range g.Nodes {
		if rep, ok := gdnPrepAt(u, n); ok && eligible(g, u, &rep) {
			reps = append(reps, rep)
		}
	}
	return reps
}

// gdnPrepAt builds the replacement whose split is n, if n starts the chain.
func gdnPrepAt(u *Uses, n *graph.Node) (Replacement, bool) {
	if n.Op != ops.OpSplit.Op || len(n.Outputs) != 3 {
		return Replacement{}, false
	}
	sa, ok := attrsValue[ops.SplitAttrs](n.Attrs)
	if !ok || sa.Heads != 1 || len(sa.Parts) != 3 || sa.Parts[0] != sa.Parts[1] {
		return Replacement{}, false
	}
	// the single reader of v, if it is an op of one input
	next := func(v *graph.Value, op string) (*graph.Node, bool) {
		r, ok := u.single(v)
		return r, ok && r.Op == op && len(r.Inputs) == 1 && r.Inputs[0] == v
	}
	qn, ok1 := next(n.Outputs[0], ops.OpL2Norm.Op)
	kn, ok2 := next(n.Outputs[1], ops.OpL2Norm.Op)
	if !ok1 || !ok2 {
		return Replacement{}, false
	}
	sc, ok := next(qn.Outputs[0], ops.OpScale.Op)
	if !ok {
		return Replacement{}, false
	}
	qa, ok4 := attrsValue[ops.NormAttrs](qn.Attrs)
	ka, ok5 := attrsValue[ops.NormAttrs](kn.Attrs)
	fa, ok6 := attrsValue[ops.ScaleAttrs](sc.Attrs)
	if !ok4 || !ok5 || !ok6 || qa != ka {
		return Replacement{}, false
	}
	dk, kd, vd := qa.Group, sa.Parts[0], sa.Parts[2]
	if dk <= 0 || kd%dk != 0 || fa.Factor != float32(1/math.Sqrt(float64(dk))) {
		return Replacement{}, false
	}
	nk := kd / dk
	nv := nk
	for _, r := range u.readers[n.Outputs[2].ID] {
		if r.Op == ops.OpGDNScan.Op && len(r.Inputs) > 3 && len(r.Inputs[3].Shape) == 2 {
			nv = r.Inputs[3].Shape[1]
		}
	}
	if nv <= 0 || vd%nv != 0 {
		return Replacement{}, false
	}
	attrs := ops.GDNPrepAttrs{KeyHeads: nk, KeyDim: dk, ValueHeads: nv, ValueDim: vd / nv, Eps: qa.Eps}
	rep := Replacement{Op: ops.OpGDNPrep, Attrs: attrs, Inputs: []*graph.Value{n.Inputs[0]},
		Members: []*graph.Node{n, qn, sc, kn}, Outputs: []*graph.Value{sc.Outputs[0], kn.Outputs[0], n.Outputs[2]}, At: n}
	for _, m := range rep.Members {
		if m.ID > rep.At.ID {
			rep.At = m
		}
	}
	sig, err := ops.OpGDNPrep.Infer(attrs, rep.Inputs)
	if err != nil || len(sig.Outputs) != 3 {
		return Replacement{}, false
	}
	for i, s := range sig.Outputs {
		if o := rep.Outputs[i]; o.DType != s.DType || !o.Shape.Equal(s.Shape) {
			return Replacement{}, false
		}
	}
	return rep, true
}
