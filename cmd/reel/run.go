package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/reel-runtime/reel/models/dory"
	"github.com/reel-runtime/reel/sample"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	mf := modelFlags{reuseLogits: true}
	fs := newFlags("run", "[--model DIR] [--prompt TEXT | --prompt-ids 1,2,3] [--tokens N] [--temperature T] [--top-k K] [--seed S] [--draft N]", `
Run generates text: it feeds the prompt in chunks, then decodes one token at
a time, printing each as it comes (as text when the model's tokens are bytes,
as ids otherwise), and ends with the prefill and decode speeds on stderr.
Without --model it runs the embedded dory-gotiny, a tiny Dory that writes Go.
A Qwen4-Exp checkpoint takes --prompt-ids; with an MTP head, --draft N drafts
N tokens a step and verifies them in one window, each accepted with the
probability the sampler gives it (greedy: while it is the argmax), which
keeps the sampler's distribution (greedy: the very tokens).`, stderr)
	mf.register(fs, true)
	prompt := fs.String("prompt", "package main\n", "prompt text (models with byte tokens)")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids (overrides --prompt)")
	tokens := fs.Int("tokens", 200, "tokens to generate")
	temperature := fs.Float64("temperature", 0.8, "sampling temperature; 0 is greedy")
	topK := fs.Int("top-k", 40, "sample among the k most likely tokens; 0: all")
	seed := fs.Uint64("seed", 1, "seed of the sampler")
	loops := fs.Int("loops", 0, "recurrent loops per token (0: the checkpoint's)")
	draft := fs.Int("draft", 0, "Qwen4-Exp with an MTP head: tokens to draft a step, verified in one window")
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
	if mf.dir != "" && isQwen4(mf.dir) {
		if *promptIDs == "" {
			return usagef("a Qwen4-Exp checkpoint takes its prompt as --prompt-ids")
		}
		ids, err := parseIDs(*promptIDs)
		if err != nil {
			return usagef("--prompt-ids: %v", err)
		}
		return runQwen4(ctx, &mf, ids, *tokens, *draft, smp, stdout, stderr)
	}
	if *draft > 0 {
		return usagef("--draft needs a Qwen4-Exp checkpoint with an MTP head")
	}
	l, err := mf.open(ctx, true)
	if err != nil {
		return err
	}
	defer l.Close()
	m, s := l.model, l.session
	var ids []int
	switch {
	case *promptIDs != "":
		if ids, err = parseIDs(*promptIDs); err != nil {
			return usagef("--prompt-ids: %v", err)
		}
	case m.ByteTokens:
		for _, b := range []byte(*prompt) {
			ids = append(ids, int(b))
		}
	default:
		return usagef("the model's tokens are not bytes: give --prompt-ids")
	}
	if len(ids) == 0 {
		return usagef("the prompt is empty")
	}
	nl := *loops
	if nl == 0 {
		nl = m.Config.Loops
	}
	show := func(id int) {
		if m.ByteTokens {
			stdout.Write([]byte{byte(id)})
		} else {
			io.WriteString(stdout, strconv.Itoa(id)+" ")
		}
	}
	for _, id := range ids {
		show(id)
	}
	t0 := time.Now()
	out, err := s.Forward(ids, 0, nl, dory.WantLast)
	if err != nil {
		return err
	}
	prefill := time.Since(t0)
	next := smp.Next(out.Data().([]float32))
	t1 := time.Now()
	n := 0
	for ; n < *tokens; n++ {
		if ctx.Err() != nil {
			break
		}
		show(next)
		if n+1 == *tokens {
			n++
			break
		}
		out, err = s.Forward([]int{next}, s.Pos(), nl, dory.WantLast)
		if err != nil {
			return err
		}
		next = smp.Next(out.Data().([]float32))
	}
	decode := time.Since(t1)
	fmt.Fprintln(stdout)
	fmt.Fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", len(ids), prefill.Seconds(), float64(len(ids))/prefill.Seconds())
	if n > 1 {
		fmt.Fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s) on %s\n", n-1, decode.Seconds(), float64(n-1)/decode.Seconds(), l.be.Name())
	}
	if s.GateTokens > 0 {
		fmt.Fprintf(stderr, "gate:    %d of %d tokens took one pass\n", s.GateOne, s.GateTokens)
	}
	logger(ctx).Debug("capture", "stats", s.Stats().String())
	return nil
}
