package cuda

import (
	"encoding/binary"
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
			n := 0
			for _, c := range optest.Cases() {
				if !strings.HasPrefix(c.Name, "attention") {
					continue
				}
				n++
				t.Run(c.Name, func(t *testing.T) {
					optest.Check(t, be, c)
					optest.Compare(t, ref, be, c)
				})
			}
			if n == 0 {
				t.Fatal("no attention cases in the table")
			}
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
	// The measured defaults: widep at 256 dimensions, wide where it is
	// compiled, narrow at 32 (the only one); a variant asked for where it
	// is compiled, else the default.
	be := &Backend{}
	for fd, want := range map[int]string{32: "flash_d32", 64: "flash_wide_d64", 128: "flash_wide_d128", 256: "flash_widep_d256"} {
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
