package dory

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/planner"
)

// testRouter gives a last_loop model a router whose score alternates in sign
// with the state, so both Read and SecondFresh run.
func testRouter(hidden int) *Router {
	r := &Router{dim: hidden, rank: 1,
		easyMean: make([]float32, hidden), hardMean: make([]float32, hidden),
		easyBase: make([]float32, hidden), hardBase: make([]float32, hidden)}
	r.easyBase[0] = 1
	r.hardBase[1] = 1
	return r
}

// TestFusedEqualsUnfused runs every stage (All for prompts and decode; First,
// FirstRead, SecondRead, SecondFresh under the conf gate; Read and
// SecondFresh under the recon router) with fusion on and off: the logits
// agree within 1e-5.
func TestFusedEqualsUnfused(t *testing.T) {
	for _, name := range []string{"dory-tiny-per_loop", "dory-tiny-last_loop"} {
		m := loadModel(t, filepath.Join(testdata, "dory", name))
		m.Router = testRouter(m.Config.Hidden)
		gates := []Gate{{}}
		if m.Config.KV == LastLoop {
			gates = append(gates, Gate{Kind: GateConf, Threshold: 0.02}, Gate{Kind: GateRecon})
		}
		for _, gate := range gates {
			run := func(fuse bool) ([][]float32, *Session) {
				s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Planner: &planner.Options{Fuse: fuse}}, Chunk: 8}, Gate: gate})
				rows := forwardIn(t, s, testIDs[:11], 11, 2)
				rows = append(rows, forwardIn(t, s, testIDs[11:], 1, 2)...)
				return rows, s
			}
			fused, fs := run(true)
			plain, ps := run(false)
			requireClose(t, fused, plain, 1e-5, name+" fused vs unfused")
			require.Equal(t, ps.GateOne, fs.GateOne, "the gate decides the same")
			for _, k := range []Key{{Stage: All, Loops: 2, Want: lm.WantAll, Rows: 1}, {Stage: All, Loops: 2, Want: lm.WantAll, Rows: 8}} {
				pf, _, ok1 := fs.Planned(k)
				pp, _, ok2 := ps.Planned(k)
				if ok1 && ok2 {
					require.Less(t, len(pf.Schedule), len(pp.Schedule), "fusion removes launches for %s", k)
				}
			}
		}
	}
}

// TestCacheRecordsOnce: decoding 50 tokens within a fixed capacity records
// each key once and replays the rest; growing a full-attention slot changes
// the signature and updates (or records) each key once; another loop count
// is another key.
func TestCacheRecordsOnce(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-last_loop"))
	s := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Capacity: 64}})
	_, err := s.ForwardLoops(testIDs[:5], 0, 2, lm.WantNone)
	require.NoError(t, err)
	before := s.Stats()
	for i := 0; i < 50; i++ {
		_, err := s.ForwardLoops([]int{i % m.Config.Vocab}, s.Pos(), 2, lm.WantLast)
		require.NoError(t, err)
	}
	st := s.Stats()
	require.Equal(t, 1, st.Records-before.Records, "one recording for the decode key")
	require.Equal(t, 49, st.Hits-before.Hits, "the other 49 tokens replay")
	require.Equal(t, 0, st.Updates-before.Updates)

	// Position 55 to 70 crosses the capacity of 64: the full slots double once.
	before = s.Stats()
	for i := 0; i < 15; i++ {
		_, err := s.ForwardLoops([]int{i}, s.Pos(), 2, lm.WantLast)
		require.NoError(t, err)
	}
	st = s.Stats()
	require.Equal(t, 1, st.Updates+st.Records-before.Updates-before.Records, "one update or recording when the slot grows")
	require.Equal(t, 14, st.Hits-before.Hits)

	before = s.Stats()
	_, err = s.ForwardLoops([]int{1}, s.Pos(), 3, lm.WantLast)
	require.NoError(t, err)
	st = s.Stats()
	require.Equal(t, 1, st.Plans-before.Plans, "three loops is a new key")
	require.Equal(t, 1, st.Records-before.Records)
}

// TestReplayEqualsFresh: a replayed recording gives bit for bit what a fresh
// session gives for the same calls.
func TestReplayEqualsFresh(t *testing.T) {
	m := loadModel(t, filepath.Join(testdata, "dory", "dory-tiny-per_loop"))
	a := newSession(t, m, Options{})
	seqA := forwardIn(t, a, testIDs, 1, 2)
	require.Positive(t, a.Stats().Hits)
	for i := range testIDs {
		b := newSession(t, m, Options{})
		for j := 0; j < i; j++ {
			_, err := b.ForwardLoops(testIDs[j:j+1], j, 2, lm.WantNone)
			require.NoError(t, err)
		}
		out, err := b.ForwardLoops(testIDs[i:i+1], i, 2, lm.WantLast)
		require.NoError(t, err)
		fresh := rowsOf(t, out)[0]
		for j := range fresh {
			require.Equal(t, math.Float32bits(fresh[j]), math.Float32bits(seqA[i][j]), "position %d logit %d", i, j)
		}
	}
}
