package dory

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
	"github.com/reel-runtime/reel/sample"
)

// cudaBackend opens the CUDA backend or skips the test (cudatest.Backend).
func cudaBackend(t *testing.T, opts cuda.Options) *cuda.Backend { return cudatest.Backend(t, opts) }

// TestCUDAGolden: the golden f32 checkpoints on CUDA, within 1e-3 of the
// independent implementation's logits, in every chunking.
func TestCUDAGolden(t *testing.T) {
	be := cudaBackend(t, cuda.Options{})
	cases := goldenCases(t)
	for _, c := range cases {
		m := loadModel(t, filepath.Join(testdata, "dory", c.Model))
		s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: c.Chunk}})
		var last []float32
		for a := 0; a < len(c.IDs); a += c.Chunk {
			b := min(a+c.Chunk, len(c.IDs))
			out, err := s.ForwardLoops(c.IDs[a:b], a, c.Loops, lm.WantLast)
			require.NoError(t, err)
			last = rowsOf(t, out)[0]
		}
		d := maxAbsDiff(last, c.LogitsLast)
		t.Logf("cuda %s chunk %d: max abs diff %.3g", c.Model, c.Chunk, d)
		require.Less(t, d, 1e-3)
	}
}

// TestCUDAMatchesCPUOnBF16: the embedded bf16 model, prompt in chunks of 64
// (the GEMM path, activations split exactly) and 40 decoded tokens, against
// the CPU on the same weights, within 2e-2.
func TestCUDAMatchesCPUOnBF16(t *testing.T) {
	be := cudaBackend(t, cuda.Options{Precision: cuda.PrecisionExact})
	m := loadModel(t, filepath.Join(testdata, "dory-gotiny"))
	raw, err := os.ReadFile(filepath.Join(testdata, "dory-gotiny", "greedy.json"))
	require.NoError(t, err)
	var g greedyFile
	require.NoError(t, json.Unmarshal(raw, &g))
	seq := append(append([]int{}, g.Prompt...), g.GreedyIDs...)
	seq = append(seq, seq...)[:150]
	run := func(s *Session) [][]float32 {
		rows := forwardIn(t, s, seq[:110], 64, m.Config.Loops)
		return append(rows, forwardIn(t, s, seq[110:], 1, m.Config.Loops)...)
	}
	gpu := run(newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}}}))
	host := run(newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(0)}}}))
	worst := 0.0
	for i := range gpu {
		for j := range gpu[i] {
			worst = math.Max(worst, math.Abs(float64(gpu[i][j]-host[i][j])))
		}
	}
	t.Logf("cuda vs cpu, bf16 weights, %d positions: max abs diff %.3g", len(gpu), worst)
	require.Less(t, worst, 2e-2)
}

// TestCUDAReplayEqualsEager: decoding with recorded CUDA graphs gives what
// launching each kernel eagerly gives.
func TestCUDAReplayEqualsEager(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory-gotiny"))
	run := func(eager bool) ([][]float32, *Session) {
		be := cudaBackend(t, cuda.Options{Eager: eager})
		s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}}})
		_, err := s.ForwardLoops(testIDs, 0, 2, lm.WantNone)
		require.NoError(t, err)
		return forwardIn(t, s, testIDs[:20], 1, 2), s
	}
	graphs, sg := run(false)
	eager, _ := run(true)
	worst := 0.0
	for i := range graphs {
		for j := range graphs[i] {
			worst = math.Max(worst, math.Abs(float64(graphs[i][j]-eager[i][j])))
		}
	}
	t.Logf("replay vs eager over 20 tokens: max abs diff %g; %s", worst, sg.Stats())
	require.Positive(t, sg.Stats().Hits)
	require.LessOrEqual(t, worst, 1e-6)
}

// TestCUDAPromptPrecision measures what the prompt path's rounding costs on
// the embedded model: the prompt and greedy.json's ids (made by an
// independent PyTorch Dory in f32) teacher-forced in one chunk of 229 rows
// (cuBLAS products, flash attention), with activations rounded to bf16 once
// (PrecisionAuto, the default) or split into two 16-bit parts with f32
// attention (PrecisionExact): the
// largest logit difference from the CPU, and the positions whose argmax is
// not the reference's next id. Bounds: bf16 keeps 8 bits, a relative error
// of 2⁻⁹ an activation, which the 12 products of a token (logits of about
// ±20) turn into a few 1e-2 (measured 4.9e-2; bound 0.1); the split keeps
// about 16 bits (measured 5.1e-3, bound 2e-2). A greedy id may flip where two
// logits are closer than that: at most 1 % of them.
func TestCUDAPromptPrecision(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory-gotiny"))
	raw, err := os.ReadFile(filepath.Join(testdata, "dory-gotiny", "greedy.json"))
	require.NoError(t, err)
	var g greedyFile
	require.NoError(t, json.Unmarshal(raw, &g))
	seq := append(append([]int{}, g.Prompt...), g.GreedyIDs[:len(g.GreedyIDs)-1]...)
	loops := m.Config.Loops
	host := forwardIn(t, newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(0)}, Chunk: len(seq)}}), seq, len(seq), loops)
	for _, c := range []struct {
		exact bool
		bound float64
	}{{false, 0.1}, {true, 2e-2}} {
		opts := cuda.Options{}
		if c.exact {
			opts.Precision = cuda.PrecisionExact
		}
		be := cudaBackend(t, opts)
		gpu := forwardIn(t, newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: len(seq)}}), seq, len(seq), loops)
		worst, misses := 0.0, 0
		for i := range gpu {
			for j := range gpu[i] {
				worst = math.Max(worst, math.Abs(float64(gpu[i][j]-host[i][j])))
			}
			if i >= len(g.Prompt)-1 && sample.Argmax(gpu[i]) != g.GreedyIDs[i-len(g.Prompt)+1] {
				misses++
			}
		}
		t.Logf("exact activations %v: max abs logit diff from the CPU %.3g; %d of %d greedy ids missed", c.exact, worst, misses, len(g.GreedyIDs))
		require.Less(t, worst, c.bound)
		require.LessOrEqual(t, misses, len(g.GreedyIDs)/100)
	}
}

// TestCUDAQuantPrompt runs dory-gotiny quantized at load in each format
// on the prompt path: the prompt and greedy.json's ids in one chunk of 229
// rows (the quantized plan of bf16's schedule: quant_slerp_matmul,
// quant_swiglu_norm_matmul, each weight dequantized into 16-bit scratch
// for cuBLAS) against the CPU on the same quantized weights, in the
// default precision (activations and dequantized weights rounded once each
// to the format's 16-bit type: about twice the bf16 model's rounding, whose
// bound TestCUDAPromptPrecision sets at 0.1) and in PrecisionExact (f32
// products of the weights dequantized exactly; f32 attention): the largest
// logit difference, and the positions whose argmax is not the CPU's, at
// most 2 % of them.
func TestCUDAQuantPrompt(t *testing.T) {
	bes := map[cuda.Precision]*cuda.Backend{}
	for _, p := range []cuda.Precision{cuda.PrecisionAuto, cuda.PrecisionExact} {
		bes[p] = cudaBackend(t, cuda.Options{Precision: p})
	}
	dir := filepath.Join(testdata, "dory-gotiny")
	raw, err := os.ReadFile(filepath.Join(dir, "greedy.json"))
	require.NoError(t, err)
	var g greedyFile
	require.NoError(t, json.Unmarshal(raw, &g))
	seq := append(append([]int{}, g.Prompt...), g.GreedyIDs[:len(g.GreedyIDs)-1]...)
	for _, q := range []string{lm.QuantFP8, lm.QuantQ8, lm.QuantQ4} {
		m, err := LoadQuantized(dir, q)
		require.NoError(t, err)
		loops := m.Config.Loops
		host := forwardIn(t, newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(0)}, Chunk: len(seq)}}),
			seq, len(seq), loops)
		for _, c := range []struct {
			prec  cuda.Precision
			bound float64
		}{{cuda.PrecisionAuto, 0.2}, {cuda.PrecisionExact, 2e-2}} {
			gpu := forwardIn(t, newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: bes[c.prec]}, Chunk: len(seq)}}),
				seq, len(seq), loops)
			worst, misses := 0.0, 0
			for i := range gpu {
				for j := range gpu[i] {
					worst = math.Max(worst, math.Abs(float64(gpu[i][j]-host[i][j])))
				}
				if sample.Argmax(gpu[i]) != sample.Argmax(host[i]) {
					misses++
				}
			}
			t.Logf("%s, precision %v: max abs logit diff from the CPU %.3g; argmax differs at %d of %d positions", q, c.prec, worst, misses, len(gpu))
			require.Less(t, worst, c.bound, q)
			require.LessOrEqual(t, misses, len(gpu)/50, q)
		}
		m.Close()
	}
}

// TestCUDABuckets is TestBuckets on the card, within 1e-3, and the golden
// prompts on a bucket's plan (23 rows on 24).
func TestCUDABuckets(t *testing.T) {
	be := cudaBackend(t, cuda.Options{})
	cases := goldenCases(t)
	for _, c := range cases {
		if c.Chunk != len(c.IDs) {
			continue
		}
		m := loadModel(t, filepath.Join(testdata, "dory", c.Model))
		s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: 64, Buckets: lm.DefaultBuckets}})
		out, err := s.ForwardLoops(c.IDs, 0, c.Loops, lm.WantLast)
		require.NoError(t, err)
		d := maxAbsDiff(rowsOf(t, out)[0], c.LogitsLast)
		t.Logf("%s on a bucket's plan: max abs diff %.3g", c.Model, d)
		require.Less(t, d, 1e-3, c.Model)
		modeltest.CheckBuckets(t, m, be, "", 1e-3)
	}
}
