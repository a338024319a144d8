package trace_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	_ "github.com/reel-runtime/reel/models/all"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/trace"
	"github.com/reel-runtime/reel/weights"
)

const (
	doryTiny   = "../testdata/dory/dory-tiny-per_loop"
	doryGotiny = "../testdata/dory-gotiny"
	qwen4Small = "../testdata/qwen4/qwen4-tiny-small-11"
	llama3     = "../testdata/dense/llama3-13"
)

var ids = []int{3, 10, 17, 24, 31, 38, 45}

// run traces a forward of ids over the checkpoint in dir (chunks of chunk
// rows; a CPU backend when be is nil) and returns the records and the
// logits of every row.
func run(t testing.TB, dir string, rec *trace.Recorder, fuse bool, chunk int, be ops.Backend) ([]trace.Record, []float32, error) {
	t.Helper()
	m, err := models.Load(dir)
	require.NoError(t, err)
	defer m.Close()
	o := models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: chunk}}
	if rec != nil {
		o.Planner = rec.Planner(planner.Options{Fuse: fuse})
	} else {
		o.Planner = &planner.Options{Fuse: fuse}
	}
	s, err := m.NewSession(o)
	require.NoError(t, err)
	defer s.Close()
	d, err := s.Forward(ids, 0, lm.WantAll)
	if rec == nil {
		rec = &trace.Recorder{}
	}
	if err != nil {
		return rec.Records(), nil, err
	}
	return rec.Records(), append([]float32(nil), d.Data().([]float32)...), nil
}

// roundTrip writes records to a file and reads them back.
func roundTrip(t testing.TB, recs []trace.Record) []trace.Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.safetensors")
	require.NoError(t, trace.Write(path, recs))
	back, err := trace.Read(path)
	require.NoError(t, err)
	return back
}

// TestFusedAgainstUnfused traces Dory, Qwen4-Exp and Llama checkpoints
// with fusion on and off, through files: no value both have differs past
// 1e-5 (dory-gotiny's queries, scaled to about 100, by an NMSE past 1e-12:
// their max abs is 1.1e-5, f32 rounding at that size), the names are
// those of the graphs' labels, and a trace does not change the logits
// (bit for bit).
func TestFusedAgainstUnfused(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		chunk  int
		metric trace.Metric
		tol    float64
		names  []string
	}{
		{doryTiny, 4, trace.Abs, 1e-5, []string{"embed", "input block / layer 2 attn / attn_out", "input block / layer 1 mlp / mlp_out", "input block / layer 2 attn / out", "loop 1 / out", "head / logits"}},
		{doryGotiny, 64, trace.NMSE, 1e-12, []string{"embed", "input block / layer 0 attn / attn_out", "head / logits"}},
		{qwen4Small, 3, trace.Abs, 1e-5, []string{"embed", "layer 2 / gdn / gdn_out", "layer 3 / qsa / attn_out", "layer 3 / moe / u", "layer 3 / out", "head / u", "head / logits"}},
		{llama3, 64, trace.Abs, 1e-5, []string{"embed", "layer 1 / attn / attn_out", "layer 1 / mlp / mlp_out", "layer 1 / out", "head / norm", "head / logits"}},
	} {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			var recs [2][]trace.Record
			for i, fuse := range []bool{true, false} {
				r, logits, err := run(t, tc.dir, &trace.Recorder{}, fuse, tc.chunk, nil)
				require.NoError(t, err)
				_, plain, err := run(t, tc.dir, nil, fuse, tc.chunk, nil)
				require.NoError(t, err)
				require.Equal(t, plain, logits, "tracing changed the logits (fuse %v)", fuse)
				recs[i] = roundTrip(t, r)
				require.Equal(t, len(r), len(recs[i]))
			}
			fused, unfused := recs[0], recs[1]
			require.Less(t, len(fused), len(unfused), "fusion traces fewer values")
			rep := trace.Diff(fused, unfused, tc.tol, tc.metric)
			require.False(t, rep.Diverged(), "first divergence %+v", rep.Compared[max(rep.First, 0)])
			require.Equal(t, len(fused), len(rep.Compared), "every fused value has its unfused one")
			require.Zero(t, rep.OnlyA)
			require.Positive(t, rep.OnlyB)
			calls := (len(ids) + tc.chunk - 1) / tc.chunk
			for _, rs := range recs {
				require.Equal(t, calls-1, rs[len(rs)-1].Call)
				for _, name := range tc.names {
					n := 0
					for _, r := range rs {
						if r.Name == name {
							n++
							require.True(t, r.PerRow(), "%s: a row per position", name)
						}
					}
					require.Equal(t, calls, n, "%s: once per call", name)
				}
			}
		})
	}
}

// edited copies the checkpoint in src into a temporary folder with the
// f32 tensor of name passed through edit.
func edited(t testing.TB, src, name string, edit func(x []float32)) string {
	t.Helper()
	dst := t.TempDir()
	found := false
	require.NoError(t, weights.Rewrite(src, dst, nil, func(ts []weights.NamedTensor) []weights.NamedTensor {
		for i := range ts {
			if ts[i].Name == name && ts[i].DType == graph.F32 {
				x := make([]float32, len(ts[i].Data)/4)
				half.DecodeF32(x, ts[i].Data)
				edit(x)
				ts[i].Data, found = weights.EncodeF32(x), true
			}
		}
		return ts
	}))
	require.True(t, found, "no f32 tensor %s", name)
	return dst
}

// TestDiffFindsChangedWeight: a checkpoint with layer 2's output
// projection scaled diverges first at that projection's output, in both
// plans, and nothing before it differs at all.
func TestDiffFindsChangedWeight(t *testing.T) {
	for _, tc := range []struct {
		dir, tensor, first string
	}{
		{doryTiny, "backbone.layers.2.mixer.o_proj.weight", "input block / layer 2 attn / attn_out"},
		{qwen4Small, "model.layers.2.linear_attn.out_proj.weight", "layer 2 / gdn / gdn_out"},
		{qwen4Small, "model.layers.3.self_attn.o_proj.weight", "layer 3 / qsa / attn_out"},
	} {
		t.Run(filepath.Base(tc.dir)+"/"+tc.tensor, func(t *testing.T) {
			changed := edited(t, tc.dir, tc.tensor, func(x []float32) {
				for i := range x {
					x[i] *= 1.25
				}
			})
			for _, fuse := range []bool{true, false} {
				a, _, err := run(t, tc.dir, &trace.Recorder{}, fuse, 4, nil)
				require.NoError(t, err)
				b, _, err := run(t, changed, &trace.Recorder{}, fuse, 4, nil)
				require.NoError(t, err)
				rep := trace.Diff(a, b, 1e-4, trace.Abs)
				require.True(t, rep.Diverged())
				first := rep.Compared[rep.First]
				require.Equal(t, tc.first, first.Name, "fuse %v", fuse)
				require.Equal(t, 0, first.Call)
				for _, c := range rep.Compared[:rep.First] {
					require.Zero(t, c.MaxAbs, "%s before the changed weight", c.Name)
				}
				var sb strings.Builder
				_, err = rep.WriteTo(&sb)
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(sb.String(), "first divergence: "+tc.first+" (op "+first.Op+", max abs "), sb.String())
			}
		})
	}
}

// TestFirstNonFinite: a NaN planted in layer 2's o_proj is found at the
// product that reads it, whose input ranges name the weight's NaN, and
// the run stops there.
func TestFirstNonFinite(t *testing.T) {
	broken := edited(t, doryTiny, "backbone.layers.2.mixer.o_proj.weight", func(x []float32) { x[5] = float32(math.NaN()) })
	for _, tc := range []struct {
		fuse bool
		op   string
	}{{false, "matmul"}, {true, "norm_matmul"}} {
		rec := &trace.Recorder{FirstNonFinite: true}
		recs, _, err := run(t, broken, rec, tc.fuse, 4, nil)
		require.ErrorIs(t, err, trace.ErrNonFinite)
		nf := rec.NonFinite()
		require.NotNil(t, nf)
		require.Equal(t, "input block / layer 2 attn / attn_out", nf.Record.Name)
		require.Equal(t, tc.op, nf.Record.Op)
		require.Equal(t, 0, nf.Record.Call)
		require.Equal(t, 1, rec.Calls(), "the run stops at the first call")
		require.Positive(t, nf.Stats.NaN)
		var weight *trace.Input
		for i, in := range nf.Inputs {
			if in.Name == "backbone.layers.2.mixer.o_proj.weight" {
				weight = &nf.Inputs[i]
			}
		}
		require.NotNil(t, weight, "%v", nf.Inputs)
		require.Equal(t, graph.Weight, weight.Kind)
		require.Equal(t, 1, weight.Stats.NaN)
		s := nf.String()
		require.True(t, strings.HasPrefix(s, "first non-finite: input block / layer 2 attn / attn_out (op "+tc.op+", call 0, positions 0-3)"), s)
		require.Contains(t, s, "weight backbone.layers.2.mixer.o_proj.weight f32[64 64]: min ")
		require.Contains(t, s, ", 1 NaN")
		require.NotEmpty(t, recs)
	}
}
