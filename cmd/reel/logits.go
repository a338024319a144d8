package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/reel-runtime/reel/lm"
)

// logitsOutput is what reel logits prints.
type logitsOutput struct {
	Model     string      `json:"model"`
	Arch      string      `json:"arch"`
	Device    string      `json:"device"`
	Want      string      `json:"want"`
	Positions []int       `json:"positions"`
	Logits    [][]float32 `json:"logits"`
}

func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var mf modelFlags
	fs := newFlags("logits", "[--model DIR] --ids 1,2,3 [--chunk N] [--want last|all] [--device cpu|cuda]", `
Logits feeds token ids through the model in chunks and prints the logits as
JSON: {"logits": [[...], ...], "positions": [...], ...}, one row per position
(the last, or all). Without --model it runs the embedded dory-gotiny; any
registered architecture runs (its config's model_type picks it).`, stderr)
	mf.register(fs, true)
	idsFlag := fs.String("ids", "", "comma-separated token ids (required)")
	wantFlag := fs.String("want", "last", "rows to print: last or all")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	ids, want, err := parseIDsWant(*idsFlag, *wantFlag)
	if err != nil {
		return err
	}
	l, err := mf.open(ctx, true)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := checkIDs(ids, l.model.Vocab()); err != nil {
		return usagef("--ids: %v", err)
	}
	d, err := l.session.Forward(ids, 0, want)
	if err != nil {
		return err
	}
	out := logitsOutput{Model: l.name, Arch: l.model.Arch(), Device: l.be.Name(), Want: want.String()}
	data, vocab := d.Data().([]float32), d.Shape()[1]
	for r := 0; r < d.Shape()[0]; r++ {
		pos := r
		if want == lm.WantLast {
			pos = len(ids) - 1
		}
		out.Positions = append(out.Positions, pos)
		out.Logits = append(out.Logits, data[r*vocab:(r+1)*vocab])
	}
	return json.NewEncoder(stdout).Encode(out)
}

// parseIDsWant reads --ids (required) and --want (last or all) of the
// commands that print or trace a forward's values.
func parseIDsWant(idsFlag, wantFlag string) ([]int, lm.Want, error) {
	ids, err := parseIDs(idsFlag)
	if err != nil {
		return nil, 0, usagef("--ids: %v", err)
	}
	if len(ids) == 0 {
		return nil, 0, usagef("--ids is required")
	}
	want, err := lm.ParseWant(wantFlag)
	if err != nil || want == lm.WantNone {
		return nil, 0, usagef("--want %q: want last or all", wantFlag)
	}
	return ids, want, nil
}
