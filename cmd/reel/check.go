package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/reel-runtime/reel/models"
)

// errCheckFailed is the error of a check with cases past the tolerance.
var errCheckFailed = errors.New("check: cases past the tolerance")

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var mf modelFlags
	fs := newFlags("check", "--golden DIR [--tol T] [--device cpu|cuda]", `
Check runs every case of DIR/golden.json and prints, per case, the largest
absolute and relative error of the logits against the golden ones; it fails
(exit 1) when a case is past the tolerance. golden.json is either an object
of cases beside the checkpoint in DIR, each checked as one forward over the
whole sequence and as a prefill of its first half then one token at a time
(the Qwen3, Llama and Qwen4-Exp goldens), or a list of cases each naming a
checkpoint folder beside it, with its chunk and loops, checked at the last
position (Dory's).`, stderr)
	mf.register(fs, false)
	dir := fs.String("golden", "", "folder holding golden.json (and the checkpoint, or the checkpoints it names) (required)")
	tol := fs.Float64("tol", 1e-4, "largest absolute error allowed")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("--golden is required")
	}
	if mf.dir != "" {
		return usagef("--model: check takes its checkpoints from --golden")
	}
	if err := mf.check(); err != nil {
		return err
	}
	g, err := models.ReadGolden(*dir)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	loadedModels := map[string]models.Model{}
	defer func() {
		for _, m := range loadedModels {
			m.Close()
		}
	}()
	failed := 0
	for i, c := range g.Cases {
		m := loadedModels[c.Model]
		if m == nil {
			if m, err = loadModel(filepath.Join(*dir, c.Model), mf.quant); err != nil {
				return fmt.Errorf("check: case %d: %w", i, err)
			}
			loadedModels[c.Model] = m
		}
		f := mf
		if c.Chunk > 0 {
			f.chunk = c.Chunk
		}
		f.params = map[string]*string{}
		for k, v := range mf.params {
			f.params[k] = v
		}
		for k, v := range c.Params() {
			f.params[k] = &v
		}
		be, err := f.openBackend(logger(ctx))
		if err != nil {
			return err
		}
		s, err := m.NewSession(f.options(ctx, be))
		if err != nil {
			be.Close()
			return fmt.Errorf("check: case %d: %w", i, err)
		}
		r, err := c.Check(s)
		s.Close()
		be.Close()
		if err != nil {
			return fmt.Errorf("check: case %d (%s): %w", i, c.Model, err)
		}
		verdict := "ok"
		if !(r.Max() <= *tol) {
			verdict = "FAIL"
			failed++
		}
		what := fmt.Sprintf("whole %.3g, incremental %.3g", r.Full, r.Incremental)
		if c.Last != nil {
			what = fmt.Sprintf("chunk %d, loops %d: last %.3g", c.Chunk, c.Loops, r.Last)
		}
		fmt.Fprintf(stdout, "case %d  %-22s %2d ids  max abs %s  max rel %.3g  %s\n", i, m.Arch()+" "+c.Model, len(c.IDs), what, r.Rel, verdict)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d past %g", errCheckFailed, failed, len(g.Cases), *tol)
	}
	return nil
}
