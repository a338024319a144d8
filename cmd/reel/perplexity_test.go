package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/lm"
)

// oracle is a session whose logits for a row are 0 but for the token that
// follows it in seq, which gets hit: the log-likelihood of every scored
// token is known in closed form.
type oracle struct {
	seq        []int
	vocab, pos int
	hit        float32
	resets     int
}

func (o *oracle) Forward(ids []int, pos0 int, want lm.Want) (*tensor.Dense, error) {
	if pos0 != o.pos || want != lm.WantAll {
		return nil, os.ErrInvalid
	}
	out := make([]float32, len(ids)*o.vocab)
	for j := range ids {
		if t := o.base() + pos0 + j + 1; t < len(o.seq) {
			out[j*o.vocab+o.seq[t]] = o.hit
		}
	}
	o.pos += len(ids)
	return tensor.New(tensor.WithShape(len(ids), o.vocab), tensor.WithBacking(out)), nil
}

// base is where the current window starts in seq (windows follow each
// other, one reset each).
func (o *oracle) base() int { return (o.resets - 1) * window }

const window = 10

func (o *oracle) Pos() int             { return o.pos }
func (o *oracle) Rollback(int) error   { return nil }
func (o *oracle) Reset()               { o.pos = 0; o.resets++ }
func (o *oracle) Stats() capture.Stats { return capture.Stats{} }
func (o *oracle) Close() error         { return nil }
func (o *oracle) nll() float64 {
	return math.Log(float64(o.vocab-1)+math.Exp(float64(o.hit))) - float64(o.hit)
}

// TestPerplexityWindows: every window of ctx tokens runs from a reset
// session in chunks, its second half is scored, and the perplexity is
// exp of the mean negative log-likelihood: with every scored token's
// likelihood the same, exactly exp(nll) with no error.
func TestPerplexityWindows(t *testing.T) {
	seq := make([]int, 35)
	for i := range seq {
		seq[i] = (i * 7) % 13
	}
	for _, chunk := range []int{1, 3, 64} {
		o := &oracle{seq: seq, vocab: 13, hit: 2.5}
		var got []int
		r, err := perplexity(context.Background(), o, 13, seq, window, chunk, func(w int, nll float64, n int) {
			got = append(got, n)
			require.InDelta(t, o.nll()*float64(n), nll, 1e-9)
		})
		require.NoError(t, err)
		require.Equal(t, 3, o.resets, "three windows of 10 (the last 5 tokens are left)")
		require.Equal(t, []int{5, 5, 5}, got, "the second half of each window: tokens 5..9")
		require.Equal(t, 15, r.n)
		require.Equal(t, 27, r.run, "the last token of a window is never run")
		require.InDelta(t, math.Exp(o.nll()), r.ppl, 1e-9)
		require.InDelta(t, 0, r.err, 1e-6)
	}
	// Uniform logits: the perplexity is the vocabulary.
	o := &oracle{seq: seq[:7], vocab: 13}
	r, err := perplexity(context.Background(), o, 13, seq[:7], window, 4, nil)
	require.NoError(t, err)
	require.InDelta(t, 13, r.ppl, 1e-9)
	require.Equal(t, 4, r.n, "one short window: tokens 3..6")
	_, err = perplexity(context.Background(), o, 13, seq[:1], window, 4, nil)
	require.ErrorContains(t, err, "at least 2")
}

// TestPerplexityCommand: reel perplexity on the embedded model over Go
// source, as stored and quantized at load, ends with its summary line.
func TestPerplexityCommand(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.go")
	src, err := os.ReadFile("perplexity.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(text, src[:1500], 0o644))
	last := regexp.MustCompile(`^perplexity ([0-9.]+) ± [0-9.]+ over 700 tokens$`)
	for _, q := range []string{"", "q4"} {
		args := []string{"perplexity", "--text-file", text, "--ctx", "200"}
		if q != "" {
			args = append(args, "--quant", q)
		}
		code, out, errOut := reel(args...)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		m := last.FindStringSubmatch(lines[len(lines)-1])
		require.NotNil(t, m, out)
		require.Contains(t, out, "window 6:")
	}
	code, _, errOut := reel("perplexity", "--text-file", text, "--quant", "q3")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--quant "q3"`)
	code, _, errOut = reel("perplexity")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--text-file is required")
}
