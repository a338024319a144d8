package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// stHeader reads a safetensors file's header on its own, with encoding/json,
// as the reference the summary is checked against.
type stEntry struct {
	DType   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets []int  `json:"data_offsets"`
}

func readHeader(t *testing.T, path string) map[string]stEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data[:8])
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]stEntry{}
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		out[name] = e
	}
	return out
}

var elemBytes = map[string]int64{"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8}

// field finds "key  value" at the start of a line of out, after any indent.
func field(t *testing.T, out, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(key) + `\s+(.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in:\n%s", key, out)
	}
	return strings.TrimSpace(m[1])
}

// leadingInt is the integer a field's value starts with.
func leadingInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.Fields(s)[0], 10, 64)
	if err != nil {
		t.Fatalf("%q does not start with an integer", s)
	}
	return n
}

func runCmd(t *testing.T, run func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), err
}

func info(ctx context.Context, args []string, out, errOut *bytes.Buffer) error {
	return runInfo(ctx, args, out, errOut)
}

func TestInfoOnTestCheckpoints(t *testing.T) {
	for _, dir := range []string{"dory/dory-tiny-per_loop", "qwen4/qwen4-tiny-small-11"} {
		t.Run(dir, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", dir)
			if _, err := os.Stat(dir); err != nil {
				t.Skipf("test checkpoint missing: %v", err)
			}
			out, err := runCmd(t, info, "--model", dir, "--tensors")
			if err != nil {
				t.Fatal(err)
			}

			var cfg map[string]any
			data, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			if got := field(t, out, "model_type"); got != cfg["model_type"] {
				t.Errorf("model_type %q, config says %v", got, cfg["model_type"])
			}
			if got := field(t, out, "architectures"); got != cfg["architectures"].([]any)[0] {
				t.Errorf("architectures %q, config says %v", got, cfg["architectures"])
			}
			for _, k := range []string{"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"} {
				if got, want := field(t, out, k), fmt.Sprint(cfg[k]); got != want {
					t.Errorf("%s: %q, config says %s", k, got, want)
				}
			}

			hdr := readHeader(t, filepath.Join(dir, "model.safetensors"))
			var params, total int64
			byType := map[string]int64{}
			for _, e := range hdr {
				n := int64(1)
				for _, d := range e.Shape {
					n *= int64(d)
				}
				params += n
				byType[e.DType] += n * elemBytes[e.DType]
				total += n * elemBytes[e.DType]
			}
			if got := leadingInt(t, field(t, out, "tensors")); got != int64(len(hdr)) {
				t.Errorf("tensors %d, header has %d", got, len(hdr))
			}
			if got := leadingInt(t, field(t, out, "parameters")); got != params {
				t.Errorf("parameters %d, header sums to %d", got, params)
			}
			if got := leadingInt(t, field(t, out, "bytes")); got != total {
				t.Errorf("bytes %d, header sums to %d", got, total)
			}
			for dt, want := range byType {
				if got := leadingInt(t, field(t, out, strings.ToLower(dt))); got != want {
					t.Errorf("%s bytes %d, header sums to %d", dt, got, want)
				}
			}
			for name, e := range hdr {
				shape := fmt.Sprint(e.Shape) // [97 64], as graph.Shape writes it
				want := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+` + strings.ToLower(e.DType) + `\s+` + regexp.QuoteMeta(shape) + `$`)
				if !want.MatchString(out) {
					t.Errorf("no line for tensor %s %s %v", name, e.DType, e.Shape)
				}
			}
		})
	}
}

// writeST writes a safetensors file by hand: tensors of zeros.
func writeST(t *testing.T, path string, tensors []stEntry, names []string) {
	t.Helper()
	hdr := map[string]stEntry{}
	off := 0
	for i, e := range tensors {
		n := int(elemBytes[e.DType])
		for _, d := range e.Shape {
			n *= d
		}
		e.Offsets = []int{off, off + n}
		off += n
		hdr[names[i]] = e
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, uint64(len(js)))
	buf.Write(js)
	buf.Write(make([]byte, off))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInfoWithoutConfigListsInNaturalOrder(t *testing.T) {
	dir := t.TempDir()
	writeST(t, filepath.Join(dir, "model.safetensors"), []stEntry{
		{DType: "BF16", Shape: []int{2, 3}},
		{DType: "F32", Shape: []int{5}},
		{DType: "BF16", Shape: []int{4}},
		{DType: "I64", Shape: []int{}},
	}, []string{"layers.10.w", "layers.2.w", "layers.1.w", "step"})
	out, err := runCmd(t, info, "--model", dir, "--tensors")
	if err != nil {
		t.Fatal(err)
	}
	if got := field(t, out, "config"); got != "none (no config.json)" {
		t.Errorf("config line %q", got)
	}
	checks := map[string]int64{"tensors": 4, "parameters": 6 + 5 + 4 + 1, "bytes": 12 + 20 + 8 + 8, "bf16": 20, "f32": 20, "i64": 8}
	for k, want := range checks {
		if got := leadingInt(t, field(t, out, k)); got != want {
			t.Errorf("%s: %d, want %d", k, got, want)
		}
	}
	i1, i2, i10 := strings.Index(out, "layers.1.w "), strings.Index(out, "layers.2.w "), strings.Index(out, "layers.10.w ")
	if !(i1 >= 0 && i1 < i2 && i2 < i10) {
		t.Errorf("tensors not in natural order:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^step\s+i64\s+\[\]$`).MatchString(out) {
		t.Errorf("scalar tensor line missing:\n%s", out)
	}
}

func TestInfoErrors(t *testing.T) {
	_, err := runCmd(t, info)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--model") {
		t.Errorf("no --model: %v, want a usage error", err)
	}
	_, err = runCmd(t, info, "--model", filepath.Join(t.TempDir(), "missing"))
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing folder: %v", err)
	}
	bad := t.TempDir()
	writeST(t, filepath.Join(bad, "model.safetensors"), []stEntry{{DType: "F32", Shape: []int{2}}}, []string{"w"})
	os.WriteFile(filepath.Join(bad, "config.json"), []byte(`{"hidden_size": 64,`), 0o644)
	_, err = runCmd(t, info, "--model", bad)
	if err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("broken config.json: %v", err)
	}
	_, err = runCmd(t, info, "--model", bad, "extra")
	if !errors.As(err, &ue) {
		t.Errorf("extra argument: %v, want a usage error", err)
	}
}

func TestNaturalCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"a2", "a10", -1}, {"a10", "a2", 1}, {"a", "a", 0}, {"a", "ab", -1},
		{"l.9.x", "l.10.a", -1}, {"x01", "x1", -1}, {"x1", "x01", 1}, {"b", "a1", 1},
	} {
		got := naturalCompare(tc.a, tc.b)
		if (got < 0) != (tc.want < 0) || (got > 0) != (tc.want > 0) {
			t.Errorf("naturalCompare(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestHumanUnits(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {999, "999 B"}, {1000, "1 kB"}, {896388, "896 kB"}, {7_950_000_000, "7.95 GB"}} {
		if got := humanBytes(tc.n); got != tc.want {
			t.Errorf("humanBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := humanCount(224097); got != "224k" {
		t.Errorf("humanCount = %q", got)
	}
}
