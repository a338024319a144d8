package qwen2_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/models/qwen2"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/weights"
)

// dir is a tiny Qwen2 (2 layers, tied embeddings, q/k/v biased, rope theta
// 1e6) with transformers 5.17's logits.
const dir = "testdata/qwen2-tied-22"

// load loads dir through the registry, as the reel command does.
func load(t testing.TB) *llama.Model { return modeltest.Load[*llama.Model](t, dir, "qwen2") }

// session is a session of m on be, in prompt chunks of chunk rows.
func session(t testing.TB, m *llama.Model, be ops.Backend, chunk int) *lm.Session {
	return modeltest.Session(t, m, be, chunk)
}

// TestGolden reproduces transformers' logits whole and incrementally, the
// prompt in one chunk and in chunks of 1, 3 and 7 rows.
func TestGolden(t *testing.T) {
	m := load(t)
	for _, chunk := range []int{0, 1, 3, 7} {
		modeltest.CheckGolden(t, session(t, m, cpu.New(2), chunk), dir, 1e-4)
	}
}

// TestWeights: the graphs read a bias on q, k and v and none on o or the
// MLP, and the embedding table as the head.
func TestWeights(t *testing.T) {
	g, err := load(t).Graph("forward", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	var biases []string
	for _, v := range g.Values {
		if v.Kind == graph.Weight && strings.HasSuffix(v.Name, ".bias") {
			biases = append(biases, v.Name)
		}
		require.NotEqual(t, "lm_head.weight", v.Name)
	}
	require.ElementsMatch(t, []string{
		"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.bias",
		"model.layers.1.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.bias", "model.layers.1.self_attn.v_proj.bias",
	}, biases)
}

// TestConfig: Qwen2's own fields read as transformers reads them
// (attention_bias and mlp_bias do not exist for it), and sliding-window
// layers refused naming the field.
func TestConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	read := func(old, new string) (llama.Config, error) {
		cfg, err := weights.ParseConfig("config.json", []byte(strings.Replace(string(raw), old, new, 1)))
		require.NoError(t, err)
		return qwen2.ReadConfig(cfg)
	}
	c, err := read("", "")
	require.NoError(t, err)
	require.True(t, c.Tied)
	require.Equal(t, 1e6, c.Rope.Theta)
	require.Zero(t, c.Window)
	c, err = read(`"hidden_act"`, `"attention_bias": false, "mlp_bias": true, "hidden_act"`)
	require.NoError(t, err)
	require.True(t, c.AttnBias)
	require.False(t, c.OBias)
	require.False(t, c.MLPBias)
	_, err = read(`"use_sliding_window": false`, `"use_sliding_window": true`)
	require.ErrorContains(t, err, "use_sliding_window true")
	_, err = read(`"hidden_act": "silu"`, `"hidden_act": "gelu"`)
	require.ErrorContains(t, err, "hidden_act")
}
