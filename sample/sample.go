// Package sample picks the next token from a row of logits: greedy, or by
// temperature with top-k, from a seeded generator so runs repeat.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Sampler draws token ids from logits.
type Sampler struct {
	// Temperature divides the logits; 0 picks the argmax.
	Temperature float64
	// TopK keeps the k most likely tokens before drawing; 0 keeps all.
	TopK int
	rng  *rand.Rand
}

// New makes a sampler; seed fixes the draws.
func New(temperature float64, topK int, seed uint64) (*Sampler, error) {
	if math.IsNaN(temperature) || temperature < 0 {
		return nil, fmt.Errorf("sample: temperature %v must be 0 or positive", temperature)
	}
	if topK < 0 {
		return nil, fmt.Errorf("sample: top-k %d must be 0 or positive", topK)
	}
	return &Sampler{Temperature: temperature, TopK: topK, rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}, nil
}

// Argmax is the index of the largest logit (the lowest on ties; NaN skipped).
func Argmax(logits []float32) int {
	best := -1
	for i, v := range logits {
		if v != v {
			continue
		}
		if best < 0 || v > logits[best] {
			best = i
		}
	}
	return max(best, 0)
}

// Next draws a token id from one row of logits.
func (s *Sampler) Next(logits []float32) int {
	if s.Temperature == 0 || len(logits) < 2 {
		return Argmax(logits)
	}
	idx := make([]int, 0, len(logits))
	for i, v := range logits {
		if v == v {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return 0
	}
	sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	if s.TopK > 0 && s.TopK < len(idx) {
		idx = idx[:s.TopK]
	}
	top := float64(logits[idx[0]])
	p := make([]float64, len(idx))
	sum := 0.0
	for i, id := range idx {
		p[i] = math.Exp((float64(logits[id]) - top) / s.Temperature)
		sum += p[i]
	}
	u := s.rng.Float64() * sum
	for i, w := range p {
		if u < w {
			return idx[i]
		}
		u -= w
	}
	return idx[len(idx)-1]
}
