package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/trace"
	"github.com/reel-runtime/reel/weights"
)

const (
	goTiny  = "../../testdata/dory-gotiny"
	llama13 = "../../testdata/dense/llama3-13"
	qwen4S  = "../../testdata/qwen4/qwen4-tiny-small-11"
	// qwen4MTP stores its experts stacked, in bf16 (qwen4S one by one, in f32).
	qwen4MTP = "../../testdata/qwen4/qwen4-tiny-mtp"
)

// logitsOf runs reel logits with args (every row) and returns its rows.
func logitsOf(t *testing.T, args ...string) []float32 {
	t.Helper()
	code, out, errOut := reel(append([]string{"logits", "--want", "all"}, args...)...)
	require.Equal(t, exitOK, code, errOut)
	var got logitsOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	var flat []float32
	for _, r := range got.Logits {
		flat = append(flat, r...)
	}
	return flat
}

// TestQuantFlag: --quant quantizes the model's projections at load in
// every command that loads one: the logits of the embedded dory-gotiny
// and of a tiny Llama move by what the format costs (the bounds of the
// models' own quantization tests: relative RMS of the logits 0.3 % q8,
// 1.3 % fp8, 5.5 % q4 for dory-gotiny, measured here 0.2 %, 1.3 %,
// 2.2 %; the random Llama is more sensitive: 1.5 %, 9.9 %, 26 %), and run, chat, check, bench (a checkpoint and Dory's
// synthetic shapes), trace and dump run quantized.
func TestQuantFlag(t *testing.T) {
	ids := []string{"--ids", "102,117,110,99,32,109,97,105,110,40,41"}
	for _, c := range []struct {
		model []string
		quant string
		max   float64
	}{
		{nil, lm.QuantQ8, 0.01}, {nil, lm.QuantFP8, 0.04}, {nil, lm.QuantQ4, 0.12},
		{[]string{"--model", llama13}, lm.QuantQ8, 0.03}, {[]string{"--model", llama13}, lm.QuantFP8, 0.15},
		{[]string{"--model", llama13}, lm.QuantQ4, 0.4},
	} {
		args := append(append([]string{}, c.model...), ids...)
		want := logitsOf(t, args...)
		got := logitsOf(t, append(args, "--quant", c.quant)...)
		rel := modeltest.RelRMS(got, want)
		t.Logf("%v %s: relative RMS difference of the logits %.4f", c.model, c.quant, rel)
		require.Less(t, rel, c.max, "%v %s", c.model, c.quant)
		require.Greater(t, rel, 0.0, "%v %s", c.model, c.quant)
	}

	code, out, errOut := reel("run", "--quant", "q4", "--tokens", "8", "--seed", "3")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "package main\n"), out)

	dir := qwen3Model(t, nil)
	_, errOut, turns, err := chatRun(t, "2+2?\n", "--model", dir, "--quant", "q8", "--temperature", "0", "--tokens", "3")
	require.NoError(t, err, errOut)
	require.Len(t, turns, 1)

	code, out, errOut = reel("check", "--golden", "../../testdata/dory", "--quant", "q8", "--tol", "0.01")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 6, strings.Count(out, " ok\n"), out)

	code, out, errOut = reel("bench", "--quant", "fp8", "--prompt", "8", "--tokens", "2")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "(dory, 6967552 parameters, projections quantized in fp8)")
	code, out, errOut = reel("bench", "--synthetic", "dory-h512", "--quant", "q4", "--prompt", "4", "--tokens", "2")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "(dory, 43581440 parameters, projections quantized in q4)")
	require.Contains(t, errOut, "quantizing dory-h512 in q4")

	file := filepath.Join(t.TempDir(), "trace.safetensors")
	code, _, errOut = reel("trace", "--quant", "q8", "--ids", "1,2,3", "--out", file)
	require.Equal(t, exitOK, code, errOut)
	recs, err := trace.Read(file)
	require.NoError(t, err)
	n := 0
	for _, r := range recs {
		if strings.HasPrefix(r.Op, "quant_") { // quant_matmul or a fused form of it
			n++
		}
	}
	require.Positive(t, n, "traced values of quantized products")

	code, out, errOut = reel("dump", "--model", goTiny, "--quant", "q4")
	require.Equal(t, exitOK, code, errOut)
	// 8 attention sub-layers of 5 projections and 8 MLPs of 3, the
	// recurrent half of them (32) read again by the second loop.
	require.Equal(t, 96, strings.Count(out, "quant_matmul"))
	code, out, errOut = reel("dump", "--synthetic", "dory-4b", "--quant", "q4", "--stats")
	require.Equal(t, exitOK, code, errOut)
	// 847 launches before the fused quantized products, 455 before the
	// slerps went into the products after them (108 of 112: the other four
	// are read by a mix or the head) and each qkv_prep into its attention;
	// bf16's plan keeps its slerps (399).
	require.Contains(t, out, "nodes 2081, launches 291")
	require.Contains(t, out, "qkv_attention_gate 56 (616 nodes), quant_grouped_matmul 4 (16 nodes), quant_norm_matmul 112 (224 nodes), slerp 4 (24 nodes), slerp_matmul 108 (1192 nodes)")
}

// TestQuantFlagErrors: a --quant that is not a format is a usage error
// naming the flag, before anything is made.
func TestQuantFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"run"}, {"chat", "--model", goTiny}, {"logits", "--ids", "1"}, {"check", "--golden", "../../testdata/dory"},
		{"bench"}, {"bench", "--synthetic", "dory-h512"}, {"trace", "--ids", "1", "--out", "x"},
		{"dump", "--model", goTiny}, {"perplexity", "--text-file", "quant_test.go"},
	} {
		code, _, errOut := reel(append(args, "--quant", "q3")...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, `--quant "q3": want fp8, q8 or q4`, args)
	}
	code, _, errOut := reel("dump", "--quant", "q8")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--quant q8 needs --model or --synthetic")
}

// TestQuantizeCommand: reel quantize writes a folder that loads back with
// models.Load to the weights loading the original with --quant makes, so
// the same logits bit for bit on the CPU (a Dory in bf16, a Llama in f32,
// Qwen4-Exp with experts stored one by one in f32 and stacked in bf16;
// every format); config.json gains the quantization_config the loader
// reads, the other files are copied, the tensors the loader keeps float
// are copied as stored, and the safetensors are sharded past --shard-size
// with an index.
func TestQuantizeCommand(t *testing.T) {
	ids := []int{102, 117, 110, 99, 32, 109, 97, 105, 110, 40, 41, 7, 200}
	for _, src := range []string{goTiny, llama13, qwen4S, qwen4MTP} {
		ids := ids
		if strings.Contains(src, "qwen4") {
			ids = []int{102, 117, 110, 99, 32, 109, 97, 105, 110, 40, 41, 7, 127} // a vocabulary of 128
		}
		for _, quant := range []string{lm.QuantQ8, lm.QuantFP8, lm.QuantQ4} {
			out := filepath.Join(t.TempDir(), "out")
			code, stdout, errOut := reel("quantize", "--model", src, "--to", quant, "--out", out, "--shard-size", "100kB")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, stdout, "wrote "+out)

			cfg, err := weights.ReadConfig(filepath.Join(out, "config.json"))
			require.NoError(t, err)
			q, err := lm.ReadQuant(cfg)
			require.NoError(t, err)
			dq, _ := lm.DefaultQuant(quant)
			require.Equal(t, dq, q)
			srcEnts, err := os.ReadDir(src)
			require.NoError(t, err)
			for _, e := range srcEnts {
				if n := e.Name(); !strings.HasSuffix(n, ".safetensors") && n != "config.json" {
					a, _ := os.ReadFile(filepath.Join(src, n))
					b, err := os.ReadFile(filepath.Join(out, n))
					require.NoError(t, err, n)
					require.Equal(t, a, b, n)
				}
			}
			_, err = os.Stat(filepath.Join(out, weights.IndexFile))
			require.NoError(t, err, "sharded past 100 kB")

			ref, err := models.LoadQuantized(src, quant)
			require.NoError(t, err)
			got, err := models.Load(out)
			require.NoError(t, err)
			require.Equal(t, ref.(models.Weighted).Weights(), got.(models.Weighted).Weights(), "%s %s", src, quant)
			a := forwardAll(t, ref, ids)
			b := forwardAll(t, got, ids)
			require.Equal(t, a, b, "%s %s: the logits, bit for bit", src, quant)
			ref.Close()
			got.Close()

			// The tensors left float are the checkpoint's bytes; experts
			// stored one by one are written stacked.
			ck, err := weights.Open(src)
			require.NoError(t, err)
			qk, err := weights.Open(out)
			require.NoError(t, err)
			kept := 0
			for _, n := range ck.Names() {
				if pre, _, ok := strings.Cut(n, ".mlp.experts."); ok && !qk.Has(n) {
					require.True(t, qk.Has(pre+".mlp.experts.gate_up_proj") && qk.Has(pre+".mlp.experts.down_proj"), n)
					continue
				}
				info, _ := qk.Info(n)
				if !info.DType.IsQuantized() {
					x, _ := ck.Bytes(n)
					y, err := qk.Bytes(n)
					require.NoError(t, err)
					require.Equal(t, x, y, n)
					kept++
				}
			}
			require.Positive(t, kept)
			ck.Close()
			qk.Close()
		}
	}
	// One file without sharding.
	out := filepath.Join(t.TempDir(), "one")
	code, stdout, errOut := reel("quantize", "--model", goTiny, "--to", "q4", "--out", out)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, stdout, "in 1 files (model.safetensors)")
	ents, err := os.ReadDir(out)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"DATA-LICENSE-go-source", "README.md", "config.json", "greedy.json", "model.safetensors"}, names)
	code, stdout, errOut = reel("info", "--model", out)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, stdout, `quantization_config      {"bits":4,"group_size":32,"quant_method":"q4"}`)
}

// forwardAll runs ids through a new CPU session of m, every row's logits.
func forwardAll(t *testing.T, m models.Model, ids []int) []float32 {
	t.Helper()
	var mf modelFlags
	mf.chunk, mf.device = lm.DefaultChunk, "cpu"
	l, err := mf.start(t.Context(), "m", m)
	require.NoError(t, err)
	defer func() { l.session.Close(); l.be.Close() }()
	d, err := l.session.Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	return d.Data().([]float32)
}

// TestQuantizeCommandErrors: an out folder that exists and is not empty,
// a format that is not one, a checkpoint already quantized and an
// architecture that cannot be are refused naming the flag or the file,
// writing nothing; a bad --shard-size and missing flags are usage errors.
func TestQuantizeCommandErrors(t *testing.T) {
	full := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(full, "x"), nil, 0o644))
	fresh := filepath.Join(t.TempDir(), "fresh")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--model", goTiny, "--to", "q4", "--out", full}, exitUsage, "--out " + full + ": the folder exists and is not empty"},
		{[]string{"--model", goTiny, "--to", "q4", "--out", "quant_test.go"}, exitUsage, "exists and is not a folder"},
		{[]string{"--model", goTiny, "--to", "q5", "--out", fresh}, exitUsage, `--to "q5": want fp8, q8 or q4`},
		{[]string{"--model", "../../testdata/dense-fp8/qwen3-fp8-31", "--to", "q4", "--out", fresh}, exitError,
			"qwen3-fp8-31/config.json: quantization_config: the checkpoint is already quantized (fp8/128x128)"},
		{[]string{"--model", goTiny, "--to", "q8", "--out", fresh, "--shard-size", "2XB"}, exitUsage, `--shard-size "2XB"`},
		{[]string{"--model", goTiny, "--to", "q8", "--out", fresh, "--shard-size", "0"}, exitUsage, `--shard-size "0"`},
		{[]string{"--to", "q8", "--out", fresh}, exitUsage, "--model is required"},
		{[]string{"--model", goTiny, "--out", fresh}, exitUsage, "--to is required"},
		{[]string{"--model", goTiny, "--to", "q8"}, exitUsage, "--out is required"},
		{[]string{"--model", t.TempDir(), "--to", "q8", "--out", fresh}, exitError, "config.json"},
	} {
		code, _, errOut := reel(append([]string{"quantize"}, c.args...)...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
		_, err := os.Stat(fresh)
		require.True(t, os.IsNotExist(err), "%v: nothing written", c.args)
	}
}

// TestParseBytes: sizes in bytes, decimal and binary units.
func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"123": 123, "2GB": 2e9, "500MB": 5e8, "1.5 GB": 1.5e9, "4GiB": 4 << 30, "10kB": 1e4, "64KiB": 64 << 10, "7B": 7} {
		got, err := parseBytes(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "GB", "2XB", "-1", "1e30"} {
		_, err := parseBytes(s)
		require.Error(t, err, s)
	}
}
