// Package dory implements NVIDIA Nemotron Labs Dory, a looped normalized GPT,
// as graphs of Reel ops: the checkpoint's config and weights (scales folded
// at load), the graphs of every stage of a forward, and a Session that keeps
// the KV cache across calls.
//
// The stack is three blocks of sub-layers: input, recurrent and output. The
// recurrent block runs `loops` times per token with the input block's output
// mixed back in before each pass. A sub-layer is gated GQA attention (sliding
// or full) or a SwiGLU MLP, and every residual is nGPT's slerp on the unit
// sphere:
//
//	attention  q,k,v,g = W·x; q = s_q ⊙ n_head(rope(q)); k = n_head(rope(k))
//	           y = n(softmax(q·k/√d)·v ⊙ σ(g ⊙ s_g)); out = O·y
//	mlp        y = n(silu(G·x ⊙ s_g) ⊙ (U·x ⊙ s_u)); out = D·y
//	residual   x = n(n(x) + α ⊙ (n(out) − n(x)))
//	loop       input = h; state = input; per loop: h = n(state + input), R(h), state = n(h)
//	logits     H·h ⊙ logit_scale / σ₀
package dory

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	"github.com/reel-runtime/reel/weights"
)

// MaxLoops is the most passes of the recurrent block a call may ask for.
const MaxLoops = 16

// Eps is justnorm's epsilon.
const Eps = 1e-6

// KVMode says how the recurrent block's attention layers keep their rows.
type KVMode int

const (
	// PerLoop keeps one KV slot per loop in each recurrent attention layer.
	PerLoop KVMode = iota
	// LastLoop keeps one slot per layer; each loop rewrites the chunk's rows,
	// so earlier rows hold their last loop's keys.
	LastLoop
)

// String gives the config spelling.
func (m KVMode) String() string {
	if m == LastLoop {
		return "last_loop"
	}
	return "per_loop"
}

// ParseKVMode reads "per_loop" or "last_loop".
func ParseKVMode(s string) (KVMode, error) {
	switch s {
	case "per_loop":
		return PerLoop, nil
	case "last_loop":
		return LastLoop, nil
	}
	return 0, fmt.Errorf("recurrent_kv_cache_mode %q: want per_loop or last_loop", s)
}

// RopeProfile is one of the two rotary settings a layer may use.
type RopeProfile struct {
	Theta float64
	// Rotary is the rotated dims of a head: head_dim × the partial factor.
	Rotary int
}

// Config is a Dory checkpoint's shape and settings.
type Config struct {
	Vocab, Hidden, FFN      int
	Heads, KVHeads, HeadDim int
	// Pattern has one character per sub-layer: 'S' sliding attention, '*'
	// full attention, '-' SwiGLU MLP.
	Pattern          string
	NIn, NRec, NOut  int
	Loops            int
	KV               KVMode
	Window           int
	Profiles         [2]RopeProfile
	LayerProfile     []int // 1 or 2 per sub-layer
	Std              float64
	AlphaInit        float64
	GateLogitScale   float64 // g0
	MaxPositionEmbed int
	// ByteLevel says token ids are byte values (config "tokenizer":
	// "bytes...").
	ByteLevel bool
}

// Released is the shape of NVIDIA-Nemotron-Labs-Dory1.0-4B, for synthetic
// benchmarks and dumps.
func Released() Config {
	c := Config{
		Vocab: 131072, Hidden: 2560, FFN: 7168, Heads: 16, KVHeads: 4, HeadDim: 256,
		Pattern: strings.Repeat("S-S-S-*-", 9), NIn: 16, NRec: 40, NOut: 16, Loops: 2,
		KV: PerLoop, Window: 1024, Std: 0.02, AlphaInit: 0.05,
		Profiles: [2]RopeProfile{{Theta: 1e6, Rotary: 256}, {Theta: 1e4, Rotary: 256}},
	}
	c.GateLogitScale = math.Sqrt(float64(c.Hidden))
	c.LayerProfile = slidingProfiles(c.Pattern)
	return c
}

// slidingProfiles gives sliding layers rope profile 2 and the others 1, as
// the released checkpoint does.
func slidingProfiles(pattern string) []int {
	p := make([]int, len(pattern))
	for i, k := range pattern {
		p[i] = 1
		if k == 'S' {
			p[i] = 2
		}
	}
	return p
}

// SmallBench is a Dory of hidden 512 with 8 input, 8 recurrent and 8 output
// sub-layers and a 4096-token vocabulary: the benchmark shape between the
// tiny test models and the released 4B.
func SmallBench() Config {
	c := Config{
		Vocab: 4096, Hidden: 512, FFN: 1536, Heads: 8, KVHeads: 2, HeadDim: 64,
		Pattern: strings.Repeat("S-S-S-*-", 3), NIn: 8, NRec: 8, NOut: 8, Loops: 2,
		KV: PerLoop, Window: 256, Std: 0.02, AlphaInit: 0.05,
		GateLogitScale: math.Sqrt(512),
		Profiles:       [2]RopeProfile{{Theta: 1e5, Rotary: 64}, {Theta: 1e4, Rotary: 64}},
	}
	c.LayerProfile = slidingProfiles(c.Pattern)
	return c
}

// Layers is the number of sub-layers.
func (c *Config) Layers() int { return len(c.Pattern) }

// IsAttention reports whether sub-layer i is attention.
func (c *Config) IsAttention(i int) bool { return c.Pattern[i] != '-' }

// IsSliding reports whether sub-layer i is sliding-window attention.
func (c *Config) IsSliding(i int) bool { return c.Pattern[i] == 'S' }

// Block says which block sub-layer i belongs to: 0 input, 1 recurrent, 2 output.
func (c *Config) Block(i int) int {
	switch {
	case i < c.NIn:
		return 0
	case i < c.NIn+c.NRec:
		return 1
	}
	return 2
}

// maxFold bounds the factors the scale vectors are folded with at load
// (1/σ₀, √head_dim/σ₀, √g₀/σ₀, α₀/σ₀): squared, they stay finite in f32
// with stored values up to 1e7, so a config cannot make the folded weights,
// and every logit, infinite or NaN.
const maxFold = 1e12

// Validate checks everything a forward relies on, with errors that name the
// field: every size within its range (weights.MaxDim, weights.MaxLayers,
// weights.MaxPositions), every tensor's size computed without overflow, and
// the scales in ranges that keep the folded weights finite.
func (c *Config) Validate() error {
	const maxDim = weights.MaxDim
	if err := cmp.Or(
		weights.CheckRange("vocab_size", c.Vocab, 1, maxDim), weights.CheckRange("hidden_size", c.Hidden, 1, maxDim),
		weights.CheckRange("intermediate_size", c.FFN, 1, maxDim), weights.CheckRange("num_attention_heads", c.Heads, 1, maxDim),
		weights.CheckRange("num_key_value_heads", c.KVHeads, 1, maxDim), weights.CheckRange("attention_head_dim", c.HeadDim, 1, maxDim),
		weights.CheckRange("n_recurrent_loops", c.Loops, 1, MaxLoops),
		weights.CheckRange("max_position_embeddings", c.MaxPositionEmbed, 0, weights.MaxPositions),
		weights.CheckRange("num_hidden_layers", len(c.Pattern), 1, weights.MaxLayers),
		weights.CheckMultiple("num_attention_heads", c.Heads, "num_key_value_heads", c.KVHeads)); err != nil {
		return err
	}
	if err := cmp.Or(
		weights.CheckSize("vocab_size × hidden_size", c.Vocab, c.Hidden),
		weights.CheckSize("intermediate_size × hidden_size", c.FFN, c.Hidden),
		weights.CheckSize("num_attention_heads × attention_head_dim × hidden_size", c.Heads, c.HeadDim, c.Hidden)); err != nil {
		return err
	}
	for i, k := range c.Pattern {
		if k != 'S' && k != '*' && k != '-' {
			return fmt.Errorf("hybrid_layer_pattern[%d] = %q: want S, * or -", i, k)
		}
	}
	if c.NIn < 0 || c.NRec < 0 || c.NOut < 0 || c.NIn > len(c.Pattern) || c.NRec > len(c.Pattern) || c.NOut > len(c.Pattern) ||
		c.NIn+c.NRec+c.NOut != len(c.Pattern) {
		return fmt.Errorf("n_input_layers %d + n_recurrent_layers %d + n_output_layers %d must equal the %d sub-layers", c.NIn, c.NRec, c.NOut, len(c.Pattern))
	}
	if c.NRec == 0 {
		return fmt.Errorf("n_recurrent_layers is 0: a Dory needs a recurrent block")
	}
	if strings.ContainsRune(c.Pattern, 'S') {
		hi := weights.MaxPositions
		if c.MaxPositionEmbed > 0 {
			hi = c.MaxPositionEmbed
		}
		if c.Window <= 0 || c.Window > hi {
			return fmt.Errorf("swa_window_size = %d: want 1 to %d (max_position_embeddings, or the limit of %d) when the pattern has sliding layers",
				c.Window, hi, weights.MaxPositions)
		}
	}
	if len(c.LayerProfile) != len(c.Pattern) {
		return fmt.Errorf("rope_profile_layers has %d entries for %d sub-layers", len(c.LayerProfile), len(c.Pattern))
	}
	for i, p := range c.LayerProfile {
		if p == 0 {
			return fmt.Errorf("rope_profile_layers[%d] = 0: NoPE layers are not supported", i)
		}
		if p != 1 && p != 2 {
			return fmt.Errorf("rope_profile_layers[%d] = %d: want 1 or 2", i, p)
		}
	}
	for i, p := range c.Profiles {
		suffix := [2]string{"", "_2"}[i]
		if !(p.Theta >= 1 && p.Theta <= math.MaxFloat32) {
			return fmt.Errorf("rope_theta%s = %v (rope profile %d): want 1 to %v", suffix, p.Theta, i+1, math.MaxFloat32)
		}
		if p.Rotary <= 0 || p.Rotary%2 != 0 || p.Rotary > c.HeadDim {
			return fmt.Errorf("partial_rotary_factor%s gives %d rotary dims (rope profile %d): they must be even, positive and at most head_dim %d",
				suffix, p.Rotary, i+1, c.HeadDim)
		}
	}
	if !(c.Std > 0) || math.IsInf(c.Std, 0) {
		return fmt.Errorf("init_method_std = %v: must be positive and finite", c.Std)
	}
	if !(c.GateLogitScale > 0) || math.IsInf(c.GateLogitScale, 0) {
		return fmt.Errorf("attention_output_gate_logit_scale_init = %v: must be positive and finite", c.GateLogitScale)
	}
	if math.IsNaN(c.AlphaInit) || math.IsInf(c.AlphaInit, 0) {
		return fmt.Errorf("ngpt_alpha_init = %v: must be finite", c.AlphaInit)
	}
	for _, f := range []struct {
		what string
		v    float64
	}{{"1 / init_method_std", 1 / c.Std}, {"√attention_head_dim / init_method_std", math.Sqrt(float64(c.HeadDim)) / c.Std},
		{"√attention_output_gate_logit_scale_init / init_method_std", math.Sqrt(c.GateLogitScale) / c.Std},
		{"|ngpt_alpha_init| / init_method_std", math.Abs(c.AlphaInit) / c.Std}} {
		if !(f.v <= maxFold) {
			return fmt.Errorf("init_method_std = %v, ngpt_alpha_init = %v, attention_output_gate_logit_scale_init = %v: %s = %v, more than %v: the folded scales would overflow",
				c.Std, c.AlphaInit, c.GateLogitScale, f.what, f.v, maxFold)
		}
	}
	return nil
}
