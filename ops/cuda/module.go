package cuda

import (
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// sources are the kernels' CUDA C: common.cuh, the other headers (.cuh:
// device code several files share) and the .cu files of kernels. Each .cu
// file is its own NVRTC program (a unit: common.cuh, the other headers in
// name order, then the file), so the units compile in parallel and a change
// to one file recompiles only its unit; REEL_KERNEL_UNITS=one compiles them
// all as one program.
//
//go:embed kernels/*.cuh kernels/*.cu
var sources embed.FS

// kernelNames are the kernels the Go side launches.
var kernelNames = append([]string{
	"binary", "unary", "chain", "swiglu", "embed", "argmax", "check_finite", "last_row", "kv_write", "to_half", "to_half_norm", "swiglu_norm_half",
	"norm_rows", "norm_rows_wide", "norm_rows_long", "rowfuse", "rowfuse_wide", "rope",
	"attn_part_v1", "attn_part_v2", "attn_part_v4", "attn_part_v8", "attn_part_vx", "attn_part_s",
	"attn_prep_v1", "attn_prep_v2", "attn_prep_v4", "attn_prep_v8",
	"attn_finish", "qkv_prep",
	"matmul_tiled", "slerp_rows", "kv_half_d32", "kv_half_d64", "kv_half_d128", "kv_half_d256",
	"win_half", "win_sum", "win_glu_half",
}, append(append(append(mvKernelNames(), familyKernelNames()...), flashKernelNames()...), attnDecKernelNames...)...)

// flashKernelNames are the flash kernels' names.
func flashKernelNames() []string {
	var out []string
	for _, k := range flashKernels {
		out = append(out, k.name)
	}
	return out
}

// kernelSet is the loaded modules' kernels, by name.
type kernelSet struct {
	fn map[string]*cu.Function
	// unavailable are the kernels of programs that did not compile, with
	// why: the ops that launch them fail, the others run.
	unavailable map[string]error
	sms         int
}

// why says why kernel name has no function: its program did not compile,
// or no program defines it.
func (ks *kernelSet) why(name string) error {
	if err := ks.unavailable[name]; err != nil {
		return err
	}
	return errors.New("no such kernel")
}

// compileFailures is what loadKernels makes of its units' compile errors:
// none failed, nil; every one, an error; some, the kernels of those
// programs, each with its program's error (the backend runs without them).
func compileFailures(us []unit, errs []error) (map[string]error, error) {
	failed := map[string]error{}
	n := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		n++
		for _, d := range kernelDef.FindAllStringSubmatch(us[i].src, -1) {
			failed[d[1]] = fmt.Errorf("its program %s did not compile: %w", us[i].name, err)
		}
	}
	if n == len(us) {
		return nil, errors.Join(errs...)
	}
	if n == 0 {
		return nil, nil
	}
	return failed, nil
}

// unit is one NVRTC program of kernels.
type unit struct {
	name string // its .cu file, the program's name in NVRTC's messages
	src  string
	// suffix is the architecture variant the file asks for with a line
	// "// reel:arch-suffix a" (wgmma's sm_90a; see unitArch), "" for none.
	suffix string
}

// archSuffix finds a .cu file's "// reel:arch-suffix" line.
var archSuffix = regexp.MustCompile(`(?m)^// reel:arch-suffix (\w+)\s*$`)

// unitArch is the architecture a unit asking for suffix compiles for on a
// card of architecture card (Context.Arch): the card's without a suffix;
// with "a", the architecture-specific sm_90a, on an sm_90 card only (its
// code, wgmma, runs on no other). ok is false where the unit is left out:
// its kernels are then unavailable (errNotForCard) and the ops fall back.
func unitArch(card, suffix string) (arch string, ok bool) {
	switch {
	case suffix == "":
		return card, true
	case suffix == "a" && card == "sm_90":
		return card + suffix, true
	}
	return "", false
}

// errNotForCard marks the kernels of a unit left out for the card's
// architecture (unitArch).
var errNotForCard = errors.New("not compiled for this card's architecture")

// units gives the kernels' programs: with one, a single program of every
// .cu file (named kernelProgram) but those that ask for an architecture
// suffix (each still its own program), else a program per file. Each
// starts with the headers.
func units(one bool) ([]unit, error) {
	var head strings.Builder
	common, err := sources.ReadFile("kernels/common.cuh")
	if err != nil {
		return nil, err
	}
	head.Write(common)
	head.WriteString("\n// ---- elementwise op codes (ops.ElementwiseOps) ----\n")
	for i, d := range ops.ElementwiseOps {
		fmt.Fprintf(&head, "#define OP_%s %d\n", strings.ToUpper(d.Op), i)
	}
	ents, err := sources.ReadDir("kernels")
	if err != nil {
		return nil, err
	}
	var headers, files []string
	for _, e := range ents {
		switch n := e.Name(); {
		case strings.HasSuffix(n, ".cuh") && n != "common.cuh":
			headers = append(headers, n)
		case strings.HasSuffix(n, ".cu"):
			files = append(files, n)
		}
	}
	sort.Strings(headers)
	sort.Strings(files)
	text := map[string]string{}
	for _, n := range append(headers, files...) {
		b, err := sources.ReadFile("kernels/" + n)
		if err != nil {
			return nil, err
		}
		text[n] = fmt.Sprintf("\n// ---- %s ----\n%s", n, b)
	}
	for _, n := range headers {
		head.WriteString(text[n])
	}
	var us []unit
	var all strings.Builder
	all.WriteString(head.String())
	for _, n := range files {
		suffix := ""
		if m := archSuffix.FindStringSubmatch(text[n]); m != nil {
			suffix = m[1]
		}
		if one && suffix == "" {
			all.WriteString(text[n])
			continue
		}
		us = append(us, unit{name: n, src: head.String() + text[n], suffix: suffix})
	}
	if one {
		us = append([]unit{{name: kernelProgram, src: all.String()}}, us...)
	}
	return us, nil
}

// program is every kernel's source (units(true)'s programs joined), for
// tests.
func program() (string, error) {
	us, err := units(true)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, u := range us {
		sb.WriteString(u.src)
	}
	return sb.String(), nil
}

// kernelDef finds the names of the kernels a source defines.
var kernelDef = regexp.MustCompile(`extern "C" __global__ void (?:__launch_bounds__\([0-9A-Z_*, ]+\) )?(\w+)\(`)

// kernelProgram names the kernels' program for NVRTC and its cache.
const kernelProgram = "reel_kernels.cu"

// loadKernels compiles (or reads from the cache) and loads the kernels,
// the units in parallel (one, REEL_KERNEL_UNITS=one: a single program).
// When the cache lacks a unit it tells log before it compiles (over 40 s
// on an H200 as one program) and after.
func loadKernels(ctx *cu.Context, cacheDir string, defines []string, one bool, log *slog.Logger) (*kernelSet, error) {
	nv, err := ctx.Lib().NVRTC()
	if err != nil {
		return nil, err
	}
	us, err := units(one)
	if err != nil {
		return nil, fmt.Errorf("cuda: kernel sources: %w", err)
	}
	// Units for another architecture than the card's are left out, their
	// kernels unavailable.
	notHere := map[string]error{}
	live := us[:0:0]
	for _, u := range us {
		if _, ok := unitArch(ctx.Arch(), u.suffix); ok {
			live = append(live, u)
			continue
		}
		log.Info("a CUDA kernel program is not for this card: its kernels are left out", "program", u.name, "suffix", u.suffix, "arch", ctx.Arch())
		for _, d := range kernelDef.FindAllStringSubmatch(u.src, -1) {
			notHere[d[1]] = fmt.Errorf("its program %s (arch suffix %q) is not for %s: %w", u.name, u.suffix, ctx.Arch(), errNotForCard)
		}
	}
	us = live
	opts := append([]string{"-DREEL_KERNELS=1"}, defines...)
	compiled := make([]*cu.Compiled, len(us))
	compiles := make([]func() (*cu.Compiled, error), len(us))
	var missing []int
	for i, u := range us {
		arch, _ := unitArch(ctx.Arch(), u.suffix)
		if compiled[i], compiles[i] = nv.Cached(cacheDir, u.src, u.name, opts, arch); compiles[i] != nil {
			missing = append(missing, i)
		}
	}
	t0 := time.Now()
	if len(missing) > 0 {
		log.Info("compiling the CUDA kernels with NVRTC: once for this card, NVRTC and source (cached on disk)",
			"programs", len(missing), "of", len(us), "arch", ctx.Arch())
	}
	errs := make([]error, len(us))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(missing), runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				compiled[i], errs[i] = compiles[i]()
			}
		}()
	}
	for _, i := range missing {
		next <- i
	}
	close(next)
	wg.Wait()
	unavailable, err := compileFailures(us, errs)
	if err != nil {
		return nil, fmt.Errorf("cuda: compile kernels: %w", err)
	}
	if len(notHere) > 0 && unavailable == nil {
		unavailable = map[string]error{}
	}
	for n, err := range notHere {
		unavailable[n] = err
	}
	for i, err := range errs {
		if err != nil {
			log.Error("a CUDA kernel program did not compile: the ops that launch its kernels will fail", "program", us[i].name, "err", err)
		}
	}
	if len(missing) > 0 {
		log.Info("compiled the CUDA kernels", "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	}
	owner := map[string]*cu.Module{}
	for i, u := range us {
		if errs[i] != nil {
			continue
		}
		m, err := ctx.LoadModule(compiled[i].Image)
		if err != nil {
			return nil, fmt.Errorf("cuda: load kernels of %s: %w", u.name, err)
		}
		for _, d := range kernelDef.FindAllStringSubmatch(u.src, -1) {
			owner[d[1]] = m
		}
	}
	ks := &kernelSet{fn: map[string]*cu.Function{}, unavailable: unavailable, sms: ctx.SMCount()}
	for _, n := range kernelNames {
		if unavailable[n] != nil {
			continue
		}
		m := owner[n]
		if m == nil {
			return nil, fmt.Errorf("cuda: kernel %s is in no program", n)
		}
		f, err := m.Function(n)
		if err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", n, err)
		}
		ks.fn[n] = f
	}
	// shared raises a kernel's dynamic shared memory limit to b bytes; a
	// kernel of a program that did not compile has none to raise.
	shared := func(n string, b int) error {
		if f := ks.fn[n]; f != nil {
			if err := f.SetMaxDynamicSharedBytes(b); err != nil {
				return fmt.Errorf("cuda: kernel %s: %w", n, err)
			}
		}
		return nil
	}
	for _, k := range flashKernels {
		if b := k.shared(); b > 48*1024 {
			if err := shared(k.name, b); err != nil {
				return nil, err
			}
			// A hint, so that two blocks fit an SM where their shared
			// memory allows (wide at 128 dimensions, narrow at 256): a
			// driver that refuses it only leaves the choice to itself.
			if f := ks.fn[k.name]; f != nil {
				_ = f.SetSharedCarveout(100)
			}
		}
	}
	limits := map[string]int{}
	for n, b := range gdnChunkKernels() {
		limits[n] = b
	}
	if qmvSharedMax > 48<<10 {
		for _, n := range append(append(qmvsKernelNames(), qfuseKernelNames()...), qmvxKernelNames()...) {
			limits[n] = qmvSharedMax
		}
	}
	for _, n := range qmmaKernelNames() {
		limits[n] = qmmaSharedMax
	}
	for _, n := range qsaRowsKernels {
		limits[n] = qsaRowsSharedMax
	}
	for n, b := range limits {
		if err := shared(n, b); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

// launch is one bound kernel launch.
type launch struct {
	name        string // the kernel's, for errors
	fn          *cu.Function
	why         error // fn is nil: why the kernel is unavailable
	grid, block [3]uint32
	shared      uint32
	args        []any
	// pdl launches with programmatic dependent launch (every kernel starts
	// with pdl_entry, which waits for the previous one).
	pdl bool
}

// run enqueues the launch on the backend's stream.
func (l *launch) run(ctx *cu.Context) error {
	if l.fn == nil {
		return fmt.Errorf("launch %s: %w", l.name, l.why)
	}
	var err error
	if l.pdl {
		err = ctx.Stream().LaunchPDL(l.fn, l.grid, l.block, l.shared, l.args...)
	} else {
		err = ctx.Launch(l.fn, l.grid, l.block, l.shared, l.args...)
	}
	if err != nil {
		return fmt.Errorf("launch %s (grid %v, block %v, %d bytes shared): %w", l.name, l.grid, l.block, l.shared, err)
	}
	return nil
}

// steps is a bound node's work in order: launches, copies, cuBLAS calls.
type steps struct {
	be   *Backend
	work []func() error
}

// then appends the work of others after s's.
func (s *steps) then(others ...*steps) {
	for _, o := range others {
		s.work = append(s.work, o.work...)
	}
}

// Run enqueues every piece of the node's work.
func (s *steps) Run() error {
	if err := s.be.check(); err != nil {
		return err
	}
	for _, w := range s.work {
		if err := w(); err != nil {
			return err
		}
	}
	return nil
}

// add appends a launch of kernel name.
func (s *steps) add(name string, grid, block [3]uint32, shared uint32, args ...any) {
	l := &launch{name: name, fn: s.be.kernels.fn[name], grid: grid, block: block, shared: shared, args: args, pdl: s.be.pdl}
	if l.fn == nil {
		l.why = s.be.kernels.why(name)
	}
	ctx := s.be.ctx
	s.work = append(s.work, func() error { return l.run(ctx) })
	if s.be.bound != nil {
		*s.be.bound = append(*s.be.bound, name)
	}
}

// copyBytes appends a device-to-device copy.
func (s *steps) copyBytes(dst, src cu.DevicePtr, bytes int) {
	if bytes <= 0 {
		return
	}
	ctx := s.be.ctx
	s.work = append(s.work, func() error { return ctx.DtoDAsync(dst, src, uint64(bytes)) })
}

// zero appends clearing each f32 buffer of ys (a product's outputs when it
// has no inputs to sum).
func (s *steps) zero(ys ...*Buffer) {
	ctx := s.be.ctx
	for _, y := range ys {
		s.work = append(s.work, func() error { return ctx.MemsetAsync(y.ptr, 0, uint64(4*y.n)) })
	}
}

// grid1 is a 1-D grid-stride launch shape for n elements.
func grid1(n int64) (grid, block [3]uint32) {
	const threads = 256
	b := (n + threads - 1) / threads
	b = max(1, min(b, 65535))
	return [3]uint32{uint32(b), 1, 1}, [3]uint32{threads, 1, 1}
}

// threadsFor picks a block size (a multiple of 32, 32..maxT) for n items.
func threadsFor(n, maxT int) uint32 {
	t := (n + 31) / 32 * 32
	return uint32(max(32, min(t, maxT)))
}
