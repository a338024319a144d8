package dory

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/weights"
	"github.com/reel-runtime/reel/weights/weightstest"
)

// hostileBudget bounds one hostile case: Load, a session and a one-token
// forward of the tiny checkpoint (0.9 MB) allocate a few MB.
var hostileBudget = weightstest.Budget{Time: 20 * time.Second, Alloc: 64 << 20}

var tinyDir = filepath.Join(testdata, "dory", "dory-tiny-per_loop")

// loadAndForward is what `reel logits` does: Load, a CPU session, one
// token's forward with the config's loops.
func loadAndForward(dir string) ([]float32, error) {
	m, err := Load(dir)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s, err := NewSession(m, Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	defer s.Close()
	d, err := s.ForwardLoops([]int{1}, 0, m.Config.Loops, lm.WantLast)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return d.Data().([]float32), nil
}

// TestHostileConfigs loads copies of the tiny checkpoint whose config.json
// has every numeric field set to every extreme value (weightstest's: zero,
// negatives, fractions, int64 and float64 extremes, overflowing products,
// NaN and infinities, wrong types), the cases (a billion-row window,
// a million sub-layers, scales whose fold is infinite, heads × head_dim
// wrapping around) and hostile files, then runs a token: each gives an
// error naming the folder and the field (or a tensor), or finite logits,
// within a time and allocation budget.
func TestHostileConfigs(t *testing.T) {
	million := strings.Repeat("S-*-", 250000)
	cases := []weightstest.ConfigCase{
		{Name: "window of a billion", Fields: map[string]string{"swa_window_size": "1000000000"}, Want: []string{"swa_window_size"}},
		{Name: "window past max_position_embeddings", Fields: map[string]string{"swa_window_size": "4097"}, Want: []string{"swa_window_size"}},
		{Name: "window at max_position_embeddings", Fields: map[string]string{"swa_window_size": "4096"}},
		// the sliding rings grow with the positions used, as full slots do
		{Name: "window of 2^20 at max_position_embeddings", Fields: map[string]string{"swa_window_size": "1048576", "max_position_embeddings": "1048576"}},
		{Name: "a million sub-layers", Fields: map[string]string{
			"hybrid_layer_pattern": `"` + million + `"`, "num_hidden_layers": "1000000", "n_input_layers": "0",
			"n_recurrent_layers": "1000000", "n_output_layers": "0", "rope_profile_layers": "", "no_rope_layers": "",
		}, Want: []string{"num_hidden_layers"}},
		{Name: "a million-entry rope_profile_layers", Fields: map[string]string{
			"rope_profile_layers": "[" + strings.TrimSuffix(strings.Repeat("1,", 1000000), ",") + "]",
		}, Want: []string{"rope_profile_layers"}},
		{Name: "init_method_std 1e-300", Fields: map[string]string{"init_method_std": "1e-300"}, Want: []string{"init_method_std"}},
		{Name: "init_method_std 1e-12", Fields: map[string]string{"init_method_std": "1e-12"}, Want: []string{"init_method_std"}},
		{Name: "ngpt_alpha_init 1e300", Fields: map[string]string{"ngpt_alpha_init": "1e300"}, Want: []string{"ngpt_alpha_init"}},
		{Name: "ngpt_alpha_init 1e11", Fields: map[string]string{"ngpt_alpha_init": "1e11"}, Want: []string{"ngpt_alpha_init"}},
		{Name: "gate logit scale 1e300", Fields: map[string]string{"attention_output_gate_logit_scale_init": "1e300"},
			Want: []string{"attention_output_gate_logit_scale_init"}},
		{Name: "heads × head_dim wraps", Fields: map[string]string{
			"num_attention_heads": "4294967296", "num_key_value_heads": "4294967296", "attention_head_dim": "4294967296", "head_dim": "4294967296",
		}, Want: []string{"num_attention_heads", "attention_head_dim"}},
		{Name: "vocab × hidden wraps", Fields: map[string]string{"vocab_size": "4294967297", "hidden_size": "4294967296"},
			Want: []string{"vocab_size", "hidden_size"}},
		{Name: "rope theta below 1", Fields: map[string]string{"rope_theta": "1e-300"}, Want: []string{"theta"}},
		{Name: "partial rotary factor 1e300", Fields: map[string]string{"partial_rotary_factor": "1e300"}, Want: []string{"rotary"}},
	}
	cases = append(cases, weightstest.FileCases()...)
	cases = append(cases, tensorCases...)
	cases = append(cases, weightstest.FieldCases(t, filepath.Join(tinyDir, "config.json"), "attention_output_gate_logit_scale_init")...)
	weightstest.Probe(t, tinyDir, hostileBudget, cases, loadAndForward)
}

// fill sets every element of an f32 tensor to x.
func fill(x float32) func(*weights.NamedTensor) {
	return func(nt *weights.NamedTensor) {
		v := make([]float32, len(nt.Data)/4)
		for i := range v {
			v[i] = x
		}
		nt.Data = weights.EncodeF32(v)
	}
}

// tensorCases are hostile tensors of a checkpoint whose config is good.
var tensorCases = []weightstest.ConfigCase{
	{Name: "tensor: a matrix in i32", Setup: modeltest.EditTensor(tinyDir, "backbone.layers.0.mixer.q_proj.weight", func(nt *weights.NamedTensor) {
		nt.DType = graph.I32
	}), Want: []string{"q_proj.weight: dtype i32"}},
	{Name: "tensor: embeddings transposed", Setup: modeltest.EditTensor(tinyDir, "backbone.embeddings.weight", func(nt *weights.NamedTensor) {
		nt.Shape = []int{nt.Shape[1], nt.Shape[0]}
	}), Want: []string{"backbone.embeddings.weight: shape [64 97], want [97 64]"}},
	{Name: "tensor: a vector of 2^62 × 0", Setup: modeltest.EditTensor(tinyDir, "lm_head.logit_scale", func(nt *weights.NamedTensor) {
		nt.Shape, nt.Data = []int{1 << 62, 0}, nil
	}), Want: []string{"lm_head.logit_scale: shape"}},
	{Name: "tensor: file cut short", Setup: func(t testing.TB, dir string) {
		if err := os.Truncate(filepath.Join(dir, weights.SingleFile), 900000); err != nil {
			t.Fatal(err)
		}
	}, Want: []string{weights.SingleFile}},
	{Name: "tensor: NaN logit scale", Setup: modeltest.EditTensor(tinyDir, "lm_head.logit_scale", fill(float32(math.NaN()))),
		Want: []string{"NaN"}},
	{Name: "tensor: infinite sqk", Setup: modeltest.EditTensor(tinyDir, "backbone.layers.0.mixer.sqk", fill(float32(math.Inf(1)))),
		Want: []string{"sqk", "NaN"}},
}
