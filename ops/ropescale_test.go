package ops

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
)

// ropeBase is theta^(-2j/rotary) written as an exponential.
func ropeBase(theta float64, rotary, j int) float64 {
	return math.Exp(-float64(2*j) * math.Log(theta) / float64(rotary))
}

// llama3Ref is llama3's scaling in terms of the ratio r = L·f/(2π) of the
// original context to the wavelength: f above HighFreqFactor, f/Factor
// below LowFreqFactor, a linear blend of the two between.
func llama3Ref(s RopeScaling, theta float64, rotary int) []float64 {
	out := make([]float64, rotary/2)
	for j := range out {
		f := ropeBase(theta, rotary, j)
		r := float64(s.OriginalMaxPositions) * f / (2 * math.Pi)
		t := (r - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor) // 0 at low, 1 at high
		t = math.Max(0, math.Min(1, t))
		out[j] = f / s.Factor * (1 + t*(s.Factor-1))
	}
	return out
}

// yarnRef is yarn's scaling as a blend of the interpolated (f/Factor) and
// extrapolated (f) frequency by the dim's place between the bounds lo and
// hi, given here rather than derived.
func yarnRef(factor, theta float64, rotary int, lo, hi float64) []float64 {
	out := make([]float64, rotary/2)
	for j := range out {
		f := ropeBase(theta, rotary, j)
		var w float64 // the interpolated share
		switch {
		case float64(j) <= lo:
			w = 0
		case float64(j) >= hi:
			w = 1
		default:
			w = (float64(j) - lo) / (hi - lo)
		}
		out[j] = w*f/factor + (1-w)*f
	}
	return out
}

func closeRel(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Abs(want)
}

func TestRopeScalingFrequencies(t *testing.T) {
	llama31 := RopeScaling{Type: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
	qwenYarn := RopeScaling{Type: RopeYarn, Factor: 4, OriginalMaxPositions: 32768}
	for _, c := range []struct {
		name   string
		s      RopeScaling
		theta  float64
		rotary int
		want   []float64 // the whole table
		m      float64
		// hand-checked entries of the table
		at map[int]float64
	}{
		{name: "zero", theta: 1e4, rotary: 8, m: 1, want: []float64{1, 0.1, 0.01, 0.001}},
		{name: "default", s: RopeScaling{Type: RopeDefault, Factor: 3}, theta: 1e4, rotary: 8, m: 1, want: []float64{1, 0.1, 0.01, 0.001}},
		{name: "linear", s: RopeScaling{Type: RopeLinear, Factor: 4}, theta: 1e4, rotary: 8, m: 1, want: []float64{0.25, 0.025, 0.0025, 0.00025}},
		{name: "llama3.1-8b", s: llama31, theta: 5e5, rotary: 128, m: 1, want: llama3Ref(llama31, 5e5, 128),
			// j = 20: wavelength 379 < 2048, kept; j = 30: 2948, blended with
			// s = (8192/2948.30 − 1)/3 = 0.592849; j = 40: 22911 > 8192, / 8.
			at: map[int]float64{0: 1, 20: 0.016560440080994446, 30: 0.0013718935677611381, 40: 0.0002742481756762073 / 8, 63: 2.455140791131609e-06 / 8}},
		{name: "yarn-qwen3", s: qwenYarn, theta: 1e6, rotary: 128, m: 0.1*math.Log(4) + 1,
			// the bounds: 128·ln(32768/(2π·32))/(2 ln 1e6) = 23.596 → 23 and
			// 128·ln(32768/(2π))/(2 ln 1e6) = 39.651 → 40
			want: yarnRef(4, 1e6, 128, 23, 40),
			at:   map[int]float64{0: 1, 10: 0.11547819846894582, 30: 0.001064360981247002, 63: 3.102344401879299e-07}},
		{name: "yarn-untruncated", s: RopeScaling{Type: RopeYarn, Factor: 40, OriginalMaxPositions: 4096, NoTruncate: true}, theta: 1e4, rotary: 64,
			m: 0.1*math.Log(40) + 1, want: yarnRef(40, 1e4, 64, 10.472240810318025, 22.513440636877274)},
		{name: "yarn-mscale", s: RopeScaling{Type: RopeYarn, Factor: 16, OriginalMaxPositions: 512, MScale: 1, MScaleAllDim: 0.5}, theta: 1e4, rotary: 32,
			m: 1.121751143713058},
		{name: "yarn-mscale-equal", s: RopeScaling{Type: RopeYarn, Factor: 40, OriginalMaxPositions: 4096, MScale: 1, MScaleAllDim: 1}, theta: 1e4, rotary: 64, m: 1},
		{name: "yarn-given-factor", s: RopeScaling{Type: RopeYarn, Factor: 40, OriginalMaxPositions: 4096, MScale: 1, MScaleAllDim: 1, AttentionFactor: 0.75},
			theta: 1e4, rotary: 64, m: 0.75},
		{name: "yarn-factor-below-1", s: RopeScaling{Type: RopeYarn, Factor: 0.5, OriginalMaxPositions: 4096}, theta: 1e4, rotary: 64, m: 1},
		// beta_fast = beta_slow: one bound, the ramp of width 0.001
		{name: "yarn-one-bound", s: RopeScaling{Type: RopeYarn, Factor: 2, OriginalMaxPositions: 4096, BetaFast: 4, BetaSlow: 4, NoTruncate: true},
			theta: 1e4, rotary: 16, m: 0.1*math.Log(2) + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, m, err := c.s.Frequencies(c.theta, c.rotary)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.rotary/2 {
				t.Fatalf("%d frequencies, want %d", len(got), c.rotary/2)
			}
			if !closeRel(m, c.m) {
				t.Errorf("attention factor %v, want %v", m, c.m)
			}
			for j, w := range c.want {
				if !closeRel(got[j], w) {
					t.Errorf("f[%d] = %v, want %v", j, got[j], w)
				}
			}
			for j, w := range c.at {
				if !closeRel(got[j], w) {
					t.Errorf("f[%d] = %v, want the hand-checked %v", j, got[j], w)
				}
			}
		})
	}
}

// TestYarnOneBound checks the degenerate range: every dim below the bound is
// extrapolated, every dim above it interpolated.
func TestYarnOneBound(t *testing.T) {
	s := RopeScaling{Type: RopeYarn, Factor: 2, OriginalMaxPositions: 4096, BetaFast: 4, BetaSlow: 4}
	got, _, err := s.Frequencies(1e4, 16)
	if err != nil {
		t.Fatal(err)
	}
	// d(4) = 16·ln(4096/(8π))/(2 ln 1e4) = 4.4245: truncated to [4, 5]
	for j, f := range got {
		want := ropeBase(1e4, 16, j)
		if j >= 5 {
			want /= 2
		}
		if !closeRel(f, want) {
			t.Errorf("f[%d] = %v, want %v", j, f, want)
		}
	}
}

func TestRopeScalingErrors(t *testing.T) {
	yarn := RopeScaling{Type: RopeYarn, Factor: 4, OriginalMaxPositions: 64}
	llama := RopeScaling{Type: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
	mod := func(s RopeScaling, f func(*RopeScaling)) RopeScaling { f(&s); return s }
	for _, c := range []struct {
		s      RopeScaling
		theta  float64
		rotary int
		want   string
	}{
		{RopeScaling{Type: "dynamic"}, 1e4, 8, `unknown rope type "dynamic"`},
		{RopeScaling{Type: RopeLinear}, 1e4, 8, "factor 0 must be finite and positive"},
		{RopeScaling{Type: RopeLinear, Factor: math.NaN()}, 1e4, 8, "factor NaN"},
		{RopeScaling{Type: RopeLinear, Factor: math.Inf(1)}, 1e4, 8, "factor +Inf"},
		{RopeScaling{Type: RopeLinear, Factor: 1e-320}, 1e4, 8, "frequency 0 is +Inf"},
		{mod(llama, func(s *RopeScaling) { s.HighFreqFactor = 1 }), 1e4, 8, "high_freq_factor 1 must be finite and above low_freq_factor 1"},
		{mod(llama, func(s *RopeScaling) { s.LowFreqFactor = -1 }), 1e4, 8, "low_freq_factor -1"},
		{mod(llama, func(s *RopeScaling) { s.OriginalMaxPositions = 0 }), 1e4, 8, "original_max_position_embeddings 0"},
		{mod(yarn, func(s *RopeScaling) { s.OriginalMaxPositions = -5 }), 1e4, 8, "original_max_position_embeddings -5"},
		{mod(yarn, func(s *RopeScaling) { s.BetaFast = math.NaN() }), 1e4, 8, "beta_fast NaN"},
		{mod(yarn, func(s *RopeScaling) { s.AttentionFactor = -1 }), 1e4, 8, "attention_factor -1"},
		{mod(yarn, func(s *RopeScaling) { s.MScale = math.Inf(1) }), 1e4, 8, "mscale +Inf"},
		{mod(yarn, func(s *RopeScaling) { s.MScale, s.MScaleAllDim = 1, -10 }), 1e4, 8, "mscale_all_dim -10"},
		{yarn, 1, 8, "rope theta 1 has no correction range"},
		{yarn, math.NaN(), 8, "rope theta NaN must be positive"},
		{yarn, 1e4, 7, "rotary dims 7 must be even"},
	} {
		_, _, err := c.s.Frequencies(c.theta, c.rotary)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v theta %v rotary %d: error %v, want one containing %q", c.s, c.theta, c.rotary, err, c.want)
		}
	}
}

// TestRopeAttrsRule checks rope's rule on scaled attributes, through rope
// and each fused op that rotates, and that a scaled rope's attributes stay
// comparable and dump without their zero fields.
func TestRopeAttrsRule(t *testing.T) {
	good := RopeAttrs{HeadDim: 8, Rotary: 8, Theta: 1e4, Scaling: RopeScaling{Type: RopeYarn, Factor: 4, OriginalMaxPositions: 64}}
	bad := RopeAttrs{HeadDim: 8, Rotary: 8, Theta: 1e4, Scaling: RopeScaling{Type: RopeYarn, Factor: math.NaN(), OriginalMaxPositions: 64}}
	build := func(at RopeAttrs, op string) error {
		b := graph.NewBuilder("rope")
		x := b.Input("x", graph.F32, 2, 16)
		call := b.Input("call", graph.I32, CallLen)
		slot := b.State("slot", graph.F32, 4, 16)
		switch op {
		case "rope":
			b.Output(Rope(b, x, call, at))
		case "norm_rope":
			b.Output(b.Apply(OpNormRope, NormRopeAttrs{Rope: at, Eps: 1e-6}, 1, x, call)...)
		case "norm_rope_kv":
			NormRopeKV(b, x, call, slot, nil, NormRopeKVAttrs{NormRope: NormRopeAttrs{Rope: at, Eps: 1e-6}})
		case "qkv_prep":
			v := b.State("v", graph.F32, 4, 16)
			b.Output(b.Apply(OpQKVPrep, QKVPrepAttrs{NormRope: NormRopeAttrs{Rope: at, Eps: 1e-6}}, 1, x, x, x, call, slot, v)...)
		}
		_, err := b.Graph()
		return err
	}
	for _, op := range []string{"rope", "norm_rope", "norm_rope_kv", "qkv_prep"} {
		if err := build(good, op); err != nil {
			t.Errorf("%s with %v: %v", op, good, err)
		}
		if err := build(bad, op); err == nil || !strings.Contains(err.Error(), "factor NaN") {
			t.Errorf("%s with a NaN factor: error %v, want one naming the factor", op, err)
		}
	}
	// the planner compares attributes with == (and a map key must be comparable)
	if seen := map[RopeAttrs]bool{good: true}; !seen[good] {
		t.Error("scaled attributes do not compare equal to themselves")
	}
	if got, want := fmt.Sprintf("%+v", NormRopeAttrs{Rope: good, Eps: 0.5}),
		"{Rope:{HeadDim:8 Rotary:8 Theta:10000 Scaling:{Type:yarn Factor:4 OriginalMaxPositions:64}} Eps:0.5}"; got != want {
		t.Errorf("dump %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(RopeAttrs{HeadDim: 16, Rotary: 16, Theta: 1e4}), "{HeadDim:16 Rotary:16 Theta:10000}"; got != want {
		t.Errorf("dump %s, want %s", got, want)
	}
}
