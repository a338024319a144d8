package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	reelroot "github.com/reel-runtime/reel"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/tokenizer"
)

func runPerplexity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var mf modelFlags
	fs := newFlags("perplexity", "[--model DIR] --text-file F [--ctx N] [--quant fp8|q8|q4] [--device cpu|cuda]", `
Perplexity measures how well a model predicts a text, the way llama.cpp's
perplexity does: the text's tokens (the model's tokenizer.json, or bytes for
a byte-level model such as the embedded dory-gotiny) are cut into windows of
--ctx tokens, each run from an empty cache, and the second half of each
window is scored: the mean negative log-likelihood of each token given the
ones before it in its window. It prints one line per window, then
"perplexity P ± E over N tokens" (E: P times the standard error of the mean
log-likelihood) with the tokens/s. --quant quantizes the model's projections
at load (fp8, q8 or q4), the measure of what a format costs.`, stderr)
	mf.register(fs, true)
	textFile := fs.String("text-file", "", "the text to score (required)")
	window := fs.Int("ctx", 512, "tokens a window (a text shorter than one is one window)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *textFile == "" {
		return usagef("--text-file is required")
	}
	if *window < 4 {
		return usagef("--ctx %d: want at least 4 tokens", *window)
	}
	if err := mf.check(); err != nil {
		return err
	}
	text, err := os.ReadFile(*textFile)
	if err != nil {
		return err
	}
	dir, err := mf.modelDir(true)
	if err != nil {
		return err
	}
	m, err := loadModel(dir, mf.quant)
	if err != nil {
		return err
	}
	name := mf.dir
	if name == "" {
		name = "embedded " + reelroot.DefaultModelName
	}
	l, err := mf.start(ctx, name, m)
	if err != nil {
		return err
	}
	defer l.Close()
	ids, err := textIDs(dir, l.model, string(text))
	if err != nil {
		return err
	}
	if err := checkIDs(ids, l.model.Vocab()); err != nil {
		return fmt.Errorf("%s: %w", *textFile, err)
	}
	q := mf.quant
	if q == "" {
		q = "as stored"
	}
	fmt.Fprintf(stdout, "%s (%s, %s): %d tokens in windows of %d\n", name, l.model.Arch(), q, len(ids), min(*window, len(ids)))
	start := time.Now()
	r, err := perplexity(ctx, l.session, l.model.Vocab(), ids, *window, mf.chunkRows(), func(w int, nll float64, n int) {
		fmt.Fprintf(stdout, "window %d: perplexity %.4f over %d tokens\n", w, math.Exp(nll/float64(n)), n)
	})
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "%d tokens run in %.2f s: %.1f tokens/s\n", r.run, secs, float64(r.run)/secs)
	fmt.Fprintf(stdout, "perplexity %.4f ± %.4f over %d tokens\n", r.ppl, r.err, r.n)
	return nil
}

// textIDs are the token ids of text: bytes for a byte-level model, else
// the encoding of the folder's tokenizer.json (no special tokens added).
func textIDs(dir string, m models.Model, text string) ([]int, error) {
	if bl, ok := m.(models.ByteLevel); ok && bl.ByteTokens() {
		ids := make([]int, len(text))
		for i := range len(text) {
			ids[i] = int(text[i])
		}
		return ids, nil
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: no tokenizer.json, and the model's tokens are not bytes", filepath.Clean(dir))
		}
		return nil, err
	}
	return tok.Encode(text, false)
}

// pplResult is a perplexity: its value, the error of its estimate, the
// tokens scored and the tokens run.
type pplResult struct {
	ppl, err float64
	n, run   int
}

// perplexity scores ids in windows of ctx tokens (the last window may be
// shorter; a text shorter than ctx is one window): each window runs on a
// reset session in chunks of chunk rows, and the tokens of its second half
// are scored by the log-softmax of the logits of the row before them.
// done is told each window's summed negative log-likelihood and count.
func perplexity(ctx context.Context, s models.Session, vocab int, ids []int, window, chunk int, done func(w int, nll float64, n int)) (pplResult, error) {
	if len(ids) < 2 {
		return pplResult{}, fmt.Errorf("%d tokens: perplexity needs at least 2", len(ids))
	}
	var sum, sum2 float64
	var r pplResult
	windows := max(1, len(ids)/window)
	for w := range windows {
		if err := ctx.Err(); err != nil {
			return pplResult{}, err
		}
		win := ids[w*window : min((w+1)*window, len(ids))]
		if windows == 1 {
			win = ids
		}
		first := max(1, len(win)/2) // the first token scored
		s.Reset()
		var wsum float64
		wn := 0
		for at := 0; at < len(win)-1; at += chunk {
			part := win[at:min(at+chunk, len(win)-1)]
			d, err := s.Forward(part, at, lm.WantAll)
			if err != nil {
				return pplResult{}, fmt.Errorf("window %d, position %d: %w", w, at, err)
			}
			r.run += len(part)
			logits := d.Data().([]float32)
			for j := range part {
				t := at + j + 1 // the token row j predicts
				if t < first {
					continue
				}
				nll := logSumExp(logits[j*vocab:(j+1)*vocab]) - float64(logits[j*vocab+win[t]])
				wsum += nll
				sum2 += nll * nll
				wn++
			}
		}
		sum += wsum
		r.n += wn
		if done != nil {
			done(w, wsum, wn)
		}
	}
	mean := sum / float64(r.n)
	r.ppl = math.Exp(mean)
	if r.n > 1 {
		v := max(0, sum2/float64(r.n)-mean*mean)
		r.err = r.ppl * math.Sqrt(v/float64(r.n-1))
	}
	return r, nil
}

// logSumExp is log Σ exp(x), in float64.
func logSumExp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}
