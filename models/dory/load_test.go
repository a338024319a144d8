package dory

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/weights"
)

// copyCheckpoint copies the per_loop golden checkpoint into a temp folder,
// letting the test edit its config and tensors.
func copyCheckpoint(t *testing.T, editConfig func(map[string]any), editTensors func([]weights.NamedTensor) []weights.NamedTensor) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, weights.Rewrite(filepath.Join(testdata, "dory", "dory-tiny-per_loop"), dir, editConfig, editTensors))
	return dir
}

func TestLoadRejects(t *testing.T) {
	cases := []struct {
		name    string
		config  func(map[string]any)
		tensors func([]weights.NamedTensor) []weights.NamedTensor
		want    string
	}{
		{name: "NoPE layer", config: func(c map[string]any) { c["rope_profile_layers"].([]any)[3] = 0 }, want: "rope_profile_layers[3] = 0"},
		{name: "no_rope_layers", config: func(c map[string]any) { c["no_rope_layers"].([]any)[2] = 1 }, want: "no_rope_layers[2]"},
		{name: "tied embeddings", config: func(c map[string]any) { c["tie_word_embeddings"] = true }, want: "tie_word_embeddings"},
		{name: "bad kv mode", config: func(c map[string]any) { c["recurrent_kv_cache_mode"] = "every_loop" }, want: "every_loop"},
		{name: "blocks do not sum", config: func(c map[string]any) { c["n_output_layers"] = 5 }, want: "must equal"},
		{name: "heads", config: func(c map[string]any) { c["num_key_value_heads"] = 3 }, want: "num_key_value_heads"},
		{name: "odd rotary", config: func(c map[string]any) { c["partial_rotary_factor"] = 0.3 }, want: "rotary dims"},
		{name: "missing tensor", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			var out []weights.NamedTensor
			for _, x := range ts {
				if x.Name != "backbone.layers.4.mixer.k_proj.weight" {
					out = append(out, x)
				}
			}
			return out
		}, want: "layer 4 attn: tensor backbone.layers.4.mixer.k_proj.weight: missing"},
		{name: "wrong shape", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			for i, x := range ts {
				if x.Name == "backbone.layers.1.mixer.up_proj.weight" {
					ts[i].Shape = []int{x.Shape[1], x.Shape[0]}
				}
			}
			return ts
		}, want: "layer 1 mlp: tensor backbone.layers.1.mixer.up_proj.weight: shape [64 96], want [96 64]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(copyCheckpoint(t, c.config, c.tensors))
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestLoadNaNConfig(t *testing.T) {
	dir := copyCheckpoint(t, nil, nil)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	raw = regexp.MustCompile(`"init_method_std":[^,}]*`).ReplaceAll(raw, []byte(`"init_method_std": NaN`))
	require.Contains(t, string(raw), "NaN")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, "init_method_std")
}
