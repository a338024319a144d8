package capture_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

const (
	width   = 16
	heads   = 2
	kvHeads = 1
	headDim = 8
)

// buildDecoder is a fake decode stage: `loops` passes of an attention
// layer that writes its key and value rows into a full-attention slot (Dyn
// capacity) and reads every earlier position, with an nGPT residual.
func buildDecoder(loops int) func() (*graph.Graph, error) {
	return func() (*graph.Graph, error) {
		b := graph.NewBuilder(fmt.Sprintf("decoder/loops=%d", loops))
		call := ops.Call(b)
		h := b.Input("x", graph.F32, 1, width)
		for l := range loops {
			pop := b.Push("loop %d", l)
			w := func(name string, out int) *graph.Value {
				return b.Weight(fmt.Sprintf("%s%d", name, l), graph.F32, out, width)
			}
			q := ops.MatMul(b, h, w("wq", heads*headDim))
			k := ops.MatMul(b, h, w("wk", kvHeads*headDim))
			v := ops.MatMul(b, h, w("wv", kvHeads*headDim))
			nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: headDim, Rotary: headDim, Theta: 1e4}, Eps: 1e-6}
			q = ops.NormRope(b, q, call, nil, nr)
			k = ops.NormRope(b, k, call, nil, nr)
			sk := b.State(fmt.Sprintf("slot%d.k", l), graph.F32, graph.Dyn, kvHeads*headDim)
			sv := b.State(fmt.Sprintf("slot%d.v", l), graph.F32, graph.Dyn, kvHeads*headDim)
			ops.KVWrite(b, k, sk, call, ops.SlotAttrs{})
			ops.KVWrite(b, v, sv, call, ops.SlotAttrs{})
			y := ops.Attention(b, q, sk, sv, call, ops.AttentionAttrs{Heads: heads, KVHeads: kvHeads, HeadDim: headDim, Scale: 0.35})
			o := ops.MatMul(b, y, b.Weight(fmt.Sprintf("wo%d", l), graph.F32, width, heads*headDim))
			h = ops.Slerp(b, h, o, b.Weight(fmt.Sprintf("alpha%d", l), graph.F32, width), 1e-6)
			pop()
		}
		b.Output(h)
		return b.Graph()
	}
}

// world is a decoder's buffers: weights, the input row, the call record
// and the slots, all at fixed addresses as a session keeps them.
type world struct {
	t     *testing.T
	be    ops.Backend
	bind  capture.Binding
	loops int
	rng   *rand.Rand
}

func newWorld(t *testing.T, be ops.Backend, loops, capacity int, seed uint64) *world {
	w := &world{t: t, be: be, bind: capture.Binding{}, loops: loops, rng: rand.New(rand.NewPCG(seed, 1))}
	for l := range loops {
		for _, m := range []struct {
			name string
			out  int
		}{{"wq", heads * headDim}, {"wk", kvHeads * headDim}, {"wv", kvHeads * headDim}} {
			w.put(fmt.Sprintf("%s%d", m.name, l), w.random(m.out*width, 0.25))
		}
		w.put(fmt.Sprintf("wo%d", l), w.random(width*heads*headDim, 0.25))
		w.put(fmt.Sprintf("alpha%d", l), w.random(width, 0.1))
		for _, kv := range []string{"k", "v"} {
			w.put(fmt.Sprintf("slot%d.%s", l, kv), make([]float32, capacity*kvHeads*headDim))
		}
	}
	w.put("x", make([]float32, width))
	call, err := be.Alloc(graph.I32, ops.CallLen)
	require.NoError(t, err)
	w.bind[ops.CallName] = call
	return w
}

func (w *world) random(n int, sd float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(w.rng.NormFloat64() * sd)
	}
	return x
}

func (w *world) put(name string, x []float32) {
	buf, err := w.be.Alloc(graph.F32, len(x))
	require.NoError(w.t, err)
	require.NoError(w.t, w.be.Write(buf, f32Bytes(x)))
	w.bind[name] = buf
}

// step writes the token's row and its position into the call record, in
// place: the per-token values a recording reads.
func (w *world) step(pos int, x []float32) {
	require.NoError(w.t, w.be.Write(w.bind["x"], f32Bytes(x)))
	rec := make([]byte, 4*ops.CallLen)
	binary.LittleEndian.PutUint32(rec[4*ops.CallPos:], uint32(pos))
	require.NoError(w.t, w.be.Write(w.bind[ops.CallName], rec))
}

// grow moves every slot to a buffer of capacity rows, keeping its rows.
func (w *world) grow(capacity int) {
	for l := range w.loops {
		for _, kv := range []string{"k", "v"} {
			name := fmt.Sprintf("slot%d.%s", l, kv)
			old := w.bind[name]
			nb, err := w.be.Alloc(graph.F32, capacity*kvHeads*headDim)
			require.NoError(w.t, err)
			require.NoError(w.t, w.be.Copy(nb, old, old.Len()))
			w.bind[name] = nb
		}
	}
}

func f32Bytes(x []float32) []byte {
	out := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

func bitsOf(b ops.Buffer) []uint32 {
	x := cpu.F32(b)
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

// fresh runs a plan lowered anew on the shadow world: what a replay must equal.
func fresh(t *testing.T, p *planner.Planned, be ops.Backend, bind capture.Binding) []uint32 {
	t.Helper()
	byName, err := planner.BindByName(p, bind)
	require.NoError(t, err)
	pl, err := planner.Lower(p, be, byName)
	require.NoError(t, err)
	defer pl.Close()
	require.NoError(t, pl.Run())
	return bitsOf(pl.Output(0))
}

var decodeKey = testKey{Stage: "decode", Loops: 1, Want: "last", Rows: 1}

// TestDecodeReplays decodes 50 tokens at a fixed capacity: the stage is
// planned and recorded once and replayed 49 times, and every replay equals
// a fresh run of the same plan, bit for bit, on a shadow copy of the state.
func TestDecodeReplays(t *testing.T) {
	be := cpu.New(2)
	var logs bytes.Buffer
	e := capture.NewEngine(be, planner.Options{Fuse: true}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer e.Close()
	live, shadow := newWorld(t, be, 1, 64, 1), newWorld(t, be, 1, 64, 1)
	rows := rand.New(rand.NewPCG(2, 2))
	for pos := range 50 {
		x := make([]float32, width)
		for i := range x {
			x[i] = float32(rows.NormFloat64())
		}
		live.step(pos, x)
		shadow.step(pos, x)
		outs, err := e.Run(decodeKey, buildDecoder(1), live.bind)
		require.NoError(t, err)
		require.Len(t, outs, 1)
		p, _, ok := e.Planned(decodeKey)
		require.True(t, ok)
		require.Equal(t, fresh(t, p, be, shadow.bind), bitsOf(outs[0]), "position %d", pos)
	}
	require.Equal(t, capture.Stats{Plans: 1, Records: 1, Hits: 49}, e.Stats())
	require.Contains(t, logs.String(), "capture: recorded")
	require.Contains(t, e.Stats().String(), "hits 49")
}

// TestGrowRecordsOnce grows the full-attention slot twice while decoding:
// each growth changes the signature and updates the recording exactly
// once; the other tokens replay; results equal fresh runs.
func TestGrowRecordsOnce(t *testing.T) {
	be := cpu.New(2)
	e := capture.NewEngine(be, planner.DefaultOptions(), nil)
	defer e.Close()
	live, shadow := newWorld(t, be, 1, 8, 3), newWorld(t, be, 1, 8, 3)
	capacity := 8
	for pos := range 30 {
		if pos == capacity {
			capacity *= 2
			live.grow(capacity)
			shadow.grow(capacity)
		}
		x := live.random(width, 1)
		live.step(pos, x)
		shadow.step(pos, x)
		outs, err := e.Run(decodeKey, buildDecoder(1), live.bind)
		require.NoError(t, err)
		p, _, _ := e.Planned(decodeKey)
		require.Equal(t, fresh(t, p, be, shadow.bind), bitsOf(outs[0]), "position %d", pos)
	}
	require.Equal(t, capture.Stats{Plans: 1, Records: 1, Updates: 2, Hits: 27}, e.Stats())
}

// TestKeys: another loop count (or want, or rows) is another key, planned
// and recorded on its own; each replays afterwards.
func TestKeys(t *testing.T) {
	be := cpu.New(1)
	e := capture.NewEngine(be, planner.Options{Fuse: true}, nil)
	defer e.Close()
	w := newWorld(t, be, 2, 16, 4)
	two := decodeKey
	two.Loops = 2
	for pos := range 4 {
		w.step(pos, w.random(width, 1))
		_, err := e.Run(decodeKey, buildDecoder(1), w.bind)
		require.NoError(t, err)
		_, err = e.Run(two, buildDecoder(2), w.bind)
		require.NoError(t, err)
	}
	require.Equal(t, capture.Stats{Plans: 2, Records: 2, Hits: 6}, e.Stats())
	p1, r1, _ := e.Planned(decodeKey)
	p2, r2, _ := e.Planned(two)
	require.NotSame(t, p1, p2)
	require.Greater(t, r2.Nodes, r1.Nodes)
	_, _, ok := e.Planned(testKey{Stage: "other"})
	require.False(t, ok)
}

// recordingBackend is the CPU with a recorder of its own whose updates can
// be made to fail, as cuGraphExecUpdate does when a topology changed.
type recordingBackend struct {
	*cpu.Backend
	failUpdates bool
	records     int
	recorded    []*fakeRecording // every recording made, in order
	// replaying is the recording a replay runs, at is its step running.
	replaying *fakeRecording
	at        int
}

func (r *recordingBackend) RecordPlan(steps []ops.Step) (capture.Recording, error) {
	r.records++
	f := &fakeRecording{be: r, steps: steps}
	r.recorded = append(r.recorded, f)
	return f, nil
}

type fakeRecording struct {
	be      *recordingBackend
	steps   []ops.Step
	closed  bool
	replays int
}

func (f *fakeRecording) Replay() error {
	if f.closed {
		return errors.New("replay of a closed recording")
	}
	f.replays++
	f.be.replaying = f
	defer func() { f.be.replaying = nil }()
	for i, s := range f.steps {
		f.be.at = i
		if err := s.Run(); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeRecording) Update(steps []ops.Step) error {
	if f.be.failUpdates {
		return errors.New("topology changed")
	}
	f.steps = steps
	return nil
}

func (f *fakeRecording) Close() error {
	f.closed = true
	return nil
}

// TestRecorder: a backend's own recorder is used; an update it refuses
// means recording anew.
func TestRecorder(t *testing.T) {
	be := &recordingBackend{Backend: cpu.New(1)}
	e := capture.NewEngine(be, planner.Options{}, nil)
	defer e.Close()
	w := newWorld(t, be, 1, 8, 5)
	run := func(pos int) {
		w.step(pos, w.random(width, 1))
		_, err := e.Run(decodeKey, buildDecoder(1), w.bind)
		require.NoError(t, err)
	}
	run(0)
	run(1)
	w.grow(16)
	run(2)
	require.Equal(t, capture.Stats{Plans: 1, Records: 1, Updates: 1, Hits: 1}, e.Stats())
	be.failUpdates = true
	w.grow(32)
	run(3)
	run(4)
	require.Equal(t, capture.Stats{Plans: 1, Records: 2, Updates: 1, Hits: 2}, e.Stats())
	require.Equal(t, 2, be.records)
}

// TestEviction caps the recordings at one: alternating keys evict each
// other and record again; the plans stay.
func TestEviction(t *testing.T) {
	be := cpu.New(1)
	e := capture.NewEngine(be, planner.Options{Fuse: true}, nil)
	defer e.Close()
	e.SetMaxRecordings(1)
	w := newWorld(t, be, 2, 16, 6)
	two := decodeKey
	two.Loops = 2
	for pos := range 3 {
		w.step(pos, w.random(width, 1))
		_, err := e.Run(decodeKey, buildDecoder(1), w.bind)
		require.NoError(t, err)
		_, err = e.Run(two, buildDecoder(2), w.bind)
		require.NoError(t, err)
	}
	require.Equal(t, capture.Stats{Plans: 2, Records: 6, Evictions: 5}, e.Stats())
}

// TestErrors: a missing or ill-fitting buffer, a failing builder, a closed engine.
func TestErrors(t *testing.T) {
	be := cpu.New(1)
	e := capture.NewEngine(be, planner.Options{Fuse: true}, nil)
	w := newWorld(t, be, 1, 8, 7)
	w.step(0, w.random(width, 1))
	_, err := e.Run(decodeKey, func() (*graph.Graph, error) { return nil, errors.New("no such stage") }, w.bind)
	require.ErrorContains(t, err, "no such stage")
	_, err = e.Run(decodeKey, nil, w.bind)
	require.Error(t, err)
	x := w.bind["x"]
	delete(w.bind, "x")
	_, err = e.Run(decodeKey, buildDecoder(1), w.bind)
	require.ErrorContains(t, err, "x")
	short, err := be.Alloc(graph.F32, 3)
	require.NoError(t, err)
	w.bind["x"] = short
	_, err = e.Run(decodeKey, buildDecoder(1), w.bind)
	require.ErrorContains(t, err, "x")
	// a name missing from bind comes from the next binding that has it;
	// bind's own comes first
	delete(w.bind, "x")
	_, err = e.Run(decodeKey, buildDecoder(1), w.bind, capture.Binding{"y": short}, capture.Binding{"x": x})
	require.NoError(t, err)
	w.bind["x"] = short
	_, err = e.Run(decodeKey, buildDecoder(1), w.bind, capture.Binding{"x": x})
	require.ErrorContains(t, err, "x")
	w.bind["x"] = x
	_, err = e.Run(decodeKey, buildDecoder(1), w.bind)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	_, err = e.Run(decodeKey, buildDecoder(1), w.bind)
	require.Error(t, err)
}

// testKey is a key as a model might make one.
type testKey struct {
	Stage string
	Loops int
	Want  string
	Rows  int
}

func (k testKey) String() string {
	return fmt.Sprintf("%s/loops=%d/want=%s/rows=%d", k.Stage, k.Loops, k.Want, k.Rows)
}

// TestAblate: each op's launches are left out of one recording each (the
// recorder sees the plan's steps less exactly that op's), every op of the
// plan is costed once with its launch count, the ablated recordings are
// closed, and the key's own recording replays as before, equal to a fresh
// run of its plan.
func TestAblate(t *testing.T) {
	be := &recordingBackend{Backend: cpu.New(1)}
	e := capture.NewEngine(be, planner.Options{Fuse: true}, nil)
	defer e.Close()
	w := newWorld(t, be, 2, 8, 7)
	key := decodeKey
	key.Loops = 2
	_, err := e.Ablate(key, 3, capture.AblateOptions{})
	require.ErrorIs(t, err, capture.ErrNotRecorded, "before the key ran")
	w.step(0, w.random(width, 1))
	_, err = e.Run(key, buildDecoder(2), w.bind)
	require.NoError(t, err)
	require.Equal(t, 1, be.records)
	_, err = e.Ablate(key, 0, capture.AblateOptions{})
	require.ErrorContains(t, err, "want at least 1")

	p, _, ok := e.Planned(key)
	require.True(t, ok)
	launches := map[string]int{}
	var order []string // the ops by their first launch, as they are ablated
	for _, n := range p.Schedule {
		if launches[n.Op] == 0 {
			order = append(order, n.Op)
		}
		launches[n.Op]++
	}
	require.Greater(t, len(launches), 3)
	be.recorded = nil
	a, err := e.Ablate(key, 3, capture.AblateOptions{})
	require.NoError(t, err)
	require.Positive(t, a.Replay)
	got := map[string]int{}
	for i, o := range a.Ops {
		require.NotContains(t, got, o.Op, "op %s costed twice", o.Op)
		got[o.Op] = o.Launches
		if i > 0 {
			require.GreaterOrEqual(t, a.Ops[i-1].Saved, o.Saved, "costliest first")
		}
	}
	require.Equal(t, launches, got)
	require.Len(t, be.recorded, len(launches), "one recording an op")
	for i, r := range be.recorded {
		require.Len(t, r.steps, len(p.Schedule)-launches[order[i]], "recording %d: the plan without %s", i, order[i])
		require.True(t, r.closed, "ablated recording %d closed", i)
	}

	w.step(1, w.random(width, 1))
	want := fresh(t, p, be, w.bind)
	outs, err := e.Run(key, buildDecoder(2), w.bind)
	require.NoError(t, err)
	require.Equal(t, want, bitsOf(outs[0]))
	require.Equal(t, 1+len(launches), be.records)
}

// prologueStep is a prologue that notes, per recording, the replays it
// ran in as their first step.
type prologueStep struct {
	be    *recordingBackend
	first map[*fakeRecording]int
}

func (p *prologueStep) Run() error {
	r := p.be.replaying
	if r == nil {
		return errors.New("prologue run outside a replay")
	}
	if p.be.at != 0 {
		return fmt.Errorf("prologue run as step %d of its replay", p.be.at)
	}
	p.first[r]++
	return nil
}

// TestAblatePrologue: with a prologue, the whole plan is timed in a fresh
// recording of the prologue and the plan, each ablated recording starts
// with it too, and it runs first in every replay of each; the key's own
// recording is neither replayed nor changed, and replays as before.
func TestAblatePrologue(t *testing.T) {
	be := &recordingBackend{Backend: cpu.New(1)}
	e := capture.NewEngine(be, planner.Options{Fuse: true}, nil)
	defer e.Close()
	w := newWorld(t, be, 2, 8, 8)
	key := decodeKey
	key.Loops = 2
	w.step(0, w.random(width, 1))
	_, err := e.Run(key, buildDecoder(2), w.bind)
	require.NoError(t, err)
	require.Len(t, be.recorded, 1)
	own := be.recorded[0]
	require.Equal(t, 1, own.replays)
	p, _, ok := e.Planned(key)
	require.True(t, ok)
	launches := map[string]int{}
	var order []string
	for _, n := range p.Schedule {
		if launches[n.Op] == 0 {
			order = append(order, n.Op)
		}
		launches[n.Op]++
	}

	pro := &prologueStep{be: be, first: map[*fakeRecording]int{}}
	be.recorded = nil
	const reps = 3
	a, err := e.Ablate(key, reps, capture.AblateOptions{Prologue: []ops.Step{pro}})
	require.NoError(t, err)
	require.Len(t, a.Ops, len(launches))
	for _, o := range a.Ops {
		require.NoError(t, o.Err, o.Op)
	}
	require.Len(t, be.recorded, 1+len(launches), "the whole plan's and one an op")
	for i, r := range be.recorded {
		want := len(p.Schedule)
		if i > 0 {
			want -= launches[order[i-1]]
		}
		require.Len(t, r.steps, 1+want, "recording %d", i)
		require.Same(t, pro, r.steps[0], "recording %d starts with the prologue", i)
		require.Equal(t, reps+1, r.replays, "recording %d: a warm replay and reps", i)
		require.Equal(t, r.replays, pro.first[r], "recording %d: the prologue first in every replay", i)
		require.True(t, r.closed, "recording %d closed", i)
	}
	require.Len(t, pro.first, len(be.recorded), "the prologue ran in no other recording")

	require.Equal(t, 1, own.replays, "the key's own recording is not replayed")
	require.False(t, own.closed)
	require.Len(t, own.steps, len(p.Schedule))
	w.step(1, w.random(width, 1))
	want := fresh(t, p, be, w.bind)
	outs, err := e.Run(key, buildDecoder(2), w.bind)
	require.NoError(t, err)
	require.Equal(t, want, bitsOf(outs[0]))
	require.Equal(t, 2, own.replays)
	require.Len(t, pro.first, len(be.recorded), "the key's replay runs no prologue")
	require.Equal(t, 2+len(launches), be.records)
}
