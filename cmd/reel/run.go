package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	mf := modelFlags{reuseLogits: true}
	var gf genFlags
	fs := newFlags("run", "[--model DIR] [--tokenizer DIR] [--prompt TEXT | --prompt-ids 1,2,3] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--stop STRING] [--seed S] [--draft N]", `
Run generates text: it feeds the prompt in chunks, then decodes one token at
a time, printing the prompt and each token's text as it comes, and ends
with the prefill and decode speeds on stderr. Text goes through the model
folder's tokenizer.json (or --tokenizer's), streamed so that a character
split across tokens prints whole; a model without one whose tokens are
bytes reads and writes bytes, any other takes --prompt-ids and prints ids.
Without --model it runs the embedded dory-gotiny, a tiny byte-level Dory
that writes Go. Any registered architecture runs (its config's model_type
picks it); flags of one architecture's own are refused by the others.

The sampler's settings not given as flags come from the model folder's
generation_config.json (do_sample, temperature, top_k, top_p, min_p,
repetition_penalty), else the defaults shown. Generation stops at an
end-of-sequence id (generation_config.json's eos_token_id, the tokenizer
config's eos_token), where the text holds a --stop string (not printed),
or after --tokens tokens. A model with a draft head (Qwen4-Exp's MTP)
takes --draft N: N tokens drafted a step and verified in one window, each
accepted with the probability the sampler gives it (greedy: while it is
the argmax), which keeps the sampler's distribution (greedy: the very
tokens).`, stderr)
	mf.register(fs, true)
	gf.register(fs, 200)
	prompt := fs.String("prompt", "package main\n", "prompt text")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids (overrides --prompt)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if err := gf.parsed(fs, mf.chunkRows()); err != nil {
		return err
	}
	ids, err := parseIDs(*promptIDs)
	if err != nil {
		return usagef("--prompt-ids: %v", err)
	}
	l, gen, smp, err := gf.open(ctx, &mf, true)
	if err != nil {
		return err
	}
	defer l.Close()
	g, err := newGenerator(l.session, smp, gf.draft)
	if err != nil {
		return err
	}
	if *promptIDs != "" {
		if err := checkPrompt(ids, l.model.Vocab()); err != nil {
			return usagef("--prompt-ids: %v", err)
		}
	}
	tio, err := openTextIO(gf.tokenizer, mf.dir, l.model)
	if err != nil {
		return err
	}
	so, err := gf.stopping(gen, tio)
	if err != nil {
		return err
	}
	if *promptIDs == "" {
		if ids, err = tio.encode(*prompt, true); err != nil {
			return usagef("--prompt: %v", err)
		}
		if err := checkPrompt(ids, l.model.Vocab()); err != nil {
			return usagef("--prompt: %v", err)
		}
	}
	logger(ctx).Debug("generating", "prompt", len(ids), "sampler", fmt.Sprintf("%+v", smp.Options()), "stop", fmt.Sprintf("%+v", so))
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	dec := tio.stream()
	for _, id := range ids {
		s, err := dec.Next(id)
		if err != nil {
			return err
		}
		out.WriteString(s)
	}
	if err := out.Flush(); err != nil {
		return err
	}
	t0 := time.Now()
	logits, err := prefill(ctx, l.session, ids, mf.chunkRows())
	if err != nil {
		return err
	}
	prefillTime := time.Since(t0)
	smp.Prompt(ids)
	r, err := g.run(ctx, logits, so, dec, out)
	out.WriteByte('\n')
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", len(ids), prefillTime.Seconds(), float64(len(ids))/prefillTime.Seconds())
	if n := len(r.ids) - 1; n > 0 {
		fmt.Fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s) on %s\n", n, r.decode.Seconds(), float64(n)/r.decode.Seconds(), l.be.Name())
	}
	if r.windows > 0 {
		fmt.Fprintf(stderr, "drafts:  %d of %d accepted in %d windows\n", r.accepted, r.drafted, r.windows)
	}
	logger(ctx).Debug("stopped", "reason", r.reason.String(), "ids", r.ids)
	if rp, ok := l.session.(models.Reporter); ok {
		for _, line := range rp.Report() {
			fmt.Fprintln(stderr, line)
		}
	}
	logger(ctx).Debug("capture", "stats", l.session.Stats().String())
	return nil
}

// prefill feeds ids from the session's position a chunk per call,
// stopping between chunks when ctx is done, and returns the last
// position's logits.
func prefill(ctx context.Context, s models.Session, ids []int, chunk int) ([]float32, error) {
	var last []float32
	pos0 := s.Pos()
	for a := 0; a < len(ids); a += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b := min(a+chunk, len(ids))
		want := lm.WantNone
		if b == len(ids) {
			want = lm.WantLast
		}
		d, err := s.Forward(ids[a:b], pos0+a, want)
		if err != nil {
			return nil, err
		}
		if d != nil {
			last = d.Data().([]float32)
		}
	}
	return last, nil
}
