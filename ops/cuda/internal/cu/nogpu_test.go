package cu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// These tests need no GPU.

func TestLoadErrorIsOneLine(t *testing.T) {
	lib, err := Load()
	if err == nil {
		t.Skipf("CUDA driver present (%s); nothing to check", lib.Path())
	}
	msg := err.Error()
	t.Logf("Load: %s", msg)
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("Load error spans several lines: %q", msg)
	}
	if !strings.HasPrefix(msg, "cuda: unavailable: ") {
		t.Errorf("Load error %q does not start with %q", msg, "cuda: unavailable: ")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Load error does not wrap ErrUnavailable")
	}
}

func TestMarshalArgs(t *testing.T) {
	f := &Function{name: "k"}
	var buf [maxKernelArgs * 8]byte
	args := []any{DevicePtr(0x1122334455667788), int32(-2), float32(1.5), uint64(7), true, float64(0.25)}
	if err := f.marshal(&buf, args); err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	if got := ne.Uint64(buf[0:]); got != 0x1122334455667788 {
		t.Errorf("slot 0 = %#x", got)
	}
	if got := int32(ne.Uint32(buf[8:])); got != -2 {
		t.Errorf("slot 1 = %d", got)
	}
	if got := math.Float32frombits(ne.Uint32(buf[16:])); got != 1.5 {
		t.Errorf("slot 2 = %v", got)
	}
	if got := ne.Uint64(buf[24:]); got != 7 {
		t.Errorf("slot 3 = %d", got)
	}
	if buf[32] != 1 {
		t.Errorf("slot 4 = %d", buf[32])
	}
	if got := math.Float64frombits(ne.Uint64(buf[40:])); got != 0.25 {
		t.Errorf("slot 5 = %v", got)
	}

	if err := f.marshal(&buf, []any{int(3)}); err == nil || !strings.Contains(err.Error(), "unsupported type int") {
		t.Errorf("int argument: err = %v", err)
	}
	if err := f.marshal(&buf, []any{&buf}); err == nil {
		t.Errorf("pointer argument accepted")
	}
	if err := f.marshal(&buf, make([]any, maxKernelArgs+1)); err == nil {
		t.Errorf("too many arguments accepted")
	}

	f.params = []uint64{8, 4}
	if err := f.marshal(&buf, []any{DevicePtr(1), int32(2)}); err != nil {
		t.Errorf("matching arguments: %v", err)
	}
	if err := f.marshal(&buf, []any{DevicePtr(1), int64(2)}); err == nil || !strings.Contains(err.Error(), "parameter 1 is 4 bytes") {
		t.Errorf("size mismatch: err = %v", err)
	}
	if err := f.marshal(&buf, []any{DevicePtr(1)}); err == nil || !strings.Contains(err.Error(), "takes 2 parameters") {
		t.Errorf("count mismatch: err = %v", err)
	}
}

func TestCompileOptions(t *testing.T) {
	got := compileOptions([]string{"-DN=4", "--gpu-architecture=sm_90"})
	want := []string{"-default-device", "--std=c++17", "-DN=4", "--gpu-architecture=sm_90"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("compileOptions = %q, want %q", got, want)
	}
	got = compileOptions([]string{"-std=c++20", "-default-device"})
	if strings.Join(got, " ") != "-std=c++20 -default-device" {
		t.Errorf("compileOptions kept defaults it should not: %q", got)
	}
	for _, c := range []struct {
		opts []string
		arch string
		real bool
	}{
		{nil, "", false},
		{[]string{"--gpu-architecture=sm_90"}, "sm_90", true},
		{[]string{"-arch=sm_90a"}, "sm_90a", true},
		{[]string{"-arch", "compute_80"}, "compute_80", false},
		{[]string{"-arch=compute_80", "--gpu-architecture=sm_86"}, "sm_86", true},
	} {
		a := targetArch(c.opts)
		if a != c.arch || isRealArch(a) != c.real {
			t.Errorf("targetArch(%q) = %q (real %v), want %q (real %v)", c.opts, a, isRealArch(a), c.arch, c.real)
		}
	}
}

func TestCacheEntry(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "entry.cubin")
	img := []byte("\x7fELF pretend cubin")
	if err := writeCacheEntry(path, img); err != nil {
		t.Fatal(err)
	}
	got, ok := readCacheEntry(path)
	if !ok || !bytes.Equal(got, img) {
		t.Fatalf("readCacheEntry = %q, %v", got, ok)
	}
	// No temporary files are left behind.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("cache dir holds %d files, want 1", len(ents))
	}
	raw, _ := os.ReadFile(path)
	raw[len(raw)-1] ^= 0xff
	os.WriteFile(path, raw, 0o644)
	if _, ok := readCacheEntry(path); ok {
		t.Errorf("corrupt entry accepted")
	}
	os.WriteFile(path, raw[:10], 0o644)
	if _, ok := readCacheEntry(path); ok {
		t.Errorf("truncated entry accepted")
	}
	if _, ok := readCacheEntry(filepath.Join(dir, "missing")); ok {
		t.Errorf("missing entry accepted")
	}
}

func TestCacheKey(t *testing.T) {
	n := &NVRTC{major: 13, minor: 0}
	base := n.cacheKey("src", "a.cu", []string{"-DX=1"}, "sm_90")
	if base != n.cacheKey("src", "a.cu", []string{"-DX=1"}, "sm_90") {
		t.Fatal("cache key not deterministic")
	}
	others := []string{
		n.cacheKey("src2", "a.cu", []string{"-DX=1"}, "sm_90"),
		n.cacheKey("src", "b.cu", []string{"-DX=1"}, "sm_90"),
		n.cacheKey("src", "a.cu", []string{"-DX=2"}, "sm_90"),
		n.cacheKey("src", "a.cu", []string{"-DX=1"}, "sm_80"),
		n.cacheKey("src", "a.cu", []string{"-DX", "=1"}, "sm_90"),
		(&NVRTC{major: 13, minor: 1}).cacheKey("src", "a.cu", []string{"-DX=1"}, "sm_90"),
	}
	for i, k := range others {
		if k == base {
			t.Errorf("variant %d has the same key", i)
		}
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	d, err := DefaultCacheDir()
	if err != nil || d != "/tmp/xdg/reel/cuda" {
		t.Errorf("DefaultCacheDir = %q, %v", d, err)
	}
}

func TestVersionLess(t *testing.T) {
	ps := []string{"/x/libnvrtc.so.12.8.93", "/x/libnvrtc.so", "/x/libnvrtc.so.13", "/x/libnvrtc.so.12"}
	sort.Slice(ps, func(i, j int) bool { return versionLess(ps[j], ps[i]) })
	want := "/x/libnvrtc.so.13 /x/libnvrtc.so.12.8.93 /x/libnvrtc.so.12 /x/libnvrtc.so"
	if strings.Join(ps, " ") != want {
		t.Errorf("newest first = %q", ps)
	}
}

func TestGemmArgumentChecks(t *testing.T) {
	b := &BLAS{}
	if err := b.MatMulRowMajor(4, 4, 4, 1, 4, F32, 2, 4, BF16, 3, 4, F32); err == nil ||
		!strings.Contains(err.Error(), "convert the activations to bf16") {
		t.Errorf("mixed f32/bf16: err = %v", err)
	}
	if err := b.MatMulRowMajor(4, 4, 4, 1, 4, F32, 2, 4, F32, 3, 4, BF16); err == nil {
		t.Errorf("f32 inputs with bf16 output accepted")
	}
	if err := b.MatMulRowMajor(4, 4, 8, 1, 4, BF16, 2, 8, BF16, 3, 4, F32); err == nil ||
		!strings.Contains(err.Error(), "leading dimensions") {
		t.Errorf("ldx < k: err = %v", err)
	}
	if err := b.GemmEx(Gemm{M: 0, N: 1, K: 1, LDA: 1, LDB: 1, LDC: 1}); err == nil {
		t.Errorf("m = 0 accepted")
	}
}

func TestBytes(t *testing.T) {
	b := Bytes([]float32{1, 2})
	if len(b) != 8 || math.Float32frombits(binary.NativeEndian.Uint32(b[4:])) != 2 {
		t.Errorf("Bytes = %v", b)
	}
	if Bytes([]uint16(nil)) != nil {
		t.Errorf("Bytes(nil) != nil")
	}
}

func TestErrorMessages(t *testing.T) {
	e := &Error{Op: "cuMemAlloc(1073741824)", Code: ResultOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	if got, want := e.Error(), "cuMemAlloc(1073741824): CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !IsResult(e, ResultOutOfMemory) {
		t.Errorf("IsResult failed")
	}
	ref := &GraphUpdateRefusedError{Reason: GraphUpdateTopologyChanged, Err: e}
	if !errors.Is(ref, ErrGraphUpdateRefused) || !IsResult(ref, ResultOutOfMemory) {
		t.Errorf("GraphUpdateRefusedError does not match")
	}
	ce := &CompileError{Op: "nvrtcCompileProgram", Name: "k.cu", Code: 6, Desc: "NVRTC_ERROR_COMPILATION", Log: "k.cu(1): error: oops\n"}
	if got := ce.Error(); got != "nvrtcCompileProgram(k.cu): NVRTC_ERROR_COMPILATION\nk.cu(1): error: oops" {
		t.Errorf("CompileError = %q", got)
	}
}

// TestCached: Cached finds the entry CompileCached would read, by every
// argument that keys it, and not a corrupt one; no device or NVRTC needed.
func TestCached(t *testing.T) {
	n := &NVRTC{major: 13, minor: 0}
	dir := t.TempDir()
	src, opts := "__global__ void k() {}", []string{"-DX=1"}
	if c, compile := n.Cached(dir, src, "k.cu", opts, "sm_90"); c != nil || compile == nil {
		t.Fatal("Cached before any entry was written")
	}
	path, _, cubin, err := n.cacheEntry(dir, src, "k.cu", opts, "sm_90")
	if err != nil || !cubin || filepath.Dir(path) != dir {
		t.Fatalf("cacheEntry = %q, cubin %v, %v; want a cubin entry in %s", path, cubin, err, dir)
	}
	if err := writeCacheEntry(path, []byte("image")); err != nil {
		t.Fatal(err)
	}
	if c, compile := n.Cached(dir, src, "k.cu", opts, "sm_90"); compile != nil || !c.CacheHit || string(c.Image) != "image" || c.Path != path {
		t.Errorf("Cached misses the entry just written: %+v", c)
	}
	for _, c := range []struct {
		src, name, arch string
		opts            []string
	}{{src + " ", "k.cu", "sm_90", opts}, {src, "j.cu", "sm_90", opts}, {src, "k.cu", "sm_80", opts}, {src, "k.cu", "sm_90", nil}} {
		if _, compile := n.Cached(dir, c.src, c.name, c.opts, c.arch); compile == nil {
			t.Errorf("Cached(%q, %q, %v, %s): an entry of other arguments counted", c.src, c.name, c.opts, c.arch)
		}
	}
	if err := os.WriteFile(path, []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, compile := n.Cached(dir, src, "k.cu", opts, "sm_90"); compile == nil {
		t.Error("Cached counts a corrupt entry")
	}
}
