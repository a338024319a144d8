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
