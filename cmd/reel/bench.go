package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/models/dory"
	"github.com/reel-runtime/reel/models/qwen4"
	"github.com/reel-runtime/reel/planner"
)

// qwen4Synthetic names qwen4.BenchShape for --synthetic: the released
// Qwen4-Exp layer in 12 layers and 64 experts.
const qwen4Synthetic = "qwen4-12l"

// syntheticShapes are the Dory models reel bench can make without a file.
func syntheticShapes() map[string]func() dory.Config {
	return map[string]func() dory.Config{
		"dory-4b":   dory.Released,
		"dory-h512": dory.SmallBench,
	}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	mf := modelFlags{reuseLogits: true}
	fs := newFlags("bench", "[--model DIR | --synthetic dory-4b|dory-h512|qwen4-12l] [--prompt N] [--tokens N] [--device cpu|cuda]", `
Bench measures prefill and decode speed: a prompt of --prompt tokens in
chunks, then --tokens one-token forwards. With --synthetic it makes a model of
a known shape with random weights (--dtype bf16 or f32), needing no file.
It prints tokens/s, the plan steps per decode token and the plan cache's
counters (plans, records, updates, replays).`, stderr)
	mf.register(fs, true)
	synthetic := fs.String("synthetic", "", "random-weight model: dory-4b (the released shape), dory-h512, or "+qwen4Synthetic+" (Qwen4-Exp's released layer, 12 layers, 64 experts)")
	dtype := fs.String("dtype", "bf16", "weight dtype of a synthetic model: bf16 or f32")
	promptN := fs.Int("prompt", 128, "prompt tokens")
	tokens := fs.Int("tokens", 64, "decode tokens")
	loops := fs.Int("loops", 0, "recurrent loops (0: the model's)")
	profile := fs.Bool("profile", false, "also time the decode plan's launches op by op (each followed by a sync)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the decode loop to this file (for go tool pprof)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *promptN < 1 || *tokens < 1 {
		return usagef("--prompt and --tokens must be positive")
	}
	if *synthetic == "" && mf.dir != "" && isQwen4(mf.dir) {
		m, err := qwen4.Load(mf.dir)
		if err != nil {
			return err
		}
		defer m.Close()
		return benchQwen4(&mf, mf.dir, m, *promptN, *tokens, stdout)
	}
	if *synthetic == qwen4Synthetic {
		dt, err := graph.ParseDType(*dtype)
		if err != nil || (dt != graph.BF16 && dt != graph.F32) {
			return usagef("--dtype %q: want bf16 or f32", *dtype)
		}
		shape, err := qwen4.Shapes(qwen4.BenchShape(), dt)
		if err != nil {
			return err
		}
		if err := checkMemory("synthetic "+qwen4Synthetic, syntheticMemory(shape.Parameters(), dt, mf.device)); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "making %s with random %s weights...\n", *synthetic, dt)
		m, err := qwen4.Synthetic(qwen4.BenchShape(), dt, 1)
		if err != nil {
			return err
		}
		return benchQwen4(&mf, "synthetic "+qwen4Synthetic, m, *promptN, *tokens, stdout)
	}
	var l *loaded
	var err error
	if *synthetic != "" {
		shape, ok := syntheticShapes()[*synthetic]
		if !ok {
			return usagef("unknown --synthetic %q (want dory-4b, dory-h512 or %s)", *synthetic, qwen4Synthetic)
		}
		dt, err := graph.ParseDType(*dtype)
		if err != nil || (dt != graph.BF16 && dt != graph.F32) {
			return usagef("--dtype %q: want bf16 or f32", *dtype)
		}
		c := shape()
		if err := checkMemory("synthetic "+*synthetic, syntheticMemory(c.Parameters(), dt, mf.device)); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "making %s with random %s weights...\n", *synthetic, dt)
		m, err := dory.Synthetic(c, dt, 1)
		if err != nil {
			return err
		}
		if l, err = mf.session(ctx, m); err != nil {
			return err
		}
	} else if l, err = mf.open(ctx, true); err != nil {
		return err
	}
	defer l.Close()
	m, s := l.model, l.session
	nl := *loops
	if nl == 0 {
		nl = m.Config.Loops
	}
	ids := make([]int, *promptN)
	for i := range ids {
		ids[i] = (i*31 + 7) % m.Config.Vocab
	}
	t0 := time.Now()
	if _, err := s.Forward(ids, 0, nl, dory.WantLast); err != nil {
		return err
	}
	if err := l.be.Sync(); err != nil {
		return err
	}
	prefill := time.Since(t0)
	// The first decode token plans and records; time the rest.
	if _, err := s.Forward([]int{1}, s.Pos(), nl, dory.WantLast); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
	}
	t1 := time.Now()
	for i := 0; i < *tokens; i++ {
		if _, err := s.Forward([]int{(i * 13) % m.Config.Vocab}, s.Pos(), nl, dory.WantLast); err != nil {
			return err
		}
	}
	decode := time.Since(t1)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "model        %s (%d parameters, %.2f GB of matrices) on %s\n", modelName(mf.dir, *synthetic), m.Parameters(), float64(m.MatrixBytes())/1e9, l.be.Name())
	fmt.Fprintf(&b, "loops        %d, kv %s\n", nl, s.Config().KV)
	fmt.Fprintf(&b, "prefill      %d tokens in %.3f s: %.1f tok/s\n", *promptN, prefill.Seconds(), float64(*promptN)/prefill.Seconds())
	fmt.Fprintf(&b, "decode       %d tokens in %.3f s: %.1f tok/s (%.3f ms/token)\n", *tokens, decode.Seconds(), float64(*tokens)/decode.Seconds(), decode.Seconds()*1e3/float64(*tokens))
	if p, rep, ok := s.Planned(dory.Key{Stage: dory.All, Loops: nl, Want: dory.WantLast, Rows: 1}); ok {
		if err := writeDecodePlan(&b, p, rep, l.be, float64(*tokens)/decode.Seconds(), ""); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "plan cache   %s\n", s.Stats())
	if *profile {
		prof, err := s.Profile(dory.Key{Stage: dory.All, Loops: nl, Want: dory.WantLast, Rows: 1})
		if err != nil {
			return err
		}
		var total time.Duration
		for _, p := range prof {
			total += p.Time
		}
		fmt.Fprintf(&b, "profile      one decode token, each launch synced: %.3f ms\n", total.Seconds()*1e3)
		for _, p := range prof {
			fmt.Fprintf(&b, "  %-18s %4d launches %9.3f ms %5.1f %%\n", p.Op, p.Launches, p.Time.Seconds()*1e3, 100*p.Time.Seconds()/total.Seconds())
		}
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

func modelName(dir, synthetic string) string {
	switch {
	case synthetic != "":
		return "synthetic " + synthetic
	case dir != "":
		return dir
	}
	return "embedded dory-gotiny"
}

// writeDecodePlan writes the decode plan's lines of a bench report: its
// launches and arena, the weight bytes a token reads (qualified by bytesNote,
// e.g. " at most") and, on a backend that measures its copy bandwidth, the
// bound that gives and the share of it tps reaches.
func writeDecodePlan(b *strings.Builder, p *planner.Planned, rep planner.Report, be any, tps float64, bytesNote string) error {
	fmt.Fprintf(b, "decode plan  %d launches per token, arena %d bytes (temporaries %d)\n", len(p.Schedule), rep.ArenaBytes, rep.TempBytes)
	perToken := weightBytesRead(p)
	fmt.Fprintf(b, "bytes read   %.3f GB of weights per decode token%s (%.1f GB/s at this speed)\n", float64(perToken)/1e9, bytesNote, float64(perToken)*tps/1e9)
	bm, ok := be.(bandwidthMeter)
	if !ok {
		return nil
	}
	bw, err := bm.MeasureCopyBandwidth(1<<30, 10)
	if err != nil {
		return err
	}
	bound := bw / float64(perToken)
	fmt.Fprintf(b, "bandwidth    copy %.0f GB/s (read+write, measured now): bound %.1f tok/s; decode at %.1f %% of it\n", bw/1e9, bound, 100*tps/bound)
	return nil
}

// weightBytesRead is the bytes of weights one run of a plan reads: every
// weight input of every launch (a weight read in each loop counts each
// time), but only the gathered rows of an embedding or n-gram table, and at
// most one expert per (row, pick) unit of an expert product.
func weightBytesRead(p *planner.Planned) int {
	total := 0
	for _, n := range p.Schedule {
		for i, v := range n.Inputs {
			if v.Kind != graph.Weight {
				continue
			}
			switch {
			case n.Op == "embed" && len(v.Shape) == 2 && len(n.Outputs) == 1:
				// the rows of the ids
				total += n.Outputs[0].Shape[0] * v.Shape[1] * v.DType.Size()
			case n.Op == "ngram_embed" && len(n.Outputs) == 1:
				// one table row per output row and head, whichever shard
				total += n.Outputs[0].Shape.Elems() * v.DType.Size() / max(1, len(n.Inputs)-1)
			case n.Op == "expert_matmul" && i == 1 && len(v.Shape) == 3 && len(n.Inputs) == 3:
				// at most one expert per (row, pick) unit
				units := n.Inputs[2].Shape.Elems()
				total += min(v.Shape[0], units) * v.Shape[1] * v.Shape[2] * v.DType.Size()
			default:
				total += v.Bytes()
			}
		}
	}
	return total
}
