package main

import (
	"strings"
	"testing"

	"github.com/reel-runtime/reel/models"
)

// TestHelpMatchesCode: what the commands' help says they do, they do.
func TestHelpMatchesCode(t *testing.T) {
	_, help, _ := reel("help", "dump")
	// Every stage the help lists for a synthetic shape dumps, and so does
	// forward, the stage every model has.
	for _, shape := range []string{"dory-h512", "qwen4-12l"} {
		a, ok := models.Synthetic(shape)
		if !ok {
			t.Fatalf("no synthetic %s", shape)
		}
		m, err := a.Shapes[shape]()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(help, a.Name+": "+stageNames(m)) {
			t.Errorf("dump -h does not list %s's stages %s:\n%s", a.Name, stageNames(m), help)
		}
		for _, stage := range append(m.Stages(), "forward") {
			code, out, errOut := reel("dump", "--synthetic", shape, "--stage", stage)
			if code != exitOK || !strings.HasPrefix(out, "graph ") {
				t.Errorf("dump --synthetic %s --stage %s: status %d\n%s", shape, stage, code, errOut)
			}
		}
		if !strings.Contains(help, shape) {
			t.Errorf("dump -h does not name --synthetic %s", shape)
		}
	}
	code, out, errOut := reel("dump", "--model", "../../testdata/dense/llama3-13", "--stage", "forward")
	if code != exitOK || !strings.HasPrefix(out, "graph ") || !strings.Contains(help, "llama: forward") {
		t.Errorf("llama's forward: status %d\n%s", code, errOut)
	}

	// logits and run default to the embedded model, as their help says.
	for _, tc := range []struct{ cmd, args string }{{"logits", "--ids 65,66"}, {"run", "--tokens 2"}} {
		_, h, _ := reel("help", tc.cmd)
		if !strings.Contains(h, "Without --model it runs the embedded dory-gotiny") {
			t.Errorf("%s -h does not say it runs the embedded model:\n%s", tc.cmd, h)
		}
		if code, _, errOut := reel(append([]string{tc.cmd}, strings.Fields(tc.args)...)...); code != exitOK {
			t.Errorf("%s %s without --model: status %d\n%s", tc.cmd, tc.args, code, errOut)
		}
	}
	// bench names every synthetic shape, and takes the embedded model too.
	_, h, _ := reel("help", "bench")
	for _, n := range models.SyntheticNames() {
		if !strings.Contains(h, n) {
			t.Errorf("bench -h does not name --synthetic %s", n)
		}
	}
	// check's help names its one required flag, which its usage error asks for.
	_, h, _ = reel("help", "check")
	if code, _, errOut := reel("check"); !strings.Contains(h, "--golden DIR") || code != exitUsage || !strings.Contains(errOut, "--golden is required") {
		t.Errorf("check: status %d\n%s", code, errOut)
	}
}
