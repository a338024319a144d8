package cuda

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// BenchmarkQuantGEMV measures quant_matmul at Dory-4B's decode shapes
// (one row; gate/up also with 2, 4, 5 and 8, down with 5; and one row of
// the fused q/k/v/g and gate/up with SwiGLU) in FP8 (128 x 128
// blocks, f32 scales), q8 and q4 (groups of 32, f16 scales), each with the
// old kernels (qmv_*, a warp a feature: <format>_old_<shape>), the split-K
// ones on the CUDA cores (qmvs_*, the default at one row for SwiGLU and wide products:
// <format>_splitk_<shape>; the same with x read through L1 rather than staged
// in shared memory: <format>_nostage_<shape>) and the tensor-core ones
// (qmma_*, the default from qmmaMinRows rows, here at every row count:
// <format>_mma_<shape>), and at one row the one-row kernels (qmvr_*, and
// qmvgr_*, qmvswr_* for the grouped and SwiGLU shapes; <format>_row_<shape>,
// with one feature a warp <format>_rowf1_<shape>), beside the launch the
// backend takes by default (<format>_default_<shape>): GB/s of codes, scales
// and activations moved, and the share of the copy bound, as BenchmarkGEMV
// reports the bf16 products; and the prompt path (dequantize, then the
// GEMM) at quantPromptShapes, with TFLOP/s, e.g. ops_cuda.test -test.run
// '^$' -test.bench 'QuantGEMV/.*rows(64|2048)'.
func BenchmarkQuantGEMV(b *testing.B) {
	be := newTestBackend(b, Options{})
	if bw, err := be.MeasureCopyBandwidth(1<<30, 10); err == nil {
		b.Logf("%s: measured copy bandwidth %.0f GB/s (read + write)", be.Device(), bw/1e9)
	}
	type format struct {
		dt, sdt graph.DType
		blocks  ops.QuantAttrs
	}
	formats := map[string]format{
		"fp8": {graph.F8E4M3, graph.F32, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}},
		"q8":  {graph.I8, graph.F16, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}},
		"q4":  {graph.U8, graph.F16, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}},
	}
	for _, f := range []string{"fp8", "q8", "q4"} {
		for _, s := range quantGEMVShapes() {
			for _, k := range []struct {
				name string
				tune mvTuning
			}{{"default", mvTuning{}}, {"old", mvTuning{quantOld: true}}, {"splitk", mvTuning{quantNoMMA: true, quantNoRow: true}},
				{"nostage", mvTuning{quantNoMMA: true, quantNoRow: true, quantNoStage: true}}, {"mma", mvTuning{quantMMARows: 1}},
				{"row", mvTuning{quantNoMMA: true, quantRow: true}}, {"rowf1", mvTuning{quantNoMMA: true, quantRow: true, feats: 1}},
				{"f32", mvTuning{quantNoStaged: true}}, {"x16x2f2", mvTuning{qmvx: [3]int{16, 2, 2}}}, {"x16x1f1", mvTuning{qmvx: [3]int{16, 1, 1}}},
				{"x16x4f1", mvTuning{qmvx: [3]int{16, 4, 1}}}, {"x8x4f1", mvTuning{qmvx: [3]int{8, 4, 1}}}} {
				if (strings.HasPrefix(k.name, "row") || strings.HasPrefix(k.name, "x")) && s.rows > 1 {
					continue // one row only
				}
				b.Run(f+"_"+k.name+"_"+s.name, func(b *testing.B) {
					be.mv = k.tune
					defer func() { be.mv = mvTuning{} }()
					gb := newQuantBench(b, be, s, formats[f].dt, formats[f].sdt, formats[f].blocks)
					defer gb.free()
					gb.report(b, be, gb.steps(b, be, false), f+" "+k.name)
				})
			}
		}
		for _, s := range quantPromptShapes {
			for _, k := range []struct {
				name string
				f32  bool
			}{{"f32", true}, {"half", false}} {
				b.Run(f+"_"+k.name+"_"+s.name, func(b *testing.B) {
					be.quantPromptF32 = k.f32
					defer func() { be.quantPromptF32 = false }()
					gb := newQuantBench(b, be, s, formats[f].dt, formats[f].sdt, formats[f].blocks)
					defer gb.free()
					gb.report(b, be, gb.steps(b, be, false), f+" "+k.name)
				})
			}
		}
	}
	for _, s := range quantPromptShapes {
		b.Run("bf16_"+s.name, func(b *testing.B) {
			gb := newGEMVBench(b, be, s, s.rows)
			defer gb.free()
			gb.report(b, be, gb.steps(b, be, false), "bf16")
		})
	}
}

// quantPromptShapes are BenchmarkQuantGEMV's prompt products: Dory-4B's
// gate/up shape at 64 rows and at a chunk of 2048, each in every format
// computed in f32 (<format>_f32_<shape>: dequant_f32, an f32 GEMM) and in
// the format's 16-bit type (<format>_half_<shape>: dequant16, to_half,
// cuBLAS), and with bf16 weights (bf16_<shape>: to_half, cuBLAS), the time
// to beat.
var quantPromptShapes = []gemvShape{
	{"gate_up_7168x2560_rows64", "matmul", [][2]int{{7168, 2560}}, 64},
	{"gate_up_7168x2560_rows2048", "matmul", [][2]int{{7168, 2560}}, 2048},
}

// quantGEMVShapes are BenchmarkQuantGEMV's decode shapes: gemvShapes'
// plain products but the output head (never quantized), and the one-row
// grouped q/k/v/g (quant_grouped_matmul) and gate/up with SwiGLU
// (quant_matmul_swiglu), the fused products Dory's decode runs most.
func quantGEMVShapes() []gemvShape {
	var out []gemvShape
	for _, s := range gemvShapes {
		if s.form == "matmul" && s.ws[0][0] <= 65536 || (s.form == "grouped" || s.form == "swiglu") && s.rows == 1 {
			out = append(out, s)
		}
	}
	return out
}

// newQuantBench is newGEMVBench for shape s's products (one quant_matmul,
// or s.form grouped or swiglu: one quant_grouped_matmul or
// quant_matmul_swiglu) of weights stored as codes of dt with scales of sdt.
func newQuantBench(tb testing.TB, be *Backend, s gemvShape, dt, sdt graph.DType, a ops.QuantAttrs) *gemvBench {
	tb.Helper()
	k := s.ws[0][1]
	gb := graph.NewBuilder("quant_gemv")
	x := gb.Input("x", graph.F32, s.rows, k)
	var ws, codes []*graph.Value // codes and scales of each weight in turn; the codes
	wBytes, outs := 0, 0
	for i, d := range s.ws {
		n := d[0]
		w := gb.Weight(fmt.Sprintf("w%d", i), dt, n, ops.QuantCols(dt, k))
		sc := gb.Weight(fmt.Sprintf("s%d", i), sdt, (n+a.BlockRows-1)/a.BlockRows, (k+a.BlockCols-1)/a.BlockCols)
		ws, codes = append(ws, w, sc), append(codes, w)
		wBytes += w.Bytes() + sc.Bytes()
		outs += n
	}
	switch s.form {
	case "matmul":
		gb.Output(ops.QuantMatMul(gb, x, ws[0], ws[1], a))
	case "grouped":
		for _, y := range ops.QuantGroupedMatMul(gb, x, a, ws...) {
			gb.Output(y)
		}
	case "swiglu":
		f := s.ws[0][0]
		sg, su := gb.Input("sg", graph.F32, f), gb.Input("su", graph.F32, f)
		gb.Output(ops.QuantMatMulSwiGLU(gb, x, ws[0], ws[1], ws[2], ws[3], sg, su, a))
		outs = f
	default:
		tb.Fatalf("unknown form %s", s.form)
	}
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	b := &gemvBench{s: s, rows: s.rows, g: g, x: x, ws: codes, be: be}
	b.copies = max(1, min(32, (512<<20)/wBytes))
	b.bytes = float64(wBytes + 4*s.rows*(k+outs))
	shared := b.allocShared(tb)
	for i := 0; i < b.copies; i++ {
		bufs := append([]ops.Buffer(nil), shared...)
		for _, v := range ws {
			host := make([]byte, v.Bytes())
			for j := range host {
				host[j] = byte(j*7+j>>9+i) & 0x3b // finite codes; small finite f16 and f32 scales
			}
			buf := b.alloc(tb, v.DType, v.Shape.Elems())
			if err := be.Write(buf, host); err != nil {
				tb.Fatal(err)
			}
			bufs[v.ID] = buf
		}
		b.inst = append(b.inst, bufs)
	}
	return b
}

// TestQuantMatVecSweep times the qmvs kernels over launch shapes (features
// a unit, warps, split, a capped grid, x staged or through L1) and the
// qmma kernels over theirs (warps a block, warps a tile) at
// BenchmarkQuantGEMV's decode shapes, for tuning qmvFeats, qmvPlan and
// qmmaPlan: set REEL_QMV_SWEEP (the formats: "q4 q8 fp8") to run it, and
// REEL_QMV_SWEEP_MMA=1 for the qmma launches only; compile other QMV_LOADS
// or QMMA_LOADS with REEL_CUDA_DEFINES (e.g. -DQMMA_LOADS=4) as
// TestMatVecSweep does MV_LOADS, or QMVR_VMAX and QMVR_EARLY. Each
// family's best is printed: qmv (qmv_* and qmvs_*), qmvr (the one-row
// qmvr_*, qmvgr_*, qmvswr_*: features a warp, warps a block) and qmma.
func TestQuantMatVecSweep(t *testing.T) {
	env := os.Getenv("REEL_QMV_SWEEP")
	if env == "" {
		t.Skip("REEL_QMV_SWEEP is not set")
	}
	be := newTestBackend(t, Options{})
	formats := map[string][2]graph.DType{"fp8": {graph.F8E4M3, graph.F32}, "q8": {graph.I8, graph.F16}, "q4": {graph.U8, graph.F16}}
	for _, f := range strings.Fields(env) {
		dts, ok := formats[f]
		if !ok {
			t.Fatalf("REEL_QMV_SWEEP: format %q: want fp8, q8 or q4", f)
		}
		a := ops.QuantAttrs{BlockRows: 1, BlockCols: 32}
		if f == "fp8" {
			a = ops.QuantAttrs{BlockRows: 128, BlockCols: 128}
		}
		for _, s := range quantGEMVShapes() {
			gb := newQuantBench(t, be, s, dts[0], dts[1], a)
			var tunes []mvTuning
			if os.Getenv("REEL_QMV_SWEEP_MMA") != "1" {
				tunes = append(tunes, mvTuning{quantOld: true})
				for _, feats := range []int{1, 2, 4} {
					for _, warps := range []int{4, 8} {
						for _, split := range []int{0, 1, 2, 4} {
							for _, grid := range []int{0, 2, 4} {
								for _, noStage := range []bool{false, true} {
									tunes = append(tunes, mvTuning{quantNoMMA: true, quantNoRow: true, feats: feats, warps: warps, split: split, quantGrid: grid, quantNoStage: noStage})
								}
							}
						}
					}
				}
				for _, feats := range []int{1, 2} {
					for _, warps := range []int{1, 2, 4, 8} {
						if s.rows == 1 {
							tunes = append(tunes, mvTuning{quantNoMMA: true, quantRow: true, feats: feats, warps: warps})
						}
					}
				}
			}
			for _, warps := range []int{4, 8, 16} {
				for _, split := range []int{0, 1, 2, 4, 8, 16} {
					if split <= warps {
						tunes = append(tunes, mvTuning{quantMMARows: 1, warps: warps, split: split})
					}
				}
			}
			best := map[string]float64{}
			bestT := map[string]mvTuning{}
			for _, tune := range tunes {
				be.mv = tune
				per, gbps := gb.time(t, be, gb.steps(t, be, false), 20)
				fam := "qmma"
				switch {
				case tune.quantRow:
					fam = "qmvr"
				case tune.quantOld || tune.quantNoMMA:
					fam = "qmv"
				}
				fmt.Printf("sweep %-4s %-24s %s %+v: %6.0f GB/s %5.1f%% %7.2f us\n", f, s.name, fam, tune, gbps, 100*gbps*1e9/copyBound, float64(per.Nanoseconds())/1e3)
				if gbps > best[fam] {
					best[fam], bestT[fam] = gbps, tune
				}
			}
			for _, fam := range []string{"qmv", "qmvr", "qmma"} {
				if b, ok := best[fam]; ok {
					fmt.Printf("best  %-4s %-24s %s %+v: %.0f GB/s %.1f%%\n", f, s.name, fam, bestT[fam], b, 100*b*1e9/copyBound)
				}
			}
			be.mv = mvTuning{}
			gb.free()
		}
	}
}
