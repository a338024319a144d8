package lm_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/weights"
)

// storeGraphs are graphs that embed the ids and store them: into a
// recurrent state (stage "rec") or into a slot (stage "slot").
type storeGraphs struct{}

func (storeGraphs) Vocab() int { return vocab }

func (storeGraphs) Key(rows int, _ lm.Want) capture.Key { return testKey{Stage: "rec", Rows: rows} }

func (storeGraphs) Build(k capture.Key) (*graph.Graph, error) {
	key := k.(testKey)
	b := graph.NewBuilder(key.String())
	call := ops.Call(b)
	ids := b.Input(lm.InputIDs, graph.I32, key.Rows)
	e := ops.Embed(b, b.Weight("table", graph.F32, vocab, width), ids)
	if key.Stage == "rec" {
		ops.Store(b, e, b.State("rec", graph.F32, key.Rows, width))
	} else {
		ops.KVWrite(b, e, b.State("slot", graph.F32, graph.Dyn, width), call, ops.SlotAttrs{})
	}
	b.Output(e)
	return b.Graph()
}

func (storeGraphs) State(name string) (lm.StateSpec, error) {
	if name == "rec" {
		return lm.StateSpec{Kind: lm.Recurrent}, nil
	}
	return lm.StateSpec{Kind: lm.Slot}, nil
}

// TestSlotsHoldPositions: a run whose graph binds a slot that does not
// hold the positions before its first row (made after them, or rolled
// back past them) is refused with ErrUnwritten; a slot holds the positions
// below where the last run that wrote it ended.
func TestSlotsHoldPositions(t *testing.T) {
	s, err := lm.NewSession(newModel(), storeGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	run := func(pos int) error {
		_, err := s.Run(testKey{Stage: "slot", Rows: 1}, pos, 1, lm.Inputs{IDs: []int{1}})
		return err
	}
	require.ErrorIs(t, run(2), lm.ErrUnwritten, "a slot made at position 2")
	require.ErrorContains(t, run(2), "state slot holds the positions below 0, not those below 2")
	for p := range 3 {
		require.NoError(t, run(p))
	}
	require.NoError(t, run(1), "a rewrite from a position it holds")
	require.ErrorIs(t, run(3), lm.ErrUnwritten, "the rewrite from 1 ended at 2")
	require.NoError(t, run(2))
	require.NoError(t, run(3))
	require.NoError(t, s.Advance(4))
	require.NoError(t, s.Rollback(1))
	require.ErrorIs(t, run(2), lm.ErrUnwritten, "rolled back to 1")
	require.NoError(t, run(1))
	s.Reset()
	require.ErrorIs(t, run(1), lm.ErrUnwritten, "after a reset")
	require.NoError(t, run(0))
}

// TestSessionBroken: a run that fails in a graph with a recurrent state
// breaks the session until a Reset; one that fails in a graph without
// (a draft head's, over slots) leaves it running.
func TestSessionBroken(t *testing.T) {
	s, err := lm.NewSession(newModel(), storeGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	rec, slot := testKey{Stage: "rec", Rows: 1}, testKey{Stage: "slot", Rows: 1}
	_, err = s.Run(rec, 0, 1, lm.Inputs{IDs: []int{2}})
	require.NoError(t, err)
	require.True(t, s.Recurrent())

	_, err = s.Run(slot, 0, 1, lm.Inputs{IDs: []int{vocab}})
	require.ErrorContains(t, err, "outside the vocabulary")
	require.NoError(t, s.Broken(), "a failed graph without recurrent states")
	_, err = s.Run(slot, 0, 1, lm.Inputs{IDs: []int{1}})
	require.NoError(t, err)

	require.NoError(t, s.Snapshot())
	_, err = s.Run(rec, 0, 1, lm.Inputs{IDs: []int{vocab}})
	require.ErrorContains(t, err, "outside the vocabulary")
	require.ErrorContains(t, s.Broken(), "an earlier forward failed")
	_, err = s.Forward([]int{1}, 0, lm.WantNone)
	require.ErrorContains(t, err, "an earlier forward failed")
	require.EqualError(t, s.Rollback(1), "rollback to 1: the cache holds positions 0 to 0")
	// a refused snapshot keeps the one before, which mends the session
	require.ErrorContains(t, s.Snapshot(), "an earlier forward failed")
	require.Equal(t, 0, s.SnapshotPos())
	require.NoError(t, s.Rollback(0))
	require.NoError(t, s.Broken())
	_, err = s.Run(rec, 0, 1, lm.Inputs{IDs: []int{vocab}})
	require.Error(t, err)
	s.Reset()
	require.NoError(t, s.Broken())
	_, err = s.Forward([]int{1}, 0, lm.WantNone)
	require.NoError(t, err)
}

// TestLoadWeightsNameAndMake: Name maps a declaration to the checkpoint's
// tensor (the errors still name the declaration), and Make's errors come
// back with the weight's scope, naming the tensor they are about.
func TestLoadWeightsNameAndMake(t *testing.T) {
	dir := t.TempDir()
	table := make([]float32, vocab*width)
	for i := range table {
		table[i] = float32(i)
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, weights.SingleFile), []weights.NamedTensor{
		{Name: "outer.table", DType: graph.F32, Shape: []int{vocab, width}, Data: weights.EncodeF32(table)},
		{Name: "part.0", DType: graph.F32, Shape: []int{width}, Data: weights.EncodeF32(table[:width])},
	}))
	ck, err := weights.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	decl := []lm.Declared{{Name: "table", DType: graph.F32, Shape: []int{vocab, width}, Scope: "layer 0"}}
	outer := func(n string) string { return "outer." + n }
	stack := func(d lm.Declared, ck *weights.Checkpoint) (lm.Tensor, []string, bool, error) {
		if d.Name != "stack" {
			return lm.Tensor{}, nil, false, nil
		}
		var data []byte
		for _, p := range []string{"part.0", "part.1"} {
			b, err := ck.Bytes(p)
			if err != nil {
				return lm.Tensor{}, nil, false, err
			}
			data = append(data, b...)
		}
		return lm.Tensor{DType: graph.F32, Shape: d.Shape, Data: data}, []string{"part.0", "part.1"}, true, nil
	}
	unusedPart := func(n string) bool { return n == "part.0" }

	ts, err := lm.LoadWeights(ck, decl, lm.LoadOptions{Name: outer, Unused: unusedPart})
	require.NoError(t, err)
	require.Equal(t, weights.EncodeF32(table), ts["table"].Data)
	_, err = lm.LoadWeights(ck, decl, lm.LoadOptions{Unused: unusedPart})
	require.EqualError(t, err, "layer 0: tensor table: missing from the checkpoint")

	decl = append(decl, lm.Declared{Name: "stack", DType: graph.F32, Shape: []int{2, width}, Scope: "layer 1 / mlp"})
	_, err = lm.LoadWeights(ck, decl, lm.LoadOptions{Name: outer, Make: stack})
	require.ErrorContains(t, err, "layer 1 / mlp: ")
	require.ErrorContains(t, err, "part.1")
	require.NotContains(t, err.Error(), "tensor stack")
}

// wideGraphs are storeGraphs whose embedding rows are the logits.
type wideGraphs struct{ storeGraphs }

func (wideGraphs) Vocab() int { return width }

// TestForwardNotFinite: logits that are not finite are an error naming the
// position, and the session stands after the chunk its recurrent state
// took in (not before it, where the next forward would take it in twice).
func TestForwardNotFinite(t *testing.T) {
	m := newModel()
	m.table[3*width+1] = float32(math.NaN())
	s, err := lm.NewSession(m, wideGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Forward([]int{1}, 0, lm.WantLast)
	require.NoError(t, err)
	_, err = s.Forward([]int{3}, 1, lm.WantLast)
	require.ErrorContains(t, err, "position 1: the logit of token 1 is NaN")
	require.NoError(t, s.Broken())
	require.Equal(t, 2, s.Pos())
	_, err = s.Forward([]int{2}, 2, lm.WantLast)
	require.NoError(t, err)
}

// finiteChecked is a CPU backend that checks values as a device does
// (ops.FiniteChecker): CheckFinite notes a NaN or an infinity among them
// and the next Read reports it, as ErrNotFinite, with the values read.
type finiteChecked struct {
	*cpu.Backend
	checks int
	found  bool
}

func (d *finiteChecked) CheckFinite(b ops.Buffer, n int) error {
	d.checks++
	raw := make([]byte, 4*n)
	if err := d.Backend.Read(b, raw); err != nil {
		return err
	}
	for i := range n {
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		d.found = d.found || math.IsNaN(v) || math.IsInf(v, 0)
	}
	return nil
}

func (d *finiteChecked) Read(src ops.Buffer, dst []byte) error {
	if err := d.Backend.Read(src, dst); err != nil {
		return err
	}
	if d.found {
		d.found = false
		return fmt.Errorf("check: %w", ops.ErrNotFinite)
	}
	return nil
}

// TestForwardNotFiniteChecked: on a backend that checks the logits itself,
// the session asks it to for every forward and names the position and the
// token of a value it found, as the host's scan does; a backend's error
// alone would name neither.
func TestForwardNotFiniteChecked(t *testing.T) {
	m := newModel()
	m.table[3*width+1] = float32(math.Inf(-1))
	be := &finiteChecked{Backend: cpu.New(1)}
	defer be.Close()
	s, err := lm.NewSession(m, wideGraphs{}, lm.SessionOptions{Options: lm.Options{Backend: be}})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Forward([]int{1}, 0, lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, 1, be.checks)
	_, err = s.Forward([]int{3}, 1, lm.WantLast)
	require.ErrorContains(t, err, "position 1: the logit of token 1 is -Inf")
	require.Equal(t, 2, be.checks)
	_, err = s.Forward([]int{2}, 2, lm.WantLast)
	require.NoError(t, err)
}

// TestStackExperts: a stack of experts is each expert's parts, their rows
// one after the other; a part missing, misshaped or in another dtype is an
// error naming it, before anything is made. Codes quantized at load stack
// the float parts they are made of.
func TestStackExperts(t *testing.T) {
	dir := t.TempDir()
	part := func(name string, dt graph.DType, rows int, v float32) weights.NamedTensor {
		x := make([]float32, rows*width)
		for i := range x {
			x[i] = v + float32(i)
		}
		data := weights.EncodeF32(x)
		if dt == graph.BF16 {
			data = weights.EncodeBF16(x)
		}
		return weights.NamedTensor{Name: name, DType: dt, Shape: []int{rows, width}, Data: data}
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, weights.SingleFile), []weights.NamedTensor{
		part("e0.gate", graph.F32, 1, 0), part("e0.up", graph.F32, 1, 10), part("e1.gate", graph.F32, 1, 20), part("e1.up", graph.F32, 1, 30),
		part("e2.gate", graph.F32, 2, 0), part("e3.gate", graph.BF16, 1, 0),
	}))
	ck, err := weights.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	d := lm.Declared{Name: "experts.gate_up", DType: graph.F32, Shape: []int{2, 2, width}}
	parts := func(e int) []string { return []string{fmt.Sprintf("e%d.gate", e), fmt.Sprintf("e%d.up", e)} }
	st, reads, err := lm.StackExperts(ck, d, parts)
	require.NoError(t, err)
	require.Equal(t, []string{"e0.gate", "e0.up", "e1.gate", "e1.up"}, reads)
	var want []float32
	for _, v := range []float32{0, 10, 20, 30} {
		for i := range width {
			want = append(want, v+float32(i))
		}
	}
	require.Equal(t, weights.EncodeF32(want), st.Data)
	require.Equal(t, d.Shape, st.Shape)
	// codes quantized at load: the float stack they are made of
	q4, err := lm.DefaultQuant(lm.QuantQ4)
	require.NoError(t, err)
	codes := lm.Declared{Name: d.Name, DType: q4.DType(), Shape: []int{2, 2, ops.QuantCols(q4.DType(), width)}}
	st, _, err = lm.StackExperts(ck, codes, parts)
	require.NoError(t, err)
	require.Equal(t, lm.Tensor{DType: graph.F32, Shape: d.Shape, Data: weights.EncodeF32(want)}, st)

	for e, msg := range map[int]string{
		2: "tensor e2.gate: shape [2 4], want [1 4]",
		3: "tensor e3.gate: dtype bf16, but expert 0 is f32: experts are stacked in one dtype",
		4: "tensor e4.gate: missing from the checkpoint",
	} {
		one := func(int) []string { return []string{fmt.Sprintf("e%d.gate", e)} }
		_, _, err := lm.StackExperts(ck, lm.Declared{Name: "experts.gate", DType: graph.F32, Shape: []int{1, 1, width}}, one)
		require.EqualError(t, err, msg)
	}
}

// TestLoad: Load reads the config, then opens the tensors for load; an
// error of load names the architecture and the folder.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"n": 3}`), 0o644))
	require.NoError(t, weights.WriteFile(filepath.Join(dir, weights.SingleFile), []weights.NamedTensor{
		{Name: "w", DType: graph.F32, Shape: []int{1}, Data: weights.EncodeF32([]float32{2})},
	}))
	config := func(cfg *weights.Config) (int, error) { return cfg.Int("n", 0) }
	n, err := lm.Load(dir, "test", "", config, func(n int, _ lm.Stored, ck *weights.Checkpoint) (int, error) {
		w, err := ck.Float32("w")
		return n * int(w[0]), err
	})
	require.NoError(t, err)
	require.Equal(t, 6, n)
	_, err = lm.Load(dir, "test", "", config, func(int, lm.Stored, *weights.Checkpoint) (int, error) { return 0, errors.New("no") })
	require.EqualError(t, err, "test "+dir+": no")
	_, err = lm.Load(t.TempDir(), "test", "", config, func(int, lm.Stored, *weights.Checkpoint) (int, error) { return 0, nil })
	require.ErrorContains(t, err, "config.json")
}

// TestAblateBreaks: an ablation profile of a plan that has run costs each
// of its ops and leaves the session broken (its replays wrote the states)
// until a Reset; one that cannot start (the plan has not run, no replays
// asked for) leaves it running.
func TestAblateBreaks(t *testing.T) {
	s, err := lm.NewSession(newModel(), storeGraphs{}, lm.SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.AblateForward(1, lm.WantLast, 2)
	require.ErrorIs(t, err, capture.ErrNotRecorded)
	require.NoError(t, s.Broken())
	rec := testKey{Stage: "rec", Rows: 1}
	_, err = s.Run(rec, 0, 1, lm.Inputs{IDs: []int{2}})
	require.NoError(t, err)
	_, err = s.AblateForward(1, lm.WantLast, 0)
	require.ErrorContains(t, err, "want at least 1")
	require.NoError(t, s.Broken())

	a, err := s.AblateForward(1, lm.WantLast, 2)
	require.NoError(t, err)
	var names []string
	for _, o := range a.Ops {
		names = append(names, o.Op)
		require.Equal(t, 1, o.Launches, o.Op)
	}
	require.ElementsMatch(t, []string{"embed", "store"}, names)
	require.ErrorContains(t, s.Broken(), "ablation")
	_, err = s.Run(rec, 0, 1, lm.Inputs{IDs: []int{2}})
	require.ErrorContains(t, err, "ablation profile")
	s.Reset()
	_, err = s.Run(rec, 0, 1, lm.Inputs{IDs: []int{2}})
	require.NoError(t, err)
}

// routeGraphs is one graph over a recurrent state, built as a Gated
// DeltaNet layer and a MoE router are as far as an ablation sees them: the
// state is advanced from the token (acc ← (table[id] + acc)² · 1e-20, the
// scale done in place over the square) and the router checks logits made
// from the new value (u² - u², NaN once u² overflows). Without the scale
// the new value is the square, about 1e20: it overflows the router's
// square at once, and, stored, the next replay's as well.
type routeGraphs struct{}

func (routeGraphs) Vocab() int { return width }

func (routeGraphs) Key(rows int, _ lm.Want) capture.Key { return testKey{Stage: "route", Rows: rows} }

func (routeGraphs) Build(k capture.Key) (*graph.Graph, error) {
	key := k.(testKey)
	b := graph.NewBuilder(key.String())
	ids := b.Input(lm.InputIDs, graph.I32, key.Rows)
	acc := b.State("acc", graph.F32, key.Rows, width)
	e := ops.Embed(b, b.Weight("table", graph.F32, vocab, width), ids)
	a := ops.Add(b, e, acc)
	u := ops.Scale(b, ops.Mul(b, a, a), 1e-20)
	ops.Store(b, u, acc)
	m := ops.Mul(b, u, u)
	_, w := ops.MoERoute(b, ops.Sub(b, m, m), 1, false)
	b.Output(w)
	return b.Graph()
}

func (routeGraphs) State(string) (lm.StateSpec, error) { return lm.StateSpec{Kind: lm.Recurrent}, nil }

// TestAblateRestores: every replay of an ablation starts from the
// recurrent states as they stood before it, copied back by the prologue:
// the op whose absence drives the state past the router's range (scale)
// is not measured, with the router's error, but the ops measured after it
// (store, whose absence alone changes nothing there) are; the state ends
// as one replay from the saved one leaves it, and the copy is freed.
func TestAblateRestores(t *testing.T) {
	m := newModel()
	for i := range m.table {
		m.table[i] = 1e10
	}
	be := &counting{Backend: cpu.New(1), freed: map[ops.Buffer]int{}}
	s, err := lm.NewSession(m, routeGraphs{}, lm.SessionOptions{Options: lm.Options{Backend: be, Planner: &planner.Options{}}})
	require.NoError(t, err)
	defer s.Close()
	key := testKey{Stage: "route", Rows: 1}
	_, err = s.Run(key, 0, 1, lm.Inputs{IDs: []int{2}})
	require.NoError(t, err)
	p, _, ok := s.Planned(key)
	require.True(t, ok)
	var order []string
	for _, n := range p.Schedule {
		order = append(order, n.Op)
		if n.Op == "scale" {
			require.NotNil(t, p.Offsets[n.Outputs[0].ID].Alias, "scale in place over the square")
		}
	}
	require.Equal(t, []string{"embed", "add", "mul", "scale", "store", "mul", "sub", "moe_route"}, order)
	acc, ok := s.StateBuffer("acc")
	require.True(t, ok)
	saved := cpu.F32(acc)[0]
	require.InDelta(t, 1, saved, 1e-3)
	freed := len(be.freed)

	a, err := s.AblateForward(1, lm.WantLast, 10)
	require.NoError(t, err)
	got := map[string]error{}
	for _, o := range a.Ops {
		got[o.Op] = o.Err
	}
	require.Len(t, got, 7)
	require.ErrorContains(t, got["scale"], "router logit of expert 0 is NaN")
	for op, err := range got {
		if op != "scale" {
			require.NoError(t, err, "op %s", op)
		}
	}
	x := float32(1e10) + saved
	one := x * x * float32(1e-20)
	for i, v := range cpu.F32(acc) {
		require.InEpsilon(t, one, v, 1e-6, "acc[%d]", i)
	}
	require.Len(t, be.freed, freed+1, "the copy of acc freed")
	require.Zero(t, be.freed[acc])
	require.ErrorContains(t, s.Broken(), "ablation")
	s.Reset()
	_, err = s.Run(key, 0, 1, lm.Inputs{IDs: []int{2}})
	require.NoError(t, err)
}
