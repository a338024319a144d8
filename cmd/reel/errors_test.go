package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
)

// TestNoCUDAIsOneLine runs every command that takes --device cuda on a
// machine without a driver: each must fail with status 1 and one line
// saying CUDA is unavailable, with nothing on stdout and no panic.
func TestNoCUDAIsOneLine(t *testing.T) {
	if be, err := openCUDA(cudaFlags{graphs: true}, slog.New(slog.DiscardHandler)); err == nil {
		be.Close()
		t.Skip("a CUDA driver and card are here")
	}
	for _, args := range [][]string{
		{"run", "--tokens", "2"},
		{"run", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--prompt-ids", "1,2"},
		{"logits", "--ids", "1,2"},
		{"check", "--golden", "../../testdata/dory"},
		{"check", "--golden", "../../testdata/qwen4/qwen4-tiny-small-11"},
		{"bench", "--prompt", "2", "--tokens", "2"},
	} {
		args = append(args, "--device", "cuda")
		code, out, errOut := reel(args...)
		if code != exitError || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.HasPrefix(errOut, "reel: ") || !strings.Contains(errOut, "cuda: unavailable") || strings.Contains(errOut, "panic") {
			t.Errorf("%v: status %d, stdout %q, stderr:\n%s", args, code, out, errOut)
		}
	}
}

// TestBadCommandLines checks that each bad flag value is a usage error
// (status 2) naming the flag, printed before any output.
func TestBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--prompt-ids", "1,,3"}, "--prompt-ids: entry 1 between commas is empty"},
		{[]string{"run", "--prompt-ids", "1,x"}, `--prompt-ids: token 1: "x" is not an integer id`},
		{[]string{"run", "--prompt-ids", "65,66,300"}, "--prompt-ids: token 2: id 300 is outside the vocabulary of 256"},
		{[]string{"run", "--prompt-ids", "65,-1"}, "--prompt-ids: token 1: id -1 is outside the vocabulary"},
		{[]string{"logits", "--ids", "1,256"}, "--ids: token 1: id 256 is outside the vocabulary of 256"},
		{[]string{"logits", "--ids", ",1"}, "--ids: entry 0 between commas is empty"},
		{[]string{"logits"}, "--ids is required"},
		{[]string{"run", "--threads", "-1"}, "--threads -1 is negative"},
		{[]string{"logits", "--ids", "1", "--threads", "-1"}, "--threads -1 is negative"},
		{[]string{"bench", "--threads", "-1"}, "--threads -1 is negative"},
		{[]string{"run", "--chunk", "-1"}, "--chunk -1: want at least one row"},
		{[]string{"logits", "--ids", "1", "--chunk", "-1"}, "--chunk -1: want at least one row"},
		{[]string{"bench", "--chunk", "-1"}, "--chunk -1: want at least one row"},
		{[]string{"check", "--golden", "../../testdata/dory", "--chunk", "-3"}, "--chunk -3"},
		{[]string{"run", "--device", "tpu"}, `unknown --device "tpu"`},
		{[]string{"run", "--temperature", "Inf"}, "--temperature +Inf"},
		{[]string{"run", "--temperature", "NaN"}, "--temperature NaN"},
		{[]string{"run", "--temperature", "-1"}, "--temperature -1"},
		{[]string{"run", "--top-p", "2"}, "--top-p 2"},
		{[]string{"chat", "--model", doryTiny, "--min-p", "1.5"}, "--min-p 1.5"},
		{[]string{"run", "--top-k", "-1"}, "top-k -1"},
		{[]string{"run", "--tokens", "-1"}, "--tokens -1 is negative"},
		{[]string{"dump", "--stage", "nosuch"}, `--stage "nosuch" needs --model or --synthetic`},
		{[]string{"dump", "--synthetic", "dory-h512", "--stage", "nosuch"}, `--stage "nosuch": a dory model has the stages`},
		{[]string{"dump", "--synthetic", "nosuch"}, `unknown --synthetic "nosuch"`},
		{[]string{"check", "--golden", "../../testdata/dory", "--model", "x"}, "--model: check takes its checkpoints from --golden"},
		{[]string{"check"}, "--golden is required"},
		{[]string{"bench", "--synthetic", "nosuch"}, `unknown --synthetic "nosuch"`},
		{[]string{"bench", "--prompt", "0"}, "--prompt and --tokens must be positive"},
		{[]string{"run", "--loops", "x"}, `--loops "x": not an integer`},
		{[]string{"run", "--mtp", "on"}, "--mtp: a dory model has no such option"},
	} {
		code, out, errOut := reel(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "Run 'reel "+tc.args[0]+" -h' for usage.") {
			t.Errorf("%v: status %d, want %d with %q; stdout %q, stderr:\n%s", tc.args, code, exitUsage, tc.want, out, errOut)
		}
	}
}

// TestWarnPastMaxPositions: each architecture passes its config's
// max_position_embeddings to the session, which warns once on stderr when
// a run passes it (and runs on).
func TestWarnPastMaxPositions(t *testing.T) {
	for _, src := range []string{
		"../../testdata/dory/dory-tiny-per_loop",
		"../../testdata/qwen4/qwen4-tiny-small-11",
		"../../testdata/dense/llama3-13",
	} {
		code, _, errOut := reel("run", "--model", src, "--prompt-ids", "1,2,3,4,5,6,7,8,9,10", "--tokens", "3", "--temperature", "0")
		if code != exitOK || strings.Contains(errOut, "WARN") {
			t.Errorf("%s: status %d, stderr:\n%s", src, code, errOut)
		}
		dir := t.TempDir()
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			raw, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == "config.json" {
				var cfg map[string]any
				if err := json.Unmarshal(raw, &cfg); err != nil {
					t.Fatal(err)
				}
				cfg["max_position_embeddings"] = 8
				if raw, err = json.Marshal(cfg); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		code, _, errOut = reel("run", "--model", dir, "--prompt-ids", "1,2,3,4,5,6,7,8,9,10", "--tokens", "3", "--temperature", "0", "--chunk", "4")
		if code != exitOK || strings.Count(errOut, "level=WARN") != 1 || !strings.Contains(errOut, "max_position_embeddings=8") {
			t.Errorf("%s with max_position_embeddings 8: status %d, stderr:\n%s", src, code, errOut)
		}
	}
}

// TestChunkRows: --chunk 0 (the default) takes the device's chunk.
func TestChunkRows(t *testing.T) {
	for _, c := range []struct {
		device      string
		chunk, want int
	}{{"cpu", 0, lm.DefaultChunk}, {"cuda", 0, cudaChunk}, {"cuda", 300, 300}, {"cpu", 7, 7}} {
		f := modelFlags{device: c.device, chunk: c.chunk}
		require.Equal(t, c.want, f.chunkRows(), "%s --chunk %d", c.device, c.chunk)
	}
}

// TestLastChunk: the rows of a prompt's last forward.
func TestLastChunk(t *testing.T) {
	for _, c := range [][3]int{{200, 64, 8}, {128, 64, 64}, {50, 64, 50}, {1, 1, 1}, {65, 64, 1}} {
		require.Equal(t, c[2], lastChunk(c[0], c[1]), "%d tokens in chunks of %d", c[0], c[1])
	}
}
