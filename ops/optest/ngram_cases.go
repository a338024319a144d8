package optest

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Cases of the hashed n-gram embedding (PLE) ops.

// splitMix64 is the splitmix64 finalizer of the PLE hash constants.
func splitMix64(v uint64) uint64 {
	v += 0x9E3779B97F4A7C15
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// pleHashAttrs are a layer's hash constants as the reference code makes them
// (the sizes need not be prime for the op; their sum fits i32).
func pleHashAttrs(n, hp int, eos int32, vocab, layer, seed uint64, sizes []int64) ops.PLEHashAttrs {
	at := ops.PLEHashAttrs{NGram: n, HeadsPerNGram: hp, EOS: eos, Sizes: sizes}
	half := (uint64(1)<<63 - 1) / vocab / 2
	for j := 0; j < n; j++ {
		v := seed + 10007*layer + 0x9E3779B97F4A7C15*uint64(j+1)
		at.Mult = append(at.Mult, int64(2*(splitMix64(v)%half)+1))
	}
	var off int64
	for _, s := range sizes {
		at.Offsets = append(at.Offsets, off)
		off += s
	}
	return at
}

func ngramCases() []Case {
	var cs []Case
	// the constants of the golden tiny models (vocabulary 128, seed 1234,
	// first PLE layer): multipliers 40323955908725927, 35454616657218691,
	// 55314113489879455, sizes the primes after 100
	tiny := pleHashAttrs(3, 2, 1, 128, 0, 1234, []int64{101, 103, 107, 109})
	release := pleHashAttrs(3, 8, 248044, 248320, 0, 1234, []int64{
		20000003, 20000023, 20000033, 20000039, 20000051, 20000069, 20000093, 20000099,
		20000113, 20000123, 20000129, 20000131, 20000159, 20000167, 20000173, 20000197})
	four := pleHashAttrs(4, 1, 0, 50, 1, 7, []int64{31, 37, 41})
	type ph struct {
		label     string
		at        ops.PLEHashAttrs
		ids, hist []int
		pos, used int
		vocab     int // > 0: random ids of this vocabulary, with EOS at every 7th
	}
	for _, s := range []ph{
		{"tiny", tiny, []int{5, 1, 7, 9, 1, 3}, []int{0, 0}, 0, 0, 0}, // EOS inside: new segments
		{"tiny", tiny, []int{42}, []int{17, 23}, 5, 0, 0},
		{"tiny", tiny, []int{1}, []int{9, 8}, 7, 0, 0},                         // the token itself is EOS
		{"tiny", tiny, []int{4, 5, 6, 7}, []int{1, 2}, 1, 3, 0},                // EOS in the history; padded
		{"tiny", tiny, make([]int, 20), []int{3, 4}, 33, 0, 128},               // a chunk
		{"tiny", tiny, make([]int, 24), []int{3, 4}, 33, 13, 128},              // a bucket's plan: 13 rows in use
		{"release", release, make([]int, 20), []int{99, 248044}, 6, 0, 248320}, // large ids and products
		{"ngram4", four, []int{3, 0, 8, 8, 9, 0, 1}, []int{5, 6, 7}, 2, 0, 0},
	} {
		name := fmt.Sprintf("ple_hash/%s/rows=%d/pos=%d/used=%d/hist=%v", s.label, len(s.ids), s.pos, s.used, s.hist)
		m := newMaker(name)
		ids := intLeaf("ids", graph.Input, s.ids, len(s.ids))
		if s.vocab > 0 {
			for i := range ids.Data {
				ids.Data[i] = float64(m.r.intn(s.vocab))
				if i%7 == 3 {
					ids.Data[i] = float64(s.at.EOS)
				}
			}
		}
		at := s.at
		rows := len(s.ids)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{ids, intLeaf("hist", graph.State, s.hist, len(s.hist)), call(s.pos, s.used)},
			Build:  applyAll(ops.OpPLEHash, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[2], rows)
				r, h := refPLEHash(in[0], in[1], at, pos, used)
				return [][]float64{r, h}
			},
			Tol: 0,
		})
	}
	type emb struct {
		tokens, heads, w int
		shards           []int
		dt               graph.DType
		bad              int // > 0: this row id, outside the table
	}
	for _, s := range []emb{
		{3, 4, 8, []int{256, 256}, graph.F32, 0}, {1, 2, 5, []int{7}, graph.BF16, 0},
		{6, 3, 16, []int{100, 50, 70}, graph.F16, 0}, {64, 4, 16, []int{300, 300}, graph.BF16, 0},
		{2, 4, 8, []int{256, 256}, graph.F32, 512},
	} {
		total := 0
		for _, r := range s.shards {
			total += r
		}
		name := fmt.Sprintf("ngram_embed/%s/%dx%d/w=%d/shards=%v", s.dt, s.tokens, s.heads, s.w, s.shards)
		if s.bad > 0 {
			name = "ngram_embed/error/" + name[len("ngram_embed/"):]
		}
		m := newMaker(name)
		rows := make([]int, s.tokens*s.heads)
		for i := range rows {
			rows[i] = m.r.intn(total)
		}
		rows[0], rows[len(rows)-1] = total-1, 0
		if s.bad > 0 {
			rows[len(rows)-1] = s.bad
		}
		inputs := []Tensor{intLeaf("rows", graph.Input, rows, s.tokens, s.heads)}
		for i, r := range s.shards {
			inputs = append(inputs, m.weight(fmt.Sprintf("shard_%d", i), s.dt, r, s.w))
		}
		w := s.w
		c := Case{
			Name:   name,
			Inputs: inputs,
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.NGramEmbed(b, in[0], in[1:]...)}
			},
			Ref: func(in [][]float64) [][]float64 { return [][]float64{refNGramEmbed(in[0], w, in[1:]...)} },
			Tol: TolF32,
		}
		if s.bad > 0 {
			c.WantErr = fmt.Sprintf("row %d outside the table of %d rows", s.bad, total)
		}
		cs = append(cs, c)
	}
	return cs
}
