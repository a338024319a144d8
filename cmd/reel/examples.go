package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// example is a built-in graph reel dump can print without a checkpoint.
type example struct {
	name  string
	doc   string
	build func() (*graph.Graph, error)
}

// examples lists the built-in graphs.
func examples() []example {
	return []example{
		{"attention", "a gated attention sub-layer: q/k/v/g, norm_rope, kv_write, attention, gate, o, slerp", attentionExample},
		{"mlp", "a SwiGLU MLP sub-layer: gate/up, scaled SwiGLU, norm, down, slerp", mlpExample},
	}
}

func findExample(name string) (example, bool) {
	for _, e := range examples() {
		if e.name == name {
			return e, true
		}
	}
	return example{}, false
}

func exampleNames() []string {
	var out []string
	for _, e := range examples() {
		out = append(out, e.name)
	}
	return out
}

func exampleHelp() string {
	var b strings.Builder
	for _, e := range examples() {
		fmt.Fprintf(&b, "  %-10s %s\n", e.name, e.doc)
	}
	return b.String()
}

// The tiny nGPT-style shape of the examples (the test checkpoint's).
const (
	exHidden  = 64
	exFFN     = 96
	exHeads   = 4
	exKVHeads = 2
	exHeadDim = 16
	exRows    = 1 // one decode row
	exEps     = 1e-6
)

// attentionExample builds one attention sub-layer of layer 0 as Dory's
// graphs do: projections of the residual x, rotary and per-head norm of q and
// k (q scaled), the key and value rows written into their slots, causal GQA
// attention, the sigmoid output gate and norm, the output projection, and
// the slerp residual.
func attentionExample() (*graph.Graph, error) {
	b := graph.NewBuilder("example attention")
	call := ops.Call(b)
	x := b.Input("x", graph.F32, exRows, exHidden)
	pop := b.Push("layer 0 / attn")
	p := "backbone.layers.0.mixer."
	qw := b.Weight(p+"q_proj.weight", graph.BF16, exHeads*exHeadDim, exHidden)
	kw := b.Weight(p+"k_proj.weight", graph.BF16, exKVHeads*exHeadDim, exHidden)
	vw := b.Weight(p+"v_proj.weight", graph.BF16, exKVHeads*exHeadDim, exHidden)
	gw := b.Weight(p+"g_proj.weight", graph.BF16, exHeads*exHeadDim, exHidden)
	ow := b.Weight(p+"o_proj.weight", graph.BF16, exHidden, exHeads*exHeadDim)
	sqk := b.Weight(p+"sqk", graph.F32, exHeads*exHeadDim)
	sGate := b.Weight(p+"s_gate", graph.F32, exHeads*exHeadDim)
	alpha := b.Weight("backbone.layers.0.attn_alpha", graph.F32, exHidden)
	kSlot := b.State("slot.0.k", graph.F32, graph.Dyn, exKVHeads*exHeadDim)
	vSlot := b.State("slot.0.v", graph.F32, graph.Dyn, exKVHeads*exHeadDim)

	q := b.Label(ops.MatMul(b, x, qw), "q")
	k := b.Label(ops.MatMul(b, x, kw), "k")
	v := b.Label(ops.MatMul(b, x, vw), "v")
	g := b.Label(ops.MatMul(b, x, gw), "g")
	nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: exHeadDim, Rotary: exHeadDim, Theta: 1e4}, Eps: exEps}
	q = b.Label(ops.NormRope(b, q, call, sqk, nr), "q_rot")
	k = b.Label(ops.NormRope(b, k, call, nil, nr), "k_rot")
	ops.KVWrite(b, k, kSlot, call, ops.SlotAttrs{})
	ops.KVWrite(b, v, vSlot, call, ops.SlotAttrs{})
	y := b.Label(ops.Attention(b, q, kSlot, vSlot, call, ops.AttentionAttrs{
		Heads: exHeads, KVHeads: exKVHeads, HeadDim: exHeadDim,
		Scale: float32(1 / math.Sqrt(exHeadDim)),
	}), "attn")
	y = b.Label(ops.GatedNorm(b, y, g, sGate, exEps), "gated")
	o := b.Label(ops.MatMul(b, y, ow), "o")
	pop()
	pop = b.Push("layer 0 / residual")
	out := b.Label(ops.Slerp(b, x, o, alpha, exEps), "h")
	pop()
	b.Output(out)
	return b.Graph()
}

// mlpExample builds one MLP sub-layer: gate and up projections, the scaled
// SwiGLU, the norm before the down projection, and the slerp residual.
func mlpExample() (*graph.Graph, error) {
	b := graph.NewBuilder("example mlp")
	x := b.Input("x", graph.F32, exRows, exHidden)
	pop := b.Push("layer 1 / mlp")
	p := "backbone.layers.1.mixer."
	gw := b.Weight(p+"gate_proj.weight", graph.BF16, exFFN, exHidden)
	uw := b.Weight(p+"up_proj.weight", graph.BF16, exFFN, exHidden)
	dw := b.Weight(p+"down_proj.weight", graph.BF16, exHidden, exFFN)
	sg := b.Weight(p+"suv_gate", graph.F32, exFFN)
	su := b.Weight(p+"suv_up", graph.F32, exFFN)
	alpha := b.Weight("backbone.layers.1.mlp_alpha", graph.F32, exHidden)

	g := b.Label(ops.MatMul(b, x, gw), "gate")
	u := b.Label(ops.MatMul(b, x, uw), "up")
	a := b.Label(ops.SwiGLU(b, g, u, sg, su), "act")
	a = b.Label(ops.L2Norm(b, a, 0, exEps), "act_norm")
	d := b.Label(ops.MatMul(b, a, dw), "down")
	pop()
	pop = b.Push("layer 1 / residual")
	out := b.Label(ops.Slerp(b, x, d, alpha, exEps), "h")
	pop()
	b.Output(out)
	return b.Graph()
}
