package sample

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGreedy(t *testing.T) {
	s, err := New(0, 0, 1)
	require.NoError(t, err)
	require.Equal(t, 2, s.Next([]float32{0, 1, 3, 3, -1}))
	require.Equal(t, 1, Argmax([]float32{float32(math.NaN()), 2, 1}))
}

func TestTopKOnlyDrawsTheTop(t *testing.T) {
	s, err := New(1, 2, 7)
	require.NoError(t, err)
	logits := []float32{5, 0, 4.5, 1, -3}
	seen := map[int]int{}
	for i := 0; i < 2000; i++ {
		seen[s.Next(logits)]++
	}
	require.Len(t, seen, 2)
	// The frequencies follow softmax over the two: e^0.5 : 1.
	ratio := float64(seen[0]) / float64(seen[2])
	require.InDelta(t, math.Exp(0.5), ratio, 0.25)
}

func TestSeedRepeats(t *testing.T) {
	a, _ := New(0.8, 40, 42)
	b, _ := New(0.8, 40, 42)
	logits := make([]float32, 100)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	for i := 0; i < 50; i++ {
		require.Equal(t, a.Next(logits), b.Next(logits))
	}
}

func TestBadSettings(t *testing.T) {
	_, err := New(-1, 0, 0)
	require.Error(t, err)
	_, err = New(1, -2, 0)
	require.Error(t, err)
}

// TestSpeculativeDraws: accepting a drafted token with Accept, or else
// drawing with NextExcept, draws from Next's own distribution (softmax of
// the top-k at the temperature), whichever token was drafted, one outside
// the top-k included; greedy, the argmax alone is accepted.
func TestSpeculativeDraws(t *testing.T) {
	logits := []float32{2, 0.5, 1.5, -1, 0, float32(math.NaN())}
	const temp, k, n = 0.7, 4, 200000
	// the distribution: the top 4 (ids 0, 2, 1, 4) at temperature 0.7
	want := map[int]float64{}
	sum := 0.0
	for _, id := range []int{0, 2, 1, 4} {
		want[id] = math.Exp(float64(logits[id]) / temp)
		sum += want[id]
	}
	for id := range want {
		want[id] /= sum
	}
	for _, d := range []int{0, 1, 4, 3} {
		s, err := New(temp, k, uint64(d)+1)
		require.NoError(t, err)
		seen := map[int]int{}
		for range n {
			tok := d
			if !s.Accept(logits, d) {
				tok = s.NextExcept(logits, d)
			}
			seen[tok]++
		}
		for id, p := range want {
			require.InDelta(t, p, float64(seen[id])/n, 0.005, "draft %d: token %d", d, id)
		}
		require.Zero(t, seen[3], "draft %d: token 3 is outside the top-k", d)
		require.Zero(t, seen[5], "NaN")
	}

	g, err := New(0, 0, 1)
	require.NoError(t, err)
	require.True(t, g.Accept(logits, 0))
	require.False(t, g.Accept(logits, 2))
	require.Equal(t, 0, g.NextExcept(logits, 2))
	one, err := New(1, 1, 1)
	require.NoError(t, err)
	require.True(t, one.Accept(logits, 0), "top-1: the only token is always accepted")
	require.Equal(t, 0, one.NextExcept(logits, 0), "nothing else to draw")
}
