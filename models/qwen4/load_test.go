package qwen4

import (
	"encoding/binary"
	"github.com/reel-runtime/reel/lm"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/weights"
)

// copyCheckpoint copies a golden checkpoint into a temp folder, letting the
// test edit its config and tensors.
func copyCheckpoint(t testing.TB, name string, editConfig func(map[string]any), editTensors func([]weights.NamedTensor) []weights.NamedTensor) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, weights.Rewrite(filepath.Join(testdata, name), dir, editConfig, editTensors))
	return dir
}

func without(names ...string) func([]weights.NamedTensor) []weights.NamedTensor {
	return func(ts []weights.NamedTensor) []weights.NamedTensor {
		var out []weights.NamedTensor
		for _, x := range ts {
			keep := true
			for _, n := range names {
				keep = keep && x.Name != n
			}
			if keep {
				out = append(out, x)
			}
		}
		return out
	}
}

func TestLoadRejects(t *testing.T) {
	cases := []struct {
		name    string
		config  func(map[string]any)
		tensors func([]weights.NamedTensor) []weights.NamedTensor
		want    string
	}{
		{name: "activation", config: func(c map[string]any) { c["hidden_act"] = "gelu" }, want: `hidden_act = "gelu": Qwen4-Exp needs silu`},
		{name: "rope type", config: func(c map[string]any) { c["rope_parameters"].(map[string]any)["rope_type"] = "yarn" }, want: `rope_type = "yarn"`},
		{name: "layer type", config: func(c map[string]any) { c["layer_types"].([]any)[2] = "sliding_attention" }, want: `layer_types[2] = "sliding_attention"`},
		{name: "layer count", config: func(c map[string]any) { c["num_hidden_layers"] = 9 }, want: "num_hidden_layers 9 but layer_types has 8"},
		{name: "indexer kv heads", config: func(c map[string]any) { c["indexer_kv_heads"] = 2 }, want: "indexer_kv_heads = 2"},
		{name: "tied", config: func(c map[string]any) { c["tie_word_embeddings"] = true }, want: "tie_word_embeddings"},
		{name: "output gate", config: func(c map[string]any) { c["output_gate_type"] = "relu" }, want: `output_gate_type = "relu"`},
		{name: "budget", config: func(c map[string]any) { c["indexer_budget"] = 5 }, want: "indexer_budget 5 is not a multiple of indexer_compress_ratio 2"},
		{name: "value heads", config: func(c map[string]any) { c["linear_num_value_heads"] = 3 }, want: "linear_num_value_heads 3 is not a multiple"},
		{name: "ple layer", config: func(c map[string]any) { c["ple_layer_ids"] = []any{9} }, want: "ple_layer_ids[0] = 9"},
		{name: "rotary", config: func(c map[string]any) { c["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 0.03 }, want: "rotary dims"},
		{name: "dense layers", config: func(c map[string]any) { c["mlp_only_layers"] = []any{1} }, want: "mlp_only_layers"},
		{name: "mtp layers", config: func(c map[string]any) { c["mtp_num_hidden_layers"] = 2 }, want: "mtp_num_hidden_layers = 2"},
		{name: "model type", config: func(c map[string]any) { c["model_type"] = "qwen3_next" }, want: `model_type "qwen3_next"`},
		{name: "field type", config: func(c map[string]any) { c["hc_count"] = "four" }, want: "hc_count"},
		{name: "missing tensor", tensors: without("model.layers.3.self_attn.k_norm.weight"),
			want: "layer 3: tensor model.layers.3.self_attn.k_norm.weight: missing from the checkpoint"},
		{name: "missing expert", tensors: without("model.layers.2.mlp.experts.5.up_proj.weight"),
			want: "layer 2: tensor model.layers.2.mlp.experts.5.up_proj.weight: missing"},
		{name: "missing shard", tensors: without("model.layers.1.ple.ple_embedding.ngram_embedding.shard_1.weight"),
			want: "layer 1: tensor model.layers.1.ple.ple_embedding.ngram_embedding.shard_1.weight: missing"},
		{name: "missing head", tensors: without("lm_head.weight"), want: "tensor lm_head.weight: missing"},
		{name: "unread tensor", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			x := ts[0]
			x.Name = "model.layers.0.self_attn.q_proj.weight"
			return append(ts, x)
		}, want: "tensors the model does not read: model.layers.0.self_attn.q_proj.weight"},
		{name: "expert dtype", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			for i, x := range ts {
				if x.Name == "model.layers.5.mlp.experts.3.down_proj.weight" {
					ts[i].DType, ts[i].Data = graph.BF16, weights.EncodeBF16(decodeF32(x.Data))
				}
			}
			return ts
		}, want: "layer 5: tensor model.layers.5.mlp.experts.3.down_proj.weight: dtype bf16, but expert 0 is f32"},
		{name: "wrong shape", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			for i, x := range ts {
				if x.Name == "model.layers.4.linear_attn.in_proj_qkv.weight" {
					ts[i].Shape = []int{x.Shape[1], x.Shape[0]}
				}
			}
			return ts
		}, want: "layer 4: tensor model.layers.4.linear_attn.in_proj_qkv.weight: shape [64 128], want [128 64]"},
		{name: "wrong ple buffer", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			for i, x := range ts {
				if x.Name == "model.layers.1.ple.ple_embedding.ngram_heads_offsets" {
					ts[i].Shape, ts[i].Data = []int{3}, x.Data[:24]
				}
			}
			return ts
		}, want: "layer 1: tensor model.layers.1.ple.ple_embedding.ngram_heads_offsets: i64 [3], want i64 [4]"},
		{name: "int weight", tensors: func(ts []weights.NamedTensor) []weights.NamedTensor {
			for i, x := range ts {
				if x.Name == "model.layers.3.self_attn.q_norm.weight" {
					ts[i].DType = graph.I32
				}
			}
			return ts
		}, want: "layer 3: tensor model.layers.3.self_attn.q_norm.weight: dtype i32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(copyCheckpoint(t, checkpoints[0], c.config, c.tensors))
			require.ErrorContains(t, err, c.want)
			t.Log(err)
		})
	}
}

func TestLoadNaNConfig(t *testing.T) {
	dir := copyCheckpoint(t, checkpoints[0], nil, nil)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	raw = regexp.MustCompile(`"rms_norm_eps":[^,}]*`).ReplaceAll(raw, []byte(`"rms_norm_eps": NaN`))
	require.Contains(t, string(raw), "NaN")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	_, err = Load(dir)
	require.ErrorContains(t, err, "rms_norm_eps")
}

// TestPLEConstants checks the reference's (transformers') formulas for the hash constants
// against the buffers transformers stored.
func TestPLEConstants(t *testing.T) {
	for _, name := range checkpoints {
		dir := filepath.Join(testdata, name)
		m := loadModel(t, dir)
		ck, err := weights.Open(dir)
		require.NoError(t, err)
		for idx, li := range m.Config.PLELayers {
			mult, sizes, offs := PLEConstants(&m.Config, idx)
			for _, b := range []struct {
				name string
				got  []int64
			}{{pleMult, mult}, {pleSizes, sizes}, {pleOffsets, offs}} {
				raw, err := ck.Bytes(LayerPrefix(li) + b.name)
				require.NoError(t, err)
				want := make([]int64, len(raw)/8)
				for i := range want {
					want[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
				}
				require.Equal(t, want, b.got, "%s layer %d %s", name, li, b.name)
			}
			_, rows := m.PLEShards(li)
			total := 0
			for _, r := range rows {
				total += r
			}
			require.Equal(t, PLETableRows(&m.Config, idx), total)
		}
		ck.Close()
	}
}

// TestLoadLayouts loads the same weights in the other layouts a checkpoint
// may use (stacked experts, the multimodal prefix, no stored PLE constants)
// and checks the logits do not change.
func TestLoadLayouts(t *testing.T) {
	name := checkpoints[1]
	gc := readGolden(t, filepath.Join(testdata, name)).Cases[1]
	stack := func(ts []weights.NamedTensor) []weights.NamedTensor {
		return stackExpertTensors(loadModel(t, filepath.Join(testdata, name)).Config, ts, "")
	}
	multimodal := func(ts []weights.NamedTensor) []weights.NamedTensor {
		for i := range ts {
			if strings.HasPrefix(ts[i].Name, "model.") {
				ts[i].Name = "model.language_model." + strings.TrimPrefix(ts[i].Name, "model.")
			}
		}
		vision := ts[0] // the wrapper's other parts are not the text model's
		vision.Name = "model.visual.patch_embed.proj.weight"
		return append(ts, vision)
	}
	noConstants := func(ts []weights.NamedTensor) []weights.NamedTensor {
		var out []weights.NamedTensor
		for _, x := range ts {
			if x.DType != graph.I64 {
				out = append(out, x)
			}
		}
		return out
	}
	textConfig := func(c map[string]any) {
		text := map[string]any{}
		for k, v := range c {
			text[k] = v
		}
		text["model_type"] = "qwen4_exp_text"
		for k := range c {
			if k != "eos_token_id" {
				delete(c, k)
			}
		}
		c["model_type"], c["text_config"] = "qwen4_exp", text
	}
	for _, lc := range []struct {
		name    string
		config  func(map[string]any)
		tensors func([]weights.NamedTensor) []weights.NamedTensor
	}{{"stacked experts", nil, stack}, {"multimodal", textConfig, multimodal}, {"computed PLE constants", nil, noConstants}} {
		t.Run(lc.name, func(t *testing.T) {
			m := loadModel(t, copyCheckpoint(t, name, lc.config, lc.tensors))
			s := newSession(t, m, Options{})
			out, err := s.Forward(gc.IDs, 0, lm.WantAll)
			require.NoError(t, err)
			require.Less(t, maxDiff(t, rowsOf(t, out), gc.Full), 1e-4)
		})
	}
}
