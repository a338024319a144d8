package planner

import (
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// RuleSlerpMatMul is the rule that folds an nGPT residual into the product
// after it (ops/fused_slerp.go).
const RuleSlerpMatMul = "slerp_matmul"

// SlerpProductRule folds a slerp (the fused node of the slerp rule) into
// the product that reads its result next: a grouped_matmul (Dory's q/k/v/g)
// becomes slerp_matmul, a matmul_swiglu slerp_matmul_swiglu, a
// quant_grouped_matmul (q/k/v/g stored quantized) quant_slerp_matmul, a
// quant_matmul_swiglu quant_slerp_matmul_swiglu. The fused node gives the
// slerp's result h too, for its other readers (the next residual), which
// must all come after the product; it takes the product's scope (the next
// sub-layer's), where its launch runs. A plain matmul is left alone (the
// one after Dory's last residual is the head).
//
// Prompt rows (ops.AttentionChunkRows or more) fold into every product:
// there the fused node's slerp writes the 16-bit copy of h that the
// products read, saving their conversion. Decode rows fold into the
// quantized products only: on CUDA a one-row quantized product stages h
// in every block, and can compute the slerp there (quant_fused.go's
// slerp forms). A product of 16-bit weights reads x as it streams, and
// the slerp inside it (one pass over x, u = (1 - α) ⊙ x and w = α ⊙ y
// multiplied apart, the norms' five sums beside) was measured slower than
// the slerp as its own launch: Dory 4B bf16 184.0 against 219.5 tok/s
// (session 11, device run 4; session 5 measured a form that computed the slerp
// first in every block: 141.6 against 215.5). It runs after the rules
// that make its parts (slerp, grouped_matmul, matmul_swiglu,
// quant_grouped_matmul, quant_matmul_swiglu).
type SlerpProductRule struct{}

// Name is "slerp_matmul".
func (SlerpProductRule) Name() string { return RuleSlerpMatMul }

// Match pairs each slerp with the first product that reads its result as
// its input.
func (SlerpProductRule) Match(g *graph.Graph, u *Uses) []Replacement {
	var reps []Replacement
	for _, s := range g.Nodes {
		if s.Op != ops.OpSlerp.Op || len(s.Outputs) != 1 || u.output[s.Outputs[0].ID] {
			continue
		}
		h := s.Outputs[0]
		prompt := h.Shape.Rows() >= ops.AttentionChunkRows
		var p *graph.Node
		for _, r := range u.readers[h.ID] {
			quant := r.Op == ops.OpQuantGroupedMatMul.Op || r.Op == ops.OpQuantMatMulSwiGLU.Op
			if (quant || prompt && (r.Op == ops.OpGroupedMatMul.Op || r.Op == ops.OpMatMulSwiGLU.Op)) && (p == nil || r.ID < p.ID) {
				p = r
			}
		}
		if p == nil || !slerpFoldable(g, u, s, p) {
			continue
		}
		rep := Replacement{Members: []*graph.Node{s, p}, Attrs: s.Attrs, At: p, Scope: p.Scope,
			Inputs:  append(append([]*graph.Value(nil), s.Inputs...), p.Inputs[1:]...),
			Outputs: append([]*graph.Value{h}, p.Outputs...)}
		switch p.Op {
		case ops.OpMatMulSwiGLU.Op:
			rep.Op = ops.OpSlerpMatMulSwiGLU
		case ops.OpQuantGroupedMatMul.Op, ops.OpQuantMatMulSwiGLU.Op:
			e, ok1 := attrsValue[ops.EpsAttrs](s.Attrs)
			b, ok2 := attrsValue[ops.QuantAttrs](p.Attrs)
			if !ok1 || !ok2 {
				continue
			}
			rep.Op, rep.Attrs = ops.OpQuantSlerpMatMul, ops.QuantNormAttrs{Blocks: b, Eps: e.Eps}
			if p.Op == ops.OpQuantMatMulSwiGLU.Op {
				rep.Op = ops.OpQuantSlerpMatMulSwiGLU
			}
		default:
			rep.Op = ops.OpSlerpMatMul
		}
		if _, err := rep.Op.Infer(rep.Attrs, rep.Inputs); err != nil {
			continue
		}
		reps = append(reps, rep)
	}
	return reps
}

// slerpFoldable says whether slerp s can move to product p's place: p
// reads h as its input only; every other reader of h comes after p; the product's outputs are not read
// before p (as ever); and no node between them writes what s reads.
func slerpFoldable(g *graph.Graph, u *Uses, s, p *graph.Node) bool {
	h := s.Outputs[0]
	if p.ID <= s.ID || p.Inputs[0] != h {
		return false
	}
	for _, w := range p.Inputs[1:] {
		if w == h {
			return false
		}
	}
	for _, r := range u.readers[h.ID] {
		if r != p && r.ID <= p.ID {
			return false
		}
	}
	for _, v := range p.Outputs {
		for _, r := range u.readers[v.ID] {
			if r.ID <= p.ID {
				return false
			}
		}
	}
	return !writesBetween(g, s, p, s.Inputs)
}

// writesBetween says whether a node after a and before b in build order
// writes one of vals.
func writesBetween(g *graph.Graph, a, b *graph.Node, vals []*graph.Value) bool {
	for _, n := range g.Nodes[a.ID+1 : b.ID] {
		if slices.ContainsFunc(n.Writes, func(w *graph.Value) bool { return slices.Contains(vals, w) }) {
			return true
		}
	}
	return false
}
