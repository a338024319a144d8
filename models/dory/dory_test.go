package dory

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/sample"
)

const testdata = "../../testdata"

type goldenCase struct {
	Model      string    `json:"model"`
	IDs        []int     `json:"ids"`
	Chunk      int       `json:"chunk"`
	Loops      int       `json:"loops"`
	LogitsLast []float64 `json:"logits_last"`
}

// goldenCases reads testdata/dory/golden.json (at least one case).
func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testdata, "dory", "golden.json"))
	require.NoError(t, err)
	var cases []goldenCase
	require.NoError(t, json.Unmarshal(raw, &cases))
	require.NotEmpty(t, cases)
	return cases
}

func loadModel(t testing.TB, dir string) *Model {
	t.Helper()
	m, err := Load(dir)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func newSession(t testing.TB, m *Model, opts Options) *Session {
	t.Helper()
	if opts.Backend == nil {
		opts.Backend = cpu.New(2)
	}
	s, err := NewSession(m, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func rowsOf(t testing.TB, d *tensor.Dense) [][]float32 {
	t.Helper()
	require.NotNil(t, d)
	sh := d.Shape()
	data := d.Data().([]float32)
	out := make([][]float32, sh[0])
	for i := range out {
		out[i] = data[i*sh[1] : (i+1)*sh[1]]
	}
	return out
}

func maxAbsDiff(a []float32, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// TestGolden checks the last logits of every case of golden.json, made by an
// independent PyTorch implementation, within 1e-4.
func TestGolden(t *testing.T) {
	cases := goldenCases(t)
	models := map[string]*Model{}
	for _, c := range cases {
		m := models[c.Model]
		if m == nil {
			m = loadModel(t, filepath.Join(testdata, "dory", c.Model))
			models[c.Model] = m
		}
		chunks := []int{c.Chunk}
		if c.Chunk == len(c.IDs) {
			// also on row buckets: the whole prompt on a plan of 24 rows
			chunks = append(chunks, 64)
			if m.Config.KV == PerLoop {
				// and 14 rows then 9 on the plan of 14 (a last_loop
				// cache's logits depend on the chunks: its golden is
				// the one chunk's)
				chunks = append(chunks, 14)
			}
		}
		for _, chunk := range chunks {
			s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: chunk, Buckets: lm.DefaultBuckets}})
			var last []float32
			for a := 0; a < len(c.IDs); a += chunk {
				b := min(a+chunk, len(c.IDs))
				out, err := s.ForwardLoops(c.IDs[a:b], a, c.Loops, lm.WantLast)
				require.NoError(t, err)
				last = rowsOf(t, out)[0]
			}
			require.Len(t, last, len(c.LogitsLast))
			d := maxAbsDiff(last, c.LogitsLast)
			t.Logf("%s chunk %d: max abs diff %.3g", c.Model, chunk, d)
			require.Less(t, d, 1e-4, "%s chunk %d", c.Model, chunk)
		}
	}
}

// TestBuckets: two prompt lengths of one row bucket share its plan, and
// their logits are those of plans of their own rows, on both KV modes.
func TestBuckets(t *testing.T) {
	for _, name := range []string{"dory-tiny-per_loop", "dory-tiny-last_loop"} {
		t.Run(name, func(t *testing.T) {
			modeltest.CheckBuckets(t, loadModel(t, filepath.Join(testdata, "dory", name)), cpu.New(2), "", 1e-5)
		})
	}
}

type greedyFile struct {
	Prompt    []int `json:"prompt"`
	GreedyIDs []int `json:"greedy_ids"`
}

// TestGoTinyGreedy checks the embedded model against greedy.json, made by an
// independent PyTorch Dory: teacher-forced argmax at every position, and
// free-running greedy decoding.
func TestGoTinyGreedy(t *testing.T) {
	dir := filepath.Join(testdata, "dory-gotiny")
	raw, err := os.ReadFile(filepath.Join(dir, "greedy.json"))
	require.NoError(t, err)
	var g greedyFile
	require.NoError(t, json.Unmarshal(raw, &g))
	m := loadModel(t, dir)
	loops := m.Config.Loops

	t.Run("teacher forced", func(t *testing.T) {
		s := newSession(t, m, Options{})
		seq := append(append([]int{}, g.Prompt...), g.GreedyIDs[:len(g.GreedyIDs)-1]...)
		out, err := s.ForwardLoops(seq, 0, loops, lm.WantAll)
		require.NoError(t, err)
		rows := rowsOf(t, out)
		for i := len(g.Prompt) - 1; i < len(seq); i++ {
			want := g.GreedyIDs[i-len(g.Prompt)+1]
			require.Equal(t, want, sample.Argmax(rows[i]), "position %d", i)
		}
	})
	t.Run("free running", func(t *testing.T) {
		s := newSession(t, m, Options{})
		out, err := s.ForwardLoops(g.Prompt, 0, loops, lm.WantLast)
		require.NoError(t, err)
		next := sample.Argmax(rowsOf(t, out)[0])
		got := []int{next}
		for len(got) < len(g.GreedyIDs) {
			out, err = s.ForwardLoops([]int{next}, s.Pos(), loops, lm.WantLast)
			require.NoError(t, err)
			next = sample.Argmax(rowsOf(t, out)[0])
			got = append(got, next)
		}
		require.Equal(t, g.GreedyIDs, got)
	})
}

func forwardIn(t *testing.T, s *Session, ids []int, chunk, loops int) [][]float32 {
	t.Helper()
	var rows [][]float32
	for a := 0; a < len(ids); a += chunk {
		b := min(a+chunk, len(ids))
		out, err := s.ForwardLoops(ids[a:b], s.Pos(), loops, lm.WantAll)
		require.NoError(t, err)
		rows = append(rows, rowsOf(t, out)...)
	}
	return rows
}

func requireClose(t *testing.T, a, b [][]float32, tol float64, what string) {
	t.Helper()
	require.Equal(t, len(a), len(b), what)
	for i := range a {
		for j := range a[i] {
			d := math.Abs(float64(a[i][j] - b[i][j]))
			require.LessOrEqual(t, d, tol, "%s: row %d logit %d: %v vs %v", what, i, j, a[i][j], b[i][j])
		}
	}
}

var testIDs = []int{3, 10, 17, 24, 31, 38, 45, 52, 59, 66, 73, 80, 87, 94, 4, 11, 18, 25, 32, 39, 46, 53, 60}

// TestChunksAgree: a prompt in one chunk, in chunks of 4 and token by token
// gives the same logits on the per_loop cache; rollback and re-run equals a
// straight run.
func TestChunksAgree(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-per_loop"))
	one := forwardIn(t, newSession(t, m, Options{}), testIDs, len(testIDs), 2)
	four := forwardIn(t, newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}}), testIDs, 4, 2)
	each := forwardIn(t, newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 1}}), testIDs, 1, 2)
	requireClose(t, one, four, 2e-4, "chunks of 4")
	requireClose(t, one, each, 2e-4, "token by token")

	s := newSession(t, m, Options{})
	forwardIn(t, s, testIDs[:15], 15, 2)
	forwardIn(t, s, []int{1, 2, 3, 4, 5}, 5, 2)
	require.NoError(t, s.Rollback(15))
	again := forwardIn(t, s, testIDs[15:], 3, 2)
	requireClose(t, one[15:], again, 2e-4, "rollback then re-run")
}

// TestReuseLogits: with ReuseLogits a token's logits are those of a plain
// session, in memory the next token reuses; a Forward of several chunks
// still returns every chunk's logits.
func TestReuseLogits(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-per_loop"))
	plain := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}})
	reuse := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4, ReuseLogits: true}})
	all := func(s *Session) []float32 {
		d, err := s.ForwardLoops(testIDs[:10], 0, 2, lm.WantAll)
		require.NoError(t, err)
		return append([]float32(nil), d.Data().([]float32)...)
	}
	require.Equal(t, all(plain), all(reuse), "ten ids in chunks of four")
	var prev *float32
	for i, id := range testIDs[10:16] {
		a, err := plain.ForwardLoops([]int{id}, 10+i, 2, lm.WantLast)
		require.NoError(t, err)
		b, err := reuse.ForwardLoops([]int{id}, 10+i, 2, lm.WantLast)
		require.NoError(t, err)
		got := b.Data().([]float32)
		require.Equal(t, a.Data().([]float32), got, "token %d", i)
		if prev != nil {
			require.Same(t, prev, &got[0], "token %d's logits are not in the reused memory", i)
		}
		prev = &got[0]
	}
}

// TestLastLoopSlots: a last_loop cache has one slot per attention layer and
// rewrites a position's rows in place.
func TestLastLoopSlots(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-last_loop"))
	s := newSession(t, m, Options{})
	forwardIn(t, s, testIDs[:6], 6, 3)
	attn := 0
	for li := range m.Config.Layers() {
		if m.Config.IsAttention(li) {
			attn++
		}
	}
	require.Equal(t, attn, slotPairs(s), "one slot per attention layer")
	per := newSession(t, loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-per_loop")), Options{})
	forwardIn(t, per, testIDs[:6], 6, 3)
	require.Greater(t, slotPairs(per), attn, "per_loop keeps a slot per loop")

	// Re-running the last position after a rollback rewrites its rows in place:
	// the logits equal the first run's.
	first := forwardIn(t, s, testIDs[6:7], 1, 3)
	require.NoError(t, s.Rollback(6))
	second := forwardIn(t, s, testIDs[6:7], 1, 3)
	requireClose(t, first, second, 0, "rewrite in place")
}

// TestGate: with conf 0 every token exits after one pass and its logits equal
// a one-loop forward; with conf above 1 none does and they equal two loops.
func TestGate(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-last_loop"))
	prompt, rest := testIDs[:8], testIDs[8:]
	run := func(opts Options, loops int) ([][]float32, *Session) {
		s := newSession(t, m, opts)
		_, err := s.ForwardLoops(prompt, 0, loops, lm.WantNone)
		require.NoError(t, err)
		return forwardIn(t, s, rest, 1, loops), s
	}
	// The prompt runs two loops in the gated runs; the references' prompt does too.
	ref := func(decodeLoops int) [][]float32 {
		s := newSession(t, m, Options{})
		_, err := s.ForwardLoops(prompt, 0, 2, lm.WantNone)
		require.NoError(t, err)
		return forwardIn(t, s, rest, 1, decodeLoops)
	}
	exitAll, s0 := run(Options{Gate: Gate{Kind: GateConf, Threshold: 0}}, 2)
	require.Equal(t, len(rest), s0.GateTokens)
	require.Equal(t, len(rest), s0.GateOne)
	requireClose(t, ref(1), exitAll, 1e-5, "conf 0 vs one loop")
	exitNone, s1 := run(Options{Gate: Gate{Kind: GateConf, Threshold: 1.5}}, 2)
	require.Equal(t, 0, s1.GateOne)
	requireClose(t, ref(2), exitNone, 1e-5, "conf 1.5 vs two loops")
}

// TestBadInput: each bad call is a clear error and leaves the session usable.
func TestBadInput(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-per_loop"))
	s := newSession(t, m, Options{})
	ref := forwardIn(t, newSession(t, m, Options{}), testIDs[:5], 5, 2)
	_, err := s.ForwardLoops(testIDs[:3], 0, 2, lm.WantNone)
	require.NoError(t, err)
	cases := []struct {
		name  string
		ids   []int
		pos   int
		loops int
		want  string
	}{
		{"id past vocab", []int{5, 97}, 3, 2, "id 97 is outside the vocabulary of 97"},
		{"negative id", []int{-1}, 3, 2, "outside the vocabulary"},
		{"empty", nil, 3, 2, "empty input"},
		{"pos0 ahead", []int{1}, 4, 2, "does not follow the cache"},
		{"pos0 behind", []int{1}, 2, 2, "does not follow the cache"},
		{"loops 0", []int{1}, 3, 0, "0 loops"},
		{"loops 17", []int{1}, 3, 17, "17 loops"},
		{"other loops per_loop", []int{1}, 3, 3, "per_loop"},
	}
	for _, c := range cases {
		_, err := s.ForwardLoops(c.ids, c.pos, c.loops, lm.WantLast)
		require.ErrorContains(t, err, c.want, c.name)
		require.Equal(t, 3, s.Pos(), c.name)
	}
	require.Error(t, s.Rollback(4))
	out, err := s.ForwardLoops(testIDs[3:5], 3, 2, lm.WantAll)
	require.NoError(t, err)
	requireClose(t, ref[3:], rowsOf(t, out), 2e-4, "after errors")
}

func TestClosedSession(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-per_loop"))
	s, err := NewSession(m, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = s.ForwardLoops([]int{1}, 0, 2, lm.WantLast)
	require.ErrorContains(t, err, "closed")
	_, err = NewSession(nil, Options{})
	require.Error(t, err)
}

// FuzzForward feeds a session random calls: ids, positions, loops, wants and
// rollbacks. Every call either works or returns an error; none panics, and
// after an error the session still runs a good call.
func FuzzForward(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 0, 2, 1})
	f.Add([]byte{0, 200, 255, 7, 9, 0, 17, 3})
	f.Add([]byte{5, 1, 1, 1, 1, 1, 4, 2, 2, 0, 1})
	m := loadModel(f, filepath.Join(testdata, "dory", "dory-tiny-last_loop"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}})
		for len(data) >= 4 {
			n, pos, loops, want := int(data[0]%6), int(data[1]%8), int(data[2]%18), lm.Want(data[3]%4)
			data = data[4:]
			if n == 5 {
				_ = s.Rollback(pos)
				continue
			}
			ids := make([]int, 0, n)
			for i := 0; i < n && len(data) > 0; i++ {
				ids = append(ids, int(data[0])-20)
				data = data[1:]
			}
			out, err := s.ForwardLoops(ids, pos, loops, want)
			if err == nil && want != lm.WantNone && out == nil {
				t.Fatalf("no logits for want %s", want)
			}
		}
		p := s.Pos()
		if _, err := s.ForwardLoops([]int{1, 2}, p, 2, lm.WantLast); err != nil {
			t.Fatalf("a good call after the fuzzed ones: %v", err)
		}
	})
}

// slotPairs counts the session's KV slots (a k and a v state each).
func slotPairs(s *Session) int {
	n := 0
	for _, st := range s.States() {
		if st.Kind == lm.Slot || st.Kind == lm.Ring {
			n++
		}
	}
	return n / 2
}
