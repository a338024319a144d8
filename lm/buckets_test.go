package lm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
)

func TestBucketRows(t *testing.T) {
	for _, c := range []struct {
		n, chunk, steps, want int
	}{
		// decode tokens and small windows run on their own size
		{1, 2048, 0, 1}, {8, 2048, 0, 8},
		// the default: two buckets per doubling from 16
		{9, 2048, 0, 16}, {16, 2048, 0, 16}, {17, 2048, 0, 24}, {24, 2048, 0, 24}, {25, 2048, 0, 32},
		{33, 2048, 0, 48}, {49, 2048, 0, 64}, {1500, 2048, 0, 1536}, {1537, 2048, 0, 2048},
		// a chunk's own rows, and the chunk caps the buckets
		{2048, 2048, 0, 2048}, {97, 100, 0, 100}, {60, 100, 0, 64}, {11, 12, 0, 12}, {40, 40, 0, 40},
		// one bucket per doubling, four
		{17, 2048, 1, 32}, {1500, 2048, 1, 2048}, {17, 2048, 4, 20}, {41, 2048, 4, 48}, {1500, 2048, 4, 1536},
		// off
		{17, 2048, lm.BucketsOff, 17}, {1500, 2048, -3, 1500},
	} {
		require.Equal(t, c.want, lm.BucketRows(c.n, c.chunk, c.steps), "%d rows in chunks of %d, %d steps", c.n, c.chunk, c.steps)
	}
	for steps := range lm.MaxBuckets + 1 {
		for n := 1; n <= 300; n++ {
			b := lm.BucketRows(n, 256, steps)
			require.True(t, b >= min(n, 256) && b <= max(n, 256), "%d rows, %d steps: bucket %d", n, steps, b)
		}
	}
}

// TestBucketsOneKeepsStates: prompts of 20 and 23 rows run the plan of
// their bucket (24 rows) once built, with the states holding exactly what
// plans of their own sizes leave: the slot and ring rows of the call's
// positions only, the recurrent state the last real row, the logits of the
// real rows.
func TestBucketsOneKeepsStates(t *testing.T) {
	m := newModel()
	open := func(buckets int) *lm.Session {
		s, err := lm.NewSession(m, kindGraphs{ring: 64, rewind: 16}, lm.SessionOptions{Chunk: 64, Buckets: buckets})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	ids := make([]int, 23)
	for i := range ids {
		ids[i] = (i*3 + 1) % width // kindGraphs' vocabulary is its width
	}
	row := func(id int) []float32 { return m.table[id*width : (id+1)*width] }
	s, exact := open(lm.DefaultBuckets), open(lm.BucketsOff)
	require.Equal(t, lm.BucketsOff, open(0).Buckets(), "no buckets by default on the CPU")
	for _, n := range []int{20, 23} {
		for _, ses := range []*lm.Session{s, exact} {
			ses.Reset()
			out, err := ses.Forward(ids[:n], 0, lm.WantAll)
			require.NoError(t, err)
			got := out.Data().([]float32)
			require.Len(t, got, n*width, "%d rows' logits", n)
			for p, id := range ids[:n] {
				require.Equal(t, row(id), got[p*width:(p+1)*width], "logits of position %d", p)
			}
			last, err := ses.Forward(ids[n-1:n], n, lm.WantLast) // a decode token after it
			require.NoError(t, err)
			require.Equal(t, row(ids[n-1]), last.Data().([]float32))
		}
		for _, name := range []string{"slot", "ring", "rec"} {
			require.Equal(t, readState(t, exact, name), readState(t, s, name), "%s after %d rows", name, n)
		}
		slot := readState(t, s, "slot")
		require.Equal(t, make([]float32, (len(slot)/width-n-1)*width), slot[(n+1)*width:], "slot rows past the call's positions")
	}
	st := s.Stats()
	require.Equal(t, 2, st.Plans, "one plan for the bucket of 24 rows, one for the decode token: %s", st)
	require.Equal(t, 3, exact.Stats().Plans, "exact rows: a plan per prompt length (20, 23) and the decode token")
	p, _, ok := s.ForwardPlan(21, lm.WantAll)
	require.True(t, ok, "the plan of 21 rows is the bucket's")
	rows := 0
	for _, v := range p.Graph.Values {
		if v.Name == lm.InputIDs {
			rows = v.Shape[0]
		}
	}
	require.Equal(t, 24, rows, "the ids of the bucket's plan")

	// more ids than the plan's rows
	_, err := s.Run(kindGraphs{}.Key(16, lm.WantNone), s.Pos(), 20, lm.Inputs{IDs: make([]int, 20)})
	require.ErrorContains(t, err, "input ids: 20 values for a plan input of 16")

	// the last row of a WantLast chunk is the last in use
	s.Reset()
	out, err := s.Forward(ids[:19], 0, lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, row(ids[18]), out.Data().([]float32))
	require.Equal(t, row(ids[18]), readState(t, s, "rec"))

	// rollback and snapshots as with exact rows: a chunk of 10 rows on the
	// plan of 16 taken back to the snapshot before it
	require.NoError(t, s.Snapshot())
	_, err = s.Forward(ids[:10], 19, lm.WantNone)
	require.NoError(t, err)
	require.Equal(t, row(ids[9]), readState(t, s, "rec"))
	require.NoError(t, s.Rollback(19))
	require.Equal(t, 19, s.Pos())
	require.Equal(t, row(ids[18]), readState(t, s, "rec"))
	out, err = s.Forward(ids[19:21], 19, lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, row(ids[20]), out.Data().([]float32))
}
