package qwen4

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/weights"
)

// A Session is the session the commands drive: their forwards, plans and
// drafts, with no adapter.
var (
	_ models.Session = (*Session)(nil)
	_ models.Planner = (*Session)(nil)
	_ models.Drafter = (*Session)(nil)
)

const testdata = "../../testdata/qwen4"

var checkpoints = []string{"qwen4-tiny-small-11", "qwen4-tiny-wide-21"}

type golden struct {
	Cases []struct {
		IDs         []int       `json:"ids"`
		Full        [][]float64 `json:"logits_full"`
		Incremental [][]float64 `json:"logits_incremental"`
	} `json:"cases"`
}

func readGolden(t testing.TB, dir string) golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	require.NoError(t, err)
	var g golden
	require.NoError(t, json.Unmarshal(raw, &g))
	require.NotEmpty(t, g.Cases)
	return g
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

// maxDiff is the largest |a − b| over rows of logits.
func maxDiff[T float32 | float64](t testing.TB, a [][]float32, b [][]T) float64 {
	t.Helper()
	require.Len(t, a, len(b))
	m := 0.0
	for r := range b {
		require.Len(t, a[r], len(b[r]))
		for i := range b[r] {
			d := math.Abs(float64(a[r][i]) - float64(b[r][i]))
			if math.IsNaN(d) {
				return math.Inf(1)
			}
			m = math.Max(m, d)
		}
	}
	return m
}

// TestGolden reproduces the transformers logits of both tiny checkpoints:
// one forward over each whole sequence, and a prefill of the first half
// followed by one token per call.
func TestGolden(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			s := newSession(t, loadModel(t, dir), Options{})
			full, inc := checkGolden(t, s, readGolden(t, dir), 1e-4)
			t.Logf("largest |logit - transformers|: full %.3g, incremental %.3g", full, inc)
		})
	}
}

// checkGolden runs every golden case on s, whole and incrementally (half,
// then one token per call), requires both within tol of the golden logits
// and gives the largest differences.
func checkGolden(t *testing.T, s *Session, gold golden, tol float64) (worstFull, worstInc float64) {
	t.Helper()
	for ci, gc := range gold.Cases {
		s.Reset()
		out, err := s.Forward(gc.IDs, 0, lm.WantAll)
		require.NoError(t, err)
		d := maxDiff(t, rowsOf(t, out), gc.Full)
		require.Less(t, d, tol, "case %d full", ci)
		worstFull = math.Max(worstFull, d)

		s.Reset()
		half := len(gc.IDs) / 2
		out, err = s.Forward(gc.IDs[:half], 0, lm.WantAll)
		require.NoError(t, err)
		inc := rowsOf(t, out)
		for p := half; p < len(gc.IDs); p++ {
			out, err := s.Forward(gc.IDs[p:p+1], p, lm.WantLast)
			require.NoError(t, err)
			inc = append(inc, rowsOf(t, out)...)
		}
		d = maxDiff(t, inc, gc.Incremental)
		require.Less(t, d, tol, "case %d incremental", ci)
		worstInc = math.Max(worstInc, d)
	}
	return worstFull, worstInc
}

// longest is the golden case with the most tokens.
func longest(g golden) []int {
	ids := g.Cases[0].IDs
	for _, c := range g.Cases {
		if len(c.IDs) > len(ids) {
			ids = c.IDs
		}
	}
	return ids
}

// TestChunkedPrefill checks that prompt chunks of several sizes (with slot
// growth on the way) agree with one token per call.
func TestChunkedPrefill(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			ids := longest(readGolden(t, dir))
			m := loadModel(t, dir)
			one := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 1, Capacity: 8}})
			out, err := one.Forward(ids, 0, lm.WantAll)
			require.NoError(t, err)
			ref := rowsOf(t, out)
			// one plan, recorded once, updated as the slots grow from 8 rows
			// (at positions 8, 16 and 32), replayed for every other token
			st := one.Stats()
			t.Logf("one row per call: %s", st)
			require.Equal(t, capture.Stats{Plans: 1, Records: 1, Updates: 3, Hits: len(ids) - 4}, st)
			for _, chunk := range []int{3, 7, 20, 64} { // 20: 13 rows on a bucket of 16; 64: 33 on 48
				s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: chunk, Capacity: 4, Buckets: lm.DefaultBuckets}})
				out, err := s.Forward(ids, 0, lm.WantAll)
				require.NoError(t, err)
				d := maxDiff(t, rowsOf(t, out), ref)
				require.Less(t, d, 1e-5, "chunk %d", chunk)
				t.Logf("chunk %d vs one row per call: largest difference %.3g", chunk, d)
			}
		})
	}
}

// TestFusedUnfused runs the fused and unfused plans on the same input.
func TestFusedUnfused(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			ids := longest(readGolden(t, dir))
			m := loadModel(t, dir)
			var got [2][][]float32
			for i, po := range []planner.Options{planner.DefaultOptions(), {Fuse: false}} {
				po := po
				s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Planner: &po}, Chunk: 8}})
				out, err := s.Forward(ids[:20], 0, lm.WantAll)
				require.NoError(t, err)
				got[i] = rowsOf(t, out)
				out, err = s.Forward(ids[20:21], 20, lm.WantLast)
				require.NoError(t, err)
				got[i] = append(got[i], rowsOf(t, out)...)
			}
			d := maxDiff(t, got[0], got[1])
			require.Less(t, d, 1e-5)
			t.Logf("fused vs unfused: largest difference %.3g", d)
		})
	}
}

// TestWantLast checks that lm.WantLast gives the last row of lm.WantAll.
func TestWantLast(t *testing.T) {
	dir := filepath.Join(testdata, checkpoints[0])
	gold := readGolden(t, dir)
	m := loadModel(t, dir)
	s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}})
	gc := gold.Cases[1]
	out, err := s.Forward(gc.IDs, 0, lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, []int{1, m.Config.Vocab}, []int(out.Shape()))
	require.Less(t, maxDiff(t, rowsOf(t, out), gc.Full[len(gc.Full)-1:]), 1e-4)
	out, err = s.Forward([]int{3}, len(gc.IDs), lm.WantNone)
	require.NoError(t, err)
	require.Nil(t, out)
	require.Equal(t, len(gc.IDs)+1, s.Pos())
}

// TestSnapshotRollback checks that a rollback to a snapshot, then a re-run,
// equals a straight run, and that other rollbacks are refused.
func TestSnapshotRollback(t *testing.T) {
	dir := filepath.Join(testdata, checkpoints[0])
	ids := longest(readGolden(t, dir))
	m := loadModel(t, dir)
	straight := newSession(t, m, Options{})
	out, err := straight.Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	ref := rowsOf(t, out)

	s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}})
	_, err = s.Forward(ids[:10], 0, lm.WantNone)
	require.NoError(t, err)
	require.NoError(t, s.Snapshot())
	// a wrong continuation, then back
	_, err = s.Forward([]int{5, 6, 7, 8, 9, 10, 11}, 10, lm.WantNone)
	require.NoError(t, err)
	err = s.Rollback(12)
	require.ErrorContains(t, err, "rollback to 12")
	require.ErrorContains(t, err, "snapshot is at position 10")
	require.Equal(t, 17, s.Pos(), "a refused rollback changes nothing")
	require.NoError(t, s.Rollback(10))
	require.Equal(t, 10, s.Pos())
	out, err = s.Forward(ids[10:], 10, lm.WantAll)
	require.NoError(t, err)
	d := maxDiff(t, rowsOf(t, out), ref[10:])
	require.Less(t, d, 1e-5)
	// twice to the same snapshot
	require.NoError(t, s.Rollback(10))
	out, err = s.Forward(ids[10:], 10, lm.WantAll)
	require.NoError(t, err)
	require.Less(t, maxDiff(t, rowsOf(t, out), ref[10:]), 1e-5)

	fresh := newSession(t, m, Options{})
	_, err = fresh.Forward(ids[:4], 0, lm.WantNone)
	require.NoError(t, err)
	require.ErrorContains(t, fresh.Rollback(2), "no snapshot was taken")
	require.ErrorContains(t, fresh.Rollback(2), "cannot go back")
	require.ErrorContains(t, fresh.Rollback(5), "holds positions 0 to 4")
	require.NoError(t, fresh.Rollback(4), "a rollback to Pos is a no-op")
}

func TestBadInput(t *testing.T) {
	dir := filepath.Join(testdata, checkpoints[0])
	m := loadModel(t, dir)
	s := newSession(t, m, Options{})
	_, err := s.Forward([]int{1, 2, 128}, 0, lm.WantLast)
	require.ErrorContains(t, err, "token 2 (position 2): id 128 is outside the vocabulary of 128")
	_, err = s.Forward([]int{-1}, 0, lm.WantLast)
	require.ErrorContains(t, err, "id -1 is outside")
	require.Equal(t, 0, s.Pos())
	_, err = s.Forward(nil, 0, lm.WantLast)
	require.ErrorContains(t, err, "empty input")
	_, err = s.Forward([]int{1, 2}, 0, lm.WantNone)
	require.NoError(t, err)
	_, err = s.Forward([]int{3}, 3, lm.WantLast)
	require.ErrorContains(t, err, "pos0 3 does not follow the cache, which holds 2 positions")
	_, err = s.Forward([]int{3}, 1, lm.WantLast)
	require.ErrorContains(t, err, "pos0 1 does not follow")
	_, err = s.Forward([]int{3}, 2, lm.Want(7))
	require.ErrorContains(t, err, "unknown want 7")
	// the session still works after the refusals
	_, err = s.Forward([]int{3}, 2, lm.WantLast)
	require.NoError(t, err)
	_, err = s.Draft(1, 2)
	require.ErrorContains(t, err, "no MTP head")
	require.NoError(t, s.Close())
	_, err = s.Forward([]int{3}, 3, lm.WantLast)
	require.ErrorContains(t, err, "closed")
}

// TestGraphScopes checks that the graph's nodes carry layer scopes and that
// its states are the ones the session binds.
func TestGraphScopes(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, checkpoints[0]))
	g, err := Build(&m.Config, Key{Rows: 3, Want: lm.WantLast}, m)
	require.NoError(t, err)
	scopes := map[string]bool{}
	for _, n := range g.Nodes {
		scopes[n.Scope] = true
	}
	for _, want := range []string{"layer 0 / gdn", "layer 1 / ple", "layer 3 / qsa / indexer", "layer 7 / moe", "head"} {
		require.True(t, scopes[want], "scope %q in %v", want, scopes)
	}
	for _, v := range g.Values {
		if v.Kind != graph.State {
			continue
		}
		_, err := m.Config.stateSpec(v.Name)
		require.NoError(t, err, "state %s is kept by the session", v.Name)
	}
	_, err = m.Config.stateSpec("qsa.3")
	require.ErrorContains(t, err, "no state qsa.3")
	s := newSession(t, m, Options{})
	_, err = s.Forward([]int{1, 2, 3}, 0, lm.WantLast)
	require.NoError(t, err, "the session makes and binds every state")
	_, err = Build(&m.Config, Key{Stage: Draft, Rows: 1}, m)
	require.ErrorContains(t, err, "no MTP head")
	_, err = Build(&m.Config, Key{Rows: 0}, m)
	require.ErrorContains(t, err, "0 rows")
	// a graph from the config alone (dumps) builds too
	c := Released()
	c.Layers = c.Layers[:4]
	_, err = Build(&c, Key{Rows: 2, Want: lm.WantAll}, nil)
	require.NoError(t, err)
}

// TestFailedRun checks that a run that fails half-way (a NaN reaching the
// router) leaves a session that says so, and that a rollback to a snapshot
// makes it usable again.
func TestFailedRun(t *testing.T) {
	const poison = 7
	dir := copyCheckpoint(t, checkpoints[0], nil, func(ts []weights.NamedTensor) []weights.NamedTensor {
		for _, x := range ts {
			if x.Name == "model.embed_tokens.weight" {
				h := x.Shape[1]
				nan := weights.EncodeF32([]float32{float32(math.NaN())})
				for i := 0; i < h; i++ {
					copy(x.Data[4*(poison*h+i):], nan)
				}
			}
		}
		return ts
	})
	gc := readGolden(t, filepath.Join(testdata, checkpoints[0])).Cases[1]
	require.NotContains(t, gc.IDs, poison)
	m := loadModel(t, dir)
	s := newSession(t, m, Options{})
	_, err := s.Forward(gc.IDs[:8], 0, lm.WantNone)
	require.NoError(t, err)
	require.NoError(t, s.Snapshot())
	_, err = s.Forward([]int{poison}, 8, lm.WantLast)
	require.ErrorContains(t, err, "NaN")
	require.ErrorContains(t, err, "layer 0")
	_, err = s.Forward(gc.IDs[8:9], 8, lm.WantLast)
	require.ErrorContains(t, err, "an earlier forward failed")
	require.ErrorContains(t, s.Snapshot(), "an earlier forward failed")
	require.NoError(t, s.Rollback(8))
	out, err := s.Forward(gc.IDs[8:], 8, lm.WantAll)
	require.NoError(t, err)
	require.Less(t, maxDiff(t, rowsOf(t, out), gc.Full[8:]), 1e-4)
	s.Reset()
	out, err = s.Forward(gc.IDs, 0, lm.WantAll)
	require.NoError(t, err)
	require.Less(t, maxDiff(t, rowsOf(t, out), gc.Full), 1e-4)
}

// TestReuseLogits: with ReuseLogits a token's logits are those of a plain
// session, in memory the next token reuses; a forward of several chunks
// still returns every chunk's logits, and a window's logits are its own.
func TestReuseLogits(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, checkpoints[0]))
	ids := longest(readGolden(t, filepath.Join(testdata, checkpoints[0])))
	plain := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4}})
	reuse := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Chunk: 4, ReuseLogits: true}})
	all := func(s *Session) []float32 {
		d, err := s.Forward(ids[:10], 0, lm.WantAll)
		require.NoError(t, err)
		return slices.Clone(d.Data().([]float32))
	}
	require.Equal(t, all(plain), all(reuse), "ten ids in chunks of four")
	var prev *float32
	for i, id := range ids[10:16] {
		a, err := plain.Forward([]int{id}, 10+i, lm.WantLast)
		require.NoError(t, err)
		b, err := reuse.Forward([]int{id}, 10+i, lm.WantLast)
		require.NoError(t, err)
		got := b.Data().([]float32)
		require.Equal(t, a.Data().([]float32), got, "token %d", i)
		if prev != nil {
			require.Same(t, prev, &got[0], "token %d's logits are not in the reused memory", i)
		}
		prev = &got[0]
	}
}
