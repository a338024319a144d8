package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/stat/distuv"
)

func TestGreedy(t *testing.T) {
	s, err := New(0, 0, 1)
	require.NoError(t, err)
	require.Equal(t, 2, s.Next([]float32{0, 1, 3, 3, -1}))
	require.Equal(t, 1, Argmax([]float32{float32(math.NaN()), 2, 1}))
	nan := float32(math.NaN())
	require.Equal(t, 0, s.Next([]float32{nan, nan}), "all NaN")
	require.Equal(t, 0, s.Next(nil))
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
	o := Options{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.01, RepetitionPenalty: 1.2, Seed: 42}
	a, _ := NewSampler(o)
	b, _ := NewSampler(o)
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
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		o    Options
		name string
	}{
		{Options{Temperature: nan}, "temperature"},
		{Options{Temperature: inf}, "temperature"},
		{Options{Temperature: -0.1}, "temperature"},
		{Options{TopK: -1}, "top-k"},
		{Options{TopP: 1.01}, "top-p"},
		{Options{TopP: -0.5}, "top-p"},
		{Options{TopP: nan}, "top-p"},
		{Options{MinP: 1}, "min-p"},
		{Options{MinP: -0.1}, "min-p"},
		{Options{MinP: nan}, "min-p"},
		{Options{RepetitionPenalty: -1}, "repetition penalty"},
		{Options{RepetitionPenalty: nan}, "repetition penalty"},
		{Options{RepetitionPenalty: inf}, "repetition penalty"},
		{Options{PresencePenalty: nan}, "presence penalty"},
		{Options{FrequencyPenalty: -inf}, "frequency penalty"},
	} {
		_, err := NewSampler(c.o)
		require.ErrorContains(t, err, c.name, "%+v", c.o)
	}
	err = Options{Temperature: -1, TopK: -1}.Validate()
	require.ErrorContains(t, err, "temperature")
	require.ErrorContains(t, err, "top-k", "every bad field is named")
	require.NoError(t, Options{Temperature: 1, TopP: 1, MinP: 0.5, RepetitionPenalty: 1.3, PresencePenalty: -2}.Validate())
}

func TestExpNeg(t *testing.T) {
	require.Equal(t, 1.0, expNeg(0))
	require.Zero(t, expNeg(-709))
	require.Zero(t, expNeg(math.Inf(-1)))
	r := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for i := 0; i < 200000; i++ {
		z := -708 * r.Float64()
		if i%2 == 0 {
			z = -2 * r.Float64() // where most weights are
		}
		want := math.Exp(z)
		worst = max(worst, math.Abs(expNeg(z)-want)/want)
	}
	require.Less(t, worst, 1e-15, "relative error against math.Exp")
}

// ref is the chain in float64, as plainly as it can be written: the
// penalties (the penalized logit rounded to float32, as the logits are),
// one full sort, softmax, then the cuts in order. It returns the
// probability of each token that may be drawn.
func ref(logits []float32, o Options, prompt, picks []int) map[int]float64 {
	l := slices.Clone(logits)
	counts := map[int]int{}
	for _, id := range picks {
		counts[id]++
	}
	inContext := map[int]bool{}
	for _, id := range append(slices.Clone(prompt), picks...) {
		inContext[id] = true
	}
	for id := range inContext {
		v := float64(l[id])
		if r := o.RepetitionPenalty; r != 0 {
			if v > 0 {
				v /= r
			} else {
				v *= r
			}
		}
		if n := counts[id]; n > 0 {
			v -= o.PresencePenalty + o.FrequencyPenalty*float64(n)
		}
		l[id] = float32(v)
	}
	var order []int
	for i, v := range l {
		if !math.IsNaN(float64(v)) {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(l[b], l[a]) })
	if o.Temperature == 0 {
		return map[int]float64{order[0]: 1}
	}
	if o.TopK > 0 && o.TopK < len(order) {
		order = order[:o.TopK]
	}
	top := float64(l[order[0]])
	w := map[int]float64{}
	total := 0.0
	for _, id := range order {
		w[id] = math.Exp((float64(l[id]) - top) / o.Temperature)
		total += w[id]
	}
	if o.TopP > 0 {
		before := 0.0
		for j, id := range order {
			if before >= o.TopP*total {
				order = order[:j]
				break
			}
			before += w[id]
		}
	}
	p := map[int]float64{}
	sum := 0.0
	for _, id := range order {
		if w[id] > 0 && w[id] >= o.MinP { // w is the ratio to the top token's weight
			p[id] = w[id]
			sum += w[id]
		}
	}
	for id := range p {
		p[id] /= sum
	}
	return p
}

// prime sets s up as after prompt and picks, which it forces with one-hot
// rows of v logits.
func prime(t testing.TB, s *Sampler, v int, prompt, picks []int) {
	s.Reset()
	s.Prompt(prompt)
	row := make([]float32, v)
	for _, id := range picks {
		for i := range row {
			row[i] = float32(math.Inf(-1))
		}
		row[id] = 0
		if got := s.Next(row); got != id {
			t.Fatalf("prime: drew %d from a row of %d alone", got, id)
		}
	}
}

// randomLogits are v logits, normal with sd spread, rounded to steps of
// quant when quant > 0 (ties), with a few NaNs and -Infs.
func randomLogits(r *rand.Rand, v int, spread, quant float64) []float32 {
	l := make([]float32, v)
	for i := range l {
		x := r.NormFloat64() * spread
		if quant > 0 {
			x = math.Round(x/quant) * quant
		}
		l[i] = float32(x)
	}
	for range v / 50 {
		l[r.IntN(v)] = float32(math.NaN())
		l[r.IntN(v)] = float32(math.Inf(-1))
	}
	return l
}

// chainCases are settings the chain's tests run through.
var chainCases = []Options{
	{Temperature: 1},
	{Temperature: 0.7, TopK: 5},
	{Temperature: 0.7, TopK: 300},
	{Temperature: 1.3, TopP: 0.9},
	{Temperature: 0.5, TopP: 0.3},
	{Temperature: 1, MinP: 0.05},
	{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.02},
	{Temperature: 1, TopK: 50, TopP: 0.8, RepetitionPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.25},
	{Temperature: 0.6, TopP: 0.7, MinP: 0.1, RepetitionPenalty: 0.8, FrequencyPenalty: -0.3},
	{Temperature: 0, RepetitionPenalty: 1.5, PresencePenalty: 1},
	{Temperature: 50, TopK: 1000},
	{Temperature: 0.05, TopP: 0.99},
}

// TestProbsMatchReference: the distribution after the whole chain equals
// the float64 reference, over vocabularies small and of Qwen's size, with
// ties (logits on a grid), crowded buckets (5000 logits within a few
// hundredths, on a grid), NaNs and -Infs.
func TestProbsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for ci, o := range chainCases {
		for _, shape := range []struct {
			v             int
			spread, quant float64
		}{{60, 2, 0}, {2000, 3, 0.25}, {5000, 0.01, 0.001}, {151936, 2.5, 0}} {
			if shape.v > 10000 && ci%3 != 0 {
				continue // the big vocabulary on a few cases: the sort in ref is slow
			}
			name := fmt.Sprintf("%d/%d", ci, shape.v)
			l := randomLogits(r, shape.v, shape.spread, shape.quant)
			prompt := []int{r.IntN(shape.v), r.IntN(shape.v), Argmax(l)}
			picks := []int{Argmax(l), r.IntN(shape.v), prompt[0], prompt[0]}
			o.Seed = uint64(ci)
			s, err := NewSampler(o)
			require.NoError(t, err)
			prime(t, s, shape.v, prompt, picks)
			want := ref(l, o, prompt, picks)
			ids, probs := s.Probs(l)
			require.True(t, slices.IsSorted(ids), name)
			got := map[int]float64{}
			for i, id := range ids {
				got[id] = probs[i]
			}
			require.Equal(t, len(want), len(got), "%s: %v", name, o)
			for id, p := range want {
				require.InDelta(t, p, got[id], 1e-12, "%s: token %d", name, id)
			}
		}
	}
}

// TestChainCuts pins each cut on small hand-made rows.
func TestChainCuts(t *testing.T) {
	probs := func(o Options, l []float32) map[int]float64 {
		s, err := NewSampler(o)
		require.NoError(t, err)
		ids, p := s.Probs(l)
		m := map[int]float64{}
		for i, id := range ids {
			m[id] = p[i]
		}
		return m
	}
	ln := func(xs ...float64) []float32 {
		l := make([]float32, len(xs))
		for i, x := range xs {
			l[i] = float32(math.Log(x))
		}
		return l
	}
	// probabilities 0.1, 0.5, 0.15, 0.25
	l := ln(0.1, 0.5, 0.15, 0.25)
	require.Len(t, probs(Options{Temperature: 1, TopP: 0.49}, l), 1)
	require.Len(t, probs(Options{Temperature: 1, TopP: 0.51}, l), 2, "0.5 < 0.51: the next one too")
	require.Len(t, probs(Options{Temperature: 1, TopP: 0.76}, l), 3)
	require.InDelta(t, 0.5/0.75, probs(Options{Temperature: 1, TopP: 0.7}, l)[1], 1e-7) // logs in float32
	require.Len(t, probs(Options{Temperature: 1, MinP: 0.29}, l), 3, "0.15 ≥ 0.29·0.5")
	require.Len(t, probs(Options{Temperature: 1, MinP: 0.31}, l), 2, "0.15 < 0.31·0.5")
	require.Len(t, probs(Options{Temperature: 1, MinP: 0.51}, l), 1)
	require.Len(t, probs(Options{Temperature: 1, TopK: 3}, l), 3)
	// min-p after top-p: top-p 0.8 keeps 0.5, 0.25 and 0.15 (0.75 before
	// it), min-p 0.25 keeps what is at least 0.125: the three. Min-p first
	// would leave 0.5, 0.25, 0.15 renormalized by 0.9, where 0.15 has
	// 0.83 before it, and top-p 0.8 would drop it.
	require.Len(t, probs(Options{Temperature: 1, TopP: 0.8, MinP: 0.25}, l), 3)
	// ties: the lower id wins
	require.Equal(t, map[int]float64{0: 0.5, 1: 0.5}, probs(Options{Temperature: 1, TopK: 2}, []float32{1, 1, 1, 1}))
	// +Inf logits take the whole draw
	inf := float32(math.Inf(1))
	require.Equal(t, map[int]float64{1: 0.5, 3: 0.5}, probs(Options{Temperature: 1}, []float32{1, inf, 0, inf}))
	require.Equal(t, map[int]float64{2: 1}, probs(Options{Temperature: 1, TopP: 0.5}, []float32{float32(math.NaN()), -1, 1e9}))
}

func TestPenalties(t *testing.T) {
	s, err := NewSampler(Options{RepetitionPenalty: 1.25})
	require.NoError(t, err)
	s.Prompt([]int{0, 2})
	// 2/1.25 = 1.6 < 1.7; -1·1.25 = -1.25 < -1.2
	require.Equal(t, 1, s.Next([]float32{2, 1.7}))
	require.Equal(t, 3, s.Next([]float32{-1e9, -1e9, -1, -1.2}))
	s.Reset()
	require.Equal(t, 0, s.Next([]float32{2, 1.7}), "reset forgets")

	// presence and frequency count the sampler's picks, not the prompt
	s, err = NewSampler(Options{PresencePenalty: 0.5, FrequencyPenalty: 0.2})
	require.NoError(t, err)
	s.Prompt([]int{0})
	require.Equal(t, 0, s.Next([]float32{1, 0.6}))                                 // the prompt does not count
	require.Equal(t, 1, s.Next([]float32{1, 0.6}), "0 picked once: 1 − 0.7 = 0.3") // 0.3 < 0.6
	require.Equal(t, 0, s.Next([]float32{1, 0.8}), "1 picked once: 0.8 − 0.7 = 0.1")
	require.Equal(t, 1, s.Next([]float32{1, 0.9}), "0 picked twice: 1 − 0.9 = 0.1 < 0.9 − 0.7")
}

// chiSquare fails unless counts (of n draws) fit want: no token outside
// it, and the chi-square statistic (cells expecting fewer than 5 pooled)
// below the quantile 1 − 1e-6 of its distribution.
func chiSquare(t *testing.T, counts map[int]int, n int, want map[int]float64, msg string) {
	t.Helper()
	for id, c := range counts {
		_, ok := want[id]
		require.True(t, ok, "%s: token %d drawn %d times, outside the distribution", msg, id, c)
	}
	stat, cells, poolE, poolO := 0.0, 0, 0.0, 0.0
	for id, p := range want {
		e, o := p*float64(n), float64(counts[id])
		if e < 5 {
			poolE, poolO = poolE+e, poolO+o
			continue
		}
		stat += (o - e) * (o - e) / e
		cells++
	}
	if poolE > 0 {
		stat += (poolO - poolE) * (poolO - poolE) / max(poolE, 1)
		cells++
	}
	if cells < 2 {
		return
	}
	limit := distuv.ChiSquared{K: float64(cells - 1)}.Quantile(1 - 1e-6)
	require.Less(t, stat, limit, "%s: chi-square over %d cells", msg, cells)
}

// TestNextDraws: Next's draws follow the reference distribution.
func TestNextDraws(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const v, n = 40, 50000
	for ci, o := range chainCases {
		l := randomLogits(r, v, 1.5, 0)
		o.Seed = uint64(ci) + 100
		s, err := NewSampler(o)
		require.NoError(t, err)
		want := ref(l, o, nil, nil)
		counts := map[int]int{}
		for range n {
			counts[s.Next(l)]++
			s.Reset() // the draws are independent: no pick counts
		}
		chiSquare(t, counts, n, want, fmt.Sprint(o))
	}
}

// TestSpeculativeDraws: accepting a drafted token with Accept, or else
// drawing with NextExcept, draws from Next's own distribution (the whole
// chain: penalties, temperature, top-k, top-p, min-p), whichever token was
// drafted, one filtered out included; greedy, the argmax alone is
// accepted.
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

	// The whole chain, with penalties that depend on the prompt and the
	// picks so far, each draft drawn from the distribution after them.
	r := rand.New(rand.NewPCG(7, 8))
	const v = 30
	for ci, o := range chainCases {
		if o.Temperature == 0 {
			continue
		}
		l := randomLogits(r, v, 1.5, 0)
		prompt, picks := []int{1, 2, 3}, []int{3, 4, 4}
		want := ref(l, o, prompt, picks)
		o.Seed = uint64(ci)
		s, err := NewSampler(o)
		require.NoError(t, err)
		// drafts: the most likely token, a middling one, one cut away
		ids, _ := s.Probs(l)
		drafts := []int{Argmax(l), ids[len(ids)/2]}
		for id := range v {
			if _, ok := want[id]; !ok && l[id] == l[id] {
				drafts = append(drafts, id)
				break
			}
		}
		if !o.penalties() {
			prompt, picks = nil, nil
			want = ref(l, o, nil, nil)
		}
		for _, d := range drafts {
			counts := map[int]int{}
			const n = 20000
			for range n {
				if o.penalties() {
					prime(t, s, v, prompt, picks)
				}
				tok := d
				if !s.Accept(l, d) {
					tok = s.NextExcept(l, d)
				}
				counts[tok]++
			}
			chiSquare(t, counts, n, want, fmt.Sprintf("%v, draft %d", o, d))
		}
	}

	// An accepted draft counts as a pick for the penalties.
	p, err := NewSampler(Options{Temperature: 1, TopK: 1, PresencePenalty: 10})
	require.NoError(t, err)
	require.True(t, p.Accept([]float32{1, 0}, 0))
	require.Equal(t, 1, p.Next([]float32{1, 0}), "0 was accepted, so it is penalized")

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

// benchLogits are logits of Qwen's vocabulary shaped like a language
// model's: a broad mass around 0 and a few tokens well above it.
func benchLogits() []float32 {
	r := rand.New(rand.NewPCG(9, 10))
	l := make([]float32, 151936)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 2.5)
	}
	for i := range 20 {
		l[r.IntN(len(l))] = float32(18 - i/2)
	}
	return l
}

// BenchmarkNext is one sampling step over a vocabulary of 151,936 (ns/op
// is ns per token).
func BenchmarkNext(b *testing.B) {
	l := benchLogits()
	ctx := make([]int, 2000)
	for i := range ctx {
		ctx[i] = (i * 7919) % len(l)
	}
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"greedy", Options{}},
		{"temperature", Options{Temperature: 0.8}},
		{"top-p", Options{Temperature: 0.8, TopP: 0.95}},
		{"top-p-flat", Options{Temperature: 3, TopP: 0.95}},
		{"top-k", Options{Temperature: 0.8, TopK: 40}},
		{"top-k+top-p+min-p", Options{Temperature: 0.7, TopK: 20, TopP: 0.8, MinP: 0.05}},
		{"penalties+top-p", Options{Temperature: 0.8, TopP: 0.95, RepetitionPenalty: 1.1, PresencePenalty: 0.5}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := NewSampler(c.o)
			require.NoError(b, err)
			s.Prompt(ctx)
			for b.Loop() {
				s.Next(l)
			}
		})
	}
}
