package trace_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/trace"
	"github.com/reel-runtime/reel/weights"
)

// f32 makes a record of rows rows at pos holding xs.
func f32(name string, call, pos, rows int, xs ...float32) trace.Record {
	data := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	return trace.Record{Name: name, Op: "op", Call: call, Pos: pos, Rows: rows, DType: graph.F32,
		Shape: []int{rows, len(xs) / rows}, Data: data}
}

// TestDiffMetrics checks the errors against float64 arithmetic written
// out: max abs, NMSE against the first recording, NaN and infinities.
func TestDiffMetrics(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name         string
		a, b         []float32
		maxAbs, nmse float64
	}{
		{"equal", []float32{1, 2}, []float32{1, 2}, 0, 0},
		{"off", []float32{3, 4}, []float32{3, 4.5}, 0.5, 0.25 / 25},
		{"zero reference", []float32{0, 0}, []float32{0, 1}, 1, math.Inf(1)},
		{"NaN both", []float32{nan, 1}, []float32{nan, 1}, 0, 0},
		{"NaN one side", []float32{1, 1}, []float32{nan, 1}, math.Inf(1), math.Inf(1)},
		{"Inf both", []float32{inf, 2}, []float32{inf, 2}, 0, 0},
		{"Inf against -Inf", []float32{inf, 2}, []float32{-inf, 2}, math.Inf(1), math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := trace.Diff([]trace.Record{f32("x", 0, 0, 1, tc.a...)}, []trace.Record{f32("x", 0, 0, 1, tc.b...)}, 0, trace.Abs)
			require.Len(t, rep.Compared, 1)
			c := rep.Compared[0]
			require.Equal(t, tc.maxAbs, c.MaxAbs)
			require.InDelta(t, tc.nmse, c.NMSE, 1e-12)
			if tc.maxAbs == 0 {
				require.False(t, rep.Diverged())
			} else {
				require.True(t, rep.Diverged())
			}
		})
	}
	a := []trace.Record{f32("x", 0, 0, 1, 3, 4)}
	b := []trace.Record{f32("x", 0, 0, 1, 3, 4.5)}
	require.False(t, trace.Diff(a, b, 0.5, trace.Abs).Diverged(), "at the tolerance is not past it")
	require.True(t, trace.Diff(a, b, 0.4, trace.Abs).Diverged())
	require.False(t, trace.Diff(a, b, 0.01, trace.NMSE).Diverged())
	require.True(t, trace.Diff(a, b, 0.009, trace.NMSE).Diverged())
}

// TestDiffAlignsByPosition: a run in chunks of 3 rows against one of 7
// compares every position once, row against row; names only one side
// has are counted, and a value that is not a row per position (a summary
// of the last row) aligns with nothing in another chunking.
func TestDiffAlignsByPosition(t *testing.T) {
	whole := []trace.Record{
		f32("h", 0, 0, 7, 0, 1, 2, 3, 4, 5, 6),
		f32("extra", 0, 0, 1, 9),
	}
	chunks := []trace.Record{
		f32("h", 0, 0, 3, 0, 1, 2),
		f32("last", 0, 0, 1, 2),
		f32("h", 1, 3, 3, 3, 1, 5),
		f32("h", 2, 6, 1, 6),
	}
	rep := trace.Diff(chunks, whole, 1e-6, trace.Abs)
	require.Len(t, rep.Compared, 3)
	require.Equal(t, 1, rep.OnlyA, "last")
	require.Equal(t, 1, rep.OnlyB, "extra")
	require.Equal(t, 0, rep.Unaligned)
	require.Equal(t, 1, rep.First)
	c := rep.Compared[1]
	require.Equal(t, [3]any{3, 3, 3.0}, [3]any{c.Pos, c.Rows, c.MaxAbs})

	rep = trace.Diff(whole, chunks, 1e-6, trace.Abs)
	require.Len(t, rep.Compared, 1, "the whole value against the rows of three chunks")
	require.Equal(t, 7, rep.Compared[0].Elems)
	require.Equal(t, 3.0, rep.Compared[0].MaxAbs)

	var sb strings.Builder
	_, err := rep.WriteTo(&sb)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	require.Equal(t, "first divergence: h (op op, max abs 3, nmse 0.0989)", lines[0])
	require.Contains(t, lines[1], "pos 0-6")
	require.Contains(t, lines[1], "past 1e-06")
	require.Equal(t, "compared 1 values (abs): 1 past 1e-06; 1 names only in the first, 1 only in the second, 0 records not aligned", lines[2])

	summary := []trace.Record{f32("s", 0, 0, 3, 1, 2, 3)}
	summary[0].Shape = []int{1, 3}
	other := []trace.Record{f32("s", 1, 3, 3, 1, 2, 3)}
	other[0].Shape = []int{1, 3}
	rep = trace.Diff(summary, other, 0, trace.Abs)
	require.Equal(t, 1, rep.Unaligned)
	require.False(t, rep.Diverged())
	require.Contains(t, reportText(t, rep), "no divergence past 0\n")
}

func reportText(t *testing.T, rep trace.Report) string {
	var sb strings.Builder
	_, err := rep.WriteTo(&sb)
	require.NoError(t, err)
	return sb.String()
}

// TestReadRejects: a safetensors file that is no trace, and a trace
// tensor without its metadata, are errors naming the file and tensor.
func TestReadRejects(t *testing.T) {
	_, err := trace.Read(doryTiny + "/model.safetensors")
	require.ErrorContains(t, err, "model.safetensors: not a trace")
	path := filepath.Join(t.TempDir(), "t.safetensors")
	require.NoError(t, weights.WriteFileMetadata(path, []weights.NamedTensor{{Name: "x#0", DType: graph.F32, Shape: []int{1}, Data: make([]byte, 4)}},
		map[string]string{trace.FormatKey: trace.FormatVersion}))
	_, err = trace.Read(path)
	require.ErrorContains(t, err, `tensor "x#0" has no metadata entry`)
	_, err = trace.Read(filepath.Join(t.TempDir(), "missing.safetensors"))
	require.ErrorContains(t, err, "missing.safetensors")
}

// TestRecordsRoundTrip: what Write writes, Read gives back.
func TestRecordsRoundTrip(t *testing.T) {
	recs := []trace.Record{f32("layer 0 / attn / attn_out", 0, 0, 2, 1, 2, 3, 4), f32("head / logits", 1, 2, 1, 5)}
	recs[0].Op, recs[0].Scope, recs[0].Graph, recs[0].Index = "matmul", "layer 0 / attn", "g", 0
	recs[1].Index = 1
	recs = append(recs, trace.Record{Name: "ids", Call: 1, Index: 2, Pos: -1, DType: graph.I32, Shape: []int{2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0}})
	require.Equal(t, recs, roundTrip(t, recs))
}

// TestGlob: * crosses the scope separators, ? is one character, a list
// matches any, and a bad pattern is an error.
func TestGlob(t *testing.T) {
	m, err := trace.Glob("*attn_out", "layer ? / out")
	require.NoError(t, err)
	require.True(t, m("input block / layer 0 attn / attn_out"))
	require.True(t, m("layer 3 / out"))
	require.False(t, m("layer 13 / out"))
	require.False(t, m("layer 3 / attn / q"))
	m, err = trace.Glob("layer [0-2] *")
	require.NoError(t, err)
	require.True(t, m("layer 2 / mlp / mlp_out"))
	require.False(t, m("layer 3 / mlp / mlp_out"))
	all, err := trace.Glob()
	require.NoError(t, err)
	require.True(t, all("anything"))
	_, err = trace.Glob("layer [")
	require.Error(t, err)
}

// TestMaxBytes: a recorder past its bound fails the run, naming the value.
func TestMaxBytes(t *testing.T) {
	_, _, err := run(t, doryTiny, &trace.Recorder{MaxBytes: 5000}, true, 4, nil)
	require.ErrorContains(t, err, "more than 5000 bytes of values")
}
