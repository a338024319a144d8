package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// reel runs the command line and returns the exit status, stdout and stderr.
func reel(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := reelMain(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageAndExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     []string
		stderr     []string
		notInStdio []string
	}{
		{"no command", nil, exitUsage, nil, []string{"usage: reel", "info", "dump"}, nil},
		{"unknown command", []string{"frobnicate"}, exitUsage, nil, []string{`unknown command "frobnicate"`, "usage: reel"}, nil},
		{"help", []string{"help"}, exitOK, []string{"usage: reel", "commands:", "info", "dump"}, nil, nil},
		{"-h", []string{"-h"}, exitOK, []string{"usage: reel", "commands:"}, nil, nil},
		{"bad global flag", []string{"-nope", "info"}, exitUsage, nil, []string{"-nope", "usage: reel"}, nil},
		{"help info", []string{"help", "info"}, exitOK, []string{"usage: reel info --model DIR", "-tensors", "-model"}, nil, nil},
		{"help run", []string{"help", "run"}, exitOK, []string{"usage: reel run", "-top-k"}, nil, nil},
		{"info -h", []string{"info", "-h"}, exitOK, []string{"usage: reel info", "Info summarizes", "flags:", "-model"}, nil, nil},
		{"dump --help", []string{"dump", "--help"}, exitOK, []string{"usage: reel dump", "-format", "attention", "mlp"}, nil, nil},
		{"bad subcommand flag", []string{"dump", "--nope"}, exitUsage, nil, []string{"flag provided but not defined: -nope", "usage: reel dump"}, nil},
		{"bad flag value", []string{"dump", "--format", "xml"}, exitUsage, nil, []string{`reel dump: unknown --format "xml"`, "reel dump -h"}, nil},
		{"missing flag", []string{"info"}, exitUsage, nil, []string{"reel info: --model is required"}, nil},
		{"failure", []string{"info", "--model", "/nonexistent/reel-test"}, exitError, nil, []string{"reel: info: ", "/nonexistent/reel-test"}, nil},
		{"success", []string{"dump", "--example", "mlp"}, exitOK, []string{"graph example mlp"}, nil, []string{"level=DEBUG"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := reel(tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			for _, s := range tc.notInStdio {
				if strings.Contains(out+errOut, s) {
					t.Errorf("output holds %q:\n%s%s", s, out, errOut)
				}
			}
		})
	}
}

func TestVerboseLogsDebug(t *testing.T) {
	for _, args := range [][]string{{"-v", "dump"}, {"dump", "-v"}} {
		code, out, errOut := reel(args...)
		if code != exitOK || !strings.Contains(errOut, "level=DEBUG") || !strings.Contains(errOut, "dumping graph") {
			t.Errorf("%v: status %d, stderr:\n%s", args, code, errOut)
		}
		if strings.Contains(out, "DEBUG") {
			t.Errorf("%v: log lines on stdout:\n%s", args, out)
		}
	}
}

func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		if c.name == "" || c.summary == "" || c.run == nil || c.name == "help" || seen[c.name] {
			t.Errorf("bad or duplicate command entry %+v", c)
		}
		seen[c.name] = true
		// Every command answers -h with its usage on stdout (so that
		// `reel help run | grep top-k` works), nothing on stderr and no
		// error status.
		code, out, errOut := reel(c.name, "-h")
		if code != exitOK || !strings.Contains(out, "usage: reel "+c.name) || !strings.Contains(out, "flags:") || errOut != "" {
			t.Errorf("%s -h: status %d, stdout:\n%s\nstderr:\n%s", c.name, code, out, errOut)
		}
	}
}

// countingWriter counts the writes it takes.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestRunBuffersOutput: reel run writes its text a token at a time at
// most (the prompt at once, then each token's text), not a byte per write.
func TestRunBuffersOutput(t *testing.T) {
	const tokens = 30
	var out countingWriter
	var errOut bytes.Buffer
	code := reelMain(context.Background(), []string{"run", "--prompt", "package main\n\nimport \"fmt\"\n", "--tokens", fmt.Sprint(tokens), "--temperature", "0"}, &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	require.Greater(t, out.Len(), 30, "the prompt and the tokens were printed")
	require.LessOrEqual(t, out.writes, tokens+3, "%d writes for %d bytes", out.writes, out.Len())
}
