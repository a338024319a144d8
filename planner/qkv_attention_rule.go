package planner

import (
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// RuleQKVAttention is the rule that folds a decode row's qkv_prep into
// the attention_gate of its queries (ops.OpQKVAttentionGate).
const RuleQKVAttention = "qkv_attention_gate"

// QKVAttentionRule folds a qkv_prep (the fused node of the qkv_prep rule,
// with its queries' scale) into the attention_gate that reads its
// queries, for plans of exactly one row: qkv_attention_gate, at the
// attention's place. On CUDA the attention's blocks then prepare their own
// queries and the block that holds the row's key writes the key and value
// rows (REEL_QKV_ATTN=1), one launch fewer a layer; with more rows a row's
// keys would be written by other blocks of the same launch, so windows and
// prompts keep the two nodes. It runs after the qkv_prep and
// attention_gate rules.
type QKVAttentionRule struct{}

// Name is "qkv_attention_gate".
func (QKVAttentionRule) Name() string { return RuleQKVAttention }

// Match pairs each one-row attention_gate with the qkv_prep of its
// queries.
func (QKVAttentionRule) Match(g *graph.Graph, u *Uses) []Replacement {
	var reps []Replacement
	for _, a := range g.Nodes {
		if a.Op != ops.OpAttentionGate.Op || len(a.Inputs) != 6 || a.Inputs[0].Shape.Rows() != 1 {
			continue
		}
		p := a.Inputs[0].Producer
		if p == nil || p.Op != ops.OpQKVPrep.Op || len(p.Inputs) != 7 || len(p.Outputs) != 1 || !qkvFoldable(g, u, p, a) {
			continue
		}
		prep, ok1 := attrsValue[ops.QKVPrepAttrs](p.Attrs)
		attn, ok2 := attrsValue[ops.AttentionAttrs](a.Attrs)
		if !ok1 || !ok2 {
			continue
		}
		rep := Replacement{Members: []*graph.Node{p, a}, Op: ops.OpQKVAttentionGate, Attrs: ops.QKVAttentionAttrs{Prep: prep, Attention: attn},
			Inputs: append(append([]*graph.Value(nil), p.Inputs...), a.Inputs[4], a.Inputs[5]), Outputs: a.Outputs, At: a, Scope: a.Scope}
		if _, err := rep.Op.Infer(rep.Attrs, rep.Inputs); err != nil {
			continue
		}
		reps = append(reps, rep)
	}
	return reps
}

// qkvFoldable says whether qkv_prep p can move to attention_gate a's
// place: a reads p's queries, p's slots and call as its own and nothing
// else reads the queries; no node between them reads or writes the
// slots or writes what p reads.
func qkvFoldable(g *graph.Graph, u *Uses, p, a *graph.Node) bool {
	q := p.Outputs[0]
	// One reader (Uses counts a node reading a value twice twice): a, as its queries.
	if a.ID <= p.ID || u.output[q.ID] || len(u.readers[q.ID]) != 1 ||
		a.Inputs[1] != p.Inputs[4] || a.Inputs[2] != p.Inputs[5] || a.Inputs[3] != p.Inputs[3] {
		return false
	}
	slots := p.Inputs[4:6]
	for _, n := range g.Nodes[p.ID+1 : a.ID] {
		if slices.ContainsFunc(n.Inputs, func(v *graph.Value) bool { return slices.Contains(slots, v) }) {
			return false // a read of the slots before p's writes
		}
	}
	return !writesBetween(g, p, a, p.Inputs) // the slots are p's inputs too
}
