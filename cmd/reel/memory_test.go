package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
)

func TestSyntheticMemory(t *testing.T) {
	require.Equal(t, int64(6000), syntheticMemory(1000, graph.BF16, "cpu"), "bf16 and the CPU's f32 copy")
	require.Equal(t, int64(2000), syntheticMemory(1000, graph.BF16, "cuda"))
	require.Equal(t, int64(4000), syntheticMemory(1000, graph.F32, "cpu"))
	require.NoError(t, checkMemory("tiny", 1))
	if _, ok := availableMemory(); ok {
		require.ErrorContains(t, checkMemory("huge", 1<<62), "huge needs about")
	}
}
