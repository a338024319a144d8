package cu

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// These tests need a CUDA device; without one they skip with Load's error.

// testContext returns a Context on device 0, closed when the test ends.
func testContext(t testing.TB) *Context {
	t.Helper()
	lib, err := Load()
	if err != nil {
		t.Skip(err)
	}
	c, err := lib.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func testNVRTC(t *testing.T, c *Context) *NVRTC {
	t.Helper()
	n, err := c.Lib().NVRTC()
	if err != nil {
		t.Skip(err)
	}
	return n
}

const kernelsSrc = `
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale(float* y, float s, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] *= s;
}
`

// kernels compiles kernelsSrc for c's device and returns saxpy and scale.
func kernels(t *testing.T, c *Context, opts ...string) (saxpy, scale *Function) {
	t.Helper()
	n := testNVRTC(t, c)
	if len(opts) == 0 {
		opts = []string{"--gpu-architecture=" + c.Arch()}
	}
	img, log, err := n.Compile(kernelsSrc, "kernels.cu", opts)
	if err != nil {
		t.Fatal(err)
	}
	if log != "" {
		t.Logf("nvrtc log: %s", log)
	}
	m, err := c.LoadModule(img)
	if err != nil {
		t.Fatal(err)
	}
	if saxpy, err = m.Function("saxpy"); err != nil {
		t.Fatal(err)
	}
	if scale, err = m.Function("scale"); err != nil {
		t.Fatal(err)
	}
	return saxpy, scale
}

func upload[T Elem](t *testing.T, c *Context, xs []T) DevicePtr {
	t.Helper()
	b := Bytes(xs)
	p, err := c.Alloc(uint64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HtoD(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

func download[T Elem](t *testing.T, c *Context, p DevicePtr, n int) []T {
	t.Helper()
	out := make([]T, n)
	if err := c.DtoH(Bytes(out), p); err != nil {
		t.Fatal(err)
	}
	return out
}

func blocks(n int) [3]uint32 { return [3]uint32{uint32((n + 255) / 256), 1, 1} }

var threads = [3]uint32{256, 1, 1}

func TestDeviceInfo(t *testing.T) {
	c := testContext(t)
	major, minor := c.ComputeCapability()
	free, total, err := c.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: sm_%d%d, %d SMs, %d MiB total (%d MiB free per MemInfo, %d total), driver %d, %s",
		c.DeviceName(), major, minor, c.SMCount(), c.TotalMem()>>20, free>>20, total>>20,
		c.Lib().DriverVersion(), c.Lib().Path())
	if c.DeviceName() == "" || major == 0 || c.SMCount() == 0 || total == 0 || free > total {
		t.Errorf("implausible device info")
	}
}

func TestAllocCopyRoundTrip(t *testing.T) {
	c := testContext(t)
	const n = 1<<20 + 7
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	a, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := c.DtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	// A read below the page-locked stage's size, one that makes it grow
	// (100 KiB, then all n), and one that fits it.
	for _, m := range []int{1000, 100 << 10, n, 200 << 10} {
		got := make([]byte, m)
		if err := c.DtoH(got, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src[:m]) {
			t.Fatalf("round trip of %d bytes changed the data", m)
		}
	}
	got := make([]byte, n)
	// Async variants on the stream, and memset.
	if err := c.MemsetAsync(b, 0xab, n); err != nil {
		t.Fatal(err)
	}
	if err := c.DtoDAsync(b.Offset(16), a, 16); err != nil {
		t.Fatal(err)
	}
	if err := c.DtoHAsync(got, b); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		want := byte(0xab)
		if i >= 16 && i < 32 {
			want = src[i-16]
		}
		if v != want {
			t.Fatalf("byte %d = %#x, want %#x", i, v, want)
		}
	}
	f := []float32{0, 0, 0, 0}
	p := upload(t, c, f)
	if err := c.Stream().MemsetD32Async(p, math.Float32bits(1.5), 4); err != nil {
		t.Fatal(err)
	}
	if got := download[float32](t, c, p, 4); got[0] != 1.5 || got[3] != 1.5 {
		t.Errorf("MemsetD32Async: %v", got)
	}
	if err := c.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(a); err == nil {
		t.Error("double Free succeeded")
	}
}

func TestAllocErrorMessage(t *testing.T) {
	c := testContext(t)
	_, err := c.Alloc(1 << 50)
	if err == nil {
		t.Fatal("1 PiB allocation succeeded")
	}
	t.Logf("error: %v", err)
	want := "cuMemAlloc(1125899906842624): CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
	if err.Error() != want || !IsResult(err, ResultOutOfMemory) {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestSaxpy(t *testing.T) {
	c := testContext(t)
	for _, variant := range []struct {
		name string
		opts []string
	}{
		{"cubin", []string{"--gpu-architecture=" + c.Arch()}},
		{"ptx", []string{"--gpu-architecture=" + strings.Replace(c.Arch(), "sm_", "compute_", 1)}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			saxpy, _ := kernels(t, c, variant.opts...)
			const n = 1<<20 + 3
			x := make([]float32, n)
			y := make([]float32, n)
			for i := range x {
				x[i] = float32(i % 97)
				y[i] = 1
			}
			dx, dy := upload(t, c, x), upload(t, c, y)
			if err := c.Launch(saxpy, blocks(n), threads, 0, float32(2.5), dx, dy, int32(n)); err != nil {
				t.Fatal(err)
			}
			got := download[float32](t, c, dy, n)
			for i := range got {
				if want := 2.5*x[i] + 1; got[i] != want {
					t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
				}
			}
			regs, err := saxpy.Attribute(FuncNumRegs)
			t.Logf("saxpy: %d registers (err %v), param sizes known: %v", regs, err, saxpy.params)
			if saxpy.params != nil {
				if err := c.Launch(saxpy, blocks(n), threads, 0, float32(2.5), dx, dy, int64(n)); err == nil {
					t.Error("launch with an int64 for an int parameter succeeded")
				}
			}
		})
	}
}

func TestCompileError(t *testing.T) {
	c := testContext(t)
	n := testNVRTC(t, c)
	_, _, err := n.Compile(`extern "C" __global__ void k() { undefined_thing(); }`, "bad.cu", nil)
	var ce *CompileError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "undefined_thing") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("compile error: %v", err)
}

func TestGraphCaptureAndUpdate(t *testing.T) {
	c := testContext(t)
	saxpy, scale := kernels(t, c)
	const n = 4099
	x := make([]float32, n)
	y0 := make([]float32, n)
	for i := range x {
		x[i] = float32(i % 31)
		y0[i] = 1
	}
	dx, dy, dy2 := upload(t, c, x), upload(t, c, y0), upload(t, c, y0)
	s := c.Stream()

	capture := func(y DevicePtr, both bool) *Graph {
		t.Helper()
		if err := s.BeginCapture(CaptureThreadLocal); err != nil {
			t.Fatal(err)
		}
		if err := s.Launch(saxpy, blocks(n), threads, 0, float32(2), dx, y, int32(n)); err != nil {
			t.Fatal(err)
		}
		if both {
			if err := s.Launch(scale, blocks(n), threads, 0, y, float32(0.5), int32(n)); err != nil {
				t.Fatal(err)
			}
		}
		g, err := s.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	// step applies one graph run to y on the host.
	step := func(y []float32) {
		for i := range y {
			y[i] = 0.5 * (2*x[i] + y[i])
		}
	}
	check := func(name string, p DevicePtr, want []float32) {
		t.Helper()
		got := download[float32](t, c, p, n)
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Abs(float64(want[i])) {
				t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
			}
		}
	}

	g := capture(dy, true)
	if nodes, err := g.NumNodes(); err != nil || nodes != 2 {
		t.Fatalf("graph has %d nodes (err %v), want 2", nodes, err)
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), y0...)
	for i := 0; i < 3; i++ {
		if err := exec.Launch(s); err != nil {
			t.Fatal(err)
		}
		step(want)
	}
	check("y", dy, want)

	// Same work on another buffer: update the executable graph in place.
	g2 := capture(dy2, true)
	if err := exec.Update(g2); err != nil {
		t.Fatalf("Update with a changed pointer: %v", err)
	}
	if err := exec.Launch(s); err != nil {
		t.Fatal(err)
	}
	want2 := append([]float32(nil), y0...)
	step(want2)
	check("y2", dy2, want2)
	check("y (untouched)", dy, want)

	// A different topology is refused with a typed error.
	g3 := capture(dy, false)
	err = exec.Update(g3)
	var refused *GraphUpdateRefusedError
	if !errors.Is(err, ErrGraphUpdateRefused) || !errors.As(err, &refused) {
		t.Fatalf("Update with a different topology: err = %v, want ErrGraphUpdateRefused", err)
	}
	t.Logf("refused update: %v", err)
	exec3, err := g3.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := exec3.Launch(s); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i] = 2*x[i] + want[i]
	}
	check("y after re-instantiate", dy, want)
	for _, d := range []interface{ Destroy() error }{exec, exec3, g, g2, g3} {
		if err := d.Destroy(); err != nil {
			t.Error(err)
		}
	}
}

func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1 // round to nearest even (inputs here are finite)
	return uint16(b >> 16)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func TestGemm(t *testing.T) {
	c := testContext(t)
	blas, err := c.NewBLAS()
	if err != nil {
		if errors.Is(err, ErrCUBLASUnavailable) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	lib, _ := c.Lib().CUBLAS()
	ma, mi, pa := lib.Version()
	t.Logf("cuBLAS %d.%d.%d from %s", ma, mi, pa, lib.Path())

	const m, n, k = 37, 96, 200
	const ldx, ldw, ldy = k, k + 8, n // padded weight rows
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, m*ldx)
	w := make([]float32, n*ldw)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	for i := range w {
		w[i] = rng.Float32()*2 - 1
	}
	// reference computes Y = X·Wᵀ in float64 from the given (possibly
	// rounded) inputs, and the scale sum|x||w| of each output for tolerances.
	reference := func(x, w []float32) (ref, mag []float64) {
		ref, mag = make([]float64, m*n), make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s, a float64
				for l := 0; l < k; l++ {
					p := float64(x[i*ldx+l]) * float64(w[j*ldw+l])
					s += p
					a += math.Abs(p)
				}
				ref[i*n+j], mag[i*n+j] = s, a
			}
		}
		return ref, mag
	}
	compare := func(t *testing.T, name string, got []float32, ref, mag []float64, tol float64) {
		t.Helper()
		worst := 0.0
		for i := range got {
			e := math.Abs(float64(got[i])-ref[i]) / (mag[i] + 1e-30)
			worst = max(worst, e)
			if e > tol {
				t.Fatalf("%s: Y[%d,%d] = %v, want %v (relative error %.3g > %.3g)", name, i/n, i%n, got[i], ref[i], e, tol)
			}
		}
		t.Logf("%s: worst relative error %.3g", name, worst)
	}
	dy, err := c.Alloc(m * ldy * 4)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("f32", func(t *testing.T) {
		dx, dw := upload(t, c, x), upload(t, c, w)
		if err := blas.MatMulRowMajor(m, n, k, dx, ldx, F32, dw, ldw, F32, dy, ldy, F32); err != nil {
			t.Fatal(err)
		}
		ref, mag := reference(x, w)
		compare(t, "f32", download[float32](t, c, dy, m*n), ref, mag, 1e-5)
	})

	xb, wb := make([]uint16, len(x)), make([]uint16, len(w))
	xr, wr := make([]float32, len(x)), make([]float32, len(w))
	for i := range x {
		xb[i] = f32ToBF16(x[i])
		xr[i] = bf16ToF32(xb[i])
	}
	for i := range w {
		wb[i] = f32ToBF16(w[i])
		wr[i] = bf16ToF32(wb[i])
	}
	refB, magB := reference(xr, wr)
	dxb, dwb := upload(t, c, xb), upload(t, c, wb)

	t.Run("bf16", func(t *testing.T) {
		if err := blas.MatMulRowMajor(m, n, k, dxb, ldx, BF16, dwb, ldw, BF16, dy, ldy, F32); err != nil {
			t.Fatal(err)
		}
		compare(t, "bf16->f32", download[float32](t, c, dy, m*n), refB, magB, 1e-5)
	})

	t.Run("bf16-out", func(t *testing.T) {
		dyb, err := c.Alloc(m * ldy * 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := blas.MatMulRowMajor(m, n, k, dxb, ldx, BF16, dwb, ldw, BF16, dyb, ldy, BF16); err != nil {
			t.Fatal(err)
		}
		raw := download[uint16](t, c, dyb, m*n)
		got := make([]float32, len(raw))
		for i, h := range raw {
			got[i] = bf16ToF32(h)
		}
		compare(t, "bf16->bf16", got, refB, magB, 1.0/128)
	})

	// batched: two weights in separate allocations (the second the first
	// negated) times one x, the stride of A spanning the allocations, both
	// products into one buffer, as the gate and up products are made.
	t.Run("batched", func(t *testing.T) {
		if !blas.CanBatch() {
			t.Skip("no cublasGemmStridedBatchedEx")
		}
		neg := make([]uint16, len(wb))
		for i, h := range wb {
			neg[i] = h ^ 0x8000
		}
		w0, w1 := dwb, upload(t, c, neg)
		first, second := 1.0, -1.0
		if w1 < w0 {
			w0, w1, first, second = w1, w0, -1, 1
		}
		dy2, err := c.Alloc(2 * m * n * 4)
		if err != nil {
			t.Fatal(err)
		}
		err = blas.GemmEx(Gemm{
			TransA: Trans, TransB: NoTrans, M: n, N: m, K: k, Alpha: 1,
			A: w0, AType: BF16, LDA: ldw, B: dxb, BType: BF16, LDB: ldx, C: dy2, CType: F32, LDC: n,
			Batch: 2, StrideA: int64(w1-w0) / 2, StrideB: 0, StrideC: int64(m * n),
		})
		if err != nil {
			t.Fatal(err)
		}
		got := download[float32](t, c, dy2, 2*m*n)
		for b, sign := range []float64{first, second} {
			ref := make([]float64, len(refB))
			for i, v := range refB {
				ref[i] = sign * v
			}
			compare(t, fmt.Sprintf("batched %d", b), got[b*m*n:(b+1)*m*n], ref, magB, 1e-5)
		}
	})

	t.Run("captured", func(t *testing.T) {
		if err := c.Memset(dy, 0, m*ldy*4); err != nil {
			t.Fatal(err)
		}
		if err := c.BeginCapture(CaptureGlobal); err != nil {
			t.Fatal(err)
		}
		err := blas.MatMulRowMajor(m, n, k, dxb, ldx, BF16, dwb, ldw, BF16, dy, ldy, F32)
		g, endErr := c.EndCapture()
		if err != nil || endErr != nil {
			t.Fatalf("GEMM under capture: %v; EndCapture: %v", err, endErr)
		}
		exec, err := g.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		if err := exec.Launch(c.Stream()); err != nil {
			t.Fatal(err)
		}
		compare(t, "captured bf16->f32", download[float32](t, c, dy, m*n), refB, magB, 1e-5)
	})
}

func TestMemInfoReturnsToBaseline(t *testing.T) {
	c := testContext(t)
	const chunk = 256 << 20
	// Warm up the allocator once so the baseline is steady.
	p, err := c.Alloc(chunk)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Free(p); err != nil {
		t.Fatal(err)
	}
	base, _, err := c.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	const slack = 64 << 20
	for i := 0; i < 20; i++ {
		ps := make([]DevicePtr, 4)
		for j := range ps {
			if ps[j], err = c.Alloc(chunk); err != nil {
				t.Fatal(err)
			}
		}
		during, _, _ := c.MemInfo()
		if base-during < 4*chunk-slack {
			t.Fatalf("free memory fell by %d MiB with %d MiB allocated", (base-during)>>20, 4*chunk>>20)
		}
		for _, p := range ps {
			if err := c.Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	after, _, _ := c.MemInfo()
	t.Logf("free: baseline %d MiB, after loop %d MiB", base>>20, after>>20)
	if after+slack < base {
		t.Errorf("free memory did not return to baseline: %d MiB -> %d MiB", base>>20, after>>20)
	}

	// Close frees what a Context still holds.
	c2, err := c.Lib().NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Alloc(1 << 30); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.NewEvent(); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.NewStream(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c2.Alloc(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
	afterClose, _, _ := c.MemInfo()
	t.Logf("free after a closed context's 1 GiB: %d MiB", afterClose>>20)
	if afterClose+slack < base {
		t.Errorf("Close did not free memory: %d MiB -> %d MiB", base>>20, afterClose>>20)
	}
}

func TestCompileCache(t *testing.T) {
	c := testContext(t)
	n := testNVRTC(t, c)
	dir := t.TempDir()
	opts := []string{"-DUNUSED=1"}

	t0 := time.Now()
	first, err := n.CompileCached(dir, kernelsSrc, "kernels.cu", opts, c.Arch())
	if err != nil {
		t.Fatal(err)
	}
	d1 := time.Since(t0)
	if first.CacheHit || first.CacheErr != nil || !first.CUBIN {
		t.Fatalf("first compile: hit %v, cache error %v, cubin %v", first.CacheHit, first.CacheErr, first.CUBIN)
	}
	if _, err := os.Stat(first.Path); err != nil {
		t.Fatalf("cache entry missing: %v", err)
	}
	t0 = time.Now()
	second, err := n.CompileCached(dir, kernelsSrc, "kernels.cu", opts, c.Arch())
	if err != nil {
		t.Fatal(err)
	}
	d2 := time.Since(t0)
	t.Logf("compile %v, cache hit %v (%s)", d1, d2, second.Path)
	if !second.CacheHit || !bytes.Equal(second.Image, first.Image) {
		t.Fatalf("second compile: hit %v, same image %v", second.CacheHit, bytes.Equal(second.Image, first.Image))
	}
	if d2 >= d1 {
		t.Errorf("cache hit (%v) not faster than compiling (%v)", d2, d1)
	}

	// A corrupt entry is compiled again and replaced.
	if err := os.WriteFile(first.Path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := n.CompileCached(dir, kernelsSrc, "kernels.cu", opts, c.Arch())
	if err != nil || third.CacheHit {
		t.Fatalf("after corruption: hit %v, err %v", third.CacheHit, err)
	}
	fourth, err := n.CompileCached(dir, kernelsSrc, "kernels.cu", opts, c.Arch())
	if err != nil || !fourth.CacheHit {
		t.Fatalf("after rewrite: hit %v, err %v", fourth.CacheHit, err)
	}

	// The cached image runs.
	m, err := c.LoadModule(fourth.Image)
	if err != nil {
		t.Fatal(err)
	}
	scale, err := m.Function("scale")
	if err != nil {
		t.Fatal(err)
	}
	p := upload(t, c, []float32{1, 2, 3})
	if err := c.Launch(scale, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, p, float32(2), int32(3)); err != nil {
		t.Fatal(err)
	}
	if got := download[float32](t, c, p, 3); got[0] != 2 || got[2] != 6 {
		t.Errorf("scale from cached image: %v", got)
	}
}

func TestMeasureCopyBandwidth(t *testing.T) {
	c := testContext(t)
	bw, err := MeasureCopyBandwidth(c, 256<<20, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device-to-device copy, 256 MiB x 5: %.1f GB/s (read+write)", bw/1e9)
	if bw <= 0 {
		t.Errorf("bandwidth %v", bw)
	}
	if c.Allocated() != 0 {
		t.Errorf("MeasureCopyBandwidth left %d bytes allocated", c.Allocated())
	}
}

// BenchmarkDtoH reads the logits of a decode token (131072 floats) and of
// windows of 5 and 8 rows (rows<n>/...) back: through the page-locked stage
// and a copy into Go memory (what DtoH does for large reads), the stage
// alone (the copy's share is the difference), and straight into pageable
// Go memory (the driver stages it itself).
func BenchmarkDtoH(b *testing.B) {
	c := testContext(b)
	for _, rows := range []int{1, 5, 8} {
		n := 131072 * 4 * rows
		p, err := c.Alloc(uint64(n))
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]byte, n)
		b.Run(fmt.Sprintf("rows%d/staged", rows), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := c.DtoH(dst, p); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rows%d/stage_only", rows), func(b *testing.B) {
			if err := c.DtoH(dst, p); err != nil { // the stage grown to n
				b.Fatal(err)
			}
			b.SetBytes(int64(n))
			for b.Loop() {
				if r := cuMemcpyDtoHPinned(c.lib.drv.memcpyDtoHAsync, c.stage, uint64(p), uint64(n), c.stream.h); r != 0 {
					b.Fatal(c.lib.cuErr(r, "cuMemcpyDtoHAsync"))
				}
				if err := c.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rows%d/pageable", rows), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := c.DtoHAsync(dst, p); err != nil {
					b.Fatal(err)
				}
				if err := c.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rows%d/fresh_staged", rows), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := c.DtoH(make([]byte, n), p); err != nil {
					b.Fatal(err)
				}
			}
		})
		if err := c.Free(p); err != nil {
			b.Fatal(err)
		}
	}
}
