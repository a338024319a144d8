package lm_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/lm"
)

// TestSpeculate: a window runs its rows in one forward (Windowed while it
// runs), accepts drafts up to the first refusal and takes the later rows
// back: the recurrent state comes back from the window's own copy and is
// settled over the accepted rows, the session stands after them, and the
// session's snapshot is untouched. A window of all accepted drafts is
// not settled; a window past a chunk, or of a bad id, changes nothing.
func TestSpeculate(t *testing.T) {
	m := newModel()
	g := kindGraphs{ring: 16, rewind: 8}
	s, err := lm.NewSession(m, g, lm.SessionOptions{Chunk: 4})
	require.NoError(t, err)
	defer s.Close()
	row := func(id int) []float32 { return m.table[id*width : (id+1)*width] }
	_, err = s.Forward([]int{1, 2}, 0, lm.WantNone)
	require.NoError(t, err)
	require.NoError(t, s.Snapshot())

	var windowed []bool
	forward := func(ids []int, pos0 int, w lm.Want) (*tensor.Dense, error) {
		windowed = append(windowed, s.Windowed())
		return s.Forward(ids, pos0, w)
	}
	var seen [][]float32
	accept := func(logits []float32, draft int) bool {
		seen = append(seen, logits)
		return draft != 0
	}
	var settled [][]int
	settle := func(pos0 int, ids []int, rows int) error {
		require.Equal(t, row(2), readState(t, s, "rec"), "restored to the window's start")
		settled = append(settled, []int{pos0, len(ids), rows})
		_, err := s.Run(g.Key(len(ids), lm.WantNone), pos0, len(ids), lm.Inputs{IDs: ids})
		return err
	}
	accepted, logits, err := s.Speculate([]int{3, 1, 0, 2}, forward, accept, settle)
	require.NoError(t, err)
	require.Equal(t, 1, accepted)
	require.Equal(t, row(1), logits, "the last accepted row's logits")
	require.Equal(t, [][]float32{row(3), row(1)}, seen, "each draft judged on the row before it")
	require.Equal(t, [][]int{{2, 2, 4}}, settled)
	require.Equal(t, []bool{true}, windowed)
	require.False(t, s.Windowed())
	require.Equal(t, 4, s.Pos())
	require.Equal(t, row(1), readState(t, s, "rec"), "settled over the accepted rows")
	require.Equal(t, 2, s.SnapshotPos(), "the session's snapshot stays")

	accepted, logits, err = s.Speculate([]int{2, 3}, forward, accept, settle)
	require.NoError(t, err)
	require.Equal(t, 1, accepted)
	require.Equal(t, row(3), logits)
	require.Len(t, settled, 1, "nothing to take back")
	require.Equal(t, 6, s.Pos())
	require.Equal(t, row(3), readState(t, s, "rec"))

	_, _, err = s.Speculate([]int{1, 1, 1, 1, 1}, forward, accept, settle)
	require.ErrorContains(t, err, "a window of 5 rows is more than a chunk of 4")
	_, _, err = s.Speculate([]int{1, width}, forward, accept, settle)
	require.ErrorContains(t, err, "outside the vocabulary")
	require.Equal(t, 6, s.Pos())
	require.NoError(t, s.Rollback(2))
	require.Equal(t, row(2), readState(t, s, "rec"))
}

// TestForget: the slots Forget matches hold no position from n on; the
// others keep theirs.
func TestForget(t *testing.T) {
	s, err := lm.NewSession(newModel(), storeGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	run := func(pos int) error {
		_, err := s.Run(testKey{Stage: "slot", Rows: 1}, pos, 1, lm.Inputs{IDs: []int{1}})
		return err
	}
	for p := range 3 {
		require.NoError(t, run(p))
	}
	s.Forget(1, func(name string) bool { return name == "rec" })
	require.NoError(t, run(3), "another state forgotten")
	s.Forget(1, func(name string) bool { return name == "slot" })
	require.ErrorIs(t, run(2), lm.ErrUnwritten)
	require.NoError(t, run(1))
}

// TestHostValues: a host value goes with the position: a snapshot keeps
// it and a rollback to the snapshot brings it back (as does a window's
// take-back); a rollback of a session without recurrent states, and a
// Reset, drop it.
func TestHostValues(t *testing.T) {
	m := newModel()
	g := kindGraphs{ring: 16, rewind: 8}
	s, err := lm.NewSession(m, g, lm.SessionOptions{Chunk: 4})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Forward([]int{1, 2}, 0, lm.WantNone)
	require.NoError(t, err)
	require.Nil(t, s.Host("h"))
	s.SetHost("h", []float32{2})
	require.NoError(t, s.Snapshot())
	_, err = s.Forward([]int{3}, 2, lm.WantNone)
	require.NoError(t, err)
	s.SetHost("h", []float32{3})
	require.NoError(t, s.Rollback(2))
	require.Equal(t, []float32{2}, s.Host("h"), "back with the snapshot")

	settle := func(pos0 int, ids []int, rows int) error {
		require.Equal(t, []float32{2}, s.Host("h"), "back with the window's copy")
		s.SetHost("h", []float32{float32(len(ids))})
		_, err := s.Run(g.Key(len(ids), lm.WantNone), pos0, len(ids), lm.Inputs{IDs: ids})
		return err
	}
	forward := func(ids []int, pos0 int, w lm.Want) (*tensor.Dense, error) {
		s.SetHost("h", []float32{9})
		return s.Forward(ids, pos0, w)
	}
	_, _, err = s.Speculate([]int{1, 0}, forward, func([]float32, int) bool { return false }, settle)
	require.NoError(t, err)
	require.Equal(t, []float32{1}, s.Host("h"))
	s.Reset()
	require.Nil(t, s.Host("h"))

	slots, err := lm.NewSession(m, slotGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	defer slots.Close()
	_, err = slots.Forward([]int{1, 2}, 0, lm.WantNone)
	require.NoError(t, err)
	slots.SetHost("h", []float32{2})
	require.NoError(t, slots.Rollback(2), "to where it stands: nothing changes")
	require.Equal(t, []float32{2}, slots.Host("h"))
	require.NoError(t, slots.Rollback(1))
	require.Nil(t, slots.Host("h"), "a rollback by position drops it")
}

// TestRunLogits: RunLogits reads the first output's logits for the rows
// wanted, none for WantNone, and gives every output.
func TestRunLogits(t *testing.T) {
	m := newModel()
	s, err := lm.NewSession(m, kindGraphs{ring: 16, rewind: 8}, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	g := kindGraphs{}
	logits, outs, err := s.RunLogits(g.Key(2, lm.WantLast), 0, 2, lm.WantLast, lm.Inputs{IDs: []int{1, 3}})
	require.NoError(t, err)
	require.Len(t, outs, 1)
	require.Equal(t, m.table[3*width:4*width], logits)
	logits, outs, err = s.RunLogits(g.Key(1, lm.WantNone), 2, 1, lm.WantNone, lm.Inputs{IDs: []int{1}})
	require.NoError(t, err)
	require.Nil(t, logits)
	require.Empty(t, outs)
	_, _, err = s.RunLogits(g.Key(1, lm.WantLast), 3, 1, lm.WantLast, lm.Inputs{IDs: []int{width + 1}})
	require.Error(t, err)
}
