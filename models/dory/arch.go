package dory

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

func init() {
	makeSynthetic := func(c func() Config) func(graph.DType, uint64, lm.Progress) (models.Model, error) {
		return func(dt graph.DType, seed uint64, p lm.Progress) (models.Model, error) {
			return synthetic(c(), dt, seed, p)
		}
	}
	shapes := func(c func() Config) func() (models.Model, error) {
		return func() (models.Model, error) {
			cfg := c()
			if err := cfg.Validate(); err != nil {
				return nil, err
			}
			return &Model{Config: cfg}, nil
		}
	}
	models.Register(models.Arch{
		Name:          "dory",
		ModelTypes:    []string{"dory"},
		Architectures: []string{"DoryForCausalLM"},
		Load:          func(dir string) (models.Model, error) { return Load(dir) },
		LoadQuantized: func(dir, quant string) (models.Model, error) { return LoadQuantized(dir, quant) },
		Synthetic:     map[string]func(graph.DType, uint64, lm.Progress) (models.Model, error){"dory-4b": makeSynthetic(Released), "dory-h512": makeSynthetic(SmallBench)},
		Shapes:        map[string]func() (models.Model, error){"dory-4b": shapes(Released), "dory-h512": shapes(SmallBench)},
		InfoFields: []string{"attention_head_dim", "rope_theta_2", "partial_rotary_factor", "hybrid_layer_pattern", "n_input_layers",
			"n_recurrent_layers", "n_output_layers", "n_recurrent_loops", "recurrent_kv_cache_mode", "swa_window_size"},
		Params: []models.Param{
			{Name: "loops", Usage: "dory: recurrent loops per token (0: the checkpoint's)"},
			{Name: "kv", Usage: "dory: override the KV cache mode: per_loop or last_loop"},
			{Name: "gate", Usage: "dory: early-exit gate: none, conf:THRESHOLD or recon (needs last_loop)"},
			{Name: "prompt-loops", Usage: "dory: loops of chunks whose logits nobody reads, on last_loop (0: all)"},
		},
	})
}

// params reads the session options of o: those of every session and
// Dory's own, the loops resolved (0: the config's).
func (m *Model) params(o models.Options) (opts Options, err error) {
	if err := o.CheckParams("dory", "loops", "kv", "gate", "prompt-loops"); err != nil {
		return opts, err
	}
	opts.SessionOptions = o.SessionOptions
	if opts.Loops, err = o.Int("loops", 0); err != nil {
		return opts, err
	}
	if opts.Loops == 0 {
		opts.Loops = m.Config.Loops
	}
	if opts.Loops < 1 || opts.Loops > MaxLoops {
		return opts, fmt.Errorf("--loops %d: want 1 to %d", opts.Loops, MaxLoops)
	}
	if opts.PromptLoops, err = o.Int("prompt-loops", 0); err != nil {
		return opts, err
	}
	if opts.PromptLoops < 0 {
		return opts, fmt.Errorf("--prompt-loops %d is negative", opts.PromptLoops)
	}
	if v := o.Params["kv"]; v != "" {
		mode, err := ParseKVMode(v)
		if err != nil {
			return opts, fmt.Errorf("--kv: %w", err)
		}
		opts.KV = &mode
	}
	if opts.Gate, err = ParseGate(o.Params["gate"]); err != nil {
		return opts, fmt.Errorf("--gate: %w", err)
	}
	return opts, nil
}

// Arch names the architecture.
func (m *Model) Arch() string { return "dory" }

// Vocab is the length of a row of logits.
func (m *Model) Vocab() int { return m.Config.Vocab }

// ByteTokens says whether token ids are byte values.
func (m *Model) ByteTokens() bool { return m.Config.ByteLevel }

// Stages names the stages a dump shows, the plain forward first.
func (m *Model) Stages() []string { return stageNames[:] }

// Graph builds a stage's graph with the loops of o (0: the config's).
func (m *Model) Graph(stage string, rows int, want lm.Want, o models.Options) (*graph.Graph, error) {
	opts, err := m.params(o)
	if err != nil {
		return nil, err
	}
	st, err := ParseStage(stage)
	if err != nil {
		return nil, err
	}
	c := m.Config
	if opts.KV != nil {
		c.KV = *opts.KV
	}
	return BuildStage(&c, Key{Stage: st, Loops: opts.Loops, Want: want, Rows: rows}, m.Stored())
}

// NewSession starts a session whose forwards run the loops of o's params.
func (m *Model) NewSession(o models.Options) (models.Session, error) {
	if m.Tensors == nil {
		return nil, fmt.Errorf("dory: a model of shapes only has no weights to run")
	}
	opts, err := m.params(o)
	if err != nil {
		return nil, err
	}
	s, err := NewSession(m, opts)
	if err != nil {
		return nil, err // not a nil *Session in the interface
	}
	return s, nil
}

// Quantize quantizes the projections the model holds in a float type in
// the format of quant ("fp8", "q8", "q4"), as LoadQuantized does at load:
// for a synthetic model. m is spent: the model returned holds its
// checkpoint's mappings. A model of shapes only gives the format's graphs.
func (m *Model) Quantize(quant string, progress lm.Progress) (models.Model, error) {
	l, ok, err := m.Loaded.Quantize(quant, m.Config.declarations, progress)
	if err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	if !ok {
		return m, nil
	}
	return &Model{Config: m.Config, Loaded: l, Router: m.Router}, nil
}
