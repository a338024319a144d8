package qwen4

import (
	"fmt"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

// Quantized weights. The projections are quantized: the routed experts
// (read by quant_expert_matmul, one table of scales per expert), the shared
// expert's gate, up and down, the Gated DeltaNet's in_proj_qkv, in_proj_z
// and out_proj, the QSA layers' q, k, v and o and the indexer's
// index_qk_proj, a PLE layer's key_proj and value_proj, and the MTP head's
// fc_embedding and fc_hidden. What stays as stored: the embedding and the
// head, the router (mlp.gate) and the shared expert's gate row, the GDN's
// in_proj_a and in_proj_b (a logit per value head), the hyper-connection
// mixers (their gates and inject weights), the n-gram tables, the conv
// kernels and every norm and vector.

// linear is x · Wᵀ for the projection name [out, in] as stored: matmul, or
// quant_matmul of its codes and scales.
func (g *builder) linear(x *graph.Value, name string, out, in int) *graph.Value {
	g.known(name)
	return g.st.Linear(g.b, x, name, out, in)
}

// experts is the product of x with the routed experts name [E, out, in] as
// stored: expert_matmul, or quant_expert_matmul of their codes and scales.
func (g *builder) experts(x, ids *graph.Value, name string, out, in int) *graph.Value {
	g.known(name)
	return g.st.Experts(g.b, x, ids, name, g.c.Experts, out, in)
}

// known fails the graph when the model has no weight name.
func (g *builder) known(name string) {
	if g.st.DTypeOf(name) == graph.Invalid {
		g.b.Fail(fmt.Errorf("weight %s: not in the model", name))
	}
}

// Parameters counts the model's weights (a quantized matrix's elements, not
// its codes' and scales').
func (m *Model) Parameters() int { return m.Loaded.Parameters(m.declare) }

// Quantize quantizes the projections the model holds in a float type in
// the format of quant ("fp8", "q8", "q4"), as LoadQuantized does at load:
// for a synthetic model (models.Quantizer). m is spent: the model returned
// holds its checkpoint's mappings. A model of shapes only gives one of the
// format's shapes.
func (m *Model) Quantize(quant string, progress lm.Progress) (models.Model, error) {
	l, ok, err := m.Loaded.Quantize(quant, m.declare, progress)
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if !ok {
		return m, nil
	}
	out := *m
	out.Loaded = l
	return &out, nil
}

// Source gives where a checkpoint written quantized stores the weight of
// graph name, and the tensors of the model's checkpoint it replaces
// (models.Sourced): a stack of experts the checkpoint stores one by one is
// written whole, under the stack's name in the checkpoint's prefix.
func (m *Model) Source(name string) (stored string, from []string) {
	r := newResolver(m.Checkpoint)
	if n := r.name(name); n != "" {
		return n, []string{n}
	}
	if from = r.experts().From(name, m.Config.Experts); len(from) == 0 {
		return "", nil
	}
	stored = name
	if rest, ok := strings.CutPrefix(name, "model."); ok {
		stored = r.pre + rest
	}
	return stored, from
}
