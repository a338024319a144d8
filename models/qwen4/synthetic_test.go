package qwen4

import (
	"github.com/reel-runtime/reel/lm"
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
			require.Len(t, m.Tensors, len(loaded.Tensors))
			for n, lt := range loaded.Tensors {
				st, ok := m.Tensors[n]
				require.True(t, ok, "%s is not made", n)
				require.Equal(t, lt.Shape, st.Shape, n)
			}
			require.Equal(t, loaded.ple, m.ple)
			require.Equal(t, loaded.shards, m.shards)
			again, err := Synthetic(c, graph.BF16, 3)
			require.NoError(t, err)
			require.Equal(t, m.Tensors, again.Tensors)

			c.MTPLayers = 1
			m, err = Synthetic(c, graph.F32, 4)
			require.NoError(t, err)
			require.True(t, m.HasMTP)
			s := newSession(t, m, Options{})
			out, err := s.Forward([]int{1, 2, 3, 4, 5}, 0, lm.WantAll)
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

// TestShapes: Shapes gives Synthetic's weights without values: the same
// names, dtypes and shapes, graphs that build, weights that cannot upload.
func TestShapes(t *testing.T) {
	c := loadModel(t, filepath.Join(testdata, checkpoints[1])).Config
	c.MTPLayers = 1
	full, err := Synthetic(c, graph.BF16, 1)
	require.NoError(t, err)
	bare, err := Shapes(c, graph.BF16)
	require.NoError(t, err)
	require.Len(t, bare.Tensors, len(full.Tensors))
	for n, ft := range full.Tensors {
		bt := bare.Tensors[n]
		require.Equal(t, ft.DType, bt.DType, n)
		require.Equal(t, ft.Shape, bt.Shape, n)
		require.Empty(t, bt.Data, n)
	}
	g, err := Build(&c, Key{Stage: Draft, Want: lm.WantLast, Rows: 2}, bare)
	require.NoError(t, err)
	require.NotEmpty(t, g.Nodes)
	_, err = NewSession(bare, Options{})
	require.Error(t, err)
}
