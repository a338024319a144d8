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
	idx, p, sum := s.dist(logits, -1)
	if len(idx) == 0 {
		return 0
	}
	return s.draw(idx, p, sum)
}

// Accept decides on a drafted token in speculative decoding, where the
// draft proposed d outright (a greedy draft head): it accepts d with the
// probability the sampler would draw it from logits, so that accepting, or
// else drawing with NextExcept(logits, d), draws from the sampler's own
// distribution. Greedy, it accepts the argmax alone.
func (s *Sampler) Accept(logits []float32, d int) bool {
	if s.Temperature == 0 || len(logits) < 2 {
		return d == Argmax(logits)
	}
	idx, p, sum := s.dist(logits, -1)
	for i, id := range idx {
		if id == d {
			return s.rng.Float64()*sum < p[i]
		}
	}
	return false // outside the top-k: never drawn
}

// NextExcept draws a token id from logits as Next does, leaving out
// refused (the draft Accept turned down): the rest of the distribution,
// renormalized. Greedy, it is the argmax.
func (s *Sampler) NextExcept(logits []float32, refused int) int {
	if s.Temperature == 0 || len(logits) < 2 {
		return Argmax(logits)
	}
	idx, p, sum := s.dist(logits, refused)
	if len(idx) == 0 || sum == 0 {
		return refused // it was all there was
	}
	return s.draw(idx, p, sum)
}

// dist gives the tokens Next may draw (the top-k of the non-NaN logits,
// less skip when it is one of them), their weights exp((l − top)/T) and
// the weights' sum.
func (s *Sampler) dist(logits []float32, skip int) (idx []int, p []float64, sum float64) {
	idx = make([]int, 0, len(logits))
	for i, v := range logits {
		if v == v {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, nil, 0
	}
	sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	if s.TopK > 0 && s.TopK < len(idx) {
		idx = idx[:s.TopK]
	}
	top := float64(logits[idx[0]])
	kept := idx[:0]
	for _, id := range idx {
		if id == skip {
			continue
		}
		w := math.Exp((float64(logits[id]) - top) / s.Temperature)
		kept = append(kept, id)
		p = append(p, w)
		sum += w
	}
	return kept, p, sum
}

// draw picks one of idx by weight.
func (s *Sampler) draw(idx []int, p []float64, sum float64) int {
	u := s.rng.Float64() * sum
	for i, w := range p {
		if u < w {
			return idx[i]
		}
		u -= w
	}
	return idx[len(idx)-1]
}
