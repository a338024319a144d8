package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
	"github.com/reel-runtime/reel/ops/optest"
)

// newTestBackend opens a backend, skipping the test (with the driver's one
// line) where CUDA cannot be used.
func newTestBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	be, err := New(opts)
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return be
}

func TestNewWithoutDriver(t *testing.T) {
	if _, err := cu.Load(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	_, err := New(Options{})
	if err == nil || !errors.Is(err, cu.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("New without a driver: %v, want cu.Load's one-line error", err)
	}
}

// TestKernelTable needs no device: every op has a binder, and every kernel
// the Go side launches is in the sources.
func TestKernelTable(t *testing.T) {
	var missing []string
	for _, d := range ops.All() {
		if _, ok := binders[d.Op]; !ok {
			missing = append(missing, d.Op)
		}
	}
	if len(missing) > 0 {
		t.Errorf("ops without a CUDA kernel: %v", missing)
	}
	src, err := program()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range kernelNames {
		if !regexp.MustCompile(`extern "C" __global__ void (__launch_bounds__\([0-9A-Z_*, ]+\) )?` + n + `\(`).MatchString(src) {
			t.Errorf("kernel %s is not in the sources", n)
		}
	}
}

// caseOps reports whether every op of a case has a CUDA kernel.
func caseOps(be *Backend, c optest.Case) (string, bool) {
	g, err := c.Graph()
	if err != nil {
		return err.Error(), false
	}
	for _, n := range g.Nodes {
		if _, ok := be.Kernel(n.Op); !ok {
			return n.Op, false
		}
	}
	return "", true
}

// TestOpCases runs the golden table: every case against its float64
// reference (plain, in place, unfused) and against the CPU backend.
func TestOpCases(t *testing.T) {
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	ref := cpu.New(0)
	t.Logf("device %s, cuBLAS %v", be.Device(), be.HasBLAS())
	for _, c := range optest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			if op, ok := caseOps(be, c); !ok {
				t.Skipf("no CUDA kernel for %s", op)
			}
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
		})
	}
}

// BenchmarkOpCases is the op table's perf mode on the card: the time and
// GB/s of each case's launches back to back, e.g.
// ops_cuda.test -test.run '^$' -test.bench 'OpCases/attention'.
func BenchmarkOpCases(b *testing.B) {
	be := newTestBackend(b, Options{})
	if bw, err := be.MeasureCopyBandwidth(1<<30, 10); err == nil {
		b.Logf("%s: measured copy bandwidth %.0f GB/s (read + write)", be.Device(), bw/1e9)
	}
	optest.BenchCases(b, be, func(c optest.Case) (string, bool) {
		op, ok := caseOps(be, c)
		return "no CUDA kernel for " + op, !ok
	})
}

// encode is optest.Encode for a test: an error fails it.
func encode(t testing.TB, dt graph.DType, vals []float64) []byte {
	t.Helper()
	raw, err := optest.Encode(dt, vals)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func readF32(t testing.TB, be *Backend, b ops.Buffer) []float64 {
	t.Helper()
	raw := make([]byte, 4*b.Len())
	if err := be.Read(b, raw); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, b.Len())
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	return out
}

// bound is a case's graph bound on a backend, each value in its own buffer.
type bound struct {
	c      optest.Case
	g      *graph.Graph
	bufs   []ops.Buffer
	leaves []*graph.Value // by Inputs index
}

func bindCase(t testing.TB, be *Backend, c optest.Case) *bound {
	t.Helper()
	g, err := c.Graph()
	if err != nil {
		t.Fatal(err)
	}
	b := &bound{c: c, g: g, bufs: make([]ops.Buffer, len(g.Values)), leaves: make([]*graph.Value, len(c.Inputs))}
	for i, in := range c.Inputs {
		for _, v := range g.Values {
			if v.Kind != graph.Temp && v.Name == in.Name {
				b.leaves[i] = v
			}
		}
		if in.Kind == graph.Weight {
			buf, err := be.Load(in.DType, in.Len(), encode(t, in.DType, in.Data))
			if err != nil {
				t.Fatal(err)
			}
			b.bufs[b.leaves[i].ID] = buf
			continue
		}
		buf, err := be.Alloc(in.DType, in.Len())
		if err != nil {
			t.Fatal(err)
		}
		b.bufs[b.leaves[i].ID] = buf
	}
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			buf, err := be.Alloc(v.DType, v.Shape.Elems())
			if err != nil {
				t.Fatal(err)
			}
			b.bufs[v.ID] = buf
		}
	}
	return b
}

// reset writes the case's data into its inputs and states, with the call
// record at pos.
func (b *bound) reset(t testing.TB, be *Backend, pos int) {
	t.Helper()
	for i, in := range b.c.Inputs {
		if in.Kind == graph.Weight {
			continue
		}
		data := append([]float64(nil), in.Data...)
		if in.Name == ops.CallName {
			data[ops.CallPos] = float64(pos)
		}
		if err := be.Write(b.bufs[b.leaves[i].ID], encode(t, in.DType, data)); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *bound) setPos(t testing.TB, be *Backend, pos int) {
	t.Helper()
	for i, in := range b.c.Inputs {
		if in.Name == ops.CallName {
			data := append([]float64(nil), in.Data...)
			data[ops.CallPos] = float64(pos)
			if err := be.Write(b.bufs[b.leaves[i].ID], encode(t, graph.I32, data)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (b *bound) steps(t testing.TB, be *Backend) []ops.Step {
	t.Helper()
	order, err := b.g.Order()
	if err != nil {
		t.Fatal(err)
	}
	var out []ops.Step
	for _, n := range order {
		st, err := ops.BindNode(be, n, b.bufs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

// results reads the outputs, then the states.
func (b *bound) results(t testing.TB, be *Backend) [][]float64 {
	t.Helper()
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	var out [][]float64
	for _, o := range b.g.Outputs {
		out = append(out, readF32(t, be, b.bufs[o.ID]))
	}
	for i, in := range b.c.Inputs {
		if in.Kind == graph.State {
			out = append(out, readF32(t, be, b.bufs[b.leaves[i].ID]))
		}
	}
	return out
}

func maxAbsDiff(a, b [][]float64) float64 {
	m := 0.0
	for i := range a {
		for j := range a[i] {
			d := math.Abs(a[i][j] - b[i][j])
			if d != d {
				return math.Inf(1)
			}
			m = max(m, d)
		}
	}
	return m
}

func findCase(t testing.TB, prefix string) optest.Case {
	for _, c := range optest.Cases() {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no case %s", prefix)
	return optest.Case{}
}

// TestRecordReplay records an attention block (bf16 projections, norm_rope,
// KV writes, split attention, gate, slerp) once and replays it at several
// positions, against eager runs of the same steps; then moves every input
// and state to new buffers, updates the recording and checks it again.
func TestRecordReplay(t *testing.T) {
	be := newTestBackend(t, Options{})
	c := findCase(t, "block/attention/rows=1/pos=5/cap=8")
	b := bindCase(t, be, c)
	st := b.steps(t, be)

	// The first position against the float64 reference.
	b.reset(t, be, 5)
	for _, s := range st {
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
	}
	first := b.results(t, be)
	var in [][]float64
	for _, x := range c.Inputs {
		in = append(in, x.Data)
	}
	for i, w := range c.Ref(in) {
		if e := optest.NMSE(first[i], w); !(e <= c.Tol) {
			t.Errorf("eager result %d: NMSE %.3g against the reference", i, e)
		}
	}

	positions := []int{5, 6, 7}
	eager := func() [][][]float64 {
		var out [][][]float64
		b.reset(t, be, positions[0])
		for _, p := range positions {
			b.setPos(t, be, p)
			for _, s := range st {
				if err := s.Run(); err != nil {
					t.Fatal(err)
				}
			}
			out = append(out, b.results(t, be))
		}
		return out
	}
	want := eager()
	rec, err := be.Record(st)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	replay := func(what string) {
		b.reset(t, be, positions[0])
		worst := 0.0
		for i, p := range positions {
			b.setPos(t, be, p)
			if err := rec.Replay(); err != nil {
				t.Fatal(err)
			}
			got := b.results(t, be)
			d := maxAbsDiff(got, want[i])
			worst = max(worst, d)
			if d > 1e-6 {
				t.Errorf("%s at position %d: max abs diff %g against eager", what, p, d)
			}
		}
		t.Logf("%s (graph %v) over positions %v: max abs diff against eager %g", what, !rec.Eager(), positions, worst)
	}
	replay("replay")

	// Move inputs, states and temporaries, rebind, update.
	old := b.bufs
	b.bufs = make([]ops.Buffer, len(old))
	for _, v := range b.g.Values {
		if v.Kind == graph.Weight {
			b.bufs[v.ID] = old[v.ID]
			continue
		}
		nb, err := be.Alloc(v.DType, old[v.ID].Len())
		if err != nil {
			t.Fatal(err)
		}
		b.bufs[v.ID] = nb
	}
	if err := rec.Update(b.steps(t, be)); err != nil {
		t.Fatal(err)
	}
	replay("replay after update")
	t.Logf("updates in place %d, re-instantiations %d", rec.Updates, rec.Reinstantiations)
}

// TestKernelErrorThenRecover checks that a reported error comes once and
// the backend goes on.
func TestKernelErrorThenRecover(t *testing.T) {
	be := newTestBackend(t, Options{})
	c := findCase(t, "embed/error/id=300")
	res, err := optest.Run(be, c, optest.Plain)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || !strings.Contains(res.Err.Error(), c.WantErr) {
		t.Fatalf("error %v, want %q", res.Err, c.WantErr)
	}
	if err := be.Sync(); err != nil {
		t.Fatalf("the error came twice: %v", err)
	}
	optest.Check(t, be, findCase(t, "matmul/bf16/3x65x129"))
}

// TestLeak opens, runs, records and closes backends in a loop; the device's
// free memory must come back.
func TestLeak(t *testing.T) {
	lib, err := cu.Load()
	if err != nil {
		t.Skip(err)
	}
	ctx, err := lib.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	free0, _, err := ctx.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	c := findCase(t, "block/attention/rows=4")
	var frees []uint64
	for i := 0; i < 4; i++ {
		be, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		b := bindCase(t, be, c)
		b.reset(t, be, 0)
		rec, err := be.Record(b.steps(t, be))
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Replay(); err != nil {
			t.Fatal(err)
		}
		b.results(t, be)
		if _, err := be.Alloc(graph.F32, 64<<20); err != nil { // left for Close to free
			t.Fatal(err)
		}
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
		free, _, err := ctx.MemInfo()
		if err != nil {
			t.Fatal(err)
		}
		frees = append(frees, free)
	}
	t.Logf("free memory: baseline %d MiB, after each open/run/close %v MiB", free0>>20, mib(frees))
	// The first round may leave the libraries' per-context state (cuBLAS,
	// the runtime); later rounds must not lose more.
	const slack = 8 << 20
	if frees[0]+(256<<20) < free0 {
		t.Errorf("after the first round free memory is %d MiB below the baseline", (free0-frees[0])>>20)
	}
	for i, f := range frees[1:] {
		if f+slack < frees[0] {
			t.Errorf("after round %d free memory is %d MiB below the first round's", i+1, (frees[0]-f)>>20)
		}
	}
}

func mib(xs []uint64) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = x >> 20
	}
	return out
}

// TestKernelsParse checks the kernels' C++ with clang's CUDA front end, when
// clang is installed (REEL_CLANG names another binary): a syntax or type
// error then fails here, on any machine, instead of in NVRTC on the card.
// It compiles for sm_80, so code under __CUDA_ARCH__ >= 900 is not seen.
func TestKernelsParse(t *testing.T) {
	clang := os.Getenv("REEL_CLANG")
	if clang == "" {
		for _, c := range []string{"clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"} {
			if p, err := exec.LookPath(c); err == nil {
				clang = p
				break
			}
		}
	}
	if clang == "" {
		t.Skip("clang is not installed (REEL_CLANG names one): the kernels' C++ is checked by NVRTC on the card only")
	}
	prelude, err := os.ReadFile(filepath.Join("testdata", "clang_prelude.h"))
	if err != nil {
		t.Fatal(err)
	}
	one, err := units(true)
	if err != nil {
		t.Fatal(err)
	}
	each, err := units(false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, u := range append(one, each...) {
		t.Run(u.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(dir, u.name)
			if err := os.WriteFile(file, append(slices.Clip(prelude), u.src...), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80",
				"-fsyntax-only", "-std=c++17", file).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", clang, err, out)
			}
		})
	}
}

// TestKernelUnits: every kernel the Go side launches is defined in exactly
// one unit (a program per .cu file), and in the single program.
func TestKernelUnits(t *testing.T) {
	each, err := units(false)
	if err != nil {
		t.Fatal(err)
	}
	one, err := units(true)
	if err != nil {
		t.Fatal(err)
	}
	// The single program holds every file but those asking for an
	// architecture suffix, which stay programs of their own.
	suffixed := 0
	in := map[string][]string{}
	for _, u := range each {
		if !strings.HasSuffix(u.name, ".cu") {
			t.Errorf("unit %q is not named for its file", u.name)
		}
		if _, ok := unitArch("sm_90", u.suffix); !ok {
			t.Errorf("unit %s: arch suffix %q is for no card", u.name, u.suffix)
		}
		if u.suffix != "" {
			suffixed++
		}
		for _, d := range kernelDef.FindAllStringSubmatch(u.src, -1) {
			in[d[1]] = append(in[d[1]], u.name)
		}
	}
	if len(one) != 1+suffixed || one[0].name != kernelProgram || len(each) < 2 {
		t.Fatalf("%d programs in the single form (%d with a suffix) and %d units", len(one), suffixed, len(each))
	}
	all := map[string]int{}
	for _, u := range one {
		for _, d := range kernelDef.FindAllStringSubmatch(u.src, -1) {
			all[d[1]]++
		}
	}
	for _, n := range kernelNames {
		if len(in[n]) != 1 || all[n] != 1 {
			t.Errorf("kernel %s: defined in units %v and %d times in the single form", n, in[n], all[n])
		}
	}
	if !slices.ContainsFunc(each, func(u unit) bool { return u.name == "flash_wg.cu" && u.suffix == "a" }) {
		t.Error("flash_wg.cu does not ask for sm_90a")
	}
}

// TestUnitArch: a unit without a suffix compiles for the card; one asking
// for "a" (wgmma) for sm_90a on an sm_90 card and on no other.
func TestUnitArch(t *testing.T) {
	for _, c := range []struct {
		card, suffix, want string
		ok                 bool
	}{
		{"sm_90", "", "sm_90", true}, {"sm_89", "", "sm_89", true}, {"sm_100", "", "sm_100", true},
		{"sm_90", "a", "sm_90a", true}, {"sm_89", "a", "", false}, {"sm_100", "a", "", false}, {"sm_80", "a", "", false},
		{"sm_90", "f", "", false},
	} {
		if got, ok := unitArch(c.card, c.suffix); got != c.want || ok != c.ok {
			t.Errorf("unitArch(%q, %q) = %q, %v; want %q, %v", c.card, c.suffix, got, ok, c.want, c.ok)
		}
	}
}

// TestCompileFailures: a program that does not compile takes only its own
// kernels out, each with its program's error; every program failing is an
// error; a launch of a kernel taken out says why instead of launching.
func TestCompileFailures(t *testing.T) {
	us := []unit{
		{name: "a.cu", src: `extern "C" __global__ void ka(int n) {}` + "\n" + `extern "C" __global__ void __launch_bounds__(256, 2) kb(int n) {}`},
		{name: "b.cu", src: `extern "C" __global__ void kc(int n) {}`},
	}
	boom := errors.New("nvrtcCompileProgram(b.cu): NVRTC_ERROR_COMPILATION")
	got, err := compileFailures(us, []error{nil, nil})
	if got != nil || err != nil {
		t.Errorf("no failures: %v, %v; want nil, nil", got, err)
	}
	got, err = compileFailures(us, []error{nil, boom})
	if err != nil || len(got) != 1 || !errors.Is(got["kc"], boom) || !strings.Contains(got["kc"].Error(), "b.cu") {
		t.Errorf("b.cu failing: %v, %v; want kc alone, naming b.cu and wrapping its error", got, err)
	}
	if _, err = compileFailures(us, []error{boom, boom}); !errors.Is(err, boom) {
		t.Errorf("every program failing: %v, want the programs' errors", err)
	}
	ks := &kernelSet{unavailable: got}
	be := &Backend{kernels: ks}
	s := &steps{be: be}
	s.add("kc", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0)
	s.add("nosuch", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0)
	for i, want := range []string{"launch kc: its program b.cu did not compile", "launch nosuch: no such kernel"} {
		if err := s.work[i](); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("launch %d: %v, want an error containing %q", i, err, want)
		}
	}
}
