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

// fp8Dir is a tiny Qwen3 in the published FP8 layout (float8_e4m3fn
// projections with 128 x 128 block weight_scale_inv) with transformers'
// logits of its dequantized weights.
const fp8Dir = "../../testdata/dense-fp8/qwen3-fp8-31"

// projections are the matrices of a layer that Linear reads.
var projections = []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}

// checkQuantGraph checks that a model's forward reads every projection
// through quant_matmul with codes of dt and nothing else quantized.
func checkQuantGraph(t *testing.T, m models.Model, layers int, dt graph.DType) {
	t.Helper()
	g, err := m.Graph("forward", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	n := 0
	for _, nd := range g.Nodes {
		if nd.Op == "quant_matmul" {
			n++
			require.Equal(t, dt, nd.Inputs[1].DType, nd.Inputs[1].Name)
		}
		if nd.Op == "matmul" {
			require.Contains(t, []string{"model.embed_tokens.weight", "lm_head.weight"}, nd.Inputs[1].Name)
		}
	}
	require.Equal(t, len(projections)*layers, n, "quant_matmul nodes")
}

// TestFP8Golden: the FP8 checkpoint loads unchanged through the registry
// (its projections kept as float8_e4m3fn with their scales, every scale
// read) and gives transformers' logits of the dequantized weights within
// 1e-4, fused and unfused.
func TestFP8Golden(t *testing.T) {
	m, err := models.Load(fp8Dir)
	require.NoError(t, err)
	defer m.Close()
	checkQuantGraph(t, m, 2, graph.F8E4M3)
	off := planner.DefaultOptions()
	off.Fuse = false
	for _, p := range []*planner.Options{nil, &off} {
		s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(2), Planner: p}}})
		require.NoError(t, err)
		modeltest.CheckGolden(t, s, fp8Dir, 1e-4)
		s.Close()
	}
}

// TestFP8Plan: the planner plans the FP8 layer, grouping the quantized
// products of one input (q/k/v, gate/up: quant_grouped_matmul, none left
// to the plain grouping rule) and still fusing the norms and rotary
// embeddings around them.
func TestFP8Plan(t *testing.T) {
	m, err := llama.Load(fp8Dir)
	require.NoError(t, err)
	defer m.Close()
	g, err := m.Graph("forward", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	fused, rep, err := planner.Plan(g, planner.DefaultOptions())
	require.NoError(t, err)
	require.Equal(t, 4, rep.Fusions[planner.RuleQuantGroupMatMul]) // 2 layers' q/k/v and gate/up
	require.Zero(t, rep.Fusions[planner.RuleGroupMatMul]+rep.Fusions[planner.RuleMatMulSwiGLU])
	require.Less(t, rep.Launches, rep.Nodes)
	_ = fused
	t.Log(rep.FusionString(), rep.Launches, "launches of", rep.Nodes, "nodes")
}

// editFP8 copies the FP8 checkpoint, with edit applied to its config and
// the tensors (by name) keep keeps, to a new folder.
func editFP8(t *testing.T, edit func(cfg map[string]any), keep func(name string) bool) string {
	t.Helper()
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(fp8Dir, "config.json"))
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(raw, &cfg))
	if edit != nil {
		edit(cfg)
	}
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	ck, err := weights.Open(fp8Dir)
	require.NoError(t, err)
	defer ck.Close()
	var ts []weights.NamedTensor
	for _, n := range ck.Names() {
		if keep != nil && !keep(n) {
			continue
		}
		info, err := ck.Info(n)
		require.NoError(t, err)
		data, err := ck.Bytes(n)
		require.NoError(t, err)
		ts = append(ts, weights.NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: data})
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, "model.safetensors"), ts))
	return dir
}

// TestFP8LoadErrors: what does not fit the FP8 layout is refused naming
// the tensor or the field.
func TestFP8LoadErrors(t *testing.T) {
	qc := func(f func(q map[string]any)) func(cfg map[string]any) {
		return func(cfg map[string]any) { f(cfg["quantization_config"].(map[string]any)) }
	}
	for _, c := range []struct {
		name string
		edit func(cfg map[string]any)
		keep func(string) bool
		want string
	}{
		{"scale missing", nil, func(n string) bool { return n != "model.layers.1.mlp.up_proj.weight_scale_inv" },
			"layer 1 / mlp: tensor model.layers.1.mlp.up_proj.weight_scale_inv: missing"},
		{"no quantization_config", func(cfg map[string]any) { delete(cfg, "quantization_config") }, nil,
			"model.layers.0.self_attn.q_proj.weight is stored as f8_e4m3, which the quantization (none) does not describe"},
		{"other blocks", qc(func(q map[string]any) { q["weight_block_size"] = []int{64, 64} }), nil,
			"model.layers.0.self_attn.q_proj.weight_scale_inv: shape [2 2], want [4 4]"},
		{"per-tensor", qc(func(q map[string]any) { delete(q, "weight_block_size") }), nil,
			"weight_block_size []: want two block sides"},
		{"e5m2", qc(func(q map[string]any) { q["fmt"] = "e5m2" }), nil, `fmt "e5m2"`},
		{"static", qc(func(q map[string]any) { q["activation_scheme"] = "static" }), nil, `activation_scheme "static"`},
		{"method", qc(func(q map[string]any) { q["quant_method"] = "gptq" }), nil, `quant_method: quantization "gptq"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := llama.Load(editFP8(t, c.edit, c.keep))
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := llama.LoadQuantized(fp8Dir, "q4")
	require.ErrorContains(t, err, "--quant q4: the checkpoint is stored quantized in fp8")
}

// TestQuantizeOnLoad: quantizing a float checkpoint at load reads every
// projection through quant_matmul in the format (embedding, norms and the
// output head stay f32), and moves the logits of the float model by what
// the format's rounding costs: the relative RMS difference of the logits
// is about 1.6 % for q8, 6 % for fp8 and 22 % for q4 (this tiny random
// model is sensitive; the weights' own errors are in lm's tests).
func TestQuantizeOnLoad(t *testing.T) {
	src := filepath.Join(testdata, "qwen3-untied-12")
	ids := []int{5, 17, 33, 2, 90, 41, 7, 7, 1}
	ref := load(t, src)
	want, err := session(t, ref, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	w := want.Data().([]float32)
	for _, c := range []struct {
		quant string
		dt    graph.DType
		max   float64
	}{{"q8", graph.I8, 0.03}, {"fp8", graph.F8E4M3, 0.1}, {"q4", graph.U8, 0.35}} {
		m, err := llama.LoadQuantized(src, c.quant)
		require.NoError(t, err, c.quant)
		checkQuantGraph(t, m, ref.Config.Layers, c.dt)
		got, err := session(t, m, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
		require.NoError(t, err)
		var num, den float64
		for i, g := range got.Data().([]float32) {
			d := float64(g - w[i])
			num += d * d
			den += float64(w[i]) * float64(w[i])
		}
		rel := math.Sqrt(num / den)
		t.Logf("%s: relative RMS difference of the logits %.4f", c.quant, rel)
		require.Less(t, rel, c.max, c.quant)
		require.Greater(t, rel, 0.0, c.quant)
		m.Close()
	}
}

// TestQuantizeModel: Quantize makes of a loaded float model the weights
// LoadQuantized makes at load, so the same logits bit for bit (the CPU
// holds f32 weights at one alignment wherever they lie in their file);
// the receiver is spent, the parameters are still the matrices'
// elements, and an FP8 checkpoint is not quantized again in another
// format.
func TestQuantizeModel(t *testing.T) {
	src := filepath.Join(testdata, "qwen3-untied-12")
	ids := []int{5, 17, 33, 2, 90, 41, 7, 7, 1}
	for _, quant := range []string{"q8", "fp8", "q4"} {
		want, err := llama.LoadQuantized(src, quant)
		require.NoError(t, err)
		defer want.Close()
		m := load(t, src)
		params := m.Parameters()
		q, err := m.Quantize(quant, nil)
		require.NoError(t, err)
		got := q.(*llama.Model)
		defer got.Close()
		require.Nil(t, m.Weights(), "the receiver is spent")
		require.Equal(t, want.Weights(), got.Weights(), quant)
		require.Equal(t, params, got.Parameters())
		a, err := session(t, want, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
		require.NoError(t, err)
		b, err := session(t, got, lm.SessionOptions{}).Forward(ids, 0, lm.WantAll)
		require.NoError(t, err)
		require.Equal(t, a.Data(), b.Data(), quant)
	}
	_, err := load(t, fp8Dir).Quantize("q4", nil)
	require.ErrorContains(t, err, "llama: --quant q4: the model is stored quantized in fp8")
	_, err = load(t, src).Quantize("q2", nil)
	require.ErrorContains(t, err, `quantization "q2"`)
}
