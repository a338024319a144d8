package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/trace"
	"github.com/reel-runtime/reel/weights"
)

// TestTraceAndDiff traces dory-tiny fused and unfused and diffs the two
// files (no divergence past 1e-5, exit 0), then against a copy whose layer
// 2 o_proj is scaled: the report's first line names that product, exit 1.
func TestTraceAndDiff(t *testing.T) {
	dir := t.TempDir()
	fused, unfused, changed := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors"), filepath.Join(dir, "c.safetensors")
	code, _, errOut := reel("trace", "--model", doryTiny, "--ids", "3,10,17,24,31", "--chunk", "3", "--out", fused)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "of 2 calls (dory, cpu) into "+fused)
	code, _, errOut = reel("trace", "--model", doryTiny, "--ids", "3,10,17,24,31", "--chunk", "3", "--fused=false", "--out", unfused)
	require.Equal(t, exitOK, code, errOut)

	code, out, errOut := reel("trace", "--diff", fused, unfused, "--tol", "1e-5")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "no divergence past 1e-05\n"), out)
	require.Contains(t, out, "input block / layer 2 attn / attn_out")
	require.Contains(t, out, "head / logits")

	scaledDir := editF32(t, doryTiny, "backbone.layers.2.mixer.o_proj.weight", func(x []float32) {
		for i := range x {
			x[i] *= 1.25
		}
	})
	code, _, errOut = reel("trace", "--model", scaledDir, "--ids", "3,10,17,24,31", "--chunk", "3", "--out", changed)
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut = reel("trace", "--diff", fused, changed, "--metric", "nmse", "--tol", "1e-9")
	require.Equal(t, exitError, code, out)
	require.True(t, strings.HasPrefix(out, "first divergence: input block / layer 2 attn / attn_out (op norm_matmul, max abs "), out)
	require.Contains(t, errOut, "reel: trace: the recordings diverge: first at input block / layer 2 attn / attn_out (call 0)")

	// --match keeps only what it names
	code, _, errOut = reel("trace", "--model", doryTiny, "--ids", "3,10", "--match", "*attn_out,head / *", "--out", changed)
	require.Equal(t, exitOK, code, errOut)
	recs, err := trace.Read(changed)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	for _, r := range recs {
		require.True(t, strings.HasSuffix(r.Name, "/ attn_out") || strings.HasPrefix(r.Name, "head / "), r.Name)
	}
	require.Equal(t, "head / logits", recs[len(recs)-1].Name)
}

// TestTraceFirstNonFinite plants a NaN in layer 2's o_proj: the report
// names the product that reads it and the weight's NaN, exit 1; the
// untouched checkpoint has none, exit 0.
func TestTraceFirstNonFinite(t *testing.T) {
	broken := editF32(t, doryTiny, "backbone.layers.2.mixer.o_proj.weight", func(x []float32) { x[7] = float32(math.NaN()) })
	code, out, errOut := reel("trace", "--model", broken, "--ids", "3,10,17", "--fused=false", "--first-nonfinite")
	require.Equal(t, exitError, code, errOut)
	require.True(t, strings.HasPrefix(out, "first non-finite: input block / layer 2 attn / attn_out (op matmul, call 0, positions 0-2): "), out)
	require.Contains(t, out, "weight backbone.layers.2.mixer.o_proj.weight f32[64 64]: min ")
	require.Contains(t, out, ", 1 NaN\n")
	require.Contains(t, errOut, "reel: trace: a value is not finite")

	code, out, errOut = reel("trace", "--model", doryTiny, "--ids", "3,10,17", "--first-nonfinite")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "no non-finite value in ")
}

// TestTraceUsage: what the command refuses.
func TestTraceUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", doryTiny, "--ids", "1"}, "--out is required"},
		{[]string{"--model", doryTiny, "--out", "x"}, "--ids is required"},
		{[]string{"--diff", "a"}, "--diff takes two trace files, not 1"},
		{[]string{"--diff", "a", "b", "--metric", "rel"}, `unknown metric "rel"`},
		{[]string{"--model", doryTiny, "--ids", "1", "--out", "x", "y"}, `unexpected argument "y"`},
		{[]string{"--model", doryTiny, "--ids", "1", "--out", "x", "--match", "["}, "--match: pattern"},
		{[]string{"--model", doryTiny, "--ids", "1", "--out", "x", "--want", "none"}, `--want "none"`},
	} {
		code, _, errOut := reel(append([]string{"trace"}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, tc.args)
	}
	code, _, errOut := reel("trace", "--diff", "/nonexistent/a.safetensors", "/nonexistent/b.safetensors")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "/nonexistent/a.safetensors")
}

// editF32 copies the checkpoint in src into a temporary folder with the
// f32 tensor of name passed through edit (scaled, a NaN planted).
func editF32(t testing.TB, src, name string, edit func(x []float32)) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, weights.Rewrite(src, dst, nil, func(ts []weights.NamedTensor) []weights.NamedTensor {
		for i := range ts {
			if ts[i].Name == name && ts[i].DType == graph.F32 {
				x := make([]float32, len(ts[i].Data)/4)
				half.DecodeF32(x, ts[i].Data)
				edit(x)
				ts[i].Data = weights.EncodeF32(x)
			}
		}
		return ts
	}))
	return dst
}
