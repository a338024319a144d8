package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/reel-runtime/reel/models/dory"
)

// doryGolden is one case of a Dory golden.json.
type doryGolden struct {
	Model      string    `json:"model"`
	IDs        []int     `json:"ids"`
	Chunk      int       `json:"chunk"`
	Loops      int       `json:"loops"`
	LogitsLast []float64 `json:"logits_last"`
}

// errCheckFailed is returned when a case is past the tolerance.
var errCheckFailed = errors.New("check: cases past the tolerance")

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var mf modelFlags
	fs := newFlags("check", "--golden DIR [--tol T] [--device cpu|cuda]", `
Check runs every case of DIR/golden.json on the checkpoints beside it and
prints, per case, the largest absolute and relative error of the logits
against the golden ones; it fails (exit 1) when a case is past the tolerance.
For Dory, golden.json lists cases naming checkpoint folders beside it; for
Qwen4-Exp, DIR is the checkpoint and each case is checked as one forward over
the whole sequence and as a prefill of its first half then one token at a
time.`, stderr)
	mf.register(fs, false)
	dir := fs.String("golden", "", "folder holding golden.json and the checkpoints it names (required)")
	tol := fs.Float64("tol", 1e-4, "largest absolute error allowed")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("--golden is required")
	}
	raw, err := os.ReadFile(filepath.Join(*dir, "golden.json"))
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if isQwen4(*dir) {
		return checkQwen4(ctx, &mf, *dir, raw, *tol, stdout)
	}
	var cases []doryGolden
	if err := json.Unmarshal(raw, &cases); err != nil {
		return fmt.Errorf("check: %s: %w (Dory's golden format is a list of cases; a Qwen4-Exp golden.json sits beside its checkpoint)", filepath.Join(*dir, "golden.json"), err)
	}
	models := map[string]*dory.Model{}
	defer func() {
		for _, m := range models {
			m.Close()
		}
	}()
	failed := 0
	for i, c := range cases {
		m := models[c.Model]
		if m == nil {
			if m, err = dory.Load(filepath.Join(*dir, c.Model)); err != nil {
				return fmt.Errorf("check: case %d: %w", i, err)
			}
			models[c.Model] = m
		}
		f := mf
		f.chunk = max(c.Chunk, 1)
		l, err := f.session(ctx, m)
		if err != nil {
			return err
		}
		last, err := lastLogits(l.session, c)
		l.session.Close()
		l.be.Close()
		if err != nil {
			return fmt.Errorf("check: case %d (%s): %w", i, c.Model, err)
		}
		if len(last) != len(c.LogitsLast) {
			return fmt.Errorf("check: case %d: %d logits, golden has %d", i, len(last), len(c.LogitsLast))
		}
		abs, rel := 0.0, 0.0
		for j, g := range c.LogitsLast {
			d := math.Abs(float64(last[j]) - g)
			abs = math.Max(abs, d)
			rel = math.Max(rel, d/math.Max(math.Abs(g), 1e-6))
		}
		verdict := "ok"
		if !(abs <= *tol) {
			verdict = "FAIL"
			failed++
		}
		fmt.Fprintf(stdout, "case %d  %-22s chunk %-3d loops %d  max abs %.3g  max rel %.3g  %s\n", i, c.Model, c.Chunk, c.Loops, abs, rel, verdict)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d past %g", errCheckFailed, failed, len(cases), *tol)
	}
	return nil
}

func lastLogits(s *dory.Session, c doryGolden) ([]float32, error) {
	chunk := max(c.Chunk, 1)
	var last []float32
	for a := 0; a < len(c.IDs); a += chunk {
		b := min(a+chunk, len(c.IDs))
		want := dory.WantLast
		if b < len(c.IDs) {
			want = dory.WantNone
		}
		out, err := s.Forward(c.IDs[a:b], a, c.Loops, want)
		if err != nil {
			return nil, err
		}
		if out != nil {
			last = out.Data().([]float32)
		}
	}
	return last, nil
}
