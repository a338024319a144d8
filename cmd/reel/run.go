package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/sample"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	mf := modelFlags{reuseLogits: true}
	fs := newFlags("run", "[--model DIR] [--prompt TEXT | --prompt-ids 1,2,3] [--tokens N] [--temperature T] [--top-k K] [--seed S] [--draft N]", `
Run generates text: it feeds the prompt in chunks, then decodes one token at
a time, printing each as it comes (as text when the model's tokens are bytes,
as ids otherwise), and ends with the prefill and decode speeds on stderr.
Without --model it runs the embedded dory-gotiny, a tiny Dory that writes Go.
Any registered architecture runs (its config's model_type picks it); flags
of one architecture's own are refused by the others. A model with a draft
head (Qwen4-Exp's MTP) takes --draft N: N tokens drafted a step and
verified in one window, each accepted with the probability the sampler
gives it (greedy: while it is the argmax), which keeps the sampler's
distribution (greedy: the very tokens).`, stderr)
	mf.register(fs, true)
	prompt := fs.String("prompt", "package main\n", "prompt text (models with byte tokens)")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids (overrides --prompt)")
	tokens := fs.Int("tokens", 200, "tokens to generate")
	temperature := fs.Float64("temperature", 0.8, "sampling temperature; 0 is greedy")
	topK := fs.Int("top-k", 40, "sample among the k most likely tokens; 0: all")
	seed := fs.Uint64("seed", 1, "seed of the sampler")
	draft := fs.Int("draft", 0, "models with a draft head: tokens to draft a step, verified in one window")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *tokens < 0 {
		return usagef("--tokens %d is negative", *tokens)
	}
	smp, err := sample.New(*temperature, *topK, *seed)
	if err != nil {
		return usagef("%v", err)
	}
	if *draft < 0 {
		return usagef("--draft %d is negative", *draft)
	}
	if *draft > 0 && *draft >= mf.chunk {
		return usagef("--draft %d: a window of %d rows is more than a chunk of %d (--chunk)", *draft, *draft+1, mf.chunk)
	}
	mf.drafting = *draft > 0
	ids, err := parseIDs(*promptIDs)
	if err != nil {
		return usagef("--prompt-ids: %v", err)
	}
	l, err := mf.open(ctx, true)
	if err != nil {
		return err
	}
	defer l.Close()
	bl, _ := l.model.(models.ByteLevel)
	bytes := bl != nil && bl.ByteTokens()
	switch {
	case *promptIDs != "":
	case bytes:
		for _, b := range []byte(*prompt) {
			ids = append(ids, int(b))
		}
	default:
		return usagef("the model's tokens are not bytes: give --prompt-ids")
	}
	if len(ids) == 0 {
		return usagef("the prompt is empty")
	}
	if err := checkIDs(ids, l.model.Vocab()); err != nil {
		return usagef("--prompt-ids: %v", err)
	}
	dr, _ := l.session.(models.Drafter)
	if *draft > 0 && (dr == nil || !dr.CanDraft()) {
		return usagef("--draft %d: the model has no draft head", *draft)
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	show := func(id int) {
		if bytes {
			out.WriteByte(byte(id))
		} else {
			out.WriteString(strconv.Itoa(id) + " ")
		}
	}
	for _, id := range ids {
		show(id)
	}
	out.Flush()
	t0 := time.Now()
	logits, err := prefill(ctx, l.session, ids, mf.chunk)
	if err != nil {
		return err
	}
	prefillTime := time.Since(t0)
	next := smp.Next(logits)
	t1 := time.Now()
	produced, windows, drafted, accepted := 0, 0, 0, 0
	for produced < *tokens && ctx.Err() == nil {
		show(next)
		out.Flush()
		produced++
		if produced == *tokens {
			break
		}
		if *draft == 0 {
			d, err := l.session.Forward([]int{next}, l.session.Pos(), lm.WantLast)
			if err != nil {
				return err
			}
			next = smp.Next(d.Data().([]float32))
			continue
		}
		drafts, err := dr.Draft(next, min(*draft, *tokens-produced))
		if err != nil {
			return err
		}
		a, lg, err := dr.VerifyFunc(next, drafts, smp.Accept)
		if err != nil {
			return err
		}
		for _, d := range drafts[:a] {
			show(d)
		}
		produced += a
		windows, drafted, accepted = windows+1, drafted+len(drafts), accepted+a
		if a < len(drafts) {
			next = smp.NextExcept(lg, drafts[a])
		} else {
			next = smp.Next(lg)
		}
	}
	decode := time.Since(t1)
	out.WriteByte('\n')
	out.Flush()
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", len(ids), prefillTime.Seconds(), float64(len(ids))/prefillTime.Seconds())
	if produced > 1 {
		fmt.Fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s) on %s\n", produced-1, decode.Seconds(), float64(produced-1)/decode.Seconds(), l.be.Name())
	}
	if windows > 0 {
		fmt.Fprintf(stderr, "drafts:  %d of %d accepted in %d windows\n", accepted, drafted, windows)
	}
	if r, ok := l.session.(models.Reporter); ok {
		for _, line := range r.Report() {
			fmt.Fprintln(stderr, line)
		}
	}
	logger(ctx).Debug("capture", "stats", l.session.Stats().String())
	return nil
}

// prefill feeds ids from position 0 a chunk per call, stopping between
// chunks when ctx is done, and returns the last position's logits.
func prefill(ctx context.Context, s models.Session, ids []int, chunk int) ([]float32, error) {
	var last []float32
	for a := 0; a < len(ids); a += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b := min(a+chunk, len(ids))
		want := lm.WantNone
		if b == len(ids) {
			want = lm.WantLast
		}
		d, err := s.Forward(ids[a:b], a, want)
		if err != nil {
			return nil, err
		}
		if d != nil {
			last = d.Data().([]float32)
		}
	}
	return last, nil
}
