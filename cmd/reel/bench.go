package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	mf := modelFlags{reuseLogits: true}
	fs := newFlags("bench", "[--model DIR | --synthetic "+strings.Join(models.SyntheticNames(), "|")+"] [--prompt N] [--tokens N] [--device cpu|cuda]", `
Bench measures prefill and decode speed: a prompt of --prompt tokens in
chunks (run twice: the first builds the plans, the second is timed; with
--after, a prompt of that many tokens runs before both, as a process that
has served another length: the first then builds only what that one's
plans do not serve, a prompt chunk running the plan of its row bucket), then
--tokens one-token forwards. With --synthetic it makes a model of
a known shape with random weights (--dtype bf16 or f32), needing no file.
It prints tokens/s, the plan's launches per decode token, the bytes of
weights a token reads, the plan cache's counters (plans, records, updates,
replays) and, on CUDA, the card's copy bandwidth measured in the same run
and the decode speed as a share of the bound it sets. For the prompt it prints
tokens/s, the time to the first token, the products' work (TFLOP/s) and, on
CUDA, that as a share of the card's bf16 matrix rate measured in the same run
(a large cuBLAS product of random matrices). --windows times forwards of
a few rows at once after the decode (a speculation window's verification,
or a batch of sequences' decode rows), each against a one-row forward
timed the same way.`, stderr)
	mf.register(fs, true)
	synthetic := fs.String("synthetic", "", "random-weight model of a known shape: "+strings.Join(models.SyntheticNames(), ", "))
	dtype := fs.String("dtype", "bf16", "weight dtype of a synthetic model: bf16 or f32")
	promptN := fs.Int("prompt", 128, "prompt tokens")
	after := fs.Int("after", 0, "first run (untimed) a prompt of this many tokens, whose plans the timed prompts may share (see --buckets)")
	tokens := fs.Int("tokens", 64, "decode tokens")
	context := fs.Int("context", 32768, "the positions the states (KV caches) are sized for in the report's context line")
	profile := fs.Bool("profile", false, "also time the last prompt chunk's and the decode plan's launches op by op (each followed by a sync)")
	ablate := fs.Bool("ablate", false, "at the end, time what each op of the decode plan and of the last prompt chunk's plan costs inside replays, by replaying the plan without it")
	windows := fs.String("windows", "", "also time forwards of these row counts after the decode (comma-separated, 1 to 8: e.g. 2,5,8), each against one row")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the decode loop to this file (for go tool pprof)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *promptN < 1 || *tokens < 1 {
		return usagef("--prompt and --tokens must be positive")
	}
	if *after < 0 {
		return usagef("--after %d is negative", *after)
	}
	if *context < 1 {
		return usagef("--context %d: want at least one position", *context)
	}
	windowRows, err := parseWindows(*windows)
	if err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	var l *loaded
	if *synthetic != "" {
		if mf.dir != "" {
			return usagef("give --model or --synthetic, not both")
		}
		m, err := mf.synthetic(*synthetic, *dtype, stderr)
		if err != nil {
			return err
		}
		if l, err = mf.start(ctx, "synthetic "+*synthetic, m); err != nil {
			return err
		}
	} else if l, err = mf.open(ctx, true); err != nil {
		return err
	}
	defer l.Close()
	s, vocab := l.session, l.model.Vocab()
	ids := make([]int, max(*promptN, *after))
	for i := range ids {
		ids[i] = (i*31 + 7) % vocab
	}
	if *after > 0 {
		bar := newProgress(mf.progressTo(), "prompt (--after)", int64(*after), progressTokens)
		_, err = prefill(ctx, progressSession{s, bar}, ids[:*after], mf.chunkRows())
		bar.Done()
		if err != nil {
			return err
		}
		s.Reset()
	}
	ids = ids[:*promptN]
	// The prompt runs twice: first cold (its plans built, recorded and
	// their memory allocated, as a process's first prompt of a length),
	// then, after a reset, warm (every later prompt of that length).
	var cold, prefillTime time.Duration
	plans := s.Stats().Plans
	for pass := range 2 {
		if pass == 1 {
			s.Reset()
		}
		t0 := time.Now()
		bar := newProgress(mf.progressTo(), "prompt", int64(len(ids)), progressTokens)
		_, err = prefill(ctx, progressSession{s, bar}, ids, mf.chunkRows())
		bar.Done()
		if err != nil {
			return err
		}
		if err := l.be.Sync(); err != nil {
			return err
		}
		if pass == 0 {
			cold = time.Since(t0)
			plans = s.Stats().Plans - plans
		} else {
			prefillTime = time.Since(t0)
		}
	}
	// The prompt's profile runs its last chunk again now, while the call
	// record on the device still holds that chunk's positions.
	var promptProfile strings.Builder
	pl, _ := s.(models.Planner)
	if *profile && pl != nil {
		rows := lastChunk(*promptN, mf.chunkRows())
		if err := writeProfile(&promptProfile, pl, rows, lm.WantLast, fmt.Sprintf("the last prompt chunk (%d rows)", rows)); err != nil {
			return err
		}
	}
	if _, err := s.Forward([]int{1}, s.Pos(), lm.WantLast); err != nil {
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
	bar := newProgress(mf.progressTo(), "decode", int64(*tokens), progressTokens)
	for i := 0; i < *tokens && ctx.Err() == nil; i++ {
		if _, err := s.Forward([]int{(i * 13) % vocab}, s.Pos(), lm.WantLast); err != nil {
			bar.Done()
			return err
		}
		bar.Add(1)
	}
	decode := time.Since(t1)
	bar.Done()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var windowCost strings.Builder
	if len(windowRows) > 0 {
		if err := writeWindows(&windowCost, s, windowRows, vocab); err != nil {
			return err
		}
	}
	tps := float64(*tokens) / decode.Seconds()
	var b strings.Builder
	quant := ""
	if mf.quant != "" {
		quant = ", projections quantized in " + mf.quant
	}
	fmt.Fprintf(&b, "model        %s (%s, %d parameters%s) on %s\n", l.name, l.model.Arch(), l.model.Parameters(), quant, l.be.Name())
	if r, ok := s.(models.Reporter); ok {
		for _, line := range r.Report() {
			fmt.Fprintln(&b, line)
		}
	}
	first := "the first prompt"
	if *after > 0 {
		first = fmt.Sprintf("the first prompt after one of %d tokens", *after)
	}
	fmt.Fprintf(&b, "prefill      %d tokens in %.3f s: %.1f tok/s, first token after %.1f ms (%s, plans built: %d, %.1f ms)\n",
		*promptN, prefillTime.Seconds(), float64(*promptN)/prefillTime.Seconds(), prefillTime.Seconds()*1e3, first, plans, cold.Seconds()*1e3)
	free := int64(-1)
	if mm, ok := l.be.(memoryMeter); ok {
		used, total, err := mm.MemoryInUse()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "memory       %.2f GiB of the card's %.1f GiB in use after the prompt and the decoded tokens (nothing is freed before the end: the peak)\n",
			float64(used)/(1<<30), float64(total)/(1<<30))
		free = int64(total) - int64(used)
	}
	if sm, ok := s.(stateMeter); ok {
		writeContext(&b, sm.StateBytesAt(*context), *context, free)
	}
	if pl != nil {
		if err := writePromptWork(&b, pl, *promptN, mf.chunkRows(), l.be, prefillTime); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "decode       %d tokens in %.3f s: %.1f tok/s (%.3f ms/token)\n", *tokens, decode.Seconds(), tps, decode.Seconds()*1e3/float64(*tokens))
	if pl != nil {
		if p, rep, ok := pl.ForwardPlan(1, lm.WantLast); ok {
			if err := writeDecodePlan(&b, p, rep, l.be, tps); err != nil {
				return err
			}
		}
	}
	b.WriteString(windowCost.String())
	fmt.Fprintf(&b, "plan cache   %s\n", s.Stats())
	b.WriteString(promptProfile.String())
	if *profile && pl != nil {
		if err := writeProfile(&b, pl, 1, lm.WantLast, "one decode token"); err != nil {
			return err
		}
	}
	if *ablate && pl != nil {
		// Each plan is ablated with the call record of a run of its own
		// (a decode token; the prompt again, warm), as its replays read it.
		if _, err := s.Forward([]int{1}, s.Pos(), lm.WantLast); err != nil {
			return err
		}
		if err := writeAblation(&b, pl, 1, lm.WantLast, "one decode token", decode/time.Duration(*tokens)); err != nil {
			return err
		}
		s.Reset()
		if _, err := prefill(ctx, s, ids[:*promptN], mf.chunkRows()); err != nil {
			return err
		}
		rows, chunks := lastChunk(*promptN, mf.chunkRows()), (*promptN+mf.chunkRows()-1)/mf.chunkRows()
		if err := writeAblation(&b, pl, rows, lm.WantLast, fmt.Sprintf("the last prompt chunk (%d rows)", rows), prefillTime/time.Duration(chunks)); err != nil {
			return err
		}
		s.Reset()
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// writeAblation measures what each op of the plan of rows rows costs
// inside replays of it (models.Planner's AblateForward: the replay's time
// less that of one without the op's launches; each replay starts with the
// copies that restore the recurrent states, in both times), with enough
// replays for half a second a timing at per a replay (5 to 200), and
// writes the table, costliest first. The session is reset after it, by the
// caller.
func writeAblation(b *strings.Builder, pl models.Planner, rows int, want lm.Want, what string, per time.Duration) error {
	reps := 5
	if per > 0 {
		reps = int(min(200, max(5, (500*time.Millisecond)/per)))
	}
	a, err := pl.AblateForward(rows, want, reps)
	if err != nil {
		return fmt.Errorf("ablation of %s: %w", what, err)
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	fmt.Fprintf(b, "ablation     %s: a replay takes %.3f ms; without each op's launches it takes less by (%d replays each):\n", what, ms(a.Replay), reps)
	var sum time.Duration
	for _, o := range a.Ops {
		if o.Err != nil {
			fmt.Fprintf(b, "  %-18s %4d launches not measured: without them the replay fails (%v)\n", o.Op, o.Launches, o.Err)
			continue
		}
		sum += o.Saved
		fmt.Fprintf(b, "  %-18s %4d launches %9.3f ms %5.1f %%\n", o.Op, o.Launches, ms(o.Saved), 100*o.Saved.Seconds()/a.Replay.Seconds())
	}
	fmt.Fprintf(b, "  the ops' costs add up to %.3f ms, %.1f %% of the replay\n", ms(sum), 100*sum.Seconds()/a.Replay.Seconds())
	return nil
}

// stateMeter is a session that sizes its states for a longer sequence;
// *lm.Session is one.
type stateMeter interface {
	StateBytesAt(n int) lm.StateBytes
}

// writeContext writes the context line of a bench report: the bytes of
// the states (KV caches, recurrent states) a sequence of n positions
// keeps, and, given the card's free memory (free >= 0), whether it holds
// what they grow by (the slots are doubled into new buffers before the
// old ones are freed: Peak).
func writeContext(b *strings.Builder, sb lm.StateBytes, n int, free int64) {
	gib := func(x int64) float64 { return float64(x) / (1 << 30) }
	fmt.Fprintf(b, "context      %d positions: states %.2f GiB (KV slots of %d positions %.2f GiB), %.2f GiB more than now (%.2f GiB while the slots grow)",
		n, gib(sb.At), sb.Capacity, gib(sb.Slots), gib(sb.At-sb.Now), gib(sb.Peak-sb.Now))
	if free >= 0 {
		verdict := "fits"
		if sb.Peak-sb.Now > free {
			verdict = "does not fit"
		}
		fmt.Fprintf(b, "; %.2f GiB free: %s", gib(free), verdict)
	}
	b.WriteString("\n")
}

// writeProfile times the launches of the plan of rows rows op by op and
// writes the table, slowest op first.
func writeProfile(b *strings.Builder, pl models.Planner, rows int, want lm.Want, what string) error {
	prof, err := pl.ForwardProfile(rows, want)
	if err != nil {
		return err
	}
	var total time.Duration
	for _, p := range prof {
		total += p.Time
	}
	fmt.Fprintf(b, "profile      %s, each launch synced: %.3f ms\n", what, total.Seconds()*1e3)
	for _, p := range prof {
		fmt.Fprintf(b, "  %-18s %4d launches %9.3f ms %5.1f %%\n", p.Op, p.Launches, p.Time.Seconds()*1e3, 100*p.Time.Seconds()/total.Seconds())
	}
	return nil
}

// lastChunk is the rows of the last forward of a prompt of n tokens run in
// chunks of chunk rows.
func lastChunk(n, chunk int) int { return n - (n-1)/chunk*chunk }

// writePromptWork writes the products' work of a prompt of n tokens in
// chunks of chunk rows: FLOPs, the rate reached in t and,
// on a backend that measures its matrix rate, the share of it.
func writePromptWork(b *strings.Builder, pl models.Planner, n, chunk int, be any, t time.Duration) error {
	var flops float64
	for a := 0; a < n; {
		rows := n - a
		want := lm.WantLast
		if rows > chunk {
			rows, want = chunk, lm.WantNone
		}
		p, _, ok := pl.ForwardPlan(rows, want)
		if !ok {
			return nil // the session ran other plans (a model of its own stages)
		}
		// a chunk on the plan of a bucket of more rows: its rows' share
		// (the padding's products are not the prompt's work)
		planRows := rows
		if v := p.Graph.Lookup(lm.InputIDs); v != nil && len(v.Shape) == 1 && v.Shape[0] > rows {
			planRows = v.Shape[0]
		}
		flops += productFLOPs(p) * float64(rows) / float64(planRows)
		a += rows
	}
	rate := flops / t.Seconds()
	fmt.Fprintf(b, "prompt work  %.4g TFLOP of products: %.4g TFLOP/s", flops/1e12, rate/1e12)
	if pm, ok := be.(matmulPeakMeter); ok {
		peak, err := pm.MeasureMatMulPeak(8192, 20)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, ", %.1f %% of the card's bf16 rate (cuBLAS %.0f TFLOP/s, measured now)", 100*rate/peak, peak/1e12)
	}
	b.WriteString("\n")
	return nil
}

// expertProduct says whether op multiplies rows by their routed experts
// (w [E, out, in], ids last).
func expertProduct(op string) bool {
	return op == "expert_matmul" || op == "quant_expert_matmul" || op == "expert_matmul_glu"
}

// productFLOPs is the floating-point work of a plan's products: 2 per
// weight element per row it multiplies (an expert product: per (row, pick)
// unit), counting a product inside a loop each time it runs.
func productFLOPs(p *planner.Planned) float64 {
	var total float64
	for _, n := range p.Schedule {
		if !strings.Contains(n.Op, "matmul") || len(n.Inputs) < 2 {
			continue
		}
		rows := n.Inputs[0].Shape.Rows()
		k := n.Inputs[0].Shape.Last()
		if expertProduct(n.Op) && len(n.Inputs) >= 3 {
			units := n.Inputs[len(n.Inputs)-1].Shape.Elems()
			if w := n.Inputs[1].Shape; len(w) == 3 {
				total += 2 * float64(units) * float64(w[1]) * float64(k)
			}
			continue
		}
		if n.Op == "hc_mix_matmul" && len(n.Inputs) == 3 && len(n.Inputs[2].Shape) == 2 {
			// the up product multiplies the down projection (input 1), not xn
			w := n.Inputs[2].Shape
			total += 2 * float64(rows) * float64(w[0]) * float64(w[1])
			continue
		}
		if n.Op == "quant_matmul" {
			total += 2 * float64(rows) * float64(k) * float64(n.Outputs[0].Shape.Last())
			continue
		}
		// A weight [out, in] multiplies the node's input (in = k) or,
		// in a fused chain (swiglu_norm_matmul's down product), the
		// output of a product before it (in = that product's out). A
		// quantized weight is its codes, [out, QuantCols(in)], then its
		// scales.
		widths := []int{k}
		in := n.Inputs[1:]
		for i := 0; i < len(in); i++ {
			v := in[i]
			if v.Kind != graph.Weight || len(v.Shape) != 2 {
				continue
			}
			if j := slices.IndexFunc(widths, func(w int) bool { return ops.QuantCols(v.DType, w) == v.Shape[1] }); j >= 0 {
				total += 2 * float64(rows) * float64(v.Shape[0]) * float64(widths[j])
				widths = append(widths, v.Shape[0])
			}
			if v.DType.IsQuantized() {
				i++ // its scales
			}
		}
	}
	return total
}

// writeDecodePlan writes the decode plan's lines of a bench report: its
// launches and arena, the weight bytes a token reads (at most: an expert
// product counts every pick) and, on a backend that measures its copy bandwidth, the
// bound that gives and the share of it tps reaches.
func writeDecodePlan(b *strings.Builder, p *planner.Planned, rep planner.Report, be any, tps float64) error {
	fmt.Fprintf(b, "decode plan  %d launches per token, arena %d bytes (temporaries %d)\n", len(p.Schedule), rep.ArenaBytes, rep.TempBytes)
	perToken := weightBytesRead(p)
	fmt.Fprintf(b, "bytes read   %.3f GB of weights per decode token (%.1f GB/s at this speed)\n", float64(perToken)/1e9, float64(perToken)*tps/1e9)
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
		for _, v := range n.Inputs {
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
			case expertProduct(n.Op) && len(v.Shape) == 3 && v.Shape[0] > 0:
				// at most one expert per (row, pick) unit: its weights (or
				// codes and scales)
				units := n.Inputs[len(n.Inputs)-1].Shape.Elems()
				total += min(v.Shape[0], units) * (v.Bytes() / v.Shape[0])
			default:
				total += v.Bytes()
			}
		}
	}
	return total
}

// parseWindows reads --windows: row counts from 1 to 8, comma-separated.
func parseWindows(list string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	var rows []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 8 {
			return nil, usagef("--windows %q: %q is not a row count from 1 to 8", list, f)
		}
		rows = append(rows, n)
	}
	return rows, nil
}

// windowReps is how many times writeWindows runs each window.
const windowReps = 32

// writeWindows times forwards of each row count in rows at the session's
// position, every row's logits wanted (a speculation window's
// verification), each taken back after it, against a one-row forward timed
// the same way, and writes the line of the report. A session with recurrent
// states goes back through a snapshot taken first.
func writeWindows(b *strings.Builder, s models.Session, rows []int, vocab int) error {
	p := s.Pos()
	if sn, ok := s.(interface{ Snapshot() error }); ok {
		if err := sn.Snapshot(); err != nil {
			return err
		}
	}
	time1 := func(n int) (time.Duration, error) {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = (p + 17*i) % vocab
		}
		var best time.Duration
		for r := range windowReps + 1 {
			t0 := time.Now()
			if _, err := s.Forward(ids, p, lm.WantAll); err != nil {
				return 0, fmt.Errorf("window of %d rows: %w", n, err)
			}
			d := time.Since(t0)
			if err := s.Rollback(p); err != nil {
				return 0, fmt.Errorf("window of %d rows: %w", n, err)
			}
			if r > 0 && (best == 0 || d < best) { // the first run builds the plan
				best = d
			}
		}
		return best, nil
	}
	one, err := time1(1)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "windows      best of %d, logits of every row read: 1 row %.3f ms", windowReps, one.Seconds()*1e3)
	for _, n := range rows {
		d, err := time1(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "; %d rows %.3f ms (%.2fx)", n, d.Seconds()*1e3, d.Seconds()/one.Seconds())
	}
	b.WriteString("\n")
	return nil
}
