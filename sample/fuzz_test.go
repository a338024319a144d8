package sample

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzChain: any logits (their bits from the input: NaNs, infinities and
// huge values included) and any valid options give a distribution that
// sums to 1 over ids in range, from which Next, Accept and NextExcept draw,
// without a panic.
func FuzzChain(f *testing.F) {
	le := func(xs ...float32) []byte {
		b := make([]byte, 4*len(xs))
		for i, x := range xs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	f.Add(le(1, 2, 3, 2, 1), 0.8, 2, 0.9, 0.05, 1.2, 0.5)
	f.Add(le(inf, -inf, nan, 0, inf), 1.0, 0, 0.5, 0.0, 0.0, 0.0)
	f.Add(le(-inf, -inf, nan), 2.0, 1, 0.0, 0.5, 1.0, 0.0)
	f.Add(le(3e38, -3e38, 1e-45, 0), 1e-300, 3, 1e-9, 0.99, 1e3, -1e3)
	f.Add(le(0, 0, 0, 0, 0, 0, 0, 0), 1e300, 3, 0.3, 0.0, 0.0, 0.0)
	f.Fuzz(func(t *testing.T, data []byte, temp float64, topK int, topP, minP, rep, pen float64) {
		o := Options{Temperature: temp, TopK: topK, TopP: topP, MinP: minP, RepetitionPenalty: rep, PresencePenalty: pen, FrequencyPenalty: pen / 2}
		s, err := NewSampler(o)
		if err != nil {
			return
		}
		l := make([]float32, len(data)/4)
		for i := range l {
			l[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		s.Prompt([]int{0, 1, -5, 1 << 40})
		ids, probs := s.Probs(l)
		require.True(t, slices.IsSorted(ids))
		total := 0.0
		for i, id := range ids {
			require.True(t, id >= 0 && id < len(l))
			require.True(t, probs[i] > 0 && probs[i] <= 1, "p %v", probs[i])
			total += probs[i]
		}
		if len(ids) > 0 {
			require.InDelta(t, 1, total, 1e-9)
		}
		next := s.Next(l)
		if len(ids) > 0 {
			require.Contains(t, ids, next)
		} else {
			require.Zero(t, next)
		}
		d := next
		if !s.Accept(l, d) {
			s.NextExcept(l, d)
		}
	})
}
