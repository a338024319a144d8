package lm_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/lm"
)

// TestRandomUniform: a synthetic weight is reproducible from its stream,
// differs between streams, stays within [-a, a] with a mean near 0 and the
// variance a²/3, and its bf16 form is its f32 form rounded.
func TestRandomUniform(t *testing.T) {
	const n, a = 300001, 0.5 // more elements than one goroutine's share
	f, err := lm.RandomUniform(graph.F32, a, 7, 3, n/3)
	require.NoError(t, err)
	again, err := lm.RandomUniform(graph.F32, a, 7, 3, n/3)
	require.NoError(t, err)
	require.Equal(t, f, again)
	other, err := lm.RandomUniform(graph.F32, a, 8, 3, n/3)
	require.NoError(t, err)
	require.NotEqual(t, f.Data, other.Data)
	require.Equal(t, []int{3, n / 3}, f.Shape)

	var sum, sq float64
	for i := 0; i < f.Len(); i++ {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(f.Data[4*i:])))
		require.LessOrEqual(t, math.Abs(x), a)
		sum += x
		sq += x * x
	}
	mean, v := sum/float64(f.Len()), sq/float64(f.Len())
	require.InDelta(t, 0, mean, 0.005)
	require.InDelta(t, a*a/3, v, 0.002)

	b, err := lm.RandomUniform(graph.BF16, a, 7, 3, n/3)
	require.NoError(t, err)
	for i := 0; i < b.Len(); i += 997 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(f.Data[4*i:]))
		require.Equal(t, half.F32ToBF16(x), binary.LittleEndian.Uint16(b.Data[2*i:]))
	}
	_, err = lm.RandomUniform(graph.F16, a, 7, 4)
	require.ErrorContains(t, err, "want f32 or bf16")
}
