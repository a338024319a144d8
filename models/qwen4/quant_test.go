package qwen4

import (
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/modeltest"
)

// quantFormats are the formats, each with the largest relative RMS
// difference of the logits it may make on qwen4-tiny-wide-21 (see
// TestQuantizeOnLoad).
var quantFormats = []struct {
	quant string
	dt    graph.DType
	max   float64
}{{lm.QuantQ8, graph.I8, 0.03}, {lm.QuantFP8, graph.F8E4M3, 0.15}, {lm.QuantQ4, graph.U8, 0.3}}

// unquantized are the endings of the names of the weights a product reads
// unquantized: the router, the shared expert's gate row, the GDN's a and b
// rows, the hyper-connection mixers and the head.
var unquantized = []string{"mlp.gate.weight", "shared_expert_gate.weight", "in_proj_a.weight", "in_proj_b.weight",
	"input_mix_weight_down.weight", "input_mix_weight_up.weight", "block_inject_weight.weight", "lm_head.weight"}

// quantizedProducts are the weights a graph reads with quant_matmul and
// with quant_expert_matmul (their codes' dtype dt), and the weights of its
// float products.
func quantizedProducts(t *testing.T, g *graph.Graph, dt graph.DType) (mats, experts, float []string) {
	t.Helper()
	for _, n := range g.Nodes {
		switch n.Op {
		case "quant_matmul":
			mats = append(mats, n.Inputs[1].Name)
			require.Equal(t, dt, n.Inputs[1].DType, n.Inputs[1].Name)
		case "quant_expert_matmul":
			experts = append(experts, n.Inputs[1].Name)
			require.Equal(t, dt, n.Inputs[1].DType, n.Inputs[1].Name)
		case "matmul", "expert_matmul":
			float = append(float, n.Inputs[1].Name)
		}
	}
	return mats, experts, float
}

// quantCheckpoints are the tiny checkpoints the quantization tests load,
// and ids to run (the longest golden sequence; any for the MTP one).
func quantCheckpoints(t *testing.T) map[string][]int {
	t.Helper()
	out := map[string][]int{"qwen4-tiny-mtp": {5, 17, 3, 99, 42, 7, 1, 64, 12, 8, 33, 2, 77, 90, 11, 23, 50, 6, 31, 100}}
	for _, name := range checkpoints {
		out[name] = longest(readGolden(t, filepath.Join(testdata, name)))
	}
	return out
}

// dequantized is a float model of m's weights dequantized (the f32
// matrices the codes and scales stand for), on the float model ref's
// checkpoint.
func dequantized(t *testing.T, m, ref *Model) *Model {
	t.Helper()
	d := *ref
	d.Tensors = lm.Tensors{}
	for n, w := range ref.Tensors {
		d.Tensors[n] = w
		if q := m.Tensors[n]; q.DType.IsQuantized() {
			sh := w.Shape
			v, err := m.Quant.Dequantize(q, m.Tensors[m.Quant.ScaleName(n)], sh[len(sh)-2], sh[len(sh)-1])
			require.NoError(t, err, n)
			d.Tensors[n] = lm.F32Tensor(v, sh...)
		}
	}
	return &d
}

// noisy is the float model ref with the weights m holds quantized each
// times 1 + rel·N(0, 1), a relative error as large as the format's in RMS
// but random: how much such an error moves the model's logits is what its
// rounding is measured against.
func noisy(t *testing.T, ref, m *Model, rel float64, seed uint64) *Model {
	t.Helper()
	d := *ref
	d.Tensors = lm.Tensors{}
	r := rand.New(rand.NewPCG(seed, 11))
	// In name order, so that a seed draws the same noise for every tensor
	// on every run (a map's order would not).
	for _, n := range slices.Sorted(maps.Keys(ref.Tensors)) {
		w := ref.Tensors[n]
		d.Tensors[n] = w
		if m.Tensors[n].DType.IsQuantized() {
			v, err := w.Float32()
			require.NoError(t, err, n)
			for i := range v {
				v[i] *= float32(1 + rel*r.NormFloat64())
			}
			d.Tensors[n] = lm.F32Tensor(v, w.Shape...)
		}
	}
	return &d
}

// weightError is the relative RMS error of the weights m holds quantized
// against ref's, dequantized.
func weightError(t *testing.T, m, ref, deq *Model) float64 {
	t.Helper()
	var num, den float64
	for n, q := range m.Tensors {
		if !q.DType.IsQuantized() {
			continue
		}
		a, err := deq.Tensors[n].Float32()
		require.NoError(t, err, n)
		b, err := ref.Tensors[n].Float32()
		require.NoError(t, err, n)
		for i := range a {
			d := float64(a[i] - b[i])
			num += d * d
			den += float64(b[i]) * float64(b[i])
		}
	}
	return math.Sqrt(num / den)
}

// logits runs ids through a new session of m: every row's logits.
func logits(t *testing.T, m *Model, ids []int) []float32 {
	t.Helper()
	out, err := newSession(t, m, Options{}).Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	return out.Data().([]float32)
}

// TestQuantizeOnLoad: quantizing the tiny checkpoints at load reads every
// projection through quant_matmul and the routed experts through
// quant_expert_matmul in the format, and the router, the hyper-connection
// mixers, the GDN's a and b rows, the shared expert's gate row and the head
// as stored; the weights shrink, and the logits are those of the float
// model of the dequantized weights (relative RMS difference under 1e-6;
// measured 0 on the CPU): the quantized products compute that model.
//
// How far the logits move from the unquantized model's is the format's
// rounding (relative RMS error of the weights 0.4-0.5 % q8, 2.6 % fp8,
// 6-9 % q4) amplified by the model, and these random checkpoints amplify
// much and by jumps, a router's or the indexer's choice flipping. Measured
// (relative RMS difference of the logits; q8, fp8, q4): quantizing moved
// small-11's by 22 %, 34 %, 63 %, wide-21's by 1.1 %, 9.7 %, 19 % and the
// MTP checkpoint's by 7.7 %, 4.2 %, 10 %, where a random relative error of
// the same RMS as the format's (three draws, the largest) moved them by
// 29 %, 40 %, 66 %, by 1.3 %, 12 %, 21 % and by 7.7 %, 12 %, 15 %. So the
// rounding moves them as a random error of its size does: on every
// checkpoint the difference must stay under twice the largest of three
// such random errors', and on wide-21, whose logits answer smoothly, under
// quantFormats' bounds (about 1.5 times its random errors').
func TestQuantizeOnLoad(t *testing.T) {
	for name, ids := range quantCheckpoints(t) {
		dir := filepath.Join(testdata, name)
		ref := loadModel(t, dir)
		want := logits(t, ref, ids)
		for _, c := range quantFormats {
			m, err := LoadQuantized(dir, c.quant)
			require.NoError(t, err, c.quant)
			t.Cleanup(func() { m.Close() })
			g, err := m.Graph("forward", 1, lm.WantLast, models.Options{})
			require.NoError(t, err)
			mats, experts, float := quantizedProducts(t, g, c.dt)
			require.Len(t, experts, 2*len(m.Config.Layers), "%s: gate_up and down of every layer", name)
			qsa := 0
			for _, k := range m.Config.Layers {
				if k == QSA {
					qsa++
				}
			}
			gdn := len(m.Config.Layers) - qsa
			// shared expert 3, GDN 3, QSA 5 (q, k, v, o, the indexer's), PLE 2
			require.Len(t, mats, 3*len(m.Config.Layers)+3*gdn+5*qsa+2*len(m.Config.PLELayers), "%s: projections", name)
			for _, n := range float {
				require.True(t, slices.ContainsFunc(unquantized, func(s string) bool { return strings.HasSuffix(n, s) }), "%s read unquantized", n)
			}
			require.Less(t, m.Tensors.Bytes(nil), ref.Tensors.Bytes(nil), c.quant)
			require.Equal(t, ref.Parameters(), m.Parameters(), "a quantized matrix counts its elements")

			got := logits(t, m, ids)
			deq := dequantized(t, m, ref)
			require.Less(t, modeltest.RelRMS(got, logits(t, deq, ids)), 1e-6, "%s %s: the model of the dequantized weights", name, c.quant)
			rel, werr := modeltest.RelRMS(got, want), weightError(t, m, ref, deq)
			control := 0.0
			for seed := range uint64(3) {
				control = math.Max(control, modeltest.RelRMS(logits(t, noisy(t, ref, m, werr, seed), ids), want))
			}
			t.Logf("%s %s: logits moved by %.4f (relative RMS), a random weight error of the same %.4f by up to %.4f; weights %d bytes, unquantized %d",
				name, c.quant, rel, werr, control, m.Tensors.Bytes(nil), ref.Tensors.Bytes(nil))
			require.Greater(t, rel, 0.0, "%s %s", name, c.quant)
			require.Less(t, rel, 2*control, "%s %s", name, c.quant)
			if name == "qwen4-tiny-wide-21" {
				require.Less(t, rel, c.max, "%s %s", name, c.quant)
			}
		}
	}
	_, err := LoadQuantized(filepath.Join(testdata, checkpoints[0]), "q3")
	require.ErrorContains(t, err, `--quant: quantization "q3": want fp8, q8 or q4`)
}

// TestQuantizeModel: Quantize makes of a loaded float model the very
// weights LoadQuantized makes at load (so the same logits, bit for bit);
// of a model of shapes only, one of the format's shapes, whose graphs read
// quant_matmul and quant_expert_matmul. The receiver is spent; another
// format than the one a model holds, or none, is an error naming the flag.
// reel quantize's folders load back to the weights LoadQuantized makes
// (TestQuantizeCommand in cmd/reel).
func TestQuantizeModel(t *testing.T) {
	dir := filepath.Join(testdata, "qwen4-tiny-mtp")
	ids := []int{5, 17, 3, 99, 42, 7}
	for _, c := range quantFormats {
		want, err := LoadQuantized(dir, c.quant)
		require.NoError(t, err)
		t.Cleanup(func() { want.Close() })
		src := loadModel(t, dir)
		q, err := src.Quantize(c.quant, nil)
		require.NoError(t, err)
		got := q.(*Model)
		require.Nil(t, src.Tensors, "the receiver is spent")
		require.Equal(t, want.Tensors, got.Tensors, c.quant)
		require.Equal(t, want.Quant, got.Quant)
		require.Equal(t, logits(t, want, ids), logits(t, got, ids), c.quant)
		same, err := got.Quantize(c.quant, nil)
		require.NoError(t, err)
		require.Same(t, got, same)
		_, err = got.Quantize(lm.QuantQ8, nil)
		if c.quant != lm.QuantQ8 {
			require.ErrorContains(t, err, "--quant q8: the model is stored quantized in "+c.quant)
		}
	}

	shape, err := Shapes(BenchShape(), graph.BF16)
	require.NoError(t, err)
	params := shape.Parameters()
	qs, err := shape.Quantize(lm.QuantQ4, nil)
	require.NoError(t, err)
	g, err := qs.Graph("forward", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	mats, experts, _ := quantizedProducts(t, g, graph.U8)
	require.Len(t, experts, 2*len(BenchShape().Layers))
	require.NotEmpty(t, mats)
	require.Equal(t, params, qs.Parameters())
	_, err = loadModel(t, dir).Quantize("q3", nil)
	require.ErrorContains(t, err, `qwen4: --quant: quantization "q3": want fp8, q8 or q4`)
}
