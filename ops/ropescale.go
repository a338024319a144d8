package ops

import (
	"fmt"
	"math"
	"strings"
)

// Rope scaling: the frequency tables and attention factors of the rope types
// of Hugging Face transformers 5 (modeling_rope_utils.py:
// _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters and _compute_yarn_parameters), computed in
// float64 where transformers computes in float32.

// The rope types RopeScaling knows (a checkpoint's rope_type).
const (
	RopeDefault = "default"
	RopeLinear  = "linear"
	RopeLlama3  = "llama3"
	RopeYarn    = "yarn"
)

// RopeScaling is a checkpoint's rope scaling (config.json's rope_parameters
// or rope_scaling): a rope type and its parameters. Fields a type does not
// use are ignored. The zero value is the default rope. It is comparable, so
// attributes holding it can be compared with ==.
type RopeScaling struct {
	// Type is the rope type: "" or RopeDefault, RopeLinear, RopeLlama3 or
	// RopeYarn.
	Type string
	// Factor is the context extension factor (linear, llama3, yarn); finite
	// and positive.
	Factor float64
	// OriginalMaxPositions is original_max_position_embeddings, the context
	// the model was trained with before its extension (llama3, yarn).
	OriginalMaxPositions int
	// LowFreqFactor and HighFreqFactor are llama3's low_freq_factor and
	// high_freq_factor (0 < low < high).
	LowFreqFactor, HighFreqFactor float64
	// BetaFast and BetaSlow are yarn's beta_fast and beta_slow, the number
	// of rotations over OriginalMaxPositions that bound the dims it
	// interpolates; 0 stands for 32 and 1.
	BetaFast, BetaSlow float64
	// MScale and MScaleAllDim are yarn's mscale and mscale_all_dim: when
	// both are set (not 0) and AttentionFactor is 0, the attention factor
	// is get_mscale(Factor, MScale) / get_mscale(Factor, MScaleAllDim).
	MScale, MScaleAllDim float64
	// AttentionFactor is yarn's attention_factor; 0 means computed: from
	// MScale and MScaleAllDim, else get_mscale(Factor) = 0.1·ln(Factor) + 1
	// (1 when Factor ≤ 1).
	AttentionFactor float64
	// NoTruncate is yarn's truncate = false: the bounds of the interpolated
	// dims are not rounded to whole dims (transformers' default truncates).
	NoTruncate bool
}

// String formats the scaling for dumps: its type and the fields that are
// not zero.
func (s RopeScaling) String() string {
	var b strings.Builder
	b.WriteString("{Type:" + s.Type)
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"Factor", s.Factor}, {"OriginalMaxPositions", float64(s.OriginalMaxPositions)},
		{"LowFreqFactor", s.LowFreqFactor}, {"HighFreqFactor", s.HighFreqFactor},
		{"BetaFast", s.BetaFast}, {"BetaSlow", s.BetaSlow},
		{"MScale", s.MScale}, {"MScaleAllDim", s.MScaleAllDim}, {"AttentionFactor", s.AttentionFactor},
	} {
		if f.v != 0 {
			fmt.Fprintf(&b, " %s:%v", f.name, f.v)
		}
	}
	if s.NoTruncate {
		b.WriteString(" NoTruncate:true")
	}
	return b.String() + "}"
}

// Frequencies gives the inverse frequencies f_j, j < rotary/2, and the
// attention factor m of a rope with base theta over rotary dims, as
// transformers computes them for the type:
//
//   - default: f_j = theta^(-2j/rotary), m = 1;
//   - linear: the default f_j / Factor, m = 1;
//   - llama3: with wavelength λ_j = 2π/f_j and L = OriginalMaxPositions,
//     f_j where λ_j < L/HighFreqFactor, f_j/Factor where λ_j >
//     L/LowFreqFactor, and between them (1−s)·f_j/Factor + s·f_j with
//     s = (L/λ_j − LowFreqFactor)/(HighFreqFactor − LowFreqFactor); m = 1;
//   - yarn: with d(r) = rotary·ln(L/(2πr)) / (2 ln theta), the bounds
//     lo = max(⌊d(BetaFast)⌋, 0), hi = min(⌈d(BetaSlow)⌉, rotary−1)
//     (not rounded with NoTruncate; hi + 0.001 when equal), the ramp
//     γ_j = clamp((j − lo)/(hi − lo), 0, 1): f_j = theta^(-2j/rotary) ·
//     (γ_j/Factor + 1 − γ_j); m as AttentionFactor says.
//
// It fails on an unknown type, a parameter out of range, or a table that is
// not finite and positive.
func (s RopeScaling) Frequencies(theta float64, rotary int) (freqs []float64, m float64, err error) {
	if !(theta > 0) || math.IsInf(theta, 0) {
		return nil, 0, fmt.Errorf("rope theta %v must be positive", theta)
	}
	if rotary <= 0 || rotary%2 != 0 {
		return nil, 0, fmt.Errorf("rotary dims %d must be even and positive", rotary)
	}
	freqs, m = make([]float64, rotary/2), 1
	for j := range freqs {
		freqs[j] = math.Pow(theta, -2*float64(j)/float64(rotary))
	}
	switch s.Type {
	case "", RopeDefault:
	case RopeLinear:
		if err := positive("factor", s.Factor); err != nil {
			return nil, 0, s.fail(err)
		}
		for j := range freqs {
			freqs[j] /= s.Factor
		}
	case RopeLlama3:
		if err := s.llama3(freqs); err != nil {
			return nil, 0, s.fail(err)
		}
	case RopeYarn:
		if m, err = s.yarn(freqs, theta, rotary); err != nil {
			return nil, 0, s.fail(err)
		}
	default:
		return nil, 0, fmt.Errorf("rope scaling: unknown rope type %q (want default, linear, llama3 or yarn)", s.Type)
	}
	for j, f := range freqs {
		if !(f > 0) || math.IsInf(f, 0) {
			return nil, 0, s.fail(fmt.Errorf("frequency %d is %v, not finite and positive", j, f))
		}
	}
	if !(m > 0) || math.IsInf(m, 0) {
		return nil, 0, s.fail(fmt.Errorf("attention factor %v is not finite and positive", m))
	}
	return freqs, m, nil
}

func (s RopeScaling) fail(err error) error {
	return fmt.Errorf("rope scaling %s: %w", s.Type, err)
}

// llama3 scales the default frequencies f in place.
func (s RopeScaling) llama3(f []float64) error {
	if err := positive("factor", s.Factor); err != nil {
		return err
	}
	if err := positive("low_freq_factor", s.LowFreqFactor); err != nil {
		return err
	}
	if !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0) {
		return fmt.Errorf("high_freq_factor %v must be finite and above low_freq_factor %v", s.HighFreqFactor, s.LowFreqFactor)
	}
	if s.OriginalMaxPositions <= 0 {
		return fmt.Errorf("original_max_position_embeddings %d must be positive", s.OriginalMaxPositions)
	}
	old := float64(s.OriginalMaxPositions)
	lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
	for j, inv := range f {
		wave := 2 * math.Pi / inv
		switch {
		case wave < highWave:
		case wave > lowWave:
			f[j] = inv / s.Factor
		default:
			smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			f[j] = (1-smooth)*inv/s.Factor + smooth*inv
		}
	}
	return nil
}

// yarn scales the default frequencies f in place and gives the attention
// factor.
func (s RopeScaling) yarn(f []float64, theta float64, rotary int) (float64, error) {
	if err := positive("factor", s.Factor); err != nil {
		return 0, err
	}
	if s.OriginalMaxPositions <= 0 {
		return 0, fmt.Errorf("original_max_position_embeddings %d must be positive", s.OriginalMaxPositions)
	}
	if theta == 1 {
		return 0, fmt.Errorf("rope theta 1 has no correction range")
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"beta_fast", s.BetaFast}, {"beta_slow", s.BetaSlow}, {"mscale", s.MScale}, {"mscale_all_dim", s.MScaleAllDim}, {"attention_factor", s.AttentionFactor}} {
		if !(p.v >= 0) || math.IsInf(p.v, 0) {
			return 0, fmt.Errorf("%s %v must be finite and not negative", p.name, p.v)
		}
	}
	m := s.AttentionFactor
	if m == 0 {
		if s.MScale != 0 && s.MScaleAllDim != 0 {
			m = yarnMScale(s.Factor, s.MScale) / yarnMScale(s.Factor, s.MScaleAllDim)
		} else {
			m = yarnMScale(s.Factor, 1)
		}
	}
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	dim := float64(rotary)
	// correctionDim is the dim whose wavelength turns rot times over the
	// original context.
	correctionDim := func(rot float64) float64 {
		return dim * math.Log(float64(s.OriginalMaxPositions)/(rot*2*math.Pi)) / (2 * math.Log(theta))
	}
	lo, hi := correctionDim(betaFast), correctionDim(betaSlow)
	if !s.NoTruncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = max(lo, 0), min(hi, dim-1)
	if lo == hi {
		hi += 0.001
	}
	for j, extrapolated := range f {
		ramp := min(max((float64(j)-lo)/(hi-lo), 0), 1)
		extrapolation := 1 - ramp
		f[j] = extrapolated/s.Factor*(1-extrapolation) + extrapolated*extrapolation
	}
	return m, nil
}

// yarnMScale is transformers' get_mscale: 0.1·mscale·ln(scale) + 1, or 1
// when scale ≤ 1.
func yarnMScale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}

func positive(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("%s %v must be finite and positive", name, v)
	}
	return nil
}
