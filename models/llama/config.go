package llama

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// Config is a dense decoder's config.json: LlamaForCausalLM (model_type
// llama) or Qwen3ForCausalLM (qwen3: Llama with an RMSNorm on each query
// and key head before the rotation), or an architecture derived from them
// (see Register), which sets the fields where it differs.
type Config struct {
	Vocab, Hidden, FFN, Layers int
	Heads, KVHeads, HeadDim    int
	Eps                        float32
	// Rope is the rotation of queries and keys: theta, rotary dims, scaling.
	Rope ops.RopeAttrs
	// QKNorm: an RMSNorm over each query and key head (Qwen3).
	QKNorm bool
	// Tied: the head reads the embedding table (no lm_head.weight).
	Tied bool
	// AttnBias puts a bias on q, k, v (and, with OBias, o); MLPBias on the MLP's products.
	AttnBias, OBias, MLPBias bool
	// MaxPositions is max_position_embeddings.
	MaxPositions int
	// Window is the keys every layer's attention sees, itself included (a
	// sliding window, sliding_window; 0: every earlier position).
	Window int
}

// Limits on sizes, so that a hostile config.json is refused before
// anything proportional to it is made.
const (
	maxLayers = 1 << 10
	maxWidth  = 1 << 20
	maxVocab  = 1 << 24
	maxWindow = 1 << 30
)

// ReadConfig reads a Llama or Qwen3 config.json, checking every field it
// uses and refusing what it does not support, with errors naming the field.
func ReadConfig(cfg *weights.Config) (Config, error) {
	g := cfg.Get()
	mt := g.String("model_type", "")
	c := Config{
		Vocab:        g.Int("vocab_size", 0),
		Hidden:       g.Int("hidden_size", 0),
		FFN:          g.Int("intermediate_size", 0),
		Layers:       g.Int("num_hidden_layers", 0),
		Heads:        g.Int("num_attention_heads", 0),
		Eps:          float32(g.Float("rms_norm_eps", 1e-6)),
		QKNorm:       mt == "qwen3",
		Tied:         g.Bool("tie_word_embeddings", false),
		AttnBias:     g.Bool("attention_bias", false),
		MLPBias:      g.Bool("mlp_bias", false),
		MaxPositions: g.Int("max_position_embeddings", 0),
	}
	c.OBias = c.AttnBias
	c.KVHeads = g.Int("num_key_value_heads", c.Heads)
	if c.Heads > 0 {
		c.HeadDim = g.Int("head_dim", c.Hidden/c.Heads)
	}
	var errs []error
	if act := g.String("hidden_act", "silu"); act != "silu" {
		errs = append(errs, fmt.Errorf("hidden_act %q: only silu is supported", act))
	}
	if g.Bool("use_sliding_window", false) {
		errs = append(errs, fmt.Errorf("use_sliding_window true: %s's sliding-window layers are not supported", mt))
	}
	if tp := g.Int("pretraining_tp", 1); tp != 1 {
		errs = append(errs, fmt.Errorf("pretraining_tp %d: only 1 is supported", tp))
	}
	rope, err := lm.ReadRope(cfg, "", c.HeadDim)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(append([]error{g.Err()}, errs...)...); err != nil {
		return c, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	c.Rope = rope
	c.Rope.Rotary = c.HeadDim // a Llama rotates whole heads
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	return c, nil
}

// Validate checks the sizes against each other and against limits.
func (c *Config) Validate() error {
	if err := cmp.Or(
		weights.CheckRange("vocab_size", c.Vocab, 1, maxVocab), weights.CheckRange("hidden_size", c.Hidden, 1, maxWidth),
		weights.CheckRange("intermediate_size", c.FFN, 1, maxWidth), weights.CheckRange("num_hidden_layers", c.Layers, 1, maxLayers),
		weights.CheckRange("num_attention_heads", c.Heads, 1, maxWidth), weights.CheckRange("num_key_value_heads", c.KVHeads, 1, maxWidth),
		weights.CheckRange("head_dim", c.HeadDim, 1, maxWidth),
		weights.CheckMultiple("num_attention_heads", c.Heads, "num_key_value_heads", c.KVHeads)); err != nil {
		return err
	}
	if c.Heads*c.HeadDim > maxWidth {
		return fmt.Errorf("num_attention_heads %d × head_dim %d: more than %d", c.Heads, c.HeadDim, maxWidth)
	}
	if !(c.Eps > 0) || c.Eps > 1 {
		return fmt.Errorf("rms_norm_eps %v: want a small positive number", c.Eps)
	}
	if c.Window < 0 || c.Window > maxWindow {
		return fmt.Errorf("sliding_window %d: want 1 to %d (or none)", c.Window, maxWindow)
	}
	if c.MaxPositions < 0 {
		return fmt.Errorf("max_position_embeddings %d is negative", c.MaxPositions)
	}
	if err := c.Rope.Check(); err != nil {
		return fmt.Errorf("rope: %w", err)
	}
	return nil
}
