package lm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops/cpu"
)

// TestUploadAndSynthesizeProgress: both report bytes from 0 up to the
// total, rising, ending at the total.
func TestUploadAndSynthesizeProgress(t *testing.T) {
	decl := []lm.Declared{
		{Name: "a", DType: graph.BF16, Shape: []int{4, 8}},
		{Name: "b", DType: graph.F32, Shape: []int{8}},
		{Name: "c", DType: graph.F32, Shape: []int{2, 8}},
	}
	const total = 4*8*2 + 8*4 + 2*8*4
	check := func(what string, calls [][2]int64) {
		t.Helper()
		require.NotEmpty(t, calls, what)
		for i, c := range calls {
			require.Equal(t, int64(total), c[1], what)
			if i > 0 {
				require.GreaterOrEqual(t, c[0], calls[i-1][0], what)
			}
		}
		require.Equal(t, [2]int64{total, total}, calls[len(calls)-1], what)
	}
	var made [][2]int64
	ts, err := lm.Synthesize(decl, 1, nil, func(done, total int64) { made = append(made, [2]int64{done, total}) })
	require.NoError(t, err)
	check("synthesize", made)
	var up [][2]int64
	bufs, err := ts.Upload(cpu.New(1), func(done, total int64) { up = append(up, [2]int64{done, total}) })
	require.NoError(t, err)
	require.Len(t, bufs, 3)
	check("upload", up)
	require.Equal(t, int64(0), up[0][0])
}
