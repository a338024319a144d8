package qwen4

import (
	"bytes"
	"encoding/json"
	"flag"
	"github.com/reel-runtime/reel/lm"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/weights"
)

// update rewrites testdata/qwen4/qwen4-tiny-mtp:
//
//	go test ./models/qwen4 -run TestTinyMTPCheckpoint -update
var update = flag.Bool("update", false, "rewrite testdata/qwen4/qwen4-tiny-mtp from the synthetic model")

// tinyMTPName is the folder of the tiny checkpoint with an MTP head that
// `reel run --draft` can be tried on.
const tinyMTPName = "qwen4-tiny-mtp"

// tinyMTPConfig is the config.json of qwen4-tiny-mtp: the small test
// checkpoint's, narrowed to hidden 32 in four layers (one PLE layer, one
// QSA layer) with four experts, and an MTP head.
func tinyMTPConfig(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(tinyDir, "config.json"))
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(raw, &cfg))
	for k, v := range map[string]any{
		"hidden_size": 32, "head_dim": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
		"num_hidden_layers": 4, "layer_types": []string{"linear_attention", "linear_attention", "linear_attention", "qwen_sparse_attention"},
		"ple_layer_ids": []int{1}, "ple_embed_dim": 16, "num_experts": 4, "moe_intermediate_size": 16,
		"shared_expert_intermediate_size": 16, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
		"indexer_n_heads": 2, "hc_lowrank": 4, "mtp_num_hidden_layers": 1, "dtype": "bfloat16",
	} {
		cfg[k] = v
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	return append(out, '\n')
}

// writeTinyMTP writes qwen4-tiny-mtp into dir: qwen4.Synthetic's random
// model of tinyMTPConfig with bf16 matrices (seed 7), its offset norms
// stored as offsets from one (Load adds the one back), in a transformers
// folder: config.json and model.safetensors.
func writeTinyMTP(t testing.TB, dir string) {
	t.Helper()
	raw := tinyMTPConfig(t)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	cfg, err := weights.ReadConfig(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	c, err := ConfigFromJSON(cfg)
	require.NoError(t, err)
	m, err := Synthetic(c, graph.BF16, 7)
	require.NoError(t, err)
	require.True(t, m.HasMTP)
	var ts []weights.NamedTensor
	for _, name := range slices.Sorted(maps.Keys(m.Tensors)) {
		x := m.Tensors[name]
		data := x.Data
		if isOffsetNorm(name) {
			v := make([]float32, x.Len())
			half.DecodeF32(v, data)
			for i := range v {
				v[i]--
			}
			data = weights.EncodeF32(v)
		}
		ts = append(ts, weights.NamedTensor{Name: name, DType: x.DType, Shape: x.Shape, Data: data})
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, "model.safetensors"), ts))
}

// TestTinyMTPCheckpoint: the committed qwen4-tiny-mtp is what writeTinyMTP
// makes (so it is random and reproducible), under a megabyte, and loads
// with its MTP head, whose drafts run.
func TestTinyMTPCheckpoint(t *testing.T) {
	dir := filepath.Join(testdata, tinyMTPName)
	if *update {
		writeTinyMTP(t, dir)
	}
	fresh := t.TempDir()
	writeTinyMTP(t, fresh)
	for _, f := range []string{"config.json", "model.safetensors"} {
		want, err := os.ReadFile(filepath.Join(fresh, f))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err, "run go test ./models/qwen4 -run TestTinyMTPCheckpoint -update")
		// Another architecture may fuse the generator's multiply-adds and
		// round a bf16 differently: the bytes are checked on amd64, where
		// the file was made.
		if runtime.GOARCH == "amd64" || f == "config.json" {
			require.True(t, bytes.Equal(want, got), "%s differs from what writeTinyMTP makes", f)
		}
		require.Less(t, len(got), 1<<20, f)
	}
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	require.True(t, m.HasMTP)
	s, err := NewSession(m, Options{})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Forward([]int{1, 2, 3}, 0, lm.WantLast)
	require.NoError(t, err)
	drafts, err := s.Draft(5, 2)
	require.NoError(t, err)
	require.Len(t, drafts, 2)
}
