package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models/qwen4"
	"github.com/reel-runtime/reel/sample"
	"github.com/reel-runtime/reel/weights"
)

// isQwen4 reports whether the checkpoint in dir is a Qwen4-Exp (by its
// config's model_type).
func isQwen4(dir string) bool {
	cfg, err := weights.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return false
	}
	mt, _ := cfg.String("model_type", "")
	return strings.HasPrefix(mt, "qwen4")
}

// qwen4Session loads a Qwen4-Exp and starts a session with the flags'
// backend and chunk.
func (f *modelFlags) qwen4Session(dir string) (*qwen4.Model, *qwen4.Session, func(), error) {
	m, err := qwen4.Load(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	s, done, err := f.qwen4Start(m, false)
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	return m, s, func() { done(); m.Close() }, nil
}

// qwen4Start starts a session on m with the flags' backend, chunk and
// logits reuse (and the MTP head off with noMTP); done closes the session
// and the backend (not the model).
func (f *modelFlags) qwen4Start(m *qwen4.Model, noMTP bool) (*qwen4.Session, func(), error) {
	be, err := f.openBackend()
	if err != nil {
		return nil, nil, err
	}
	s, err := qwen4.NewSession(m, qwen4.Options{Backend: be, Chunk: f.chunk, NoMTP: noMTP, ReuseLogits: f.reuseLogits})
	if err != nil {
		be.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); be.Close() }, nil
}

// qwen4Logits is reel logits on a Qwen4-Exp checkpoint.
func qwen4Logits(mf *modelFlags, ids []int, last bool, stdout io.Writer) error {
	_, s, done, err := mf.qwen4Session(mf.dir)
	if err != nil {
		return err
	}
	defer done()
	want := qwen4.WantAll
	if last {
		want = qwen4.WantLast
	}
	d, err := s.Forward(ids, 0, want)
	if err != nil {
		return err
	}
	out := logitsOutput{Model: mf.dir, Device: s.Backend().Name(), Want: want.String()}
	rows := denseRows(d)
	for r, row := range rows {
		pos := r
		if last {
			pos = len(ids) - 1
		}
		out.Positions = append(out.Positions, pos)
		out.Logits = append(out.Logits, row)
	}
	return json.NewEncoder(stdout).Encode(out)
}

func denseRows(d *tensor.Dense) [][]float32 {
	data, sh := d.Data().([]float32), d.Shape()
	rows := make([][]float32, sh[0])
	for i := range rows {
		rows[i] = data[i*sh[1] : (i+1)*sh[1]]
	}
	return rows
}

// qwenGolden is a Qwen4-Exp golden.json: logits of every position from one
// forward over the whole sequence, and from a prefill of the first half
// then one token at a time.
type qwenGolden struct {
	Model string `json:"model"`
	Cases []struct {
		IDs         []int       `json:"ids"`
		Full        [][]float64 `json:"logits_full"`
		Incremental [][]float64 `json:"logits_incremental"`
	} `json:"cases"`
}

// checkQwen4 runs reel check on a Qwen4-Exp golden folder: the checkpoint
// and golden.json side by side.
func checkQwen4(ctx context.Context, mf *modelFlags, dir string, raw []byte, tol float64, stdout io.Writer) error {
	var g qwenGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		return fmt.Errorf("check: %s: %w", filepath.Join(dir, "golden.json"), err)
	}
	_, s, done, err := mf.qwen4Session(dir)
	if err != nil {
		return err
	}
	defer done()
	failed, total := 0, 0
	for i, c := range g.Cases {
		for _, mode := range []string{"full", "incremental"} {
			ref := c.Full
			if mode == "incremental" {
				ref = c.Incremental
			}
			if len(ref) == 0 {
				continue
			}
			s.Reset()
			var rows [][]float32
			if mode == "full" {
				d, err := s.Forward(c.IDs, 0, qwen4.WantAll)
				if err != nil {
					return fmt.Errorf("check: case %d %s: %w", i, mode, err)
				}
				rows = denseRows(d)
			} else {
				half := len(c.IDs) / 2
				d, err := s.Forward(c.IDs[:half], 0, qwen4.WantAll)
				if err != nil {
					return fmt.Errorf("check: case %d %s: %w", i, mode, err)
				}
				rows = denseRows(d)
				for p := half; p < len(c.IDs); p++ {
					d, err := s.Forward(c.IDs[p:p+1], p, qwen4.WantAll)
					if err != nil {
						return fmt.Errorf("check: case %d %s position %d: %w", i, mode, p, err)
					}
					rows = append(rows, denseRows(d)...)
				}
			}
			if len(rows) != len(ref) {
				return fmt.Errorf("check: case %d %s: %d rows of logits, golden has %d", i, mode, len(rows), len(ref))
			}
			abs, rel := 0.0, 0.0
			for r := range ref {
				if len(rows[r]) != len(ref[r]) {
					return fmt.Errorf("check: case %d %s row %d: %d logits, golden has %d", i, mode, r, len(rows[r]), len(ref[r]))
				}
				for j, want := range ref[r] {
					d := math.Abs(float64(rows[r][j]) - want)
					abs = math.Max(abs, d)
					rel = math.Max(rel, d/math.Max(math.Abs(want), 1e-6))
				}
			}
			verdict := "ok"
			if !(abs <= tol) {
				verdict = "FAIL"
				failed++
			}
			total++
			fmt.Fprintf(stdout, "case %d  %-22s %-11s %2d ids  max abs %.3g  max rel %.3g  %s\n", i, g.Model, mode, len(c.IDs), abs, rel, verdict)
		}
	}
	logger(ctx).Debug("qwen4 check", "stats", s.Stats().String())
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d past %g", errCheckFailed, failed, total, tol)
	}
	return nil
}

// qwen4Stage builds the Qwen4-Exp graph the dump flags ask for: --stage
// forward (or all) or draft, --want, --rows.
func qwen4Stage(o *dumpOptions) (*graph.Graph, error) {
	var m *qwen4.Model
	var err error
	if o.synthetic == qwen4Synthetic {
		m, err = qwen4.Shapes(qwen4.BenchShape(), graph.BF16)
	} else {
		m, err = qwen4.Load(o.model)
	}
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var st qwen4.Stage
	switch o.stage {
	case "all", "forward":
		st = qwen4.Forward
	case "draft":
		if !m.HasMTP {
			return nil, usagef("--stage draft: the checkpoint has no MTP head")
		}
		st = qwen4.Draft
	case "settle":
		c := m.Config
		return qwen4.Build(&c, qwen4.Key{Stage: qwen4.Settle, Want: qwen4.WantNone, Rows: o.rows, TapeRows: o.rows}, m)
	default:
		return nil, usagef("--stage %q: a Qwen4-Exp has the stages forward, draft and settle", o.stage)
	}
	want, err := qwen4.ParseWant(o.want)
	if err != nil {
		return nil, usagef("--want: %v", err)
	}
	c := m.Config
	return qwen4.Build(&c, qwen4.Key{Stage: st, Want: want, Rows: o.rows}, m)
}

// benchQwen4 is reel bench on a Qwen4-Exp (a checkpoint's or a synthetic
// one, named name): a prompt of promptN tokens, then tokens one-token
// forwards of the main model (the MTP head off, so a token is the forward
// plan alone), with the bytes a token reads and, on CUDA, the bandwidth
// bound.
func benchQwen4(mf *modelFlags, name string, m *qwen4.Model, promptN, tokens int, stdout io.Writer) error {
	s, done, err := mf.qwen4Start(m, true)
	if err != nil {
		return err
	}
	defer done()
	vocab := m.Config.Vocab
	ids := make([]int, promptN)
	for i := range ids {
		ids[i] = (i*31 + 7) % vocab
	}
	t0 := time.Now()
	if _, err := s.Forward(ids, 0, qwen4.WantLast); err != nil {
		return err
	}
	if err := s.Backend().Sync(); err != nil {
		return err
	}
	prefill := time.Since(t0)
	if _, err := s.Forward([]int{1}, s.Pos(), qwen4.WantLast); err != nil {
		return err
	}
	t1 := time.Now()
	for i := 0; i < tokens; i++ {
		if _, err := s.Forward([]int{(i * 13) % vocab}, s.Pos(), qwen4.WantLast); err != nil {
			return err
		}
	}
	decode := time.Since(t1)
	tps := float64(tokens) / decode.Seconds()
	var b strings.Builder
	fmt.Fprintf(&b, "model        %s (Qwen4-Exp, %d parameters) on %s\n", name, m.Parameters(), s.Backend().Name())
	fmt.Fprintf(&b, "prefill      %d tokens in %.3f s: %.1f tok/s\n", promptN, prefill.Seconds(), float64(promptN)/prefill.Seconds())
	fmt.Fprintf(&b, "decode       %d tokens in %.3f s: %.1f tok/s (%.3f ms/token)\n", tokens, decode.Seconds(), tps, decode.Seconds()*1e3/float64(tokens))
	if p, rep, ok := s.Planned(qwen4.Key{Stage: qwen4.Forward, Want: qwen4.WantLast, Rows: 1, Hidden: s.MTP()}); ok {
		if err := writeDecodePlan(&b, p, rep, s.Backend(), tps, " at most"); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "plan cache   %s\n", s.Stats())
	_, err = io.WriteString(stdout, b.String())
	return err
}

// runQwen4 is reel run on a Qwen4-Exp checkpoint: ids are the prompt; with
// draft > 0 each step drafts that many tokens with the MTP head and
// verifies them in one window, accepting each with the probability the
// sampler gives it (speculative sampling; greedy, while it is the argmax).
func runQwen4(ctx context.Context, mf *modelFlags, ids []int, tokens, draft int, smp *sample.Sampler, stdout, stderr io.Writer) error {
	if len(ids) == 0 {
		return usagef("the prompt is empty")
	}
	if chunk, err := lm.ChunkRows(mf.chunk); err == nil && draft >= chunk {
		return usagef("--draft %d: a window of %d rows is more than a chunk of %d (--chunk)", draft, draft+1, chunk)
	}
	_, s, done, err := mf.qwen4Session(mf.dir)
	if err != nil {
		return err
	}
	defer done()
	if draft > 0 && !s.MTP() {
		return usagef("--draft %d: the checkpoint has no MTP head (no mtp.* tensors)", draft)
	}
	show := func(id int) { io.WriteString(stdout, strconv.Itoa(id)+" ") }
	for _, id := range ids {
		show(id)
	}
	t0 := time.Now()
	out, err := s.Forward(ids, 0, qwen4.WantLast)
	if err != nil {
		return err
	}
	prefill := time.Since(t0)
	next := smp.Next(out.Data().([]float32))
	t1 := time.Now()
	produced, windows, drafted, accepted := 0, 0, 0, 0
	for produced < tokens && ctx.Err() == nil {
		show(next)
		produced++
		if produced == tokens {
			break
		}
		if draft == 0 {
			out, err := s.Forward([]int{next}, s.Pos(), qwen4.WantLast)
			if err != nil {
				return err
			}
			next = smp.Next(out.Data().([]float32))
			continue
		}
		drafts, err := s.Draft(next, min(draft, tokens-produced))
		if err != nil {
			return err
		}
		a, lg, err := s.VerifyFunc(next, drafts, smp.Accept)
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
	fmt.Fprintln(stdout)
	fmt.Fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", len(ids), prefill.Seconds(), float64(len(ids))/prefill.Seconds())
	if produced > 1 {
		fmt.Fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s) on %s\n", produced-1, decode.Seconds(), float64(produced-1)/decode.Seconds(), s.Backend().Name())
	}
	if windows > 0 {
		fmt.Fprintf(stderr, "drafts:  %d of %d accepted in %d windows\n", accepted, drafted, windows)
	}
	return nil
}
