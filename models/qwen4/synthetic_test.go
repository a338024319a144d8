package qwen4

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
)

// TestSynthetic: a synthetic model of a checkpoint's config has the
// checkpoint's weights (names, shapes, PLE hash constants), the same seed
// gives the same weights, and it runs: finite logits, and with the MTP head
// drafts.
func TestSynthetic(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			loaded := loadModel(t, filepath.Join(testdata, name))
			c := loaded.Config
			c.MTPLayers = 0
			m, err := Synthetic(c, graph.BF16, 3)
			require.NoError(t, err)
			require.Len(t, m.tensors, len(loaded.tensors))
			for n, lt := range loaded.tensors {
				st, ok := m.tensors[n]
				require.True(t, ok, "%s is not made", n)
				require.Equal(t, lt.Shape, st.Shape, n)
			}
			require.Equal(t, loaded.ple, m.ple)
			require.Equal(t, loaded.shards, m.shards)
			again, err := Synthetic(c, graph.BF16, 3)
			require.NoError(t, err)
			require.Equal(t, m.tensors, again.tensors)

			c.MTPLayers = 1
			m, err = Synthetic(c, graph.F32, 4)
			require.NoError(t, err)
			require.True(t, m.HasMTP)
			s := newSession(t, m, Options{})
			out, err := s.Forward([]int{1, 2, 3, 4, 5}, 0, WantAll)
			require.NoError(t, err)
			for _, v := range out.Data().([]float32) {
				require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
			}
			drafts, err := s.Draft(6, 2)
			require.NoError(t, err)
			require.Len(t, drafts, 2)
		})
	}
	_, err := Synthetic(Config{}, graph.F32, 1)
	require.Error(t, err)
	_, err = Synthetic(BenchShape(), graph.F16, 1)
	require.ErrorContains(t, err, "want f32 or bf16")
	require.NoError(t, func() error { c := BenchShape(); return c.Validate() }())
}
