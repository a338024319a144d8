package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestFlashVariants runs the attention cases through every flash variant
// (TestOpCases takes the default; a variant not compiled for a dimension
// falls back to the default there).
func TestFlashVariants(t *testing.T) {
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	ref := cpu.New(0)
	for _, v := range flashVariants {
		t.Run(v, func(t *testing.T) {
			be.flashVariant = v
			defer func() { be.flashVariant = "" }()
			runAttentionCases(t, be, ref, "all", func(optest.Case) bool { return true })
		})
	}
}

func TestFlashVariantNames(t *testing.T) {
	for _, v := range append([]string{""}, flashVariants...) {
		if err := checkFlashVariant(v); err != nil {
			t.Errorf("checkFlashVariant(%q): %v", v, err)
		}
	}
	if err := checkFlashVariant("fast"); err == nil || !strings.Contains(err.Error(), "widep") {
		t.Errorf("checkFlashVariant(fast): %v, want an error naming the variants", err)
	}
	for _, k := range flashKernels {
		if !strings.Contains(strings.Join(flashVariants, " "), k.variant) {
			t.Errorf("kernel %s: unknown variant %q", k.name, k.variant)
		}
		if b := k.shared(); b > 227*1024 {
			t.Errorf("kernel %s: %d bytes of shared memory, over the 227 KiB of a block", k.name, b)
		}
		if k.rows()%16 != 0 || k.keys%16 != 0 || k.keys > 64 {
			t.Errorf("kernel %s: %d warps, %d keys a tile", k.name, k.warps, k.keys)
		}
	}
	// flash_body's layout (flash.cu): Q [rows][d+8], two buffers each of K
	// [keys][d+8] and Vᵀ [d][keys+8], in f16.
	i := slices.IndexFunc(flashKernels, func(k flashKernel) bool { return k.name == "flash_widep_d256" })
	if i < 0 {
		t.Fatal("no kernel flash_widep_d256")
	}
	if got, want := flashKernels[i].shared(), 2*(128*264+2*64*264+2*256*72); got != want {
		t.Errorf("flash_widep_d256: shared() = %d bytes, want %d", got, want)
	}
	// The measured defaults: wg at 256 dimensions, wide where it is
	// compiled, narrow at 32 (the only one); a variant asked for where it
	// is compiled, else the default.
	be := &Backend{}
	for fd, want := range map[int]string{32: "flash_d32", 64: "flash_wide_d64", 128: "flash_wide_d128", 256: "flash_wg_d256"} {
		if k := be.flashFor(fd); k.name != want || k.dim != fd {
			t.Errorf("flashFor(%d) = %+v, want %s", fd, k, want)
		}
	}
	be.flashVariant = flashNarrow
	if k := be.flashFor(256); k.name != "flash_d256" {
		t.Errorf("narrow: flashFor(256) = %+v, want flash_d256", k)
	}
	be.flashVariant = flashWideP
	if k := be.flashFor(128); k.name != "flash_wide_d128" {
		t.Errorf("widep: flashFor(128) = %+v, want the default's flash_wide_d128", k)
	}
	be.flashVariant = flashWide
	if k := be.flashFor(32); k.name != "flash_d32" {
		t.Errorf("wide: flashFor(32) = %+v, want the default's flash_d32", k)
	}
	// wg (flash_wg.cu): asked for, at 128 and 256 dimensions; the default
	// elsewhere and where its program was left out for the card, but kept
	// where it failed to compile (its launch says why).
	be.flashVariant = flashWG
	for fd, want := range map[int]string{64: "flash_wide_d64", 128: "flash_wg_d128", 256: "flash_wg_d256"} {
		if k := be.flashFor(fd); k.name != want {
			t.Errorf("wg: flashFor(%d) = %+v, want %s", fd, k, want)
		}
	}
	be.kernels = &kernelSet{unavailable: map[string]error{
		"flash_wg_d256": fmt.Errorf("its program flash_wg.cu: %w", errNotForCard),
		"flash_wg_d128": errors.New("its program flash_wg.cu did not compile"),
	}}
	if k := be.flashFor(256); k.name != "flash_widep_d256" {
		t.Errorf("wg not for the card: flashFor(256) = %+v, want the default's flash_widep_d256", k)
	}
	if k := be.flashFor(128); k.name != "flash_wg_d128" {
		t.Errorf("wg failing to compile: flashFor(128) = %+v, want flash_wg_d128", k)
	}
	// By default a kernel whose program failed to compile is passed over.
	be.flashVariant = ""
	be.kernels = &kernelSet{unavailable: map[string]error{"flash_wg_d256": errors.New("its program flash_wg.cu did not compile")}}
	if k := be.flashFor(256); k.name != "flash_widep_d256" {
		t.Errorf("default, wg failing to compile: flashFor(256) = %+v, want flash_widep_d256", k)
	}
	be.kernels = nil
	// flash_wg's layout: 1024 bytes of alignment, then Q [128][d], two K
	// [64][d] and two Vᵀ [d][64], unpadded f16.
	for _, c := range []struct {
		name string
		want int
	}{
		{"flash_wg_d256", 1024 + 2*(128*256+2*64*256+2*256*64)}, {"flash_wg_d128", 1024 + 2*(128*128+2*64*128+2*128*64)},
	} {
		i := slices.IndexFunc(flashKernels, func(k flashKernel) bool { return k.name == c.name })
		if i < 0 {
			t.Errorf("no kernel %s", c.name)
		} else if k := flashKernels[i]; k.shared() != c.want || k.rows() != 128 || k.keys != 64 {
			t.Errorf("%s: shared() = %d bytes, want %d; %d rows, %d keys a tile, want 128 and 64", c.name, k.shared(), c.want, k.rows(), k.keys)
		}
	}
}

// flashShape is one prompt attention: rows query rows from position pos
// over a slot of capacity keys (a ring when ring), Dory 4B's heads.
type flashShape struct {
	name                     string
	rows, pos, capacity, win int
	ring                     bool
}

// flashShapes are Dory 4B's attention in a 2048-token prompt of one chunk:
// the global layers (causal over a slot of 2048) and the sliding ones
// (window 1024, on a ring of 3072 that the chunk does not wrap), and the
// sliding ones of the prompt's second chunk (positions 2048 .. 4095, the
// ring wrapped).
var flashShapes = []flashShape{
	{"dory4b_global_2048", 2048, 0, 2048, 0, false},
	{"dory4b_window1024_ring", 2048, 0, 3072, 1024, true},
	{"dory4b_window1024_ring_pos2048", 2048, 2048, 3072, 1024, true},
}

// Dory 4B's attention heads.
const (
	doryHeads, doryKVHeads, doryHeadDim = 16, 4, 256
)

// flashFLOPs is the products' work of shape s: 4·heads·d for each key a
// row sees.
func flashFLOPs(s flashShape) float64 {
	keys := 0
	for p := s.pos; p < s.pos+s.rows; p++ {
		k := p + 1
		if s.win > 0 {
			k = min(k, s.win)
		}
		keys += k
	}
	return 4 * float64(doryHeads*doryHeadDim) * float64(keys)
}

// newFlashBench binds attention of shape s (q, k and v pseudo-random in
// [-1, 1), so that the maxima move as in a model) with the backend's
// current flash variant.
func newFlashBench(tb testing.TB, be *Backend, s flashShape) *gemvBench {
	tb.Helper()
	gb := graph.NewBuilder("flash")
	q := gb.Input("q", graph.F32, s.rows, doryHeads*doryHeadDim)
	k := gb.State("k", graph.F32, graph.Dyn, doryKVHeads*doryHeadDim)
	v := gb.State("v", graph.F32, graph.Dyn, doryKVHeads*doryHeadDim)
	call := ops.Call(gb)
	at := ops.AttentionAttrs{Heads: doryHeads, KVHeads: doryKVHeads, HeadDim: doryHeadDim, Window: s.win, Ring: s.ring,
		Scale: float32(1 / math.Sqrt(doryHeadDim))}
	gb.Output(ops.Attention(gb, q, k, v, call, at))
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	fb := &gemvBench{s: gemvShape{name: s.name}, rows: s.rows, g: g, be: be, copies: 1}
	bufs := make([]ops.Buffer, len(g.Values))
	for _, val := range g.Values {
		n := val.Shape.Elems()
		if val.Kind == graph.State {
			n = s.capacity * val.Shape[1]
		}
		bufs[val.ID] = fb.alloc(tb, val.DType, n)
	}
	fb.inst = [][]ops.Buffer{bufs}
	seed := uint32(1)
	for _, x := range []*graph.Value{q, k, v} {
		n := bufs[x.ID].(*Buffer).n
		raw := make([]byte, 0, 4*n)
		for range n {
			seed = seed*1664525 + 1013904223
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(int32(seed))/(1<<31)))
		}
		if err := be.Write(bufs[x.ID], raw); err != nil {
			tb.Fatal(err)
		}
	}
	rec := make([]byte, 4*ops.CallLen)
	binary.LittleEndian.PutUint32(rec[4*ops.CallPos:], uint32(s.pos))
	if err := be.Write(bufs[call.ID], rec); err != nil {
		tb.Fatal(err)
	}
	return fb
}

// TestFlashAgree runs every flash variant at Dory 4B's prompt shapes
// (flashShapes: 2048 rows, up to 32 tiles of keys a block, the grid's both
// orders) and compares its output with widep's: the op table's cases are
// small, these are the shapes TestFlashSweep times. Every variant rounds
// q, k, v and the probabilities to f16 alike, so they differ by the order
// of f32 sums and, where their tiles differ (narrow's 32 keys at 256
// dimensions), the f16 rounding of some probabilities: within
// optest.TolF16, while a layout or mask error shows as orders more.
func TestFlashAgree(t *testing.T) {
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	defer func() { be.flashVariant, be.flashGrid = "", "" }()
	for _, s := range flashShapes {
		var want []float64
		for _, v := range append([]string{flashWideP}, flashVariants...) {
			for _, grid := range flashGrids {
				be.flashVariant, be.flashGrid = v, grid
				got := flashOutput(t, be, s)
				if want == nil {
					want = got
					continue
				}
				e := optest.NMSE(got, want)
				t.Logf("%s: %s (%s, grid %s): NMSE %.3g against widep's output", s.name, v, be.flashFor(doryHeadDim).name, grid, e)
				if !(e < optest.TolF16) {
					t.Errorf("%s: %s (%s, grid %s): NMSE %.3g against widep's output, over %g", s.name, v, be.flashFor(doryHeadDim).name, grid, e, optest.TolF16)
				}
			}
		}
	}
}

// flashOutput runs attention of shape s once with the backend's variant
// and gives its output.
func flashOutput(t *testing.T, be *Backend, s flashShape) []float64 {
	t.Helper()
	fb := newFlashBench(t, be, s)
	defer fb.free()
	order, err := fb.g.Order()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range order {
		st, err := ops.BindNode(be, n, fb.inst[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Run(); err != nil {
			t.Fatal(err)
		}
	}
	out := fb.inst[0][fb.g.Outputs[0].ID]
	raw := make([]byte, 4*out.(*Buffer).n)
	if err := be.Read(out, raw); err != nil {
		t.Fatal(err)
	}
	y := make([]float64, len(raw)/4)
	for i := range y {
		y[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	return y
}

// TestFlashSweep times every flash variant at Dory 4B's prompt shapes
// (kv_half and the flash kernel, replayed in a CUDA graph) and prints the
// time of a launch pair, its TFLOP/s and each kernel's registers and spills,
// each on both grid orders (flashGrids), for choosing flashOrder and
// flashHeadsFirst: set REEL_FLASH_SWEEP=1 to run it over every
// variant, or to a comma-separated list of variants (e.g. widep,wide).
func TestFlashSweep(t *testing.T) {
	sweep := os.Getenv("REEL_FLASH_SWEEP")
	if sweep == "" {
		t.Skip("REEL_FLASH_SWEEP is not set")
	}
	variants := flashVariants
	if sweep != "1" {
		variants = strings.Split(sweep, ",")
		for _, v := range variants {
			if err := checkFlashVariant(v); err != nil {
				t.Fatalf("REEL_FLASH_SWEEP: %v", err)
			}
		}
	}
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	for _, k := range flashKernels {
		if k.dim != doryHeadDim || !slices.Contains(variants, k.variant) {
			continue
		}
		f := be.kernels.fn[k.name]
		if f == nil {
			fmt.Printf("flash %-20s %s: unavailable: %v\n", k.name, k.variant, be.kernels.why(k.name))
			continue
		}
		regs, _ := f.Attribute(cu.FuncNumRegs)
		local, _ := f.Attribute(cu.FuncLocalSizeBytes)
		fmt.Printf("flash %-20s %s: %d warps, %d rows, %d keys a tile, %d registers, %d bytes of local memory, %d bytes shared\n",
			k.name, k.variant, k.warps, k.rows(), k.keys, regs, local, k.shared())
	}
	const reps = 5
	for _, s := range flashShapes {
		flops := flashFLOPs(s)
		for _, v := range variants {
			for _, grid := range flashGrids {
				be.flashVariant, be.flashGrid = v, grid
				fb := newFlashBench(t, be, s)
				per, _ := fb.time(t, be, fb.steps(t, be, false), reps)
				fb.free()
				if err := be.Sync(); err != nil {
					t.Fatalf("%s %s %s: %v", s.name, v, grid, err)
				}
				fmt.Printf("sweep %-32s %-7s %-5s %8.3f ms %6.1f TFLOP/s\n", s.name, v, grid, float64(per.Nanoseconds())/1e6, flops/per.Seconds()/1e12)
			}
		}
	}
	be.flashVariant, be.flashGrid = "", ""
}

// BenchmarkFlash times prompt attention at Dory 4B's shapes with the
// default variant (or REEL_FLASH_VARIANT's), e.g.
// ops_cuda.test -test.run '^$' -test.bench Flash.
func BenchmarkFlash(b *testing.B) {
	be := newTestBackend(b, Options{Precision: PrecisionHalf})
	for _, s := range flashShapes {
		b.Run(s.name, func(b *testing.B) {
			fb := newFlashBench(b, be, s)
			defer fb.free()
			st := fb.steps(b, be, false)
			b.ResetTimer()
			per, _ := fb.time(b, be, st, b.N)
			b.StopTimer()
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			tflops := flashFLOPs(s) / per.Seconds() / 1e12
			b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
			b.ReportMetric(tflops, "TFLOP/s")
			b.Logf("%s on %s (%s): %v a launch pair, %.1f TFLOP/s", s.name, be.Device(), be.flashFor(flashDim(doryHeadDim)).name, per, tflops)
		})
	}
}
