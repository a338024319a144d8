package llama_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/weights"
)

const testdata = "../../testdata/dense"

var checkpoints = []string{"qwen3-tied-11", "qwen3-untied-12", "llama3-13"}

func load(t testing.TB, dir string) *llama.Model {
	t.Helper()
	m, err := llama.Load(dir)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func session(t testing.TB, m *llama.Model, o lm.SessionOptions) *lm.Session {
	t.Helper()
	if o.Backend == nil {
		o.Backend = cpu.New(2)
	}
	s, err := m.Session(o)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGolden reproduces transformers' logits of the three checkpoints (tied
// and untied Qwen3, Llama 3 with llama3 rope scaling), whole and
// incrementally, through the registry as the reel command finds them.
func TestGolden(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			m, err := models.Load(dir)
			require.NoError(t, err)
			defer m.Close()
			s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(2)}}})
			require.NoError(t, err)
			defer s.Close()
			modeltest.CheckGolden(t, s, dir, 1e-4)
		})
	}
}

// TestFusedUnfused: the planner's fusions change no logit by more than
// rounding on every checkpoint, prompt and decode graphs.
func TestFusedUnfused(t *testing.T) {
	for _, name := range checkpoints {
		m := load(t, filepath.Join(testdata, name))
		off := planner.DefaultOptions()
		off.Fuse = false
		ids := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}
		a, err := session(t, m, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
		require.NoError(t, err)
		b, err := session(t, m, lm.SessionOptions{Options: lm.Options{Planner: &off}}).Forward(ids, 0, lm.WantAll)
		require.NoError(t, err)
		require.InDeltaSlice(t, b.Data(), a.Data(), 1e-5, name)
	}
}

// TestChunks: prompt chunks of 3 rows with the slots growing from 4 rows
// give the logits of one chunk.
func TestChunks(t *testing.T) {
	m := load(t, filepath.Join(testdata, "qwen3-untied-12"))
	ids := []int{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
	want, err := session(t, m, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	s := session(t, m, lm.SessionOptions{Chunk: 3, Capacity: 4})
	got, err := s.Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	require.InDeltaSlice(t, want.Data(), got.Data(), 1e-5)
	require.Equal(t, len(ids), s.Pos())
	require.NoError(t, s.Rollback(4))
	again, err := s.Forward(ids[4:], 4, lm.WantLast)
	require.NoError(t, err)
	v := m.Config.Vocab
	require.InDeltaSlice(t, want.Data().([]float32)[(len(ids)-1)*v:], again.Data(), 1e-5)
}

// rewrite writes the checkpoint of src into a new folder with every tensor
// of two or more dimensions stored as dt, split in two shards with an index
// (the layout of a released checkpoint); it returns the folder.
func rewrite(t *testing.T, src string, dt graph.DType) string {
	t.Helper()
	ck, err := weights.Open(src)
	require.NoError(t, err)
	defer ck.Close()
	dir := t.TempDir()
	var shards [2][]weights.NamedTensor
	index := map[string]string{}
	for i, name := range ck.Names() {
		info, err := ck.Info(name)
		require.NoError(t, err)
		v, err := ck.Float32(name)
		require.NoError(t, err)
		nt := weights.NamedTensor{Name: name, DType: graph.F32, Shape: info.Shape, Data: weights.EncodeF32(v)}
		if len(info.Shape) >= 2 {
			nt.DType = dt
			switch dt {
			case graph.BF16:
				nt.Data = weights.EncodeBF16(v)
			case graph.F16:
				nt.Data = weights.EncodeF16(v)
			}
		}
		file := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i%2]
		shards[i%2] = append(shards[i%2], nt)
		index[name] = file
	}
	for i, f := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		require.NoError(t, weights.WriteFile(filepath.Join(dir, f), shards[i]))
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": index})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), raw, 0o644))
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	return dir
}

// TestSixteenBitShards: a checkpoint sharded in two, its matrices in bf16
// or f16, gives the logits of the f32 checkpoint within the rounding of
// 16-bit weights (and is read as stored: its matrices stay 16-bit).
func TestSixteenBitShards(t *testing.T) {
	src := filepath.Join(testdata, "llama3-13")
	ids := []int{5, 17, 33, 2, 90, 41}
	want, err := session(t, load(t, src), lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	for _, dt := range []graph.DType{graph.F32, graph.BF16, graph.F16} {
		m := load(t, rewrite(t, src, dt))
		g, err := m.Graph("forward", 1, lm.WantLast, models.Options{})
		require.NoError(t, err)
		for _, v := range g.Values {
			if v.Kind == graph.Weight && len(v.Shape) == 2 {
				require.Equal(t, dt, v.DType, v.Name)
			}
		}
		got, err := session(t, m, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
		require.NoError(t, err)
		tol := map[graph.DType]float64{graph.F32: 0, graph.BF16: 0.05, graph.F16: 0.01}[dt]
		require.InDeltaSlice(t, want.Data(), got.Data(), tol, dt.String())
	}
}

// TestConfigSpellings: the older top-level rope_theta and rope_scaling
// read as transformers 5's rope_parameters.
func TestConfigSpellings(t *testing.T) {
	src := filepath.Join(testdata, "llama3-13")
	dir := rewrite(t, src, graph.F32)
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	p := cfg["rope_parameters"].(map[string]any)
	cfg["rope_theta"] = p["rope_theta"]
	delete(p, "rope_theta")
	p["type"] = p["rope_type"]
	delete(p, "rope_type")
	cfg["rope_scaling"] = p
	delete(cfg, "rope_parameters")
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	a, b := load(t, src), load(t, dir)
	require.Equal(t, a.Config, b.Config)
}

// TestLoadErrors: a checkpoint that does not match the graphs' declarations
// is refused naming the tensor and where the model reads it.
func TestLoadErrors(t *testing.T) {
	src := filepath.Join(testdata, "qwen3-untied-12")
	for _, c := range []struct {
		name string
		edit func(cfg map[string]any)
		want string
	}{
		{"wrong heads", func(c map[string]any) { c["num_key_value_heads"] = 6 }, "layer 0 / attn: tensor model.layers.0.self_attn.k_proj.weight: shape"},
		{"bias missing", func(c map[string]any) { c["attention_bias"] = true }, "layer 0 / attn: tensor model.layers.0.self_attn.q_proj.bias: missing"},
		{"more layers", func(c map[string]any) { c["num_hidden_layers"] = 9 }, "layer 3 / attn: tensor model.layers.3.input_layernorm.weight: missing"},
		{"act", func(c map[string]any) { c["hidden_act"] = "gelu" }, `hidden_act "gelu"`},
		{"rope type", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"rope_type": "dynamic", "rope_theta": 1e4}
		}, `rope_type "dynamic"`},
		{"huge vocab", func(c map[string]any) { c["vocab_size"] = 1 << 40 }, "vocab_size"},
		{"heads", func(c map[string]any) { c["num_attention_heads"] = 5 }, "not a multiple"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := rewrite(t, src, graph.F32)
			var cfg map[string]any
			raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, &cfg))
			c.edit(cfg)
			raw, err = json.Marshal(cfg)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
			_, err = llama.Load(dir)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestSynthetic: a synthetic model declares exactly the tensors of the
// checkpoint of its config, and runs.
func TestSynthetic(t *testing.T) {
	for _, name := range checkpoints {
		real := load(t, filepath.Join(testdata, name))
		m, err := llama.Synthetic(real.Config, graph.BF16, 1)
		require.NoError(t, err)
		require.Equal(t, real.Parameters(), m.Parameters(), name)
		out, err := session(t, m, lm.SessionOptions{}).Forward([]int{1, 2, 3}, 0, lm.WantLast)
		require.NoError(t, err)
		for _, x := range out.Data().([]float32) {
			require.False(t, math.IsNaN(float64(x)))
		}
	}
}

// TestPlan: the planner fuses the dense layer as it does Dory's: q/k/v and
// gate/up each one grouped launch.
func TestPlan(t *testing.T) {
	m := load(t, filepath.Join(testdata, "qwen3-tied-11"))
	g, err := m.Graph("forward", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	_, rep, err := planner.Plan(g, planner.DefaultOptions())
	require.NoError(t, err)
	require.Contains(t, rep.FusionString(), "grouped_matmul")
	require.Less(t, rep.Launches, rep.Nodes)
	t.Log(rep.FusionString(), rep.Launches, "launches of", rep.Nodes, "nodes")
}

// TestTiedIgnoresHead: a tied config over a file that also stores
// lm_head.weight loads (as transformers, which ties the head to the
// embedding table) and its head is the table: its logits are the tied
// model's, not the untied file's.
func TestTiedIgnoresHead(t *testing.T) {
	src := filepath.Join(testdata, "qwen3-untied-12")
	dir := rewrite(t, src, graph.F32)
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	cfg["tie_word_embeddings"] = true
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	tied, untied := load(t, dir), load(t, src)
	require.True(t, tied.Config.Tied)
	ids := []int{1, 2, 3}
	a, err := session(t, tied, lm.SessionOptions{}).Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	b, err := session(t, untied, lm.SessionOptions{}).Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	require.NotEqual(t, a.Data(), b.Data(), "the tied head is the embedding table, not lm_head.weight")
	g, err := tied.Graph("forward", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	for _, v := range g.Values {
		require.NotEqual(t, "lm_head.weight", v.Name)
	}
}

// TestSlidingWindow: a window over every layer (Config.Window, as Mistral
// sets it) changes nothing while every row sees all its keys, changes the
// rows past it, and its rings give one forward's logits in prompt chunks
// of 1, 3 and 7 rows and decoding past their rows (so they wrap); a
// rollback goes back Rewind rows, no further.
func TestSlidingWindow(t *testing.T) {
	dir := filepath.Join(testdata, "llama3-13")
	full, win := load(t, dir), load(t, dir)
	win.Config.Window = 4
	ids := make([]int, 2*llama.Rewind+40)
	for i := range ids {
		ids[i] = (i*37 + 11) % full.Config.Vocab
	}
	a, err := session(t, full, lm.SessionOptions{}).Forward(ids[:8], 0, lm.WantAll)
	require.NoError(t, err)
	b, err := session(t, win, lm.SessionOptions{}).Forward(ids[:8], 0, lm.WantAll)
	require.NoError(t, err)
	v := full.Config.Vocab
	fa, fb := a.Data().([]float32), b.Data().([]float32)
	require.InDeltaSlice(t, fa[:4*v], fb[:4*v], 1e-5, "rows that see at most 4 keys")
	for p := 4; p < 8; p++ {
		require.NotEqual(t, fa[p*v:(p+1)*v], fb[p*v:(p+1)*v], "row %d sees 4 keys, not %d", p, p+1)
	}
	modeltest.CheckChunks(t, win, cpu.New(2), ids, 2*llama.Rewind, []int{1, 3, 7}, 1e-4)

	s := session(t, win, lm.SessionOptions{Chunk: 7})
	want, err := s.Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	require.ErrorContains(t, s.Rollback(len(ids)-llama.Rewind-1), "keep only")
	require.NoError(t, s.Rollback(len(ids)-llama.Rewind))
	got, err := s.Forward(ids[len(ids)-llama.Rewind:], len(ids)-llama.Rewind, lm.WantLast)
	require.NoError(t, err)
	require.InDeltaSlice(t, want.Data(), got.Data(), 1e-5)
}
