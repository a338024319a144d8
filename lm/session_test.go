package lm_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

// kindGraphs write each row's embedding into one state of every kind: a
// slot and a ring (rows by position), a recurrent state (the last row) and
// a scratch state of the chunk's rows; the logits are the embeddings.
type kindGraphs struct{ ring, rewind int }

func (kindGraphs) Vocab() int { return width }

func (kindGraphs) Key(rows int, w lm.Want) capture.Key {
	return testKey{Stage: "kinds", Rows: rows, Want: w.String()}
}

func (kindGraphs) Build(k capture.Key) (*graph.Graph, error) {
	key := k.(testKey)
	b := graph.NewBuilder(key.String())
	call := ops.Call(b)
	ids := b.Input(lm.InputIDs, graph.I32, key.Rows)
	e := ops.Embed(b, b.Weight("table", graph.F32, vocab, width), ids)
	ops.KVWrite(b, e, b.State("slot", graph.F32, graph.Dyn, width), call, ops.SlotAttrs{})
	ops.KVWrite(b, e, b.State("ring", graph.F32, graph.Dyn, width), call, ops.SlotAttrs{Ring: true})
	ops.Store(b, ops.LastRow(b, e, call), b.State("rec", graph.F32, 1, width))
	ops.Store(b, e, b.State("scratch", graph.F32, key.Rows, width))
	if key.Want == "none" {
		return b.Graph()
	}
	if key.Want == "last" && key.Rows > 1 {
		e = ops.LastRow(b, e, call)
	}
	b.Output(e)
	return b.Graph()
}

func (g kindGraphs) State(name string) (lm.StateSpec, error) {
	switch name {
	case "slot":
		return lm.StateSpec{Kind: lm.Slot}, nil
	case "ring":
		return lm.StateSpec{Kind: lm.Ring, Rows: g.ring, Rewind: g.rewind}, nil
	case "rec":
		return lm.StateSpec{Kind: lm.Recurrent}, nil
	case "scratch":
		return lm.StateSpec{Kind: lm.Scratch}, nil
	}
	return lm.StateSpec{}, fmt.Errorf("no state %q", name)
}

// readState reads a state's buffer as the last run bound it.
func readState(t *testing.T, s *lm.Session, name string) []float32 {
	t.Helper()
	b, ok := s.StateBuffer(name)
	require.True(t, ok, name)
	v, err := s.Core().ReadF32(b)
	require.NoError(t, err)
	return v
}

// TestSessionStates: every kind of state is made from the graphs'
// declarations as the spec says; a slot doubles from the first capacity
// keeping the rows it holds, a ring keeps its rows, scratch states are
// made per size, and rollback and snapshots go by the kinds.
func TestSessionStates(t *testing.T) {
	m := newModel()
	s, err := lm.NewSession(m, kindGraphs{ring: 6, rewind: 3}, lm.SessionOptions{Chunk: 3, Capacity: 2})
	require.NoError(t, err)
	defer s.Close()
	ids := []int{1, 2, 3, 2, 0}
	out, err := s.Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	require.Equal(t, 5, s.Pos())
	row := func(id int) []float32 { return m.table[id*width : (id+1)*width] }
	for p, id := range ids {
		require.Equal(t, row(id), out.Data().([]float32)[p*width:(p+1)*width], "logits of position %d", p)
	}

	// the slot grew 2 -> 4 -> 8 rows and kept every row written before
	slot := readState(t, s, "slot")
	require.Len(t, slot, 8*width)
	for p, id := range ids {
		require.Equal(t, row(id), slot[p*width:(p+1)*width], "slot row %d", p)
	}
	// the ring has its rows, position p at row p mod 6
	ring := readState(t, s, "ring")
	require.Len(t, ring, 6*width)
	for p, id := range ids {
		require.Equal(t, row(id), ring[(p%6)*width:(p%6+1)*width], "ring row of position %d", p)
	}
	require.Equal(t, row(0), readState(t, s, "rec"), "the recurrent state holds the last row")
	kinds := map[string]lm.StateKind{}
	sizes := map[string][]int{}
	for _, st := range s.States() {
		kinds[st.Name] = st.Kind
		sizes[st.Name] = append(sizes[st.Name], st.Len)
	}
	require.Equal(t, map[string]lm.StateKind{"slot": lm.Slot, "ring": lm.Ring, "rec": lm.Recurrent, "scratch": lm.Scratch}, kinds)
	require.Equal(t, []int{2 * width, 3 * width}, sizes["scratch"], "a scratch state per chunk size (3 rows, then 2)")

	// recurrent states go back only to a snapshot
	require.ErrorContains(t, s.Rollback(4), "no snapshot was taken")
	require.NoError(t, s.Snapshot())
	require.Equal(t, 5, s.SnapshotPos())
	_, err = s.Forward([]int{3}, 5, lm.WantNone)
	require.NoError(t, err)
	require.Equal(t, row(3), readState(t, s, "rec"))
	require.ErrorContains(t, s.Rollback(4), "the snapshot is at position 5")
	require.NoError(t, s.Rollback(5))
	require.Equal(t, 5, s.Pos())
	require.Equal(t, row(0), readState(t, s, "rec"), "restored from the snapshot")

	// a ring goes back its rewind, no further
	s.Reset()
	require.Equal(t, -1, s.SnapshotPos(), "Reset drops the snapshot")
	_, err = s.Forward(ids, 0, lm.WantNone)
	require.NoError(t, err)
	require.Equal(t, 3, s.Rewind())
	require.NoError(t, s.Snapshot())
	require.ErrorContains(t, s.Rollback(1), "rollback of 4 rows: sliding layers keep only 3 rows")
	require.ErrorContains(t, s.Rollback(9), "rollback to 9")

	// bad input changes nothing
	pos := s.Pos()
	_, err = s.Forward([]int{width}, pos, lm.WantLast)
	require.ErrorContains(t, err, "outside the vocabulary")
	_, err = s.Forward([]int{1}, pos+1, lm.WantLast)
	require.ErrorContains(t, err, "does not follow")
	_, err = s.Forward(nil, pos, lm.WantLast)
	require.ErrorContains(t, err, "empty input")
	require.Equal(t, pos, s.Pos())
}

// slotGraphs have only a slot: a model whose rollback goes anywhere.
type slotGraphs struct{ kindGraphs }

func (slotGraphs) Build(k capture.Key) (*graph.Graph, error) {
	key := k.(testKey)
	b := graph.NewBuilder(key.String())
	call := ops.Call(b)
	e := ops.Embed(b, b.Weight("table", graph.F32, vocab, width), b.Input(lm.InputIDs, graph.I32, key.Rows))
	ops.KVWrite(b, e, b.State("slot", graph.F32, graph.Dyn, width), call, ops.SlotAttrs{})
	if key.Want != "none" {
		b.Output(e)
	}
	return b.Graph()
}

// TestSessionsOnOneCore: sessions over one core keep their states apart,
// roll back anywhere over slots, and closing one leaves the core and the
// other running.
func TestSessionsOnOneCore(t *testing.T) {
	core, err := lm.Open(newModel(), lm.Options{Backend: cpu.New(1)})
	require.NoError(t, err)
	defer core.Close()
	a, err := lm.NewSessionOn(core, slotGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	b, err := lm.NewSessionOn(core, slotGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	_, err = a.Forward([]int{1, 2, 3}, 0, lm.WantAll)
	require.NoError(t, err)
	_, err = b.Forward([]int{3}, 0, lm.WantAll)
	require.NoError(t, err)
	require.Equal(t, 3, a.Pos())
	require.Equal(t, 1, b.Pos())
	require.Equal(t, readState(t, a, "slot")[:width], newModel().table[1*width:2*width])
	require.Equal(t, readState(t, b, "slot")[:width], newModel().table[3*width:4*width])
	require.NoError(t, a.Rollback(0), "slots go back anywhere")
	require.NoError(t, a.Close())
	require.True(t, a.Closed())
	_, err = a.Forward([]int{1}, 0, lm.WantLast)
	require.ErrorContains(t, err, "closed")
	_, err = b.Forward([]int{2}, 1, lm.WantLast)
	require.NoError(t, err, "the other session and the core still run")
	require.NoError(t, b.Close())
	require.False(t, core.Closed())
}

// TestGraphFuncs: GraphFuncs are Graphs that build the keys of their type
// and refuse any other.
func TestGraphFuncs(t *testing.T) {
	kinds := kindGraphs{ring: 6, rewind: 3}
	g := lm.GraphFuncs[testKey]{
		VocabSize: width,
		KeyOf:     func(rows int, w lm.Want) testKey { return kinds.Key(rows, w).(testKey) },
		BuildOf:   func(k testKey) (*graph.Graph, error) { return kinds.Build(k) },
		StateOf:   kinds.State,
	}
	s, err := lm.NewSession(newModel(), g, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	out, err := s.Forward([]int{1, 2}, 0, lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, []int{1, width}, []int(out.Shape()))
	_, err = g.Build(fakeKey{})
	require.EqualError(t, err, "a key of type lm_test.fakeKey, not lm_test.testKey")
}

type fakeKey struct{}

func (fakeKey) String() string { return "fake" }
