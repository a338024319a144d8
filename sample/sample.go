// Package sample picks the next token from a row of logits and decides when
// generation stops.
//
// A [Sampler] draws from the logits through the usual chain of transformers
// and llama.cpp, in this order:
//
//  1. Penalties on the logits, over the tokens seen so far. The repetition
//     penalty r (transformers' RepetitionPenaltyLogitsProcessor) divides a
//     positive logit by r and multiplies a negative one by r, for every token
//     of the prompt (given with [Sampler.Prompt]) or picked since. Then the
//     presence and frequency penalties (as OpenAI and vLLM define them)
//     subtract presence + frequency·n from the logit of a token the sampler
//     has picked n > 0 times (the prompt does not count for these two, as in
//     vLLM).
//  2. Temperature T: the weights are exp((l − max)/T); T = 0 is greedy, the
//     argmax of the penalized logits (lowest id on ties).
//  3. Top-k: only the k largest logits are kept (lowest id first on ties).
//  4. Top-p: of those, the smallest set of the most likely tokens whose
//     probability (renormalized after top-k) adds up to at least p; a token is
//     kept when the tokens more likely than it add up to less than p, so the
//     most likely one always is.
//  5. Min-p: tokens whose probability is below min_p times the largest are
//     dropped (the largest always stays).
//  6. The draw, from the kept tokens with their weights renormalized, by a
//     seeded generator so that runs repeat.
//
// NaN logits are never drawn; +Inf logits, if any, share the draw equally.
//
// [Sampler.Accept] and [Sampler.NextExcept] do speculative sampling with the
// same chain, so accepting drafts, or drawing from the rest of the
// distribution when one is refused, draws from the very distribution
// [Sampler.Next] draws from.
//
// A [Stopper] is fed each generated token and its text and says when to stop
// (an end-of-sequence id, a stop string, the token limit) and what text to
// show, holding back what might be the start of a stop string.
// [Resolve] merges a checkpoint's defaults (generation_config.json, read by
// package weights) with the user's settings into [Options].
//
// The penalized logits are rounded to float32, as the logits are; the rest
// is in float64, with weights below e^−708 of the top token's taken as 0.
//
// Each step costs O(V) for a vocabulary of V: no sort. One pass (in chunks
// on several goroutines, its sums added in a fixed order so that the draws
// do not depend on their number) places every token in a bucket of (l −
// max)/T and sums each bucket's count, or weight; a cut keeps the buckets
// before the one where it falls and finds its place in that one by
// selection.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Options are a Sampler's settings. The zero value is greedy decoding with
// no penalties; every field's zero value turns its step off.
type Options struct {
	// Temperature divides the logits; 0 picks the argmax.
	Temperature float64
	// TopK keeps the k most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches it, in (0, 1]; 0 and 1 keep all.
	TopP float64
	// MinP drops tokens less likely than MinP times the most likely one, in
	// [0, 1); 0 keeps all.
	MinP float64
	// RepetitionPenalty divides the positive logits, and multiplies the
	// negative ones, of tokens in the prompt or picked since; 0 and 1 are off.
	RepetitionPenalty float64
	// PresencePenalty is subtracted from the logit of every token picked
	// at least once.
	PresencePenalty float64
	// FrequencyPenalty times the number of times a token was picked is
	// subtracted from its logit.
	FrequencyPenalty float64
	// Seed fixes the draws.
	Seed uint64
}

// Validate checks every field, naming each one that is out of range.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("sample: "+format, args...)) }
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !finite(o.Temperature) || o.Temperature < 0 {
		bad("temperature %v must be a finite number, 0 or more", o.Temperature)
	}
	if o.TopK < 0 {
		bad("top-k %d is negative", o.TopK)
	}
	if !(o.TopP >= 0 && o.TopP <= 1) {
		bad("top-p %v is outside (0, 1]", o.TopP)
	}
	if !(o.MinP >= 0 && o.MinP < 1) {
		bad("min-p %v is outside [0, 1)", o.MinP)
	}
	if !finite(o.RepetitionPenalty) || o.RepetitionPenalty < 0 {
		bad("repetition penalty %v must be a finite positive number (1: off)", o.RepetitionPenalty)
	}
	if !finite(o.PresencePenalty) {
		bad("presence penalty %v is not finite", o.PresencePenalty)
	}
	if !finite(o.FrequencyPenalty) {
		bad("frequency penalty %v is not finite", o.FrequencyPenalty)
	}
	return errors.Join(errs...)
}

func (o Options) topP() bool       { return o.TopP > 0 && o.TopP < 1 }
func (o Options) repetition() bool { return o.RepetitionPenalty > 0 && o.RepetitionPenalty != 1 }
func (o Options) penalties() bool {
	return o.repetition() || o.PresencePenalty != 0 || o.FrequencyPenalty != 0
}

// Sampler draws token ids from logits by its Options (see the package
// comment for the order of the steps). It remembers the tokens it picks,
// for the penalties, and keeps scratch memory between calls; it is not safe
// for concurrent use.
type Sampler struct {
	opts Options
	rng  *rand.Rand
	// seen counts the picks of every token seen: prompt tokens are there
	// with 0 (the repetition penalty counts them, presence and frequency
	// do not). Kept only when a penalty is on.
	seen map[int]int

	scratch
}

// New makes a sampler with a temperature, a top-k and a seed, and nothing
// else: NewSampler(Options{Temperature: temperature, TopK: topK, Seed: seed}).
func New(temperature float64, topK int, seed uint64) (*Sampler, error) {
	return NewSampler(Options{Temperature: temperature, TopK: topK, Seed: seed})
}

// NewSampler makes a sampler after checking its options.
func NewSampler(o Options) (*Sampler, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Sampler{opts: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5851f42d4c957f2d))}
	if o.penalties() {
		s.seen = map[int]int{}
	}
	return s, nil
}

// Options returns the sampler's settings.
func (s *Sampler) Options() Options { return s.opts }

// Prompt tells the sampler the tokens of the prompt (or any context the
// model was given), which the repetition penalty counts. It may be called
// more than once; the ids add up.
func (s *Sampler) Prompt(ids []int) {
	if s.seen == nil {
		return
	}
	for _, id := range ids {
		if _, ok := s.seen[id]; !ok {
			s.seen[id] = 0
		}
	}
}

// Reset forgets the prompt and the picks (for a new sequence); the random
// generator goes on.
func (s *Sampler) Reset() { clear(s.seen) }

// record notes a picked token for the penalties.
func (s *Sampler) record(id int) {
	if s.seen != nil {
		s.seen[id]++
	}
}

// Argmax is the index of the largest logit (the lowest on ties; NaN skipped).
func Argmax(logits []float32) int {
	first := slices.IndexFunc(logits, func(v float32) bool { return v == v })
	if first < 0 {
		return 0
	}
	best, top := first, logits[first]
	for i, v := range logits[first+1:] {
		if v > top { // false for NaN
			best, top = first+1+i, v
		}
	}
	return best
}

// Next draws a token id from one row of logits (0 if they are all NaN or
// there are none) and remembers it for the penalties.
func (s *Sampler) Next(logits []float32) int {
	d := s.dist(logits)
	id := 0
	if only, ok := d.only(); ok {
		id = only
	} else if d.sum > 0 {
		id = d.pick(s.rng.Float64()*d.sum, -1)
	}
	s.record(id)
	return id
}

// Probs returns the tokens Next may draw from logits, in increasing id
// order, and their probabilities: the distribution after every step of the
// chain (greedy: the argmax with probability 1). It draws nothing and
// remembers nothing.
func (s *Sampler) Probs(logits []float32) (ids []int, probs []float64) {
	d := s.dist(logits)
	d.each(func(id int, w float64) {
		ids = append(ids, id)
		probs = append(probs, w/d.sum)
	})
	return ids, probs
}

// Accept decides on a drafted token in speculative decoding, where the
// draft proposed d outright (a greedy draft head): it accepts d with the
// probability the sampler would draw it from logits (after penalties, top-k,
// top-p and min-p), so that accepting, or else drawing with
// NextExcept(logits, d), draws from the sampler's own distribution. Greedy,
// it accepts the argmax alone. An accepted draft is remembered for the
// penalties as a pick.
func (s *Sampler) Accept(logits []float32, d int) bool {
	dist := s.dist(logits)
	w := dist.weight(d)
	if w == 0 {
		return false // cut, or never drawn
	}
	if _, ok := dist.only(); !ok && s.rng.Float64()*dist.sum >= w {
		return false
	}
	s.record(d)
	return true
}

// NextExcept draws a token id from logits as Next does, leaving out refused
// (the draft Accept turned down): the rest of the distribution,
// renormalized. Greedy, it is the argmax. When refused was all there was to
// draw, it returns refused.
func (s *Sampler) NextExcept(logits []float32, refused int) int {
	d := s.dist(logits)
	id := refused
	if only, ok := d.only(); ok {
		id = only
	} else if sum := d.sumExcept(refused); sum > 0 {
		id = d.pick(s.rng.Float64()*sum, refused)
	}
	s.record(id)
	return id
}
