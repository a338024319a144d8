package lm

import (
	"errors"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// ReadRope reads the rotation of queries and keys of heads of headDim
// from a config's fields under prefix ("", or "text_config." for a
// multimodal config's text model), in either spelling: transformers 5's
// rope_parameters (theta, type and partial factor inside), or the
// top-level rope_theta, partial_rotary_factor and rope_scaling of older
// checkpoints. Rotary is headDim × partial_rotary_factor (1 when absent),
// rounded; Scaling is the rope type and its parameters. A type other than
// default, linear, llama3 or yarn is an error naming the field, as is
// every field that does not read.
func ReadRope(cfg *weights.Config, prefix string, headDim int) (ops.RopeAttrs, error) {
	g := cfg.Get()
	p := prefix + "rope_scaling"
	if cfg.Has(prefix+"rope_parameters") && !cfg.IsNull(prefix+"rope_parameters") {
		p = prefix + "rope_parameters"
	}
	theta := g.Float(prefix+"rope_theta", 10000)
	partial := g.FloatIn(prefix+"partial_rotary_factor", 1, 0, 1)
	if p == prefix+"rope_parameters" {
		theta = g.Float(p+".rope_theta", theta)
		partial = g.FloatIn(p+".partial_rotary_factor", partial, 0, 1)
	}
	r := ops.RopeAttrs{HeadDim: headDim, Rotary: int(math.Round(float64(headDim) * partial)), Theta: theta}
	if !cfg.Has(p) || cfg.IsNull(p) {
		return r, g.Err()
	}
	typ := g.String(p+".rope_type", "")
	if typ == "" {
		typ = g.String(p+".type", ops.RopeDefault) // the older spelling
	}
	s := ops.RopeScaling{
		Type:                 typ,
		Factor:               g.Float(p+".factor", 0),
		OriginalMaxPositions: g.Int(p+".original_max_position_embeddings", 0),
		LowFreqFactor:        g.Float(p+".low_freq_factor", 0),
		HighFreqFactor:       g.Float(p+".high_freq_factor", 0),
		BetaFast:             g.Float(p+".beta_fast", 0),
		BetaSlow:             g.Float(p+".beta_slow", 0),
		MScale:               g.Float(p+".mscale", 0),
		MScaleAllDim:         g.Float(p+".mscale_all_dim", 0),
		AttentionFactor:      g.Float(p+".attention_factor", 0),
		NoTruncate:           !g.Bool(p+".truncate", true),
	}
	switch typ {
	case ops.RopeDefault:
		return r, g.Err()
	case ops.RopeLinear, ops.RopeLlama3, ops.RopeYarn:
	default:
		return r, errors.Join(g.Err(), fmt.Errorf("%s.rope_type %q: want default, linear, llama3 or yarn", p, typ))
	}
	if s.OriginalMaxPositions == 0 && typ == ops.RopeYarn {
		// transformers' fallback: the context the config states
		s.OriginalMaxPositions = g.Int(prefix+"max_position_embeddings", 0)
	}
	r.Scaling = s
	return r, g.Err()
}
