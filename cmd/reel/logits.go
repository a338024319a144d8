package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/reel-runtime/reel/models/dory"
)

// logitsOutput is what reel logits prints.
type logitsOutput struct {
	Model     string      `json:"model"`
	Device    string      `json:"device"`
	Loops     int         `json:"loops,omitempty"`
	Want      string      `json:"want"`
	Positions []int       `json:"positions"`
	Logits    [][]float32 `json:"logits"`
}

func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var mf modelFlags
	fs := newFlags("logits", "--model DIR --ids 1,2,3 [--chunk N] [--loops L] [--want last|all] [--device cpu|cuda]", `
Logits feeds token ids through the model in chunks and prints the logits as
JSON: {"logits": [[...], ...], "positions": [...], ...}, one row per position
(the last, or all). Dory and Qwen4-Exp checkpoints are told apart by their
config's model_type.`, stderr)
	mf.register(fs, false)
	idsFlag := fs.String("ids", "", "comma-separated token ids (required)")
	loops := fs.Int("loops", 0, "recurrent loops (0: the checkpoint's)")
	wantFlag := fs.String("want", "last", "rows to print: last or all")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	ids, err := parseIDs(*idsFlag)
	if err != nil {
		return usagef("--ids: %v", err)
	}
	if len(ids) == 0 {
		return usagef("--ids is required")
	}
	want, err := dory.ParseWant(*wantFlag)
	if err != nil || want == dory.WantNone {
		return usagef("--want %q: want last or all", *wantFlag)
	}
	if mf.dir != "" && isQwen4(mf.dir) {
		return qwen4Logits(&mf, ids, want == dory.WantLast, stdout)
	}
	l, err := mf.open(ctx, false)
	if err != nil {
		return err
	}
	defer l.Close()
	nl := *loops
	if nl == 0 {
		nl = l.model.Config.Loops
	}
	out := logitsOutput{Model: mf.dir, Device: l.be.Name(), Loops: nl, Want: want.String()}
	for a := 0; a < len(ids); a += mf.chunk {
		b := min(a+mf.chunk, len(ids))
		w := want
		if want == dory.WantLast && b < len(ids) {
			w = dory.WantNone
		}
		d, err := l.session.Forward(ids[a:b], a, nl, w)
		if err != nil {
			return err
		}
		if d == nil {
			continue
		}
		data, vocab := d.Data().([]float32), d.Shape()[1]
		for r := 0; r < d.Shape()[0]; r++ {
			pos := a + r
			if w == dory.WantLast {
				pos = b - 1
			}
			out.Positions = append(out.Positions, pos)
			out.Logits = append(out.Logits, data[r*vocab:(r+1)*vocab])
		}
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(out)
}
