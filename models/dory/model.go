package dory

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/weights"
)

// Model is a loaded Dory: its config, its matrices as stored, and its scale
// vectors folded at load (the seed's folding, in f32):
//
//	sqk      -> (sqk · √hd / σ₀)²
//	s_gate   -> (s_gate · √g₀ / σ₀)²
//	suv_*    -> suv · √hidden
//	*_alpha  -> |α · α₀ / σ₀|
//	logit_scale -> logit_scale / σ₀
type Model struct {
	Config Config
	// Loaded are the matrices as stored and the folded vectors in f32.
	lm.Loaded
	// Router is the recon early-exit router a checkpoint may carry, or nil.
	Router *Router
}

// Load reads a Dory checkpoint folder (config.json and safetensors, sharded
// or not, in f32, f16 or bf16). Every tensor the config implies must be there
// with its shape; errors name the tensor and its sub-layer.
func Load(dir string) (*Model, error) { return LoadQuantized(dir, "") }

// LoadQuantized is Load, quantizing at load the projections (q, k, v, g,
// o, gate, up, down) the checkpoint stores in a float type in the format
// of quant ("fp8", "q8", "q4"; "": none). The embedding, the head, the
// scale vectors and the router stay as stored. A checkpoint stored
// quantized (its config's quantization_config) is read as it is.
func LoadQuantized(dir, quant string) (*Model, error) {
	return lm.Load(dir, "dory", quant, func(cfg *weights.Config) (Config, error) {
		if mt, _ := cfg.String("model_type", "dory"); mt != "dory" {
			return Config{}, fmt.Errorf("%s: model_type %q is not dory", cfg.Path(), mt)
		}
		return ConfigFromJSON(cfg)
	}, fromCheckpoint)
}

// Parameters counts the weights of a model of config c (what Synthetic
// makes and a checkpoint holds), without making them.
func (c *Config) Parameters() int {
	decl, err := c.declarations(lm.Stored{}) // the matrices' elements, not their codes'
	if err != nil {
		return 0
	}
	return lm.Parameters(decl)
}

// declarations are the weights of a model of config c whose weights are
// stored as st says: those its graphs read (the one-loop forward reads
// every one).
func (c *Config) declarations(st lm.Stored) ([]lm.Declared, error) {
	g, err := BuildStage(c, Key{Stage: All, Loops: 1, Want: lm.WantLast, Rows: 1}, st)
	if err != nil {
		return nil, err
	}
	return lm.Declarations(g)
}

// fold gives the folding of a scale vector at load (see Model), by its
// checkpoint name.
func (c *Config) fold(name string) func(x []float32) {
	std := c.Std
	each := func(f func(float32) float32) func([]float32) {
		return func(x []float32) {
			for i := range x {
				x[i] = f(x[i])
			}
		}
	}
	square := func(f float32) func([]float32) { return each(func(x float32) float32 { s := x * f; return s * s }) }
	times := func(f float32) func([]float32) { return each(func(x float32) float32 { return x * f }) }
	switch {
	case strings.HasSuffix(name, ".sqk"):
		return square(float32(math.Sqrt(float64(c.HeadDim)) / std))
	case strings.HasSuffix(name, ".s_gate"):
		return square(float32(math.Sqrt(c.GateLogitScale) / std))
	case strings.HasSuffix(name, ".suv_gate"), strings.HasSuffix(name, ".suv_up"):
		return times(float32(math.Sqrt(float64(c.Hidden))))
	case strings.HasSuffix(name, "_alpha"):
		a := float32(c.AlphaInit / std)
		return each(func(x float32) float32 { return float32(math.Abs(float64(x * a))) })
	case name == "lm_head.logit_scale":
		return times(float32(1 / std))
	}
	return nil
}

// fromCheckpoint reads the weights of a checkpoint stored as st says, and
// its router.
func fromCheckpoint(c Config, st lm.Stored, ck *weights.Checkpoint) (*Model, error) {
	st.DType = lm.StoredDType(ck)
	decl, err := c.declarations(st)
	if err != nil {
		return nil, err
	}
	isRouter := func(name string) bool { return strings.HasPrefix(name, "dory.router.") }
	ts, err := lm.LoadWeights(ck, decl, lm.LoadOptions{Fold: c.fold, Unused: isRouter, Quant: st.OnLoad()})
	if err != nil {
		return nil, err
	}
	m := &Model{Config: c, Loaded: lm.Loaded{Tensors: ts, Checkpoint: ck, Quant: st.Quant}}
	if m.Router, err = loadRouter(ck, c.Hidden); err != nil {
		return nil, err
	}
	return m, nil
}

// Synthetic makes a model of config c with random weights of dtype dt (f32 or
// bf16), for benchmarks and tests that need no file. Matrices are uniform with
// the variance of 1/fan-in; scales are drawn around the released model's, so
// the forward stays well-conditioned. Generation runs on every core: the
// released shape's 8 GB take seconds.
func Synthetic(c Config, dt graph.DType, seed uint64) (*Model, error) {
	return synthetic(c, dt, seed, nil)
}

// synthetic is Synthetic telling progress the bytes made.
func synthetic(c Config, dt graph.DType, seed uint64, progress lm.Progress) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if dt != graph.F32 && dt != graph.BF16 {
		return nil, fmt.Errorf("dory: synthetic weights in %s: want f32 or bf16", dt)
	}
	decl, err := c.declarations(lm.Stored{DType: func(string) graph.DType { return dt }})
	if err != nil {
		return nil, err
	}
	scale := func(d lm.Declared, _ int, u float64) float32 {
		x := []float32{float32(c.Std * (0.5 + u))}
		if f := c.fold(d.Name); f != nil {
			f(x) // folded as Load folds a stored scale
		}
		return x[0]
	}
	ts, err := lm.Synthesize(decl, seed, scale, progress)
	if err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	return &Model{Config: c, Loaded: lm.Loaded{Tensors: ts}}, nil
}

// Parameters counts the model's weights (a quantized matrix's elements,
// not its codes' and scales'; a model of shapes only, those it would have).
func (m *Model) Parameters() int { return m.Config.Parameters() }

// ConfigFromJSON reads a Dory config.json, checking every field vLLM's DoryConfig lists
// and rejecting what Dory does not support, with errors naming the field.
func ConfigFromJSON(cfg *weights.Config) (Config, error) {
	g := cfg.Get()
	var c Config
	var errs []error // checks that are not plain field reads
	if v := g.Int("dory_format_version", 1); v != 1 {
		return c, fmt.Errorf("%s: dory_format_version %d: only 1 is supported", cfg.Path(), v)
	}
	c.Vocab = g.Int("vocab_size", 0)
	c.Hidden = g.Int("hidden_size", 0)
	c.FFN = g.Int("intermediate_size", 0)
	c.Heads = g.Int("num_attention_heads", 0)
	c.KVHeads = g.Int("num_key_value_heads", c.Heads)
	c.HeadDim = g.Int("attention_head_dim", 0)
	if hd := g.Int("head_dim", c.HeadDim); c.HeadDim == 0 {
		c.HeadDim = hd
	} else if hd != c.HeadDim {
		return c, fmt.Errorf("%s: head_dim %d disagrees with attention_head_dim %d", cfg.Path(), hd, c.HeadDim)
	}
	layers := g.Int("num_hidden_layers", 0)
	c.Pattern = g.String("hybrid_layer_pattern", "")
	c.NIn = g.Int("n_input_layers", 0)
	c.NOut = g.Int("n_output_layers", 0)
	c.NRec = g.Int("n_recurrent_layers", layers-c.NIn-c.NOut)
	c.Loops = g.Int("n_recurrent_loops", 0)
	kv := g.String("recurrent_kv_cache_mode", "per_loop")
	c.Window = g.Int("swa_window_size", 0)
	theta := g.Float("rope_theta", 10000)
	theta2 := g.Float("rope_theta_2", theta)
	f1 := g.Float("partial_rotary_factor", 1)
	f2 := g.Float("partial_rotary_factor_2", f1)
	c.LayerProfile = g.Ints("rope_profile_layers")
	noRope := g.Ints("no_rope_layers")
	c.Std = g.Float("init_method_std", 0.02)
	c.AlphaInit = g.Float("ngpt_alpha_init", 0.05)
	c.MaxPositionEmbed = g.Int("max_position_embeddings", 0)
	tok, _ := cfg.String("tokenizer", "")
	c.ByteLevel = strings.HasPrefix(tok, "bytes")
	if !cfg.IsNull("attention_output_gate_logit_scale_init") && cfg.Has("attention_output_gate_logit_scale_init") {
		c.GateLogitScale = g.Float("attention_output_gate_logit_scale_init", 0)
	} else {
		c.GateLogitScale = math.Sqrt(float64(c.Hidden))
	}
	for _, key := range []string{"ngpt", "fngpt", "attention_output_gate"} {
		weights.Need(g, key, true, "Dory needs true")
	}
	for _, key := range []string{"ngpt_enable_final_norm", "attention_bias", "mlp_bias", "tie_word_embeddings"} {
		weights.Need(g, key, false, "Dory needs false")
	}
	weights.Need(g, "mlp_hidden_act", "silu", `Dory needs "silu"`)
	weights.Need(g, "initial_state", "input_copy", `Dory needs "input_copy"`)
	weights.Need(g, "input_transform", "residual", `Dory needs "residual"`)
	weights.Need(g, "output_transform", "replace", `Dory needs "replace"`)
	if cfg.Has("mixer_type") && !cfg.IsNull("mixer_type") {
		errs = append(errs, fmt.Errorf("mixer_type = %s: Dory needs null", cfg.Raw("mixer_type")))
	}
	weights.Need(g, "swa_num_attention_heads", c.Heads, fmt.Sprintf("sliding layers must match the full ones (%d)", c.Heads))
	weights.Need(g, "swa_num_key_value_heads", c.KVHeads, fmt.Sprintf("sliding layers must match the full ones (%d)", c.KVHeads))
	weights.Need(g, "swa_head_dim", c.HeadDim, fmt.Sprintf("sliding layers must match the full ones (%d)", c.HeadDim))
	if err := errors.Join(append([]error{g.Err()}, errs...)...); err != nil {
		return c, err
	}
	if layers != len(c.Pattern) {
		return c, fmt.Errorf("%s: num_hidden_layers %d but hybrid_layer_pattern has %d sub-layers", cfg.Path(), layers, len(c.Pattern))
	}
	for i, v := range noRope {
		if v != 0 {
			return c, fmt.Errorf("%s: no_rope_layers[%d] = %d: NoPE layers are not supported", cfg.Path(), i, v)
		}
	}
	if c.LayerProfile == nil {
		c.LayerProfile = make([]int, layers)
		for i := range c.LayerProfile {
			c.LayerProfile[i] = 1
		}
	}
	mode, err := ParseKVMode(kv)
	if err != nil {
		return c, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	c.KV = mode
	rot := func(f float64) int { return int(math.Round(float64(c.HeadDim) * f)) }
	c.Profiles = [2]RopeProfile{{Theta: theta, Rotary: rot(f1)}, {Theta: theta2, Rotary: rot(f2)}}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	return c, nil
}
