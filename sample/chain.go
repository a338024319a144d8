package sample

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sync"
)

// scratch is a Sampler's memory for one step, kept between steps.
type scratch struct {
	pen   []float32        // the penalized logits
	ws    []float64        // per token of the vocabulary: its weight
	bs    []uint16         // per token of the vocabulary: its bucket, or out
	parts []part           // per chunk of the vocabulary
	hist  []float64        // the measure by bucket, up to the last one used
	histB [buckets]float64 // hist's memory
	cands []cand           // the tokens still in the draw, in id order
	bkt   []uint16         // the bucket of each of cands
	edge  []cand           // the tokens of the bucket a cut falls in
}

// Buckets for the top-k and top-p cuts: a bucket spans 1/bucketsPerNat of
// z = (l − max)/T; the last one takes everything below. out marks a token
// out of the draw in bs (NaN, or dropped by min-p early).
const (
	bucketsPerNat = 16
	buckets       = 64*bucketsPerNat + 1
	out           = math.MaxUint16
)

// chunk is how many tokens of the vocabulary one goroutine weighs.
const chunk = 1 << 14

// dist is the distribution of one step, its weights not normalized: the
// tokens a cut kept, or with no cut the weight of every token.
type dist struct {
	c     []cand    // the tokens kept, in id order, all of weight > 0; or
	dense []float64 // with no cut, every token's weight (0: out of the draw)
	sum   float64   // the sum of the weights
}

// weight is the weight of token id (0 when it is not in the draw).
func (d dist) weight(id int) float64 {
	if d.dense != nil {
		if id < 0 || id >= len(d.dense) {
			return 0
		}
		return d.dense[id]
	}
	i, ok := slices.BinarySearchFunc(d.c, id, func(x cand, id int) int { return cmp.Compare(int(x.id), id) })
	if !ok {
		return 0
	}
	return d.c[i].w
}

// only returns the token when the draw has just one (greedy, top-k 1, ...).
func (d dist) only() (int, bool) {
	if d.dense == nil && len(d.c) == 1 {
		return int(d.c[0].id), true
	}
	return 0, false
}

// each calls f with every token in the draw and its weight, in id order.
func (d dist) each(f func(id int, w float64)) {
	for i, w := range d.dense {
		if w > 0 {
			f(i, w)
		}
	}
	for _, x := range d.c {
		f(int(x.id), x.w)
	}
}

// sumExcept is the sum of the weights of every token but skip, added anew
// (sum minus skip's weight would lose the digits of what is left when skip
// had nearly all of it).
func (d dist) sumExcept(skip int) float64 {
	t := 0.0
	d.each(func(id int, w float64) {
		if id != skip {
			t += w
		}
	})
	return t
}

// pick is the token where u falls when the weights of the tokens but skip
// are laid end to end in id order; u is in [0, their sum). When rounding
// leaves u past the end, it is the last of them.
func (d dist) pick(u float64, skip int) int {
	last := -1
	for i, w := range d.dense {
		if w == 0 || i == skip {
			continue
		}
		if u < w {
			return i
		}
		u -= w
		last = i
	}
	for _, x := range d.c {
		if int(x.id) == skip {
			continue
		}
		if u < x.w {
			return int(x.id)
		}
		u -= x.w
		last = int(x.id)
	}
	return last
}

// cand is a token in the draw.
type cand struct {
	id int32
	l  float32 // the logit after penalties
	w  float64 // exp((l − max)/T), once weighed
}

// dist runs the chain on logits and returns the distribution to draw from,
// in the sampler's scratch memory (valid until the next call). Greedy, it
// is the argmax alone with weight 1; with no logits that are not NaN, it is
// empty.
//
// The whole vocabulary is passed over a few times: the argmax, a pass
// that places each token in a bucket of its z and sums the measure of each
// bucket (a count before top-k; with no top-k the weight, which weighs
// every token), in chunks on several goroutines (the sums are added in
// chunk order, so the result does not depend on their number), and a pass
// that gathers the tokens of the buckets a cut keeps. The cuts then work on
// those.
func (s *Sampler) dist(logits []float32) dist {
	src := s.penalized(logits)
	best := Argmax(src)
	if len(src) == 0 || src[best] != src[best] {
		return dist{}
	}
	top := src[best]
	if s.opts.Temperature == 0 {
		s.cands = append(s.cands[:0], cand{id: int32(best), l: top, w: 1})
		return dist{c: s.cands, sum: 1}
	}
	sc := newScale(top, s.opts.Temperature)
	// Min-p commutes with top-k (both keep a leading part of the order by
	// logit), so without top-p it drops tokens before anything is weighed.
	// After top-p it must wait: top-p's sums include the tokens it drops.
	floor := math.Inf(-1)
	if s.opts.MinP > 0 {
		floor = math.Log(s.opts.MinP)
	}
	early := floor
	if s.opts.topP() {
		early = math.Inf(-1)
	}
	k := s.opts.TopK
	topK := k > 0 && k < len(src)
	s.bucketAll(src, sc, early, !topK)
	var edge int
	switch {
	case topK:
		edge, _ = edgeOf(s.hist, float64(k))
	case s.opts.topP():
		edge, _ = edgeOf(s.hist, s.opts.TopP*sum(s.hist))
	default: // nothing to cut: the weights as they are
		return dist{dense: s.ws, sum: sum(s.hist)}
	}
	// Gather the buckets up to the edge (with their weights when weighed).
	c, bkt := s.cands[:0], s.bkt[:0]
	for i, b := range s.bs {
		if int(b) <= edge {
			c, bkt = append(c, cand{id: int32(i), l: src[i]}), append(bkt, b)
			if !topK {
				c[len(c)-1].w = s.ws[i]
			}
		}
	}
	if topK {
		c = s.cut(c, bkt, false, float64(k))
		bkt = bkt[:0]
		used := 0
		for i := range c {
			z := sc.z(c[i].l)
			c[i].w = expNeg(z)
			bkt = append(bkt, bucketOf(z))
			used = max(used, int(bkt[i])+1)
		}
		s.hist = s.histB[:used]
		clear(s.hist)
		for i, x := range c {
			s.hist[bkt[i]] += x.w
		}
	}
	if s.opts.topP() {
		c = s.cut(c, bkt, true, s.opts.TopP*sum(s.hist))
		if s.opts.MinP > 0 {
			c = slices.DeleteFunc(c, func(x cand) bool { return sc.z(x.l) < floor })
		}
	}
	c = slices.DeleteFunc(c, func(x cand) bool { return x.w == 0 })
	s.cands, s.bkt = c, bkt
	total := 0.0
	for _, x := range c {
		total += x.w
	}
	return dist{c: c, sum: total}
}

// part is what one chunk of the vocabulary adds up.
type part struct {
	hist [buckets]float64 // the measure by bucket
	used int              // 1 + the last bucket used
}

// bucketAll fills s.bs with every token's bucket (out for NaN and for z
// below early) and s.hist with the count of each bucket, or with weigh
// the sum of the weights, which s.ws then holds per token. It works in
// chunks on up to GOMAXPROCS goroutines.
func (s *Sampler) bucketAll(src []float32, sc scale, early float64, weigh bool) {
	n := len(src)
	s.bs = slices.Grow(s.bs[:0], n)[:n]
	if weigh {
		s.ws = slices.Grow(s.ws[:0], n)[:n]
	}
	parts := (n + chunk - 1) / chunk
	for len(s.parts) < parts {
		s.parts = append(s.parts, part{})
	}
	work := func(p int) {
		lo, hi := p*chunk, min((p+1)*chunk, n)
		h := &s.parts[p].hist
		clear(h[:s.parts[p].used]) // the rest is still clear
		used := 0
		bs := s.bs[lo:hi]
		if !weigh {
			for i, v := range src[lo:hi] {
				z := sc.z(v)
				if !(z >= early) { // also NaN
					bs[i] = out
					continue
				}
				b := bucketOf(z)
				bs[i] = b
				h[b]++
				used = max(used, int(b)+1)
			}
		} else {
			ws := s.ws[lo:hi]
			for i, v := range src[lo:hi] {
				z := sc.z(v)
				w := expNeg(z) // 0 for NaN
				b := bucketOf(z)
				if !(z >= early) || w == 0 {
					b = out
					w = 0
				} else {
					h[b] += w
					used = max(used, int(b)+1)
				}
				ws[i], bs[i] = w, b
			}
		}
		s.parts[p].used = used
	}
	if workers := min(parts, runtime.GOMAXPROCS(0)); workers > 1 {
		var wg sync.WaitGroup
		next := make(chan int, parts)
		for p := range parts {
			next <- p
		}
		close(next)
		for range workers {
			wg.Go(func() {
				for p := range next {
					work(p)
				}
			})
		}
		wg.Wait()
	} else {
		for p := range parts {
			work(p)
		}
	}
	used := 0
	for _, p := range s.parts[:parts] {
		used = max(used, p.used)
	}
	s.hist = s.histB[:used]
	clear(s.hist)
	for _, p := range s.parts[:parts] {
		for b, m := range p.hist[:used] {
			s.hist[b] += m
		}
	}
}

// scale turns a logit into its z = (l − top)/T, the log of its weight
// against the top token's; logits equal to top (+Inf ones too) get 0, and
// NaN stays NaN.
type scale struct {
	top   float32
	top64 float64 // top, converted once
	inv   float64 // 1/T
}

func newScale(top float32, temperature float64) scale {
	return scale{top: top, top64: float64(top), inv: 1 / temperature}
}

func (sc scale) z(l float32) float64 {
	if l == sc.top {
		return 0
	}
	return (float64(l) - sc.top64) * sc.inv
}

// bucketOf places a z ≤ 0 among the buckets of the cuts.
func bucketOf(z float64) uint16 {
	t := z * -bucketsPerNat
	if !(t < buckets-1) {
		return buckets - 1
	}
	return uint16(t)
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// edgeOf finds where a cut falls: the first bucket at which the measure
// (hist, walked from the top bucket down) reaches limit, and the measure of
// the buckets before it; edge is len(hist) when the whole measure falls
// short of limit.
func edgeOf(hist []float64, limit float64) (edge int, before float64) {
	for edge < len(hist) && before+hist[edge] < limit {
		before += hist[edge]
		edge++
	}
	return edge, before
}

// penalized returns logits with the penalties applied to the tokens seen,
// in scratch memory (logits itself when there is nothing to change).
func (s *Sampler) penalized(logits []float32) []float32 {
	if len(s.seen) == 0 {
		return logits
	}
	s.pen = append(s.pen[:0], logits...)
	o := s.opts
	for id, n := range s.seen {
		if id < 0 || id >= len(s.pen) {
			continue
		}
		l := float64(s.pen[id])
		if o.repetition() {
			if l > 0 {
				l /= o.RepetitionPenalty
			} else {
				l *= o.RepetitionPenalty
			}
		}
		if n > 0 {
			l -= o.PresencePenalty + o.FrequencyPenalty*float64(n)
		}
		s.pen[id] = float32(l)
	}
	return s.pen
}

// cut keeps the leading part of c, in the order of decreasing logit (lower
// id first on ties), made of the tokens before which the measure adds up to
// less than limit. The measure is a count (top-k: limit k), or with
// byWeight the weight (top-p: limit p times the total). c is in id order,
// with each token's bucket in bkt; it must hold every token of the buckets
// up to the one where the cut falls, whose measures are in s.hist. Within
// that bucket the cut is found by selection, not by sorting, so a cut costs
// O(len(c)). The result, in id order, reuses c.
func (s *Sampler) cut(c []cand, bkt []uint16, byWeight bool, limit float64) []cand {
	edge, cum := edgeOf(s.hist, limit)
	if edge == len(s.hist) {
		return c
	}
	e := s.edge[:0]
	for i, x := range c {
		if int(bkt[i]) == edge {
			e = append(e, x)
		}
	}
	s.edge = e
	last := lastKept(e, byWeight, cum, limit)
	kept := c[:0]
	for i, x := range c {
		if b := int(bkt[i]); b < edge || b == edge && !ranksBefore(last, x) {
			kept = append(kept, x)
		}
	}
	return kept
}

// ranksBefore reports whether a comes before b in the order of the cuts:
// the larger logit first, the lower id on ties.
func ranksBefore(a, b cand) bool {
	return a.l > b.l || a.l == b.l && a.id < b.id
}

// lastKept returns the last token a cut keeps among e (which it reorders),
// taking them in the order of ranksBefore while the measure before them,
// starting from cum (below limit), stays below limit; the last of e when it
// never reaches it. It is a quickselect on the measure (expected O(len(e)));
// after many unlucky pivots it sorts what is left.
func lastKept(e []cand, byWeight bool, cum, limit float64) cand {
	measure := func(x cand) float64 {
		if byWeight {
			return x.w
		}
		return 1
	}
	for depth := 0; len(e) > 16 && depth < 64; depth++ {
		// The median of the first, middle and last as the pivot, moved to the end.
		n, mid := len(e), len(e)/2
		if ranksBefore(e[mid], e[0]) {
			e[mid], e[0] = e[0], e[mid]
		}
		if ranksBefore(e[n-1], e[0]) {
			e[n-1], e[0] = e[0], e[n-1]
		}
		if ranksBefore(e[mid], e[n-1]) {
			e[mid], e[n-1] = e[n-1], e[mid]
		}
		p := e[n-1]
		i, ahead := 0, 0.0 // e[:i] rank before p; ahead is their measure
		for j := range n - 1 {
			if ranksBefore(e[j], p) {
				ahead += measure(e[j])
				e[i], e[j] = e[j], e[i]
				i++
			}
		}
		e[i], e[n-1] = e[n-1], e[i]
		switch {
		case cum+ahead >= limit: // the cut falls before p
			e = e[:i]
		case cum+ahead+measure(p) >= limit || i == n-1: // at p
			return p
		default: // after p
			cum += ahead + measure(p)
			e = e[i+1:]
		}
	}
	slices.SortFunc(e, func(a, b cand) int {
		switch {
		case a.id == b.id:
			return 0
		case ranksBefore(a, b):
			return -1
		}
		return 1
	})
	n := 0
	for ; n < len(e) && cum < limit; n++ {
		cum += measure(e[n])
	}
	return e[max(n, 1)-1] // cum < limit before e, so n ≥ 1
}
