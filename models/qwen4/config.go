// Package qwen4 implements Qwen4-Exp as graphs of Reel ops: the
// checkpoint's config and weights (per-expert tensors stacked at load, the
// PLE hash constants read into op attributes), the graph of a chunk of rows
// of the forward and of the MTP draft head, and a Session that keeps the
// caches and recurrent states across calls.
//
// The hidden state is kept as C residual streams X = [x_1 | ... | x_C]
// (hc_count). Every block reads a gated mix of the streams and adds its
// output back into each stream with its own gate (a gated residual, "GR"):
//
//	embed      X = [E[t] | ... | E[t]]
//	GR in      Xn = rmsnorm(X; per H-chunk); t = silu(W_down·Xn / C)
//	           u = (1/C) Σ_c σ(W_up·t)_c ⊙ Xn_c;  s = 2σ(W_inject·Xn / C)
//	GR out     X_c += s_c · y
//	layer      [PLE: X += PLE(X, ids)]; y = Mixer(GR_attn in); X = GR_attn out(y)
//	           y = MoE(GR_mlp in); X = GR_mlp out(y)
//	logits     W_lm · u, u the final mixer's GR in (no inject)
//
// The token mixer is Gated DeltaNet (linear_attention layers) or QSA sparse
// attention (every other layer):
//
//	GDN   q,k,v = silu(conv_K(W_qkv·u)); q̂,k̂ = l2norm (q̂ /= √dk); g = −e^A·softplus(W_a·u + dt)
//	      β = σ(W_b·u); per value head S ← e^g S; S ← S + k̂ (β(v − Sᵀk̂))ᵀ; o = Sᵀq̂
//	      y = W_out · (w ⊙ rms(o) ⊙ act(W_z·u))
//	QSA   q,gate = W_q·u; q = rope(rmsnorm(q)); k = rope(rmsnorm(W_k·u)); v = W_v·u
//	      indexer: qI = rope(rmsnorm(qI)); block key = rope(rmsnorm(mean of raw keys))
//	      σ_b = Σ_h relu(qI_h·kb) / √d; keep the top budget/cr blocks + the trailing keys
//	      y = W_o · (softmax(q·k/√hd over the kept keys)·v ⊙ σ(gate))
//
// and the channel mixer a routed MoE with a gated shared expert:
//
//	MoE   p = softmax(W_r·u); top-k (renormalized); y = Σ_j p_j down_j(silu(gate_j u) ⊙ up_j u)
//	      + σ(w_sg·u) · shared(u)
//
// PLE layers add hashed n-gram embeddings, gated per stream by the hidden
// state and passed through a dilated causal conv:
//
//	e = concat_h Table[hash_h(t_0..t_{o−1})]; K = rmsnorm(W_key·e); v = W_val·e
//	γ_c = ssqrt(K_c·rmsnorm(X)_c / √H); gv_c = σ(γ_c)·v
//	X += gv + silu(conv_{K, dilation n}(rmsnorm(gv)))
//
// The MTP head drafts the token after next from the final hyper-state H_t
// and the next token: X_c = fc_h(rmsnorm(H)_c) + fc_e(rmsnorm(E[t+1])),
// one QSA layer with its MoE, then the shared lm_head on its own final mix.
//
// Every rmsnorm here but the GDN's gated norm has its checkpoint weight
// stored as an offset from one; Load folds it into 1 + w (f32).
package qwen4

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// LayerKind is a decoder layer's token mixer.
type LayerKind int

const (
	// GDN is a Gated DeltaNet layer ("linear_attention").
	GDN LayerKind = iota
	// QSA is a sparse attention layer ("qwen_sparse_attention", "full_attention").
	QSA
)

// String gives the kind's short name.
func (k LayerKind) String() string {
	if k == QSA {
		return "qsa"
	}
	return "gdn"
}

// GDNEps is the epsilon of the l2 norms of GDN's queries and keys.
const GDNEps = 1e-6

// Config is a Qwen4-Exp checkpoint's shape and settings: every field the
// forward reads.
type Config struct {
	Vocab, Hidden int
	// Eps is rms_norm_eps, used by every RMS norm.
	Eps float64
	// EOS is the end-of-sequence id (the first if the config lists several);
	// -1 when the config has none (allowed only without PLE layers).
	EOS int
	// Streams is hc_count C; Rank is hc_lowrank R.
	Streams, Rank int
	// Layers gives each decoder layer's token mixer.
	Layers []LayerKind

	// Gated DeltaNet: key and value heads and their dims, the conv kernel
	// and the output gate's activation.
	KeyHeads, KeyDim, ValueHeads, ValueDim int
	ConvKernel                             int
	OutGate                                ops.Activation

	// QSA: query and KV heads of HeadDim, Rotary rotated dims (head_dim ×
	// partial_rotary_factor) at base Theta.
	Heads, KVHeads, HeadDim, Rotary int
	Theta                           float64
	// The indexer: IndexHeads query heads of IndexDim, blocks of Block keys
	// (the compress ratio), Budget keys kept (Budget/Block blocks).
	IndexHeads, IndexDim, Block, Budget int

	// PLE: the zero-based layers that have one, the n-gram size, the table
	// heads of each order, the embedding width, the conv kernel, and the
	// hash's table constants.
	PLELayers                                   []int
	NGram, HeadsPerNGram, PLEDim, PLEConvKernel int
	NGramBase, NGramDivisible                   int
	Seed                                        int64
	// PLEShards is split_ngram_parts: the row chunks the table is stored in
	// (0: as many as the checkpoint has).
	PLEShards int

	// MoE: experts, the top-k, the expert and shared expert widths.
	Experts, TopK, ExpertFFN, SharedFFN int
	NormTopK                            bool

	// MTPLayers is mtp_num_hidden_layers (0 or 1).
	MTPLayers int
	// MaxPositions is max_position_embeddings (0: unknown); a session warns
	// once when a sequence passes it.
	MaxPositions int
}

// Released is the shape of the released Qwen4-Exp, for dumps
// and synthetic benchmarks.
func Released() Config {
	c := Config{
		Vocab: 248320, Hidden: 2560, Eps: 1e-6, EOS: 248044, Streams: 4, Rank: 320,
		KeyHeads: 16, KeyDim: 128, ValueHeads: 48, ValueDim: 128, ConvKernel: 4, OutGate: ops.ActSigmoid,
		Heads: 24, KVHeads: 2, HeadDim: 256, Rotary: 64, Theta: 1e7,
		IndexHeads: 4, IndexDim: 128, Block: 4, Budget: 2048,
		PLELayers: []int{1}, NGram: 3, HeadsPerNGram: 8, PLEDim: 2560, PLEConvKernel: 4,
		NGramBase: 20000000, NGramDivisible: 128, Seed: 1234,
		Experts: 512, TopK: 10, ExpertFFN: 640, SharedFFN: 640, NormTopK: true,
		MTPLayers: 1, MaxPositions: 262144,
	}
	c.Layers = make([]LayerKind, 48)
	for i := 3; i < 48; i += 4 {
		c.Layers[i] = QSA
	}
	return c
}

// HasPLE reports whether layer li has a PLE block.
func (c *Config) HasPLE(li int) bool { return slices.Contains(c.PLELayers, li) }

// PLEIndex is layer li's index among the PLE layers (its hash constants'
// index), or -1.
func (c *Config) PLEIndex(li int) int { return slices.Index(c.PLELayers, li) }

// PLEHeads is the table heads of a PLE layer: (n − 1) · heads per order.
func (c *Config) PLEHeads() int { return (c.NGram - 1) * c.HeadsPerNGram }

// ConvDim is the channels of GDN's conv: [q | k | v].
func (c *Config) ConvDim() int { return 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim }

// Keep is the key blocks a QSA query keeps.
func (c *Config) Keep() int { return c.Budget / c.Block }

// Recurrent reports whether the model keeps state that cannot be rolled
// back by position (GDN layers' states and conv rings, PLE histories).
func (c *Config) Recurrent() bool {
	return len(c.PLELayers) > 0 || slices.Contains(c.Layers, GDN)
}

// Limits of Qwen4-Exp's own fields, beside the generic ones of package
// weights (MaxDim, MaxLayers, MaxPositions). Each is far above the released
// model's and keeps the work a config asks for before its tensors are
// checked (the PLE hash constants above all: a trial division per candidate
// prime) to a fraction of a second.
const (
	// MaxNGram bounds ngram_size (released: 3).
	MaxNGram = 16
	// MaxPLEHeads bounds a PLE layer's table heads, (ngram_size − 1) ×
	// heads_per_ngram (released: 16).
	MaxPLEHeads = 1 << 10
	// MaxNGramBase bounds ngram_vocab_size_base (released: 2·10⁷), the
	// number the table sizes are the next primes after.
	MaxNGramBase = 1 << 36
	// MaxKeep bounds the key blocks a QSA query keeps, indexer_budget /
	// indexer_compress_ratio (released: 512): the selection is that many
	// ids per row.
	MaxKeep = 1 << 16
)

// Validate checks everything a forward relies on, with errors naming the
// field: every size within its range, every tensor's and state's size
// computed without overflow (so that no product wraps around to a wrong
// shape), and the floats in ranges that keep the math finite.
func (c *Config) Validate() error {
	const maxDim = weights.MaxDim
	if err := cmp.Or(
		weights.CheckRange("vocab_size", c.Vocab, 1, maxDim), weights.CheckRange("hidden_size", c.Hidden, 1, maxDim),
		weights.CheckRange("hc_count", c.Streams, 1, maxDim), weights.CheckRange("hc_lowrank", c.Rank, 1, maxDim),
		weights.CheckRange("num_experts", c.Experts, 1, maxDim), weights.CheckRange("num_experts_per_tok", c.TopK, 1, max(c.Experts, 1)),
		weights.CheckRange("moe_intermediate_size", c.ExpertFFN, 1, maxDim),
		weights.CheckRange("shared_expert_intermediate_size", c.SharedFFN, 1, maxDim),
		weights.CheckRange("num_hidden_layers", len(c.Layers), 1, weights.MaxLayers),
		weights.CheckRange("mtp_num_hidden_layers", c.MTPLayers, 0, 1),
		weights.CheckRange("max_position_embeddings", c.MaxPositions, 0, weights.MaxPositions),
		weights.CheckFloat("rms_norm_eps", c.Eps, minEps, 1)); err != nil {
		return err
	}
	ch, err := weights.MulInts(c.Streams, c.Hidden)
	if err != nil {
		return fmt.Errorf("hc_count × hidden_size: %w", err)
	}
	if err := cmp.Or(
		weights.CheckSize("vocab_size × hidden_size", c.Vocab, c.Hidden),
		weights.CheckSize("hc_lowrank × hc_count × hidden_size", c.Rank, ch),
		weights.CheckSize("hc_count × hc_count × hidden_size", c.Streams, ch),
		weights.CheckSize("num_experts × hidden_size", c.Experts, c.Hidden),
		weights.CheckSize("num_experts × 2 × moe_intermediate_size × hidden_size", c.Experts, 2, c.ExpertFFN, c.Hidden),
		weights.CheckSize("shared_expert_intermediate_size × hidden_size", c.SharedFFN, c.Hidden)); err != nil {
		return err
	}
	if slices.Contains(c.Layers, GDN) {
		if err := c.validateGDN(); err != nil {
			return err
		}
	}
	if slices.Contains(c.Layers, QSA) || c.MTPLayers > 0 {
		if err := c.validateQSA(); err != nil {
			return err
		}
	}
	if len(c.PLELayers) > 0 {
		return c.validatePLE(ch)
	}
	return nil
}

// minEps is the smallest rms_norm_eps: the smallest normal f32.
const minEps = 0x1p-126

func (c *Config) validateGDN() error {
	if err := cmp.Or(
		weights.CheckRange("linear_num_key_heads", c.KeyHeads, 1, weights.MaxDim),
		weights.CheckRange("linear_key_head_dim", c.KeyDim, 1, weights.MaxDim),
		weights.CheckRange("linear_num_value_heads", c.ValueHeads, 1, weights.MaxDim),
		weights.CheckRange("linear_value_head_dim", c.ValueDim, 1, weights.MaxDim),
		weights.CheckRange("linear_conv_kernel_dim", c.ConvKernel, 2, weights.MaxDim),
		weights.CheckMultiple("linear_num_value_heads", c.ValueHeads, "linear_num_key_heads", c.KeyHeads)); err != nil {
		return err
	}
	if c.OutGate != ops.ActSigmoid && c.OutGate != ops.ActSiLU {
		return fmt.Errorf("output_gate_type = %q: want sigmoid or silu", c.OutGate)
	}
	qk, err1 := weights.MulInts(2, c.KeyHeads, c.KeyDim)
	vd, err2 := weights.MulInts(c.ValueHeads, c.ValueDim)
	conv, err3 := weights.AddInts(qk, vd)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("the GDN conv channels 2 × linear_num_key_heads × linear_key_head_dim + linear_num_value_heads × linear_value_head_dim: %w", err)
	}
	return cmp.Or(
		weights.CheckSize("the GDN conv channels × hidden_size", conv, c.Hidden),
		weights.CheckSize("the GDN conv channels × linear_conv_kernel_dim", conv, c.ConvKernel),
		weights.CheckSize("linear_num_value_heads × linear_value_head_dim × hidden_size", vd, c.Hidden),
		weights.CheckSize("the GDN state, linear_num_value_heads × linear_key_head_dim × linear_value_head_dim", c.ValueHeads, c.KeyDim, c.ValueDim))
}

func (c *Config) validateQSA() error {
	if err := cmp.Or(
		weights.CheckRange("num_attention_heads", c.Heads, 1, weights.MaxDim),
		weights.CheckRange("num_key_value_heads", c.KVHeads, 1, weights.MaxDim),
		weights.CheckRange("head_dim", c.HeadDim, 1, weights.MaxDim),
		weights.CheckRange("indexer_n_heads", c.IndexHeads, 1, weights.MaxDim),
		weights.CheckRange("indexer_head_dim", c.IndexDim, 1, weights.MaxDim),
		weights.CheckRange("indexer_compress_ratio", c.Block, 1, weights.MaxPositions),
		weights.CheckRange("indexer_budget", c.Budget, 1, weights.MaxPositions),
		weights.CheckMultiple("num_attention_heads", c.Heads, "num_key_value_heads", c.KVHeads),
		weights.CheckMultiple("indexer_budget", c.Budget, "indexer_compress_ratio", c.Block),
		weights.CheckFloat("rope_theta", c.Theta, 1, math.MaxFloat32)); err != nil {
		return err
	}
	if c.Rotary <= 0 || c.Rotary%2 != 0 || c.Rotary > c.HeadDim || c.Rotary > c.IndexDim {
		return fmt.Errorf("partial_rotary_factor gives %d rotary dims: they must be even, positive and at most head_dim %d and indexer_head_dim %d",
			c.Rotary, c.HeadDim, c.IndexDim)
	}
	if c.Keep() > MaxKeep {
		return fmt.Errorf("indexer_budget %d / indexer_compress_ratio %d = %d blocks kept: at most %d", c.Budget, c.Block, c.Keep(), MaxKeep)
	}
	return cmp.Or(
		weights.CheckSize("2 × num_attention_heads × head_dim × hidden_size", 2, c.Heads, c.HeadDim, c.Hidden),
		weights.CheckSize("num_key_value_heads × head_dim × hidden_size", c.KVHeads, c.HeadDim, c.Hidden),
		weights.CheckSize("(indexer_n_heads + 1) × indexer_head_dim × hidden_size", c.IndexHeads+1, c.IndexDim, c.Hidden))
}

func (c *Config) validatePLE(ch int) error {
	for i, li := range c.PLELayers {
		if li < 0 || li >= len(c.Layers) {
			return fmt.Errorf("ple_layer_ids[%d] = %d: want 1 to %d (one-based)", i, li+1, len(c.Layers))
		}
		if slices.Index(c.PLELayers, li) != i {
			return fmt.Errorf("ple_layer_ids[%d] = %d: listed twice", i, li+1)
		}
	}
	if err := cmp.Or(
		weights.CheckRange("ngram_size", c.NGram, 2, MaxNGram),
		weights.CheckRange("heads_per_ngram", c.HeadsPerNGram, 1, MaxPLEHeads),
		weights.CheckRange("ple_embed_dim", c.PLEDim, 1, weights.MaxDim),
		weights.CheckRange("ple_conv_kernel_size", c.PLEConvKernel, 2, weights.MaxDim),
		weights.CheckRange("ngram_vocab_size_base", c.NGramBase, 2, MaxNGramBase),
		weights.CheckRange("make_ngram_vocab_size_divisible_by", c.NGramDivisible, 1, weights.MaxDim),
		weights.CheckRange("split_ngram_parts", c.PLEShards, 0, weights.MaxDim)); err != nil {
		return err
	}
	if heads := c.PLEHeads(); heads > MaxPLEHeads {
		return fmt.Errorf("(ngram_size %d − 1) × heads_per_ngram %d = %d table heads: at most %d", c.NGram, c.HeadsPerNGram, heads, MaxPLEHeads)
	}
	if c.PLEDim%c.PLEHeads() != 0 {
		return fmt.Errorf("ple_embed_dim = %d: must be a positive multiple of the %d table heads", c.PLEDim, c.PLEHeads())
	}
	if c.EOS < 0 {
		return fmt.Errorf("eos_token_id = %d: PLE layers need the end-of-sequence id", c.EOS)
	}
	if c.EOS >= c.Vocab || c.EOS > math.MaxInt32 {
		return fmt.Errorf("eos_token_id = %d: outside the vocabulary (vocab_size %d)", c.EOS, c.Vocab)
	}
	return cmp.Or(
		weights.CheckSize("hc_count × hidden_size × ple_embed_dim", ch, c.PLEDim),
		weights.CheckSize("hc_count × hidden_size × ple_conv_kernel_size", ch, c.PLEConvKernel),
		weights.CheckSize("the PLE history, hc_count × hidden_size × ple_conv_kernel_size × ngram_size", ch, c.PLEConvKernel, c.NGram))
}

// ConfigFromJSON reads a Qwen4-Exp config.json (the text model's, or a
// multimodal one's text_config), checking every field transformers' Qwen4ExpConfig reads and
// rejecting settings the graphs do not implement, with errors naming the
// field.
func ConfigFromJSON(cfg *weights.Config) (Config, error) {
	pre := ""
	if cfg.Has("text_config") && !cfg.IsNull("text_config") {
		pre = "text_config."
	}
	g := cfg.Get()
	var c Config
	var errs []error
	key := func(k string) string { return pre + k }
	has := func(k string) bool { return cfg.Has(key(k)) && !cfg.IsNull(key(k)) }
	c.Vocab = g.Int(key("vocab_size"), 0)
	c.Hidden = g.Int(key("hidden_size"), 0)
	c.Eps = g.Float(key("rms_norm_eps"), 1e-6)
	eos := key("eos_token_id")
	if !has("eos_token_id") {
		eos = "eos_token_id" // a multimodal config's, beside its text_config
	}
	c.EOS = -1
	if ids := g.IDs(eos); len(ids) > 0 {
		c.EOS = ids[0]
	} else if ids != nil {
		errs = append(errs, fmt.Errorf("%s = []: want an id or a non-empty list of ids", eos))
	}
	c.Streams = g.Int(key("hc_count"), 0)
	c.Rank = g.Int(key("hc_lowrank"), 0)
	layers := g.IntIn(key("num_hidden_layers"), 0, 0, weights.MaxLayers)
	types := g.Strings(key("layer_types"))
	c.KeyHeads = g.Int(key("linear_num_key_heads"), 0)
	c.KeyDim = g.Int(key("linear_key_head_dim"), 0)
	c.ValueHeads = g.Int(key("linear_num_value_heads"), 0)
	c.ValueDim = g.Int(key("linear_value_head_dim"), 0)
	c.ConvKernel = g.Int(key("linear_conv_kernel_dim"), 4)
	c.OutGate = ops.Activation(g.String(key("output_gate_type"), string(ops.ActSiLU)))
	c.Heads = g.Int(key("num_attention_heads"), 0)
	c.KVHeads = g.Int(key("num_key_value_heads"), c.Heads)
	c.HeadDim = g.Int(key("head_dim"), 0)
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	rope, err := lm.ReadRope(cfg, pre, c.HeadDim)
	if err != nil {
		errs = append(errs, err)
	}
	c.Theta, c.Rotary = rope.Theta, rope.Rotary
	c.IndexHeads = g.Int(key("indexer_n_heads"), 0)
	c.IndexDim = g.Int(key("indexer_head_dim"), 0)
	c.Block = g.Int(key("indexer_compress_ratio"), 0)
	c.Budget = g.Int(key("indexer_budget"), 0)
	pleIDs := g.Ints(key("ple_layer_ids"))
	c.NGram = g.Int(key("ngram_size"), 0)
	c.HeadsPerNGram = g.Int(key("heads_per_ngram"), 0)
	c.PLEDim = g.Int(key("ple_embed_dim"), 0)
	c.PLEConvKernel = g.Int(key("ple_conv_kernel_size"), 0)
	c.NGramBase = g.Int(key("ngram_vocab_size_base"), 0)
	c.NGramDivisible = g.Int(key("make_ngram_vocab_size_divisible_by"), 1)
	c.Seed = int64(g.Int(key("seed"), 0))
	c.PLEShards = g.Int(key("split_ngram_parts"), 0)
	c.Experts = g.Int(key("num_experts"), 0)
	c.TopK = g.Int(key("num_experts_per_tok"), 0)
	c.ExpertFFN = g.Int(key("moe_intermediate_size"), 0)
	c.SharedFFN = g.Int(key("shared_expert_intermediate_size"), 0)
	c.NormTopK = g.Bool(key("norm_topk_prob"), true)
	c.MTPLayers = g.Int(key("mtp_num_hidden_layers"), 0)
	c.MaxPositions = g.Int(key("max_position_embeddings"), 0)
	weights.Need(g, key("hidden_act"), "silu", "Qwen4-Exp needs silu")
	weights.Need(g, key("tie_word_embeddings"), false, "Qwen4-Exp needs an untied lm_head")
	weights.Need(g, key("attention_bias"), false, "not supported")
	weights.Need(g, key("decoder_sparse_step"), 1, "every layer must be MoE (1)")
	weights.Need(g, key("indexer_kv_heads"), 1, "the indexer needs 1")
	mlpOnly := g.Ints(key("mlp_only_layers"))
	if err := g.Err(); err != nil {
		return c, err
	}
	if len(mlpOnly) > 0 {
		errs = append(errs, fmt.Errorf("mlp_only_layers = %v: dense MLP layers are not supported", mlpOnly))
	}
	if t := rope.Scaling.Type; t != "" && t != ops.RopeDefault {
		errs = append(errs, fmt.Errorf("rope_type = %q: only default rope is supported", t))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	if types == nil {
		return c, fmt.Errorf("%s: layer_types is missing", cfg.Path())
	}
	if len(types) != layers {
		return c, fmt.Errorf("%s: num_hidden_layers %d but layer_types has %d entries", cfg.Path(), layers, len(types))
	}
	c.Layers = make([]LayerKind, len(types))
	for i, t := range types {
		switch t {
		case "linear_attention":
			c.Layers[i] = GDN
		case "qwen_sparse_attention", "full_attention":
			c.Layers[i] = QSA
		default:
			return c, fmt.Errorf("%s: layer_types[%d] = %q: want linear_attention, qwen_sparse_attention or full_attention", cfg.Path(), i, t)
		}
	}
	for _, id := range pleIDs {
		c.PLELayers = append(c.PLELayers, id-1)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	return c, nil
}
