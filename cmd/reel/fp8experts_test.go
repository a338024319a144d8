package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/modeltest"
)

// TestExpertsStoredFP8Commands: reel info, logits and check take a
// Qwen4-Exp checkpoint storing its experts one by one in FP8 as published
// (each expert's float8_e4m3fn codes and _scale_inv table: qwen4S's
// experts quantized in blocks of 16x24 by modeltest.StoreQuantized). info
// lists the per-expert codes and scales and the quantization_config; check
// passes a golden.json of the logits of the float model of its dequantized
// weights (within 1e-5), and fails one of the unquantized model's
// (transformers' logits: the FP8 rounding moves them).
func TestExpertsStoredFP8Commands(t *testing.T) {
	q := lm.Quant{Method: lm.QuantFP8, BlockRows: 16, BlockCols: 24}
	fp8 := t.TempDir()
	modeltest.StoreQuantized(qwen4S, q, func(n string) bool { return strings.Contains(n, ".mlp.experts.") })(t, fp8)

	code, out, errOut := reel("info", "--model", fp8, "--tensors")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "quantization_config")
	require.Regexp(t, `(?m)^model\.layers\.7\.mlp\.experts\.7\.up_proj\.weight\s+f8_e4m3\s+\[32 64\]$`, out)
	require.Regexp(t, `(?m)^model\.layers\.7\.mlp\.experts\.7\.up_proj\.weight_scale_inv\s+f32\s+\[2 3\]$`, out)

	deq := t.TempDir()
	modeltest.Dequantized(fp8)(t, deq)
	ids := []int{102, 117, 110, 99, 32, 109, 97, 127}
	var s []string
	for _, id := range ids {
		s = append(s, strconv.Itoa(id))
	}
	want := logitsOf(t, "--model", deq, "--ids", strings.Join(s, ","))
	got := logitsOf(t, "--model", fp8, "--ids", strings.Join(s, ","))
	require.Less(t, modeltest.RelRMS(got, want), 1e-6)
	c := models.GoldenCase{IDs: ids}
	vocab := len(want) / len(ids)
	for i := range ids {
		var row []float64
		for _, x := range want[i*vocab : (i+1)*vocab] {
			row = append(row, float64(x))
		}
		c.Full = append(c.Full, row)
	}
	raw, err := json.Marshal(models.Golden{Cases: []models.GoldenCase{c}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(fp8, "golden.json"), raw, 0o644))
	code, out, errOut = reel("check", "--golden", fp8, "--tol", "1e-5")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, " ok\n")

	raw, err = os.ReadFile(filepath.Join(qwen4S, "golden.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(fp8, "golden.json"), raw, 0o644))
	code, _, _ = reel("check", "--golden", fp8, "--tol", "1e-5")
	require.Equal(t, exitError, code, "the FP8 rounding moves the unquantized model's logits")
}
