package qwen4

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/sample"
	"github.com/reel-runtime/reel/weights"
)

// The tiny checkpoints carry no MTP head, so these tests give one to the
// small checkpoint: its layer is a copy of layer 3 (QSA) with the final
// mixer, its input norms are random and its projections scaled
// permutations. Fed hidden rows that repeat one vector v in every stream
// (the whole-row norm of [v | ... | v] is [n(v) | ... | n(v)]), the head's
// input is the same in every stream:
//
//	X_c = 1.3·Q(n(v) ⊙ (1 + w_h)) + 0.7·P(n(E[t]) ⊙ (1 + w_e))
//
// so with v = E[t] it equals a one-layer model whose embedding table holds
// those rows, computed here in float64.

const mtpSource = "model.layers.3."

// perm is a permutation of n (a fixed shuffle from a seed).
func perm(n int, seed uint64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := int(splitmix64(seed+uint64(i)) % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// scaledPerm is the [n, n] matrix W with W[i, p[i]] = s (W·x picks x[p[i]]).
func scaledPerm(p []int, s float32) []float32 {
	n := len(p)
	w := make([]float32, n*n)
	for i, j := range p {
		w[i*n+j] = s
	}
	return w
}

func smallVec(n int, seed uint64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(int(splitmix64(seed+uint64(i))%201)-100) / 400
	}
	return v
}

func f32Tensor(name string, shape []int, v []float32) weights.NamedTensor {
	return weights.NamedTensor{Name: name, DType: graph.F32, Shape: shape, Data: weights.EncodeF32(v)}
}

func decodeF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

type mtpFixture struct {
	c          Config
	we, wh     []float32 // the head's input norms (wh over one stream)
	pe, ph     []int     // the permutations of fc_embedding and fc_hidden
	embed      []float32
	withHead   string // the small checkpoint with an MTP head
	equivalent string // the one-layer model the head equals on repeated streams
}

func newMTPFixture(t testing.TB) *mtpFixture {
	t.Helper()
	src := loadModel(t, filepath.Join(testdata, checkpoints[0]))
	c := src.Config
	h := c.Hidden
	f := &mtpFixture{c: c, we: smallVec(h, 1), wh: smallVec(h, 2), pe: perm(h, 3), ph: perm(h, 4)}
	var whAll []float32
	for range c.Streams {
		whAll = append(whAll, f.wh...)
	}
	f.withHead = copyCheckpoint(t, checkpoints[0], func(m map[string]any) { m["mtp_num_hidden_layers"] = 1 },
		func(ts []weights.NamedTensor) []weights.NamedTensor {
			for _, x := range ts {
				switch {
				case strings.HasPrefix(x.Name, mtpSource):
					x.Name = MTPPrefix + strings.TrimPrefix(x.Name, mtpSource)
					ts = append(ts, x)
				case strings.HasPrefix(x.Name, "model.hyper_connection_mixer."):
					x.Name = "mtp." + strings.TrimPrefix(x.Name, "model.")
					ts = append(ts, x)
				case x.Name == "model.embed_tokens.weight":
					f.embed = decodeF32(x.Data)
				}
			}
			return append(ts,
				f32Tensor("mtp.pre_fc_norm_embedding.weight", []int{h}, f.we),
				f32Tensor("mtp.pre_fc_norm_hidden.weight", []int{c.Streams * h}, whAll),
				f32Tensor("mtp.fc_embedding.weight", []int{h, h}, scaledPerm(f.pe, 0.7)),
				f32Tensor("mtp.fc_hidden.weight", []int{h, h}, scaledPerm(f.ph, 1.3)))
		})
	f.equivalent = copyCheckpoint(t, checkpoints[0], func(m map[string]any) {
		m["num_hidden_layers"], m["layer_types"], m["ple_layer_ids"] = 1, []any{"qwen_sparse_attention"}, []any{}
	}, func(ts []weights.NamedTensor) []weights.NamedTensor {
		var out []weights.NamedTensor
		for _, x := range ts {
			switch {
			case strings.HasPrefix(x.Name, mtpSource):
				x.Name = LayerPrefix(0) + strings.TrimPrefix(x.Name, mtpSource)
				out = append(out, x)
			case strings.HasPrefix(x.Name, "model.layers."):
			case x.Name == "model.embed_tokens.weight":
				out = append(out, f32Tensor(x.Name, x.Shape, f.table()))
			default:
				out = append(out, x)
			}
		}
		return out
	})
	return f
}

// table is the embedding table of the equivalent model, in float64.
func (f *mtpFixture) table() []float32 {
	h := f.c.Hidden
	out := make([]float32, len(f.embed))
	for r := 0; r < len(f.embed)/h; r++ {
		e := f.embed[r*h : (r+1)*h]
		ss := 0.0
		for _, x := range e {
			ss += float64(x) * float64(x)
		}
		inv := 1 / math.Sqrt(ss/float64(h)+f.c.Eps)
		for i := 0; i < h; i++ {
			hn := float64(e[f.ph[i]]) * inv * (1 + float64(f.wh[f.ph[i]]))
			en := float64(e[f.pe[i]]) * inv * (1 + float64(f.we[f.pe[i]]))
			out[r*h+i] = float32(1.3*hn + 0.7*en)
		}
	}
	return out
}

// repeated gives each id's embedding repeated in every stream.
func (f *mtpFixture) repeated(ids []int) []float32 {
	h := f.c.Hidden
	var out []float32
	for _, id := range ids {
		for range f.c.Streams {
			out = append(out, f.embed[id*h:(id+1)*h]...)
		}
	}
	return out
}

// TestMTPHead checks the draft head's graph against the equivalent
// one-layer model, over a whole sequence and in chunks through its cache.
func TestMTPHead(t *testing.T) {
	f := newMTPFixture(t)
	ids := longest(readGolden(t, filepath.Join(testdata, checkpoints[0])))[:17]
	eq := newSession(t, loadModel(t, f.equivalent), Options{})
	out, err := eq.Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	ref := rowsOf(t, out)

	m := loadModel(t, f.withHead)
	require.True(t, m.HasMTP)
	s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Capacity: 4}})
	require.True(t, s.CanDraft())
	lg, hs, err := s.DraftRows(f.repeated(ids), ids, 0, lm.WantAll)
	require.NoError(t, err)
	d := maxDiff(t, rowsOf(t, lg), ref)
	require.Less(t, d, 1e-4)
	t.Logf("MTP head vs its equivalent model: largest difference %.3g", d)
	require.Equal(t, []int{len(ids), f.c.Streams * f.c.Hidden}, []int(hs.Shape()))

	var inc [][]float32
	for _, r := range [][2]int{{0, 6}, {6, 7}, {7, 12}, {12, 17}} {
		lg, _, err := s.DraftRows(f.repeated(ids[r[0]:r[1]]), ids[r[0]:r[1]], r[0], lm.WantAll)
		require.NoError(t, err)
		inc = append(inc, rowsOf(t, lg)...)
	}
	require.Less(t, maxDiff(t, inc, ref), 1e-4)

	_, _, err = s.DraftRows(f.repeated(ids[:2]), ids[:1], 0, lm.WantAll)
	require.ErrorContains(t, err, "hidden values for 1 rows")
	_, _, err = s.DraftRows(f.repeated(ids[:1]), []int{999}, 0, lm.WantAll)
	require.ErrorContains(t, err, "id 999 is outside")
}

// TestMTPSession checks the head inside a session: the main logits do not
// change with the head on, a forward fills the head's cache with the pairs
// (H_p, x_{p+1}) whatever the chunks, and Draft chains greedy drafts.
func TestMTPSession(t *testing.T) {
	f := newMTPFixture(t)
	ids := longest(readGolden(t, filepath.Join(testdata, checkpoints[0])))[:17]
	n := len(ids) - 1
	m := loadModel(t, f.withHead)

	off := newSession(t, m, Options{NoMTP: true})
	out, err := off.Forward(ids[:n], 0, lm.WantAll)
	require.NoError(t, err)
	plain := rowsOf(t, out)

	// one token per call, keeping every final hyper-state
	one := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 1}})
	var hidden []float32
	var main [][]float32
	for p := 0; p < n; p++ {
		out, err := one.Forward(ids[p:p+1], p, lm.WantLast)
		require.NoError(t, err)
		main = append(main, rowsOf(t, out)...)
		hidden = append(hidden, one.hidden()...)
	}
	require.Equal(t, 0.0, maxDiff(t, main, plain), "the head changes no main logit")
	// the reference: the head over every pair at once on a fresh cache
	ref := newSession(t, m, Options{})
	lg, _, err := ref.DraftRows(hidden, ids[1:n+1], 0, lm.WantAll)
	require.NoError(t, err)
	want := rowsOf(t, lg)[n-1:]

	for _, chunk := range []int{1, 5, 64} {
		s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: chunk, Capacity: 4}})
		out, err := s.Forward(ids[:n], 0, lm.WantAll)
		require.NoError(t, err)
		require.Equal(t, 0.0, maxDiff(t, rowsOf(t, out), plain))
		require.Equal(t, hidden[(n-1)*len(s.hidden()):], s.hidden())
		lg, hs, err := s.DraftRows(s.hidden(), ids[n:n+1], n-1, lm.WantLast)
		require.NoError(t, err)
		d := maxDiff(t, rowsOf(t, lg), want)
		require.Less(t, d, 1e-5, "chunk %d", chunk)

		drafts, err := s.Draft(ids[n], 2)
		require.NoError(t, err)
		require.Len(t, drafts, 2)
		require.Equal(t, sample.Argmax(lg.Data().([]float32)), drafts[0])
		lg2, _, err := s.DraftRows(hs.Data().([]float32), drafts[:1], n, lm.WantLast)
		require.NoError(t, err)
		require.Equal(t, sample.Argmax(lg2.Data().([]float32)), drafts[1])
	}
	_, err = newSession(t, m, Options{}).Draft(ids[0], 1)
	require.ErrorContains(t, err, "run a forward first")
}

// greedy decodes n tokens after ids one forward a token and gives them,
// with the logits of every step.
func greedy(t *testing.T, s *Session, ids []int, n int) ([]int, [][]float32) {
	t.Helper()
	out, err := s.Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	lg := rowsOf(t, out)[0]
	var toks []int
	var steps [][]float32
	for range n {
		next := sample.Argmax(lg)
		toks = append(toks, next)
		out, err := s.Forward([]int{next}, s.Pos(), lm.WantLast)
		require.NoError(t, err)
		lg = rowsOf(t, out)[0]
		steps = append(steps, lg)
	}
	return toks, steps
}

// speculation sets up the window tests: the small checkpoint with an MTP
// head, a prompt, and the n tokens greedy decoding gives after it with the
// logits of each step.
func speculation(t *testing.T, n int) (m *Model, ids, want []int, steps [][]float32) {
	t.Helper()
	f := newMTPFixture(t)
	ids = longest(readGolden(t, filepath.Join(testdata, checkpoints[0])))[:9]
	m = loadModel(t, f.withHead)
	want, steps = greedy(t, newSession(t, m, Options{}), ids, n)
	return m, ids, want, steps
}

// TestVerify: a speculation window accepts the drafts that greedy decoding
// would pick, up to the first that it would not, and leaves the session
// where greedy decoding one token at a time would be, bit for bit (the
// recurrent states, the QSA caches and the MTP head's cache), whether every
// draft, some or none were accepted.
func TestVerify(t *testing.T) {
	m, ids, want, steps := speculation(t, 8)
	wrong := func(tok int) int { return (tok + 1) % m.Config.Vocab }

	for _, c := range []struct {
		name    string
		drafts  []int // after want[0]
		accept  int
		buckets int
	}{
		{"all", want[1:5], 4, 0},
		{"some", []int{want[1], want[2], wrong(want[3]), want[4]}, 2, 0},
		{"none", []int{wrong(want[1]), want[2]}, 0, 0},
		{"no drafts", nil, 0, 0},
		// the prompt of 9 rows on a bucket's plan of 16: the windows, and
		// what they leave, are the same
		{"some/buckets", []int{want[1], want[2], wrong(want[3]), want[4]}, 2, lm.DefaultBuckets},
		{"none/buckets", []int{wrong(want[1]), want[2]}, 0, lm.DefaultBuckets},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Buckets: c.buckets}})
			if c.buckets > 0 {
				require.Equal(t, 16, s.PlanRows(len(ids)))
			}
			_, err := s.Forward(ids, 0, lm.WantLast)
			require.NoError(t, err)
			require.NoError(t, s.Snapshot())
			accepted, lg, err := s.Verify(want[0], c.drafts)
			require.NoError(t, err)
			require.Equal(t, c.accept, accepted)
			require.Equal(t, len(ids)+1+accepted, s.Pos())
			require.Equal(t, want[accepted+1], sample.Argmax(lg), "the token after the window")
			_, _, settled := s.Planned(Key{Stage: Settle, Want: lm.WantNone, Rows: accepted + 1, TapeRows: len(c.drafts) + 1})
			require.Equal(t, accepted < len(c.drafts), settled, "a refusal settles from the tape")
			// the session goes on as greedy decoding does
			out, err := s.Forward([]int{want[accepted+1]}, s.Pos(), lm.WantLast)
			require.NoError(t, err)
			require.Equal(t, 0.0, maxDiff(t, rowsOf(t, out), [][]float32{steps[accepted+1]}))
			drafts, err := s.Draft(sample.Argmax(steps[accepted+1]), 2)
			require.NoError(t, err)
			ref := newSession(t, m, Options{})
			_, err = ref.Forward(append(slices.Clone(ids), want[:accepted+2]...), 0, lm.WantLast)
			require.NoError(t, err)
			refDrafts, err := ref.Draft(sample.Argmax(steps[accepted+1]), 2)
			require.NoError(t, err)
			require.Equal(t, refDrafts, drafts, "the MTP head's cache and hyper-state")
			// the user's snapshot is untouched: back to the window's start
			require.NoError(t, s.Rollback(len(ids)))
		})
	}
}

// TestVerifyFunc: the acceptance function sees, for each draft, the logits
// of the row before it (those of one-token decoding), until it refuses one.
func TestVerifyFunc(t *testing.T) {
	m, ids, want, steps := speculation(t, 6)
	s := newSession(t, m, Options{})
	_, err := s.Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	var seen [][]float32
	var offered []int
	accepted, lg, err := s.VerifyFunc(want[0], want[1:5], func(row []float32, d int) bool {
		seen = append(seen, slices.Clone(row))
		offered = append(offered, d)
		return len(seen) < 3 // the third draft is refused
	})
	require.NoError(t, err)
	require.Equal(t, 2, accepted)
	require.Equal(t, want[1:4], offered)
	require.Equal(t, 0.0, maxDiff(t, seen, steps[:3]))
	require.Equal(t, steps[2], lg, "the row before the refused draft")
	require.Equal(t, len(ids)+3, s.Pos())
}

// TestSpeculativeGreedy: greedy decoding with MTP drafts and windows gives
// the tokens of plain greedy decoding.
func TestSpeculativeGreedy(t *testing.T) {
	for _, buckets := range []int{lm.BucketsOff, lm.DefaultBuckets} {
		t.Run(fmt.Sprintf("buckets=%d", buckets), func(t *testing.T) { speculativeGreedy(t, buckets) })
	}
}

// speculativeGreedy is TestSpeculativeGreedy with the prompt's chunks on
// the plans of a session of buckets (lm.SessionOptions.Buckets).
func speculativeGreedy(t *testing.T, buckets int) {
	m, ids, want, _ := speculation(t, 24)
	opts := Options{SessionOptions: lm.SessionOptions{Buckets: buckets}}

	s := newSession(t, m, opts)
	out, err := s.Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	next := sample.Argmax(rowsOf(t, out)[0])
	var got []int
	windows, accepted := 0, 0
	for len(got) < len(want) {
		drafts, err := s.Draft(next, 3)
		require.NoError(t, err)
		a, lg, err := s.Verify(next, drafts)
		require.NoError(t, err)
		got = append(got, next)
		got = append(got, drafts[:a]...)
		next = sample.Argmax(lg)
		windows++
		accepted += a
	}
	require.Equal(t, want, got[:len(want)])
	t.Logf("MTP drafts: %d tokens in %d windows (%d drafts accepted)", len(got), windows, accepted)

	// drafts from an oracle that knows the greedy tokens and errs at
	// random: windows of 0 to 5 drafts, every prefix length accepted
	rng := rand.New(rand.NewPCG(5, 9))
	s = newSession(t, m, opts)
	out, err = s.Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	next = sample.Argmax(rowsOf(t, out)[0])
	got = got[:0]
	seen := map[int]bool{}
	for len(got) < len(want) {
		k := min(rng.IntN(6), len(want)-len(got)-1)
		drafts := slices.Clone(want[len(got)+1 : len(got)+1+k])
		if k > 0 && rng.IntN(2) == 0 {
			drafts[rng.IntN(k)] = (drafts[0] + 1 + rng.IntN(m.Config.Vocab-1)) % m.Config.Vocab
		}
		a, lg, err := s.Verify(next, drafts)
		require.NoError(t, err)
		seen[a] = true
		got = append(append(got, next), drafts[:a]...)
		next = sample.Argmax(lg)
	}
	require.Equal(t, want, got[:len(want)])
	require.Greater(t, len(seen), 2, "accepted counts seen: %v", seen)
}

func TestVerifyErrors(t *testing.T) {
	f := newMTPFixture(t)
	m := loadModel(t, f.withHead)
	s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}})
	_, err := s.Forward([]int{1, 2, 3}, 0, lm.WantLast)
	require.NoError(t, err)
	_, _, err = s.Verify(1, []int{2, 3, 4, 5})
	require.ErrorContains(t, err, "more than a chunk of 4")
	_, _, err = s.Verify(1, []int{m.Config.Vocab})
	require.ErrorContains(t, err, "outside")
	require.Equal(t, 3, s.Pos(), "a refused window changes nothing")
	out, err := s.Forward([]int{4}, 3, lm.WantLast)
	require.NoError(t, err)
	require.NotNil(t, out)
}

// FuzzSession drives a session with the MTP head (reusing its logits or
// not) through random calls (forwards with bad ids and positions, windows,
// drafts, snapshots, rollbacks, resets): none may panic, and afterwards a good forward at
// Pos() runs, after a Reset when an earlier failure left the session
// refusing.
func FuzzSession(f *testing.F) {
	f.Add([]byte{0, 3, 1, 2, 3, 1, 4, 2, 0, 0, 5, 3})
	f.Add([]byte{0, 2, 9, 9, 2, 0, 1, 3, 7, 7, 7, 4, 1})
	f.Add([]byte{3, 0, 1, 0, 4, 0, 200, 2, 5, 1, 1, 6})
	f.Add([]byte{0, 5, 1, 2, 3, 4, 5, 4, 0, 1, 3, 9, 9, 9, 9, 5, 2})
	m := loadModel(f, newMTPFixture(f).withHead)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4, Capacity: 2, ReuseLogits: len(data)%2 == 1}})
		take := func(n int) []int {
			var ids []int
			for i := 0; i < n && len(data) > 0; i++ {
				ids = append(ids, int(data[0])-10)
				data = data[1:]
			}
			return ids
		}
		for len(data) >= 2 {
			op, arg := data[0]%7, int(data[1])
			data = data[2:]
			switch op {
			case 0:
				_, _ = s.Forward(take(arg%6), s.Pos()-arg%3+1, lm.Want(arg%3))
			case 1:
				if ids := take(1 + arg%5); len(ids) > 0 {
					_, _, _ = s.Verify(ids[0], ids[1:])
				}
			case 2:
				_, _ = s.Draft(arg-10, arg%4)
			case 3:
				_ = s.Snapshot()
			case 4:
				_ = s.Rollback(s.Pos() - arg%4)
			case 5:
				s.Reset()
			case 6:
				_, _, _ = s.DraftRows(make([]float32, arg%3), take(1), arg%5, lm.WantLast)
			}
		}
		if _, err := s.Forward([]int{1, 2}, s.Pos(), lm.WantLast); err != nil {
			s.Reset()
			if _, err := s.Forward([]int{1, 2}, 0, lm.WantLast); err != nil {
				t.Fatalf("a good call after a Reset: %v", err)
			}
		}
	})
}

// TestVerifyWithoutRecurrence: on a model of QSA layers only (nothing to
// settle but the position and the MTP head's hyper-state), a refused
// window leaves the session where greedy decoding would, drafts included.
func TestVerifyWithoutRecurrence(t *testing.T) {
	c := loadModel(t, filepath.Join(testdata, checkpoints[0])).Config
	for i := range c.Layers {
		c.Layers[i] = QSA
	}
	c.PLELayers, c.MTPLayers = nil, 1
	require.False(t, c.Recurrent())
	m, err := Synthetic(c, graph.F32, 11)
	require.NoError(t, err)
	ids := []int{5, 9, 17, 3, 30, 2, 8}
	want, steps := greedy(t, newSession(t, m, Options{}), ids, 5)
	s := newSession(t, m, Options{})
	_, err = s.Forward(ids, 0, lm.WantLast)
	require.NoError(t, err)
	a, _, err := s.Verify(want[0], []int{want[1], (want[2] + 1) % c.Vocab, want[3]})
	require.NoError(t, err)
	require.Equal(t, 1, a)
	// drafting straight after the window needs the hyper-state it kept
	early, err := s.Draft(want[2], 2)
	require.NoError(t, err)
	at := newSession(t, m, Options{})
	_, err = at.Forward(append(slices.Clone(ids), want[:2]...), 0, lm.WantLast)
	require.NoError(t, err)
	refEarly, err := at.Draft(want[2], 2)
	require.NoError(t, err)
	require.Equal(t, refEarly, early)
	out, err := s.Forward([]int{want[2]}, s.Pos(), lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, 0.0, maxDiff(t, rowsOf(t, out), [][]float32{steps[2]}))
	got, err := s.Draft(want[3], 2)
	require.NoError(t, err)
	ref := newSession(t, m, Options{})
	_, err = ref.Forward(append(slices.Clone(ids), want[:3]...), 0, lm.WantLast)
	require.NoError(t, err)
	refDrafts, err := ref.Draft(want[3], 2)
	require.NoError(t, err)
	require.Equal(t, refDrafts, got)
}
