package cuda

import (
	"embed"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// sources are the kernels' CUDA C: common.cuh first, then every .cu file in
// name order, compiled as one NVRTC program.
//
//go:embed kernels/common.cuh kernels/*.cu
var sources embed.FS

// kernelNames are the kernels the Go side launches.
var kernelNames = append([]string{
	"binary", "unary", "chain", "swiglu", "embed", "argmax", "last_row", "kv_write", "to_half", "to_half_norm", "swiglu_norm_half",
	"norm_rows", "norm_rows_wide", "norm_rows_long", "rowfuse", "rowfuse_wide", "rope",
	"attn_part_v1", "attn_part_v2", "attn_part_v4", "attn_part_v8", "attn_part_vx", "attn_part_s",
	"attn_finish", "qkv_prep",
	"matmul_tiled", "slerp_rows", "kv_half_d32", "kv_half_d64", "kv_half_d128", "kv_half_d256",
	"win_half", "win_sum", "win_glu_half",
}, append(append(mvKernelNames(), familyKernelNames()...), flashKernelNames()...)...)

// flashKernelNames are the flash kernels' names.
func flashKernelNames() []string {
	var out []string
	for _, k := range flashKernels {
		out = append(out, k.name)
	}
	return out
}

// kernelSet is the loaded module's kernels, by name.
type kernelSet struct {
	fn  map[string]*cu.Function
	sms int
}

// program is the concatenated source.
func program() (string, error) {
	var sb strings.Builder
	common, err := sources.ReadFile("kernels/common.cuh")
	if err != nil {
		return "", err
	}
	sb.Write(common)
	sb.WriteString("\n// ---- elementwise op codes (ops.ElementwiseOps) ----\n")
	for i, d := range ops.ElementwiseOps {
		fmt.Fprintf(&sb, "#define OP_%s %d\n", strings.ToUpper(d.Op), i)
	}
	ents, err := sources.ReadDir("kernels")
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".cu") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := sources.ReadFile("kernels/" + n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "\n// ---- %s ----\n", n)
		sb.Write(b)
	}
	return sb.String(), nil
}

// kernelProgram names the kernels' program for NVRTC and its cache.
const kernelProgram = "reel_kernels.cu"

// loadKernels compiles (or reads from the cache) and loads the kernels.
// Without the cache's entry it tells log before it compiles (a minute or
// more on an H200) and after.
func loadKernels(ctx *cu.Context, cacheDir string, defines []string, log *slog.Logger) (*kernelSet, error) {
	nv, err := ctx.Lib().NVRTC()
	if err != nil {
		return nil, err
	}
	src, err := program()
	if err != nil {
		return nil, fmt.Errorf("cuda: kernel sources: %w", err)
	}
	opts := append([]string{"-DREEL_KERNELS=1"}, defines...)
	var t0 time.Time
	if !nv.Cached(cacheDir, src, kernelProgram, opts, ctx.Arch()) {
		t0 = time.Now()
		log.Info("compiling the CUDA kernels with NVRTC: once for this card, NVRTC and source (cached on disk)", "arch", ctx.Arch())
	}
	c, err := nv.CompileCached(cacheDir, src, kernelProgram, opts, ctx.Arch())
	if err != nil {
		return nil, fmt.Errorf("cuda: compile kernels: %w", err)
	}
	if !t0.IsZero() {
		log.Info("compiled the CUDA kernels", "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()), "cache", c.Path)
	}
	m, err := ctx.LoadModule(c.Image)
	if err != nil {
		return nil, fmt.Errorf("cuda: load kernels: %w", err)
	}
	ks := &kernelSet{fn: map[string]*cu.Function{}, sms: ctx.SMCount()}
	for _, n := range kernelNames {
		f, err := m.Function(n)
		if err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", n, err)
		}
		ks.fn[n] = f
	}
	for _, k := range flashKernels {
		if b := k.shared(); b > 48*1024 {
			if err := ks.fn[k.name].SetMaxDynamicSharedBytes(b); err != nil {
				return nil, fmt.Errorf("cuda: kernel %s: %w", k.name, err)
			}
			// A hint, so that two blocks fit an SM where their shared
			// memory allows (wide at 128 dimensions, narrow at 256): a
			// driver that refuses it only leaves the choice to itself.
			_ = ks.fn[k.name].SetSharedCarveout(100)
		}
	}
	for n, b := range gdnChunkKernels() {
		if err := ks.fn[n].SetMaxDynamicSharedBytes(b); err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", n, err)
		}
	}
	if qmvSharedMax > 48<<10 {
		for _, n := range append(qmvsKernelNames(), qfuseKernelNames()...) {
			if err := ks.fn[n].SetMaxDynamicSharedBytes(qmvSharedMax); err != nil {
				return nil, fmt.Errorf("cuda: kernel %s: %w", n, err)
			}
		}
	}
	for _, n := range qmmaKernelNames() {
		if err := ks.fn[n].SetMaxDynamicSharedBytes(qmmaSharedMax); err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", n, err)
		}
	}
	for _, n := range qsaRowsKernels {
		if err := ks.fn[n].SetMaxDynamicSharedBytes(qsaRowsSharedMax); err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", n, err)
		}
	}
	return ks, nil
}

// launch is one bound kernel launch.
type launch struct {
	name        string // the kernel's, for errors
	fn          *cu.Function
	grid, block [3]uint32
	shared      uint32
	args        []any
	// pdl launches with programmatic dependent launch (every kernel starts
	// with pdl_entry, which waits for the previous one).
	pdl bool
}

// run enqueues the launch on the backend's stream.
func (l *launch) run(ctx *cu.Context) error {
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
	ctx := s.be.ctx
	s.work = append(s.work, func() error { return l.run(ctx) })
}

// copyBytes appends a device-to-device copy.
func (s *steps) copyBytes(dst, src cu.DevicePtr, bytes int) {
	if bytes <= 0 {
		return
	}
	ctx := s.be.ctx
	s.work = append(s.work, func() error { return ctx.DtoDAsync(dst, src, uint64(bytes)) })
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
