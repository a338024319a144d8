package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reel-runtime/reel/weights/weightstest"
)

// hostileBudget bounds one hostile case of the loader: the tiny checkpoint
// (0.9 MB) read whole, as f32, takes a few MB.
var hostileBudget = weightstest.Budget{Time: 10 * time.Second, Alloc: 32 << 20}

// readFolder is what a model loader does with a folder: read config.json,
// open the checkpoint, and read every tensor (floats decoded, the rest
// touched byte by byte).
func readFolder(dir string) error {
	if _, err := ReadConfig(filepath.Join(dir, "config.json")); err != nil {
		return err
	}
	ck, err := Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	for _, n := range ck.Names() {
		info, err := ck.Info(n)
		if err != nil {
			return err
		}
		if info.DType.IsFloat() {
			if _, err := ck.Float32(n); err != nil {
				return err
			}
			continue
		}
		b, err := ck.Bytes(n)
		if err != nil {
			return err
		}
		sum := 0
		for _, x := range b {
			sum += int(x)
		}
		_ = sum
	}
	return nil
}

// hostileCase is a folder made from a copy of the tiny Dory checkpoint.
type hostileCase struct {
	name string
	// make turns the copy in dir into the hostile folder and returns the
	// folder to load (dir, or another one that it made).
	make func(t *testing.T, dir string) string
	// want are words the error must hold; none: the folder must load.
	want []string
	// is, if set, is an error the result must match.
	is error
}

// outsideFile is a copy of the tiny checkpoint's tensors in a folder of its
// own, for links that point out of the checkpoint folder.
func outsideFile(t *testing.T) string {
	out := filepath.Join(t.TempDir(), "elsewhere.safetensors")
	weightstest.CopyFile(t, filepath.Join(doryDir, SingleFile), out)
	return out
}

// moveToIndex renames model.safetensors to the shard path and writes an
// index mapping every tensor to it.
func moveToIndex(t *testing.T, dir, shard string) {
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, n := range ck.Names() {
		m[n] = shard
	}
	ck.Close()
	if !strings.HasPrefix(shard, "/") && !strings.Contains(shard, "..") {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, shard)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, SingleFile), filepath.Join(dir, shard)); err != nil {
			t.Fatal(err)
		}
	} else {
		os.Remove(filepath.Join(dir, SingleFile))
	}
	writeIndex(t, dir, m)
}

// hfCache lays the checkpoint in dir out as a Hugging Face cache does:
// <cache>/models--org--name/snapshots/<rev>/<file> linking to
// ../../blobs/<hash>, and returns the snapshot folder.
func hfCache(t *testing.T, dir string) string {
	repo := filepath.Join(t.TempDir(), "models--org--tiny")
	snap := filepath.Join(repo, "snapshots", "0123abcd")
	for _, d := range []string{snap, filepath.Join(repo, "blobs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"config.json", SingleFile} {
		blob := fmt.Sprintf("%040x", i+1)
		weightstest.CopyFile(t, filepath.Join(dir, name), filepath.Join(repo, "blobs", blob))
		weightstest.Symlink(t, filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, name))
	}
	return snap
}

func hostileCases() []hostileCase {
	self := func(f func(t *testing.T, dir string)) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string { f(t, dir); return dir }
	}
	outside := []string{"outside the checkpoint folder", "refused"}
	cases := []hostileCase{
		{name: "good copy", make: self(func(t *testing.T, dir string) {})},
		{name: "folder is a link", make: func(t *testing.T, dir string) string {
			link := filepath.Join(t.TempDir(), "link")
			weightstest.Symlink(t, dir, link)
			return link
		}},
		{name: "config.json links inside", make: self(func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "config.json"), filepath.Join(dir, "real.json"))
			weightstest.Symlink(t, "real.json", filepath.Join(dir, "config.json"))
		})},
		{name: "config.json links to /dev/zero", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, "/dev/zero", filepath.Join(dir, "config.json"))
		}), want: append([]string{"config.json"}, outside...), is: ErrOutsideFolder},
		{name: "config.json is /dev/zero's link inside the folder", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, "/dev/zero", filepath.Join(dir, "zero"))
			weightstest.Symlink(t, "zero", filepath.Join(dir, "config.json"))
		}), want: append([]string{"config.json"}, outside...)},
		{name: "config.json is a FIFO", make: self(func(t *testing.T, dir string) {
			weightstest.Mkfifo(t, filepath.Join(dir, "config.json"))
		}), want: []string{"config.json", "not a regular file", "FIFO"}},
		{name: "config.json is a folder", make: self(func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
			os.Mkdir(filepath.Join(dir, "config.json"), 0o755)
		}), want: []string{"config.json", "not a regular file"}},
		{name: "config.json of 1 GiB", make: self(func(t *testing.T, dir string) {
			weightstest.Sparse(t, filepath.Join(dir, "config.json"), 1<<30)
		}), want: []string{"config.json", "1073741824 bytes", "limit"}},
		{name: "config.json links outside", make: self(func(t *testing.T, dir string) {
			out := filepath.Join(t.TempDir(), "config.json")
			weightstest.CopyFile(t, filepath.Join(dir, "config.json"), out)
			weightstest.Symlink(t, out, filepath.Join(dir, "config.json"))
		}), want: append([]string{"config.json"}, outside...)},
		{name: "config.json link loop", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, "b", filepath.Join(dir, "a"))
			weightstest.Symlink(t, "a", filepath.Join(dir, "b"))
			weightstest.Symlink(t, "a", filepath.Join(dir, "config.json"))
		}), want: []string{"config.json"}},
		{name: "config.json dangling link", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, "/nonexistent/secret-name", filepath.Join(dir, "config.json"))
		}), want: []string{"config.json"}, is: fs.ErrNotExist},
		{name: "model.safetensors is a FIFO", make: self(func(t *testing.T, dir string) {
			weightstest.Mkfifo(t, filepath.Join(dir, SingleFile))
		}), want: []string{SingleFile, "not a regular file", "FIFO"}},
		{name: "model.safetensors links to /dev/zero", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, "/dev/zero", filepath.Join(dir, SingleFile))
		}), want: append([]string{SingleFile}, outside...)},
		{name: "model.safetensors links to /etc/passwd", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, "/etc/passwd", filepath.Join(dir, SingleFile))
		}), want: append([]string{SingleFile}, outside...)},
		{name: "model.safetensors links outside", make: self(func(t *testing.T, dir string) {
			weightstest.Symlink(t, outsideFile(t), filepath.Join(dir, SingleFile))
		}), want: append([]string{SingleFile}, outside...)},
		{name: "model.safetensors links outside by ..", make: self(func(t *testing.T, dir string) {
			out := outsideFile(t)
			rel, _ := filepath.Rel(dir, out)
			weightstest.Symlink(t, rel, filepath.Join(dir, SingleFile))
		}), want: append([]string{SingleFile}, outside...)},
		{name: "model.safetensors of 1 TiB, sparse", make: self(func(t *testing.T, dir string) {
			weightstest.Sparse(t, filepath.Join(dir, SingleFile), 1<<40)
		}), want: []string{SingleFile, "header length 0"}},
		{name: "loose file links outside", make: self(func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, SingleFile))
			weightstest.Symlink(t, outsideFile(t), filepath.Join(dir, "a.safetensors"))
		}), want: append([]string{"a.safetensors"}, outside...)},
		{name: "loose file is a FIFO", make: self(func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, SingleFile))
			weightstest.Mkfifo(t, filepath.Join(dir, "a.safetensors"))
		}), want: []string{"a.safetensors", "not a regular file"}},
		{name: "index shard in a subfolder", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "sub/model-1.safetensors")
		})},
		{name: "index shard in a linked subfolder outside", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "sub/model-1.safetensors")
			away := filepath.Join(t.TempDir(), "sub")
			if err := os.Rename(filepath.Join(dir, "sub"), away); err != nil {
				t.Fatal(err)
			}
			weightstest.Symlink(t, away, filepath.Join(dir, "sub"))
		}), want: append([]string{"sub/model-1.safetensors"}, outside...)},
		{name: "index shard links to /etc/passwd", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "model-1.safetensors")
			weightstest.Symlink(t, "/etc/passwd", filepath.Join(dir, "model-1.safetensors"))
		}), want: append([]string{"model-1.safetensors"}, outside...)},
		{name: "index shard ../", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "../model.safetensors")
		}), want: []string{IndexFile, "not a file inside the checkpoint folder"}},
		{name: "index shard absolute", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "/etc/passwd")
		}), want: []string{IndexFile, "not a file inside the checkpoint folder"}},
		{name: "index shard sub/../../", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "sub/../../model.safetensors")
		}), want: []string{IndexFile, "not a file inside the checkpoint folder"}},
		{name: "index shard is a FIFO", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "model-1.safetensors")
			weightstest.Mkfifo(t, filepath.Join(dir, "model-1.safetensors"))
		}), want: []string{"model-1.safetensors", "not a regular file"}},
		{name: "index links to /dev/zero", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "model-1.safetensors")
			weightstest.Symlink(t, "/dev/zero", filepath.Join(dir, IndexFile))
		}), want: append([]string{IndexFile}, outside...)},
		{name: "index is a FIFO", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "model-1.safetensors")
			weightstest.Mkfifo(t, filepath.Join(dir, IndexFile))
		}), want: []string{IndexFile, "not a regular file"}},
		{name: "index of 1 GiB", make: self(func(t *testing.T, dir string) {
			moveToIndex(t, dir, "model-1.safetensors")
			weightstest.Sparse(t, filepath.Join(dir, IndexFile), 1<<30)
		}), want: []string{IndexFile, "limit"}},
		{name: "Hugging Face cache snapshot", make: hfCache},
		{name: "Hugging Face snapshot linking outside its blobs", make: func(t *testing.T, dir string) string {
			snap := hfCache(t, dir)
			weightstest.Symlink(t, outsideFile(t), filepath.Join(snap, SingleFile))
			return snap
		}, want: append([]string{SingleFile}, outside...)},
		{name: "Hugging Face snapshot linking to another repo's blobs", make: func(t *testing.T, dir string) string {
			snap := hfCache(t, dir)
			other := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(snap))), "models--other", "blobs")
			os.MkdirAll(other, 0o755)
			weightstest.CopyFile(t, filepath.Join(dir, SingleFile), filepath.Join(other, "x"))
			weightstest.Symlink(t, filepath.Join("..", "..", "..", "models--other", "blobs", "x"), filepath.Join(snap, SingleFile))
			return snap
		}, want: append([]string{SingleFile}, outside...)},
	}
	for _, c := range badCases {
		cases = append(cases, hostileCase{name: "header: " + c.name, make: self(func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, SingleFile), c.file, 0o644); err != nil {
				t.Fatal(err)
			}
		}), want: append([]string{SingleFile}, c.want...)})
	}
	return cases
}

// TestHostileFolders builds hostile checkpoint folders on the fly (links in
// and out of the folder, FIFOs, /dev/zero, huge sparse files, indexes
// pointing outside, every malformed header of badCases) and reads each the
// way a model loader does, under a time and allocation budget: each must
// give an error naming the file (and never the content or the name of a
// link's target outside), or load.
func TestHostileFolders(t *testing.T) {
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := c.make(t, weightstest.CopyDir(t, doryDir))
			err := weightstest.Run(t, hostileBudget, func() error { return readFolder(dir) })
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("want the folder to load, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded, want an error with %q", c.want)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			for _, secret := range []string{"root:", "/etc/passwd", "/dev/zero", "secret-name", "elsewhere"} {
				if strings.Contains(msg, secret) && !strings.Contains(c.name, "absolute") {
					t.Errorf("error %q shows %q of a target outside the folder", msg, secret)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %q is not %v", msg, c.is)
			}
		})
	}
}

func TestMulInts(t *testing.T) {
	for _, c := range []struct {
		a    int
		b    []int
		want int
		err  string
	}{
		{3, nil, 3, ""},
		{3, []int{4, 5}, 60, ""},
		{0, []int{math.MaxInt, math.MaxInt}, 0, ""},
		{math.MaxInt, []int{1}, math.MaxInt, ""},
		{4294967297, []int{4294967296}, 0, "overflows"},
		{1 << 32, []int{1 << 31}, 0, "overflows"},
		{1 << 31, []int{1 << 31, 2}, 0, "overflows"},
		{-1, []int{2}, 0, "negative"},
		{2, []int{3, -1}, 0, "negative"},
	} {
		got, err := MulInts(c.a, c.b...)
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("MulInts(%d, %v) = %d, %v; want %d", c.a, c.b, got, err, c.want)
			}
		} else if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("MulInts(%d, %v) = %d, %v; want an error with %q", c.a, c.b, got, err, c.err)
		}
	}
	if _, err := AddInts(math.MaxInt, 1); err == nil {
		t.Error("AddInts(MaxInt, 1) did not overflow")
	}
	if s, err := AddInts(1, 2, 3); s != 6 || err != nil {
		t.Errorf("AddInts(1, 2, 3) = %d, %v", s, err)
	}
}

// TestCheckRangeSize: a field outside its range, or a size whose f32
// bytes overflow, is an error naming it; cmp.Or gives the first.
func TestCheckRangeSize(t *testing.T) {
	if err := CheckRange("n", 5, 1, 5); err != nil {
		t.Errorf("CheckRange(n, 5, 1, 5) = %v", err)
	}
	if err := CheckRange("heads", 0, 1, 8); err == nil || err.Error() != "heads = 0: want 1 to 8" {
		t.Errorf("CheckRange(heads, 0, 1, 8) = %v", err)
	}
	if err := CheckSize("vocab × hidden", 1<<20, 1<<20); err != nil {
		t.Errorf("CheckSize of 2^40 elements = %v", err)
	}
	err := CheckSize("vocab × hidden", 1<<40, 1<<22)
	if err == nil || !strings.HasPrefix(err.Error(), "vocab × hidden: the f32 bytes overflow") {
		t.Errorf("CheckSize of 2^62 f32 elements = %v", err)
	}
	if err := CheckSize("negative", 2, -1); err == nil {
		t.Error("CheckSize of a negative factor: no error")
	}
}

// TestCheckFloatMultiple: a number outside its range, NaN included, and a
// field that is not a multiple of another are errors naming them; a
// divisor that is not positive is left to CheckRange.
func TestCheckFloatMultiple(t *testing.T) {
	if err := CheckFloat("eps", 1e-6, 0x1p-126, 1); err != nil {
		t.Errorf("CheckFloat(eps, 1e-6) = %v", err)
	}
	for _, v := range []float64{0, 2, math.NaN(), math.Inf(1)} {
		if err := CheckFloat("eps", v, 0x1p-126, 1); err == nil || err.Error() != fmt.Sprintf("eps = %v: want 1.1754943508222875e-38 to 1", v) {
			t.Errorf("CheckFloat(eps, %v) = %v", v, err)
		}
	}
	if err := CheckMultiple("heads", 12, "kv", 4); err != nil {
		t.Errorf("CheckMultiple(12, 4) = %v", err)
	}
	if err := CheckMultiple("heads", 12, "kv", 5); err == nil || err.Error() != "heads 12 is not a multiple of kv 5" {
		t.Errorf("CheckMultiple(12, 5) = %v", err)
	}
	if err := CheckMultiple("heads", 12, "kv", 0); err != nil {
		t.Errorf("CheckMultiple(12, 0) = %v", err)
	}
}

func TestConfigBounded(t *testing.T) {
	cfg, err := ParseConfig("config.json", []byte(`{"n": 5, "big": 1e300, "f": 0.5, "nan": NaN, "s": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Get()
	if v := g.IntIn("n", 0, 1, 10); v != 5 {
		t.Errorf("IntIn(n) = %d", v)
	}
	if v := g.IntIn("missing", 7, 1, 3); v != 7 {
		t.Errorf("IntIn(missing) = %d, want the default", v)
	}
	if v := g.FloatIn("f", 0, 0, 1); v != 0.5 {
		t.Errorf("FloatIn(f) = %v", v)
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := cfg.IntIn("n", 0, 6, 10); return err }(), `config.json: field "n" = 5: want 6 to 10`},
		{func() error { _, err := cfg.IntIn("big", 0, 0, 10); return err }(), `field "big"`},
		{func() error { _, err := cfg.FloatIn("big", 0, 0, 1e10); return err }(), `field "big" = 1e+300: want 0 to 1e+10`},
		{func() error { _, err := cfg.FloatIn("nan", 0, 0, 1); return err }(), `field "nan" is NaN`},
		{func() error { _, err := cfg.IntIn("s", 0, 0, 1); return err }(), `field "s": want an integer`},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v, want one with %q", c.err, c.want)
		}
	}
}

func TestSplitArray(t *testing.T) {
	for _, text := range []string{
		`[]`, `[ ]`, `[1]`, ` [ 1 , -2.5e3 ,true,null ] `, `["a,b", "c\"],[d", "\\"]`,
		`[[1,2],[3],[]]`, `[{"a":[1,{"b":"]"}]}, {}]`, "[\n\t1,\n\t2\n]",
	} {
		var want []json.RawMessage
		if err := json.Unmarshal([]byte(text), &want); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		got, err := splitArray(json.RawMessage(strings.TrimSpace(text)))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d elements %q, want %d", text, len(got), got, len(want))
		}
		for i := range got {
			if string(got[i]) != string(want[i]) {
				t.Errorf("%s: element %d = %s, want %s", text, i, got[i], want[i])
			}
		}
	}
	big := "[" + strings.TrimSuffix(strings.Repeat("1,", MaxArrayLen+1), ",") + "]"
	cfg, err := ParseConfig("config.json", []byte(`{"a": `+big+`}`))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = cfg.Ints("a")
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), `field "a": more than 65536 elements`) {
		t.Errorf("Ints of %d elements: %v", MaxArrayLen+1, err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 8<<20 {
		t.Errorf("Ints of %d elements allocated %d bytes", MaxArrayLen+1, d)
	}
}
