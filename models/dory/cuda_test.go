package dory

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
)

// cudaBackend opens the CUDA backend or skips the test (cudatest.Backend).
func cudaBackend(t *testing.T, opts cuda.Options) *cuda.Backend { return cudatest.Backend(t, opts) }

// TestCUDAGolden: the golden f32 checkpoints on CUDA, within 1e-3 of the
// independent implementation's logits, in every chunking.
func TestCUDAGolden(t *testing.T) {
	be := cudaBackend(t, cuda.Options{})
	raw, err := os.ReadFile(filepath.Join(testdata, "dory", "golden.json"))
	require.NoError(t, err)
	var cases []goldenCase
	require.NoError(t, json.Unmarshal(raw, &cases))
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
// (the GEMM path) and 40 decoded tokens, against the CPU on the same
// weights, within 2e-2.
func TestCUDAMatchesCPUOnBF16(t *testing.T) {
	be := cudaBackend(t, cuda.Options{})
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
