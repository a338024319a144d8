package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/qwen4"
	"github.com/reel-runtime/reel/ops/cpu"
)

// TestBenchContext: bench sizes the session's states for --context
// positions (on the CPU, with no free memory to weigh them against).
func TestBenchContext(t *testing.T) {
	code, out, errOut := reel("bench", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--prompt", "3", "--tokens", "2", "--context", "1000")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "context      1000 positions: states ")
	require.Contains(t, out, "KV slots of 1024 positions")
	require.NotContains(t, out, "free")
	code, _, errOut = reel("bench", "--context", "0")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--context 0")
}

// TestWriteContext: the context line says whether the card's free memory
// holds what the states grow by while they grow.
func TestWriteContext(t *testing.T) {
	sb := lm.StateBytes{Now: 1 << 30, At: 3 << 30, Slots: 2 << 30, Peak: 4 << 30, Capacity: 32768}
	var b strings.Builder
	writeContext(&b, sb, 32768, 3<<30)
	require.Equal(t, "context      32768 positions: states 3.00 GiB (KV slots of 32768 positions 2.00 GiB), 2.00 GiB more than now (3.00 GiB while the slots grow); 3.00 GiB free: fits\n", b.String())
	b.Reset()
	writeContext(&b, sb, 32768, 3<<30-1)
	require.True(t, strings.HasSuffix(b.String(), ": does not fit\n"), b.String())
}

// TestBenchReleasedOnCPU: the released Qwen4-Exp shape is made on the
// backend; on the CPU that is the host, which cannot hold it: refused
// with the numbers before anything is made.
func TestBenchReleasedOnCPU(t *testing.T) {
	code, _, errOut := reel("bench", "--synthetic", "qwen4-released", "--quant", "q4", "--device", "cpu")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "synthetic qwen4-released needs about")
}

// TestBenchWindows: --windows times each window and takes it back: the
// session (recurrent states included) stands where it stood, so the next
// token's logits are those of a session that ran no window.
func TestBenchWindows(t *testing.T) {
	m, err := qwen4.Load("../../testdata/qwen4/qwen4-tiny-small-11")
	require.NoError(t, err)
	defer m.Close()
	prompt := []int{3, 1, 4, 1, 5, 9, 2, 6}
	next := func(windows []int) []float32 {
		s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(2)}}})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Forward(prompt, 0, lm.WantNone)
		require.NoError(t, err)
		if windows != nil {
			var b strings.Builder
			require.NoError(t, writeWindows(&b, s, windows, m.Vocab()))
			require.Regexp(t, `^windows      best of \d+, logits of every row read: 1 row [0-9.]+ ms; 2 rows [0-9.]+ ms \([0-9.]+x\); 5 rows [0-9.]+ ms \([0-9.]+x\)\n$`, b.String())
			require.Equal(t, len(prompt), s.Pos())
		}
		out, err := s.Forward([]int{7}, len(prompt), lm.WantLast)
		require.NoError(t, err)
		return out.Data().([]float32)
	}
	require.Equal(t, next(nil), next([]int{2, 5}))

	for _, bad := range []string{"0", "9", "2,x", "2,,3"} {
		code, _, errOut := reel("bench", "--windows", bad)
		require.Equal(t, exitUsage, code, bad)
		require.Contains(t, errOut, "--windows", bad)
	}
}

// TestBenchAfter: a prompt after one of another length of its row bucket
// builds no plan; with --buckets off it builds its own.
func TestBenchAfter(t *testing.T) {
	for _, tc := range []struct {
		buckets, want string
	}{
		{"2", "(the first prompt after one of 18 tokens, plans built: 0, "},
		{"off", "(the first prompt after one of 18 tokens, plans built: 1, "},
		{"0", "(the first prompt after one of 18 tokens, plans built: 1, "}, // the CPU's default: off
	} {
		code, out, errOut := reel("bench", "--model", "../../testdata/dense/llama3-13", "--prompt", "21", "--after", "18", "--tokens", "2", "--buckets", tc.buckets)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, tc.want, "--buckets %s", tc.buckets)
	}
	for _, args := range [][]string{{"--after", "-1"}, {"--buckets", "9"}, {"--buckets", "x"}} {
		code, _, errOut := reel(append([]string{"bench"}, args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, args[0][2:], "%v", args)
	}
}
