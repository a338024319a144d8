package qwen4

import (
	"fmt"
	"slices"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/weights"
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

// storage is how a model's projections are stored: the format of those
// stored quantized, and whether the graphs declare the ones stored in a
// float type quantized in it (while the loader, or Quantize, makes them).
type storage struct {
	quant         lm.Quant
	quantizeFloat bool
}

func (s storage) storedAs() storage { return s }

// onLoad is the format the loader quantizes float projections in (none
// once they are made).
func (s storage) onLoad() lm.Quant {
	if s.quantizeFloat {
		return s.quant
	}
	return lm.Quant{}
}

// readStorage reads a config's quantization_config, and the format quant
// ("" for none) asks to quantize the float projections in at load.
func readStorage(cfg *weights.Config, quant string) (storage, error) {
	q, err := lm.ReadQuant(cfg)
	if err != nil {
		return storage{}, err
	}
	q, onLoad, err := lm.QuantizeTo(q, quant, "checkpoint")
	return storage{quant: q, quantizeFloat: onLoad}, err
}

// stored is how the graph's weights are stored, for lm.Stored's products:
// their dtypes, and the storage of a Weights that has one (a Model).
func (g *builder) stored() lm.Stored {
	st := lm.Stored{DType: g.w.WeightDType}
	if s, ok := g.w.(interface{ storedAs() storage }); ok {
		q := s.storedAs()
		st.Quant, st.QuantizeFloat = q.quant, q.quantizeFloat
	}
	return st
}

// linear is x · Wᵀ for the projection name [out, in] as stored: matmul, or
// quant_matmul of its codes and scales.
func (g *builder) linear(x *graph.Value, name string, out, in int) *graph.Value {
	g.known(name)
	return g.stored().Linear(g.b, x, name, out, in)
}

// experts is the product of x with the routed experts name [E, out, in] as
// stored: expert_matmul, or quant_expert_matmul of their codes and scales.
func (g *builder) experts(x, ids *graph.Value, name string, out, in int) *graph.Value {
	g.known(name)
	return g.stored().Experts(g.b, x, ids, name, g.c.Experts, out, in)
}

// known fails the graph when the model has no weight name.
func (g *builder) known(name string) {
	if g.w.WeightDType(name) == graph.Invalid {
		g.b.Fail(fmt.Errorf("weight %s: not in the model", name))
	}
}

// Parameters counts the model's weights (a quantized matrix's elements, not
// its codes' and scales').
func (m *Model) Parameters() int {
	if m.quant.Method == "" {
		return m.Tensors.Parameters()
	}
	f := *m
	f.storage = storage{}
	decl, err := f.declare(func(string) graph.DType { return graph.BF16 })
	if err != nil {
		return m.Tensors.Parameters()
	}
	return lm.Parameters(decl)
}

// Quantize quantizes the projections the model holds in a float type in
// the format of quant ("fp8", "q8", "q4"), as LoadQuantized does at load:
// for a synthetic model (models.Quantizer). m is spent: the model returned
// holds its checkpoint's mappings. A model of shapes only gives one of the
// format's shapes.
func (m *Model) Quantize(quant string, progress lm.Progress) (models.Model, error) {
	q, ok, err := lm.QuantizeTo(m.quant, quant, "model")
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if !ok {
		return m, nil
	}
	out := *m
	out.storage = storage{quant: q, quantizeFloat: true}
	decl, err := out.declare(m.WeightDType)
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if m.shapesOnly() {
		out.Tensors = lm.Tensors{}
		for _, d := range decl {
			out.Tensors[d.Name] = lm.Tensor{DType: d.DType, Shape: d.Shape}
		}
	} else if out.Tensors, err = lm.QuantizeTensors(m.Tensors, decl, q, progress); err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	out.quantizeFloat = false
	m.Loaded = lm.Loaded{}
	return &out, nil
}

// shapesOnly says whether the model has weights without values (Shapes).
func (m *Model) shapesOnly() bool {
	for _, t := range m.Tensors {
		if t.Bare() {
			return true
		}
	}
	return false
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
	pre, parts, ok := expertParts(name)
	if !ok {
		return "", nil
	}
	for e := range m.Config.Experts {
		for _, p := range parts {
			if n := r.name(fmt.Sprintf("%s%d.%s", pre, e, p)); n != "" {
				from = append(from, n)
			}
		}
	}
	if len(from) == 0 {
		return "", nil
	}
	stored = name
	if rest, ok := strings.CutPrefix(name, "model."); ok {
		stored = r.pre + rest
	}
	return stored, slices.Clip(from)
}
