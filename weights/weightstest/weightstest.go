// Package weightstest makes hostile checkpoint folders for tests and runs
// loaders on them under a time and memory budget: copies of a good folder
// with config.json fields set to any JSON text (NaN and Infinity included),
// links, FIFOs and sparse files in their place, and the list of a config's
// numeric fields with the extreme values to try in each.
//
// Every model package's hostile table uses it, so that a new architecture
// gets the same probe by listing its checkpoint.
package weightstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Budget bounds one run of a loader.
type Budget struct {
	// Time is the most the run may take; past it the test fails (the
	// goroutine is left behind: a hang cannot be stopped).
	Time time.Duration
	// Alloc is the most bytes the run may allocate on the Go heap, in all
	// (runtime.MemStats.TotalAlloc before and after), from every goroutine.
	Alloc uint64
}

// Run calls f in a goroutine of its own and returns its error. The test
// fails if f panics (the panic is recovered and returned as an error with
// its stack), does not return within b.Time, or allocates more than
// b.Alloc. Runs must not overlap: the allocation count is the process's.
func Run(t testing.TB, b Budget, f func() error) error {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		done <- f()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(b.Time):
		t.Fatalf("no result within %v: a hang", b.Time)
	}
	runtime.ReadMemStats(&after)
	if err != nil && strings.HasPrefix(err.Error(), "panic: ") {
		t.Errorf("%v", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > b.Alloc {
		t.Errorf("allocated %d bytes, more than the budget of %d", d, b.Alloc)
	}
	return err
}

// CopyDir copies the regular files of the folder src (not its subfolders)
// into a new temporary folder and returns it.
func CopyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		CopyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
	}
	return dst
}

// CopyFile copies the file src to dst.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// Symlink makes path a symbolic link to target, replacing what was there.
func Symlink(t testing.TB, target, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Skipf("symbolic links: %v", err)
	}
}

// Sparse makes path a file of size bytes that takes no room on disk (its
// contents read as zeros), replacing what was there.
func Sparse(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// placeholder marks a value that SetFields writes as raw text.
const placeholder = "\x00weightstest %d\x00"

// SetFields rewrites the JSON file at path with fields set to raw JSON
// text, which may be anything, even text that is not JSON (NaN, Infinity,
// 1e999). A key is a path of object keys and array indices, such as
// "hidden_size", "rope_parameters.rope_theta" or "rope_profile_layers[3]";
// missing object keys are added. An empty raw text deletes the field.
// Numbers elsewhere in the file keep their exact text.
func SetFields(t testing.TB, path string, fields map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var root any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var raws []string
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[key]
		var v any = fmt.Sprintf(placeholder, len(raws))
		raws = append(raws, raw)
		if raw == "" {
			v = nil
		}
		if root, err = set(root, splitKey(key), v, raw == ""); err != nil {
			t.Fatalf("%s: field %s: %v", path, key, err)
		}
	}
	out, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for i, raw := range raws {
		q, _ := json.Marshal(fmt.Sprintf(placeholder, i))
		out = bytes.Replace(out, q, []byte(raw), 1)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// splitKey splits "a.b[2].c" into "a", "b", 2, "c".
func splitKey(key string) []any {
	var parts []any
	for _, p := range strings.Split(key, ".") {
		name, rest, _ := strings.Cut(p, "[")
		if name != "" {
			parts = append(parts, name)
		}
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			if err != nil {
				n = -1
			}
			parts = append(parts, n)
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return parts
}

// set puts v at the path in node and returns the node.
func set(node any, path []any, v any, del bool) (any, error) {
	if len(path) == 0 {
		return v, nil
	}
	switch p := path[0].(type) {
	case string:
		obj, ok := node.(map[string]any)
		if !ok {
			if node != nil {
				return nil, fmt.Errorf("%q: not an object", p)
			}
			obj = map[string]any{}
		}
		if del && len(path) == 1 {
			delete(obj, p)
			return obj, nil
		}
		child, err := set(obj[p], path[1:], v, del)
		if err != nil {
			return nil, err
		}
		obj[p] = child
		return obj, nil
	case int:
		arr, ok := node.([]any)
		if !ok || p < 0 || p >= len(arr) {
			return nil, fmt.Errorf("[%d]: not an element", p)
		}
		child, err := set(arr[p], path[1:], v, del)
		if err != nil {
			return nil, err
		}
		arr[p] = child
		return arr, nil
	}
	return nil, fmt.Errorf("bad path element %v", path[0])
}

// NumericFields lists the paths (as SetFields takes them) of every number
// in the JSON text data: top-level fields, fields of nested objects, and
// the first element of each array of numbers.
func NumericFields(data []byte) ([]string, error) {
	var root any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, err
	}
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case json.Number:
			out = append(out, prefix)
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				key := k
				if prefix != "" {
					key = prefix + "." + k
				}
				walk(key, x[k])
			}
		case []any:
			if len(x) > 0 {
				walk(prefix+"[0]", x[0])
			}
		}
	}
	walk("", root)
	return out, nil
}

// ExtremeValues are the JSON texts tried in every numeric field: zero,
// negatives, fractions, the extremes of int64 and float64, values whose
// products overflow, denormals, and the NaN and infinities Python writes.
var ExtremeValues = []string{
	"0", "-1", "1", "2.5", "-0.0",
	"1e-300", "1e300", "-1e300", "5e-324", "1e999",
	"NaN", "Infinity", "-Infinity",
	"9223372036854775807", "-9223372036854775808", "9223372036854775783",
	"4294967296", "4294967297", "1000000000", "1e18",
	`"7"`, "true", "null", "[]", "{}",
}

// ConfigCase is a hostile config.json: a good checkpoint's with Fields set
// (as SetFields sets them).
type ConfigCase struct {
	Name   string
	Fields map[string]string
	// Want are words of which the error must hold at least one, such as
	// the field's name; none: the case may load, or fail naming the file.
	Want []string
	// Setup, if set, changes the copied folder further before the fields
	// are set (a FIFO, a link, a tensor file).
	Setup func(t testing.TB, dir string)
	// Skip, if set, skips the case with this reason: a known failure whose
	// fix is elsewhere.
	Skip string
}

// FileCases are the ConfigCases of a checkpoint folder whose config.json
// or single safetensors file is a FIFO or a link to a device or to a file
// outside the folder: each error must name the file. (The file names are
// weights' own; weights' tests import this package, so it cannot import them.)
func FileCases() []ConfigCase {
	var cs []ConfigCase
	for _, c := range []struct{ file, link string }{{"config.json", "/dev/zero"}, {"model.safetensors", "/etc/passwd"}} {
		cs = append(cs, ConfigCase{Name: c.file + " is a FIFO", Setup: func(t testing.TB, dir string) {
			Mkfifo(t, filepath.Join(dir, c.file))
		}, Want: []string{c.file}}, ConfigCase{Name: c.file + " links to " + c.link, Setup: func(t testing.TB, dir string) {
			Symlink(t, c.link, filepath.Join(dir, c.file))
		}, Want: []string{c.file}})
	}
	return cs
}

// FieldCases returns a ConfigCase for each numeric field of the config.json
// at path (NumericFields) and more (fields the file has as null or lacks),
// and each of ExtremeValues. Each case's error must name its field
// (without an array index) or a tensor.
func FieldCases(t testing.TB, path string, more ...string) []ConfigCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := NumericFields(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []ConfigCase
	for _, f := range append(fields, more...) {
		base, _, _ := strings.Cut(f, "[")
		if i := strings.LastIndexByte(base, '.'); i >= 0 {
			base = base[i+1:]
		}
		for _, v := range ExtremeValues {
			out = append(out, ConfigCase{Name: f + "=" + v, Fields: map[string]string{f: v}, Want: []string{base, "tensor"}})
		}
	}
	return out
}

// Probe runs load on a copy of the checkpoint folder src changed by each
// case, under the budget b. load reads the folder and returns the logits
// of a forward (a model's Load, a session, one token). Each case must give
// an error that names the folder's path and holds one of its Want words, or
// logits that are all finite: never a panic, a hang, an allocation past the
// budget or a NaN.
func Probe(t *testing.T, src string, b Budget, cases []ConfigCase, load func(dir string) ([]float32, error)) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Skip != "" {
				t.Skip(c.Skip)
			}
			dir := CopyDir(t, src)
			if c.Setup != nil {
				c.Setup(t, dir)
			}
			if len(c.Fields) > 0 {
				SetFields(t, filepath.Join(dir, "config.json"), c.Fields)
			}
			var logits []float32
			err := Run(t, b, func() error {
				var err error
				logits, err = load(dir)
				return err
			})
			if err == nil {
				for i, x := range logits {
					if x != x || x > math.MaxFloat32 || x < -math.MaxFloat32 {
						t.Fatalf("loaded, but logit %d is %v", i, x)
					}
				}
				return
			}
			msg := err.Error()
			if strings.HasPrefix(msg, "panic: ") {
				return // Run has reported it
			}
			if !strings.Contains(msg, dir) {
				t.Errorf("error %q does not name the folder %s", msg, dir)
			}
			msg = strings.ReplaceAll(msg, dir, "<dir>") // its name holds the test's
			if len(c.Want) > 0 && !slices.ContainsFunc(c.Want, func(w string) bool { return strings.Contains(msg, w) }) {
				t.Errorf("error %q holds none of %q", msg, c.Want)
			}
		})
	}
}
