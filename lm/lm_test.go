package lm_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

func TestWant(t *testing.T) {
	for _, w := range []lm.Want{lm.WantNone, lm.WantLast, lm.WantAll} {
		got, err := lm.ParseWant(w.String())
		require.NoError(t, err)
		require.Equal(t, w, got)
		require.NoError(t, w.Check())
	}
	require.Equal(t, "last", lm.WantLast.String())
	require.Equal(t, "want(-1)", lm.Want(-1).String())
	require.Equal(t, "want(3)", lm.Want(3).String())
	require.EqualError(t, lm.Want(3).Check(), "unknown want 3")
	require.EqualError(t, lm.Want(-1).Check(), "unknown want -1")
	_, err := lm.ParseWant("first")
	require.ErrorContains(t, err, `unknown want "first"`)
}

func TestChunkRows(t *testing.T) {
	n, err := lm.ChunkRows(0)
	require.NoError(t, err)
	require.Equal(t, lm.DefaultChunk, n)
	n, err = lm.ChunkRows(7)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	_, err = lm.ChunkRows(-2)
	require.EqualError(t, err, "chunk of -2 rows")
}

func TestCheckTokens(t *testing.T) {
	require.NoError(t, lm.CheckTokens([]int{0, 9}, 4, 4, 10))
	require.ErrorContains(t, lm.CheckTokens(nil, 0, 0, 10), "empty input")
	require.EqualError(t, lm.CheckTokens([]int{1, 10}, 3, 3, 10), "token 1 (position 4): id 10 is outside the vocabulary of 10")
	require.ErrorContains(t, lm.CheckTokens([]int{-1}, 0, 0, 10), "id -1 is outside")
	require.ErrorContains(t, lm.CheckTokens([]int{1}, 2, 3, 10), "pos0 2 does not follow the cache, which holds 3 positions")
}

// chunkCall is one call RunChunks made.
type chunkCall struct {
	ids  []int
	pos  int
	want lm.Want
}

func TestRunChunks(t *testing.T) {
	const vocab = 3
	ids := []int{0, 1, 2, 3, 4, 5, 6}
	// logits of a row: its id, id+0.25, id+0.5
	run := func(calls *[]chunkCall) func([]int, int, lm.Want) ([]float32, error) {
		return func(ids []int, pos int, w lm.Want) ([]float32, error) {
			*calls = append(*calls, chunkCall{append([]int(nil), ids...), pos, w})
			rows := ids
			switch w {
			case lm.WantNone:
				return nil, nil
			case lm.WantLast:
				rows = ids[len(ids)-1:]
			}
			var out []float32
			for _, id := range rows {
				out = append(out, float32(id), float32(id)+0.25, float32(id)+0.5)
			}
			return out, nil
		}
	}
	for _, c := range []struct {
		want  lm.Want
		wants []lm.Want
		rows  []int // the ids of the rows returned
	}{
		{lm.WantNone, []lm.Want{lm.WantNone, lm.WantNone, lm.WantNone}, nil},
		{lm.WantLast, []lm.Want{lm.WantNone, lm.WantNone, lm.WantLast}, []int{6}},
		{lm.WantAll, []lm.Want{lm.WantAll, lm.WantAll, lm.WantAll}, ids},
	} {
		var calls []chunkCall
		d, err := lm.RunChunks(ids, 10, 3, vocab, c.want, run(&calls))
		require.NoError(t, err, c.want)
		require.Equal(t, []chunkCall{
			{[]int{0, 1, 2}, 10, c.wants[0]},
			{[]int{3, 4, 5}, 13, c.wants[1]},
			{[]int{6}, 16, c.wants[2]},
		}, calls, c.want)
		if c.want == lm.WantNone {
			require.Nil(t, d)
			continue
		}
		require.Equal(t, []int{len(c.rows), vocab}, []int(d.Shape()), c.want)
		data := d.Data().([]float32)
		for r, id := range c.rows {
			require.Equal(t, []float32{float32(id), float32(id) + 0.25, float32(id) + 0.5}, data[r*vocab:(r+1)*vocab], c.want)
		}
	}

	boom := errors.New("boom")
	_, err := lm.RunChunks(ids, 10, 4, vocab, lm.WantAll, func(ids []int, pos int, w lm.Want) ([]float32, error) {
		if pos > 10 {
			return nil, boom
		}
		return make([]float32, len(ids)*vocab), nil
	})
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "positions 14 to 16: boom")
	_, err = lm.RunChunks(ids, 0, 0, vocab, lm.WantAll, nil)
	require.Error(t, err)
}

// model is a fake model: an f32 embedding table, ids of vocab rows of width.
type model struct {
	table []float32
	fail  error
}

const (
	vocab = 5
	width = 4
	theta = 100.0
)

func newModel() *model {
	m := &model{table: make([]float32, vocab*width)}
	for i := range m.table {
		m.table[i] = float32(i%7) - 2.5 + float32(i)/16
	}
	return m
}

func (m *model) Upload(be ops.Backend, _ lm.Progress) (map[string]ops.Buffer, error) {
	if m.fail != nil {
		return nil, m.fail
	}
	raw := make([]byte, 4*len(m.table))
	for i, v := range m.table {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	b, err := be.Load(graph.F32, len(m.table), raw)
	if err != nil {
		return nil, err
	}
	return map[string]ops.Buffer{"table": b}, nil
}

// build is a graph that reads the ids, the weights and the call record:
// rope(table[ids]) at the call's position.
func build(rows int) func() (*graph.Graph, error) {
	return func() (*graph.Graph, error) {
		b := graph.NewBuilder(fmt.Sprintf("embed-rope/rows=%d", rows))
		call := ops.Call(b)
		ids := b.Input("ids", graph.I32, rows)
		e := ops.Embed(b, b.Weight("table", graph.F32, vocab, width), ids)
		b.Output(ops.Rope(b, e, call, ops.RopeAttrs{HeadDim: width, Rotary: width, Theta: theta}))
		return b.Graph()
	}
}

// want is the graph's output in float64: row t of table[ids] rotated by
// position pos+t (NeoX halves).
func want(m *model, ids []int, pos int) []float64 {
	h := width / 2
	out := make([]float64, 0, len(ids)*width)
	for t, id := range ids {
		x := m.table[id*width : (id+1)*width]
		row := make([]float64, width)
		for j := 0; j < h; j++ {
			a := float64(pos+t) * math.Pow(theta, -2*float64(j)/width)
			c, s := math.Cos(a), math.Sin(a)
			row[j] = float64(x[j])*c - float64(x[j+h])*s
			row[j+h] = float64(x[j+h])*c + float64(x[j])*s
		}
		out = append(out, row...)
	}
	return out
}

// counting is a CPU backend that counts frees and closes.
type counting struct {
	*cpu.Backend
	freed  map[ops.Buffer]int
	closed int
}

func (c *counting) Free(b ops.Buffer) error { c.freed[b]++; return c.Backend.Free(b) }
func (c *counting) Close() error            { c.closed++; return c.Backend.Close() }

func readI32(t *testing.T, be ops.Backend, b ops.Buffer) []int32 {
	t.Helper()
	raw := make([]byte, 4*b.Len())
	require.NoError(t, be.Read(b, raw))
	out := make([]int32, b.Len())
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func TestCoreRuns(t *testing.T) {
	m := newModel()
	c, err := lm.Open(m, lm.Options{})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, "cpu", c.Backend().Name())
	require.NotNil(t, c.Logger())
	require.False(t, c.Closed())

	for _, step := range []struct {
		ids []int
		pos int
	}{{[]int{1, 4, 0}, 0}, {[]int{2}, 3}, {[]int{3, 3, 1}, 4}, {[]int{0}, 7}} {
		rows := len(step.ids)
		idb, err := c.WriteIDs("ids", step.ids)
		require.NoError(t, err)
		require.NoError(t, c.WriteCall(step.pos, rows))
		bind := c.Bind(1)
		bind["ids"] = idb
		key := testKey{Stage: "test", Loops: 1, Want: "all", Rows: rows}
		outs, err := c.Run(key, build(rows), bind)
		require.NoError(t, err)
		require.Len(t, outs, 1)
		got, err := c.ReadF32(outs[0])
		require.NoError(t, err)
		ref := want(m, step.ids, step.pos)
		require.Len(t, got, len(ref))
		for i := range ref {
			require.InDelta(t, ref[i], got[i], 1e-5, "pos %d element %d", step.pos, i)
		}
		_, _, ok := c.Planned(key)
		require.True(t, ok)
		prof, err := c.Profile(key)
		require.NoError(t, err)
		require.NotEmpty(t, prof)
	}
	// one plan per row count; the second three-row call replayed
	st := c.Stats()
	require.Equal(t, 2, st.Plans)
	require.Equal(t, 2, st.Hits)
	_, _, ok := c.Planned(testKey{Stage: "test", Loops: 1, Want: "all", Rows: 2})
	require.False(t, ok)
}

func TestCoreCallAndInputs(t *testing.T) {
	be := &counting{Backend: cpu.New(1), freed: map[ops.Buffer]int{}}
	c, err := lm.Open(newModel(), lm.Options{Backend: be})
	require.NoError(t, err)

	require.NoError(t, c.WriteCall(1234, 7))
	bind := c.Bind(0)
	require.Len(t, bind, 1, "the call record (Run adds the weights)")
	table, ok := c.Weight("table")
	require.True(t, ok)
	_, ok = c.Weight("no such weight")
	require.False(t, ok)
	call := bind[ops.CallName]
	require.Equal(t, graph.I32, call.DType())
	require.Equal(t, ops.CallLen, call.Len())
	rec := readI32(t, be, call)
	want := make([]int32, ops.CallLen)
	want[ops.CallPos], want[ops.CallRows] = 1234, 7
	require.Equal(t, want, rec)
	require.NoError(t, c.WriteCall(0, 1))
	want[ops.CallPos], want[ops.CallRows] = 0, 1
	require.Equal(t, want, readI32(t, be, call))

	// one ids buffer per row count, reused
	a, err := c.WriteIDs("ids", []int{3, 1, 4})
	require.NoError(t, err)
	require.Equal(t, []int32{3, 1, 4}, readI32(t, be, a))
	b, err := c.WriteIDs("ids", []int{2})
	require.NoError(t, err)
	require.Equal(t, []int32{2}, readI32(t, be, b))
	a2, err := c.WriteIDs("ids", []int{1, 5, 9})
	require.NoError(t, err)
	require.Same(t, a, a2)
	require.Equal(t, []int32{1, 5, 9}, readI32(t, be, a))
	require.NotSame(t, a, b)
	got, err := c.Input("ids", graph.I32, 1)
	require.NoError(t, err)
	require.Same(t, b, got)
	other, err := c.WriteIDs("more", []int{1})
	require.NoError(t, err)
	require.NotSame(t, b, other, "inputs are kept by name too")

	h, err := c.WriteF32("hidden", []float32{1.5, -2, 0.25})
	require.NoError(t, err)
	x, err := c.ReadF32(h)
	require.NoError(t, err)
	require.Equal(t, []float32{1.5, -2, 0.25}, x)
	h2, err := c.WriteF32("hidden", []float32{0, 1, 2})
	require.NoError(t, err)
	require.Same(t, h, h2)

	// bad input
	require.ErrorContains(t, c.WriteCall(-1, 1), "position -1")
	require.ErrorContains(t, c.WriteCall(0, 0), "0 rows")
	require.ErrorContains(t, c.WriteCall(math.MaxInt32+1, 1), "i32")
	_, err = c.WriteIDs("ids", nil)
	require.ErrorContains(t, err, "input ids of 0 elements")
	_, err = c.WriteIDs("ids", []int{1, -3})
	require.ErrorContains(t, err, "row 1: id -3")
	_, err = c.WriteIDs("ids", []int{math.MaxInt32 + 1})
	require.ErrorContains(t, err, "not a non-negative i32")
	_, err = c.WriteF32("hidden", nil)
	require.Error(t, err)
	_, err = c.Input("ids", graph.F32, 3)
	require.ErrorContains(t, err, "input ids: it holds")
	_, err = c.ReadF32(a)
	require.ErrorContains(t, err, "as f32")
	_, err = c.ReadF32(nil)
	require.Error(t, err)
	_, err = c.Profile(testKey{Stage: "never"})
	require.Error(t, err)
	require.Equal(t, []int32{1, 5, 9}, readI32(t, be, a), "a refused write changes nothing")

	// Close frees the extras, the inputs, the weights and the call record
	// once each, and leaves a backend it did not make open
	extra, err := be.Alloc(graph.F32, 2)
	require.NoError(t, err)
	require.NoError(t, c.Close(extra, nil))
	require.True(t, c.Closed())
	for _, buf := range []ops.Buffer{extra, call, table, a, b, other, h} {
		require.Equal(t, 1, be.freed[buf])
	}
	require.Len(t, be.freed, 7)
	require.Equal(t, 0, be.closed)
	require.NoError(t, c.Close())
	require.Len(t, be.freed, 7)
	for buf, n := range be.freed {
		require.Equal(t, 1, n, "freed once: %v", buf)
	}

	// a closed core refuses work
	require.Equal(t, capture.Stats{}, c.Stats())
	_, err = c.Run(testKey{Stage: "test"}, build(1), nil)
	require.ErrorContains(t, err, "closed")
	require.ErrorContains(t, c.WriteCall(0, 1), "closed")
	_, err = c.WriteIDs("ids", []int{1})
	require.ErrorContains(t, err, "closed")
	_, _, ok = c.Planned(testKey{Stage: "test"})
	require.False(t, ok)
}

func TestOpenErrors(t *testing.T) {
	_, err := lm.Open(nil, lm.Options{})
	require.ErrorContains(t, err, "nil model")
	boom := errors.New("no weights")
	be := &counting{Backend: cpu.New(1), freed: map[ops.Buffer]int{}}
	m := newModel()
	m.fail = boom
	_, err = lm.Open(m, lm.Options{Backend: be})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 0, be.closed, "a backend the caller gave stays open")
	var nilCore *lm.Core
	require.True(t, nilCore.Closed())
	require.NoError(t, nilCore.Close())
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

// TestCheckFinite: every NaN and infinity is found, at any place in a row
// (the unrolled pass and its tail), with its position and token; finite
// extremes pass.
func TestCheckFinite(t *testing.T) {
	const vocab = 7
	x := make([]float32, 3*vocab)
	for i := range x {
		x[i] = float32(i) - 10
	}
	x[0], x[1] = math.MaxFloat32, -math.MaxFloat32
	x[2] = math.SmallestNonzeroFloat32
	require.NoError(t, lm.CheckFinite(x, vocab, 5))
	for i := range x {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			y := append([]float32(nil), x...)
			y[i] = bad
			err := lm.CheckFinite(y, vocab, 5)
			require.Error(t, err, "element %d = %v", i, bad)
			require.Contains(t, err.Error(), fmt.Sprintf("position %d: the logit of token %d is", 5+i/vocab, i%vocab))
		}
	}
}
