package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// qwen3Tokenizer is the tokenizer package's copy of Qwen3's tokenizer
// folder, whose golden.json gives "Hello, world!" the ids 9707 11 1879 0.
var qwen3Tokenizer = filepath.Join("..", "..", "tokenizer", "testdata", "qwen3")

// tokenizeCmd runs reel tokenize with stdin.
func tokenizeCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := tokenize(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestTokenize(t *testing.T) {
	out, _, err := tokenizeCmd(t, "Hello, world!", "--tokenizer", qwen3Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	want := "9707\t\"Hello\"\n11\t\",\"\n1879\t\"Ġworld\"\n0\t\"!\"\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}

	out, _, err = tokenizeCmd(t, "Hello, world!", "--tokenizer", qwen3Tokenizer, "--json", "--special")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ IDs []int }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := []int{9707, 11, 1879, 0}; !cmp.Equal(got.IDs, want) {
		t.Errorf("ids %v, want %v", got.IDs, want)
	}
	if out, _, _ := tokenizeCmd(t, "", "--tokenizer", qwen3Tokenizer, "--json"); out != "{\"ids\":[]}\n" {
		t.Errorf("empty input: %q", out)
	}

	// Decoding: commas, whitespace or both; no newline added.
	for _, in := range []string{"9707,11,1879,0", "9707 11\n1879\t0\n", "9707, 11, 1879, 0"} {
		out, _, err := tokenizeCmd(t, in, "--tokenizer", qwen3Tokenizer, "--decode")
		if err != nil {
			t.Fatal(err)
		}
		if out != "Hello, world!" {
			t.Errorf("--decode %q: %q", in, out)
		}
	}
	out, _, err = tokenizeCmd(t, "151644 9707 151645", "--tokenizer", filepath.Join(qwen3Tokenizer, "tokenizer.json.gz"), "--decode", "--skip-special")
	if err != nil || out != "Hello" {
		t.Errorf("--decode --skip-special from the .gz file: %q, %v", out, err)
	}
}

func TestTokenizeErrors(t *testing.T) {
	for _, c := range []struct {
		stdin string
		args  []string
		usage bool
		want  string
	}{
		{"", nil, true, "--tokenizer is required"},
		{"", []string{"--tokenizer", qwen3Tokenizer, "--decode", "--json"}, true, "for encoding"},
		{"", []string{"--tokenizer", qwen3Tokenizer, "--skip-special"}, true, "needs --decode"},
		{"", []string{"--tokenizer", "/nonexistent/reel-tok"}, false, "/nonexistent/reel-tok"},
		{"1,x", []string{"--tokenizer", qwen3Tokenizer, "--decode"}, false, `"x" is not an integer id`},
		{"1 999999", []string{"--tokenizer", qwen3Tokenizer, "--decode"}, false, "id 999999 at position 1"},
	} {
		_, _, err := tokenizeCmd(t, c.stdin, c.args...)
		var ue *usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &ue) != c.usage {
			t.Errorf("%v: error %v, want one with %q (usage error %v)", c.args, err, c.want, c.usage)
		}
	}
	if _, errOut, err := tokenizeCmd(t, "", "-h"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut, "usage: reel tokenize --tokenizer DIR") {
		t.Errorf("-h: %v\n%s", err, errOut)
	}
}
