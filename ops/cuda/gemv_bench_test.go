package cuda

import (
	"fmt"
	"testing"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// gemvShape is one decode product of Dory's (bf16 weights, one row): a
// plain matmul, Dory's q/k/v/g projections as one grouped_matmul or as
// separate matmuls, or its MLP's gate/up as one matmul_swiglu or as two
// matmuls and a swiglu.
type gemvShape struct {
	name string
	form string   // "matmul", "grouped", "separate", "swiglu", "swiglu_split"
	ws   [][2]int // weights' [rows, k]
	rows int      // rows of x
}

// gemvShapes are the shapes BenchmarkGEMV reports.
var gemvShapes = []gemvShape{
	{"2560x2560", "matmul", [][2]int{{2560, 2560}}, 1},
	{"q_g_4096x2560", "matmul", [][2]int{{4096, 2560}}, 1},
	{"o_2560x4096", "matmul", [][2]int{{2560, 4096}}, 1},
	{"gate_up_7168x2560", "matmul", [][2]int{{7168, 2560}}, 1},
	{"down_2560x7168", "matmul", [][2]int{{2560, 7168}}, 1},
	{"lm_head_131072x2560", "matmul", [][2]int{{131072, 2560}}, 1},
	{"qkvg_grouped", "grouped", [][2]int{{4096, 2560}, {1024, 2560}, {1024, 2560}, {4096, 2560}}, 1},
	{"qkvg_separate", "separate", [][2]int{{4096, 2560}, {1024, 2560}, {1024, 2560}, {4096, 2560}}, 1},
	{"mlp_matmul_swiglu", "swiglu", [][2]int{{7168, 2560}, {7168, 2560}}, 1},
	{"mlp_swiglu_split", "swiglu_split", [][2]int{{7168, 2560}, {7168, 2560}}, 1},
	{"gate_up_7168x2560_rows4", "matmul", [][2]int{{7168, 2560}}, 4},
	{"gate_up_7168x2560_rows8", "matmul", [][2]int{{7168, 2560}}, 8},
	// Decode windows (2 to 8 rows: cuBLAS's window by default from
	// windowMinRows, window.go).
	{"gate_up_7168x2560_rows2", "matmul", [][2]int{{7168, 2560}}, 2},
	{"gate_up_7168x2560_rows5", "matmul", [][2]int{{7168, 2560}}, 5},
	{"down_2560x7168_rows2", "matmul", [][2]int{{2560, 7168}}, 2},
	{"down_2560x7168_rows5", "matmul", [][2]int{{2560, 7168}}, 5},
	{"down_2560x7168_rows8", "matmul", [][2]int{{2560, 7168}}, 8},
	{"down_norm_2560x7168_rows5", "norm", [][2]int{{2560, 7168}}, 5},
	{"qkvg_grouped_rows5", "grouped", [][2]int{{4096, 2560}, {1024, 2560}, {1024, 2560}, {4096, 2560}}, 5},
	{"mlp_matmul_swiglu_rows5", "swiglu", [][2]int{{7168, 2560}, {7168, 2560}}, 5},
	{"mlp_matmul_swiglu_rows8", "swiglu", [][2]int{{7168, 2560}, {7168, 2560}}, 8},
	{"lm_head_131072x2560_rows5", "matmul", [][2]int{{131072, 2560}}, 5},
}

// gemvWindowRoutes are the routes BenchmarkGEMV times windows of 2 to 8
// rows on besides the default (cuBLAS's window from windowMinRows rows,
// mv_* below): the CUDA-core matvec (mv_*: cudacores), which takes the
// windows cuBLAS's route refuses, and cuBLAS's window at every row count
// (window, REEL_WINDOW_CUBLAS=1).
var gemvWindowRoutes = []struct {
	name string
	tune mvTuning
}{{"cudacores", mvTuning{winRows: -1}}, {"window", mvTuning{winRows: 1}}}

// BenchmarkGEMV measures the bf16 products of Dory's decode (one row; the
// gate/up shape also with 2, 4, 5 and 8, and windows of 2 to 8 rows of
// other forms): GB/s of weights and activations moved and the share of the
// copy bound, each shape cycling through enough weight copies to miss the
// L2 cache, replayed as one CUDA graph; the plain shapes also with
// cuBLAS's bf16 GEMM of x rounded once (cublas_<shape>, the bound a
// window's route can reach); windows of 2 to 8 rows (cuBLAS's window of
// hi + lo rows by default from windowMinRows rows, window.go) also on each
// of gemvWindowRoutes (<route>_<shape>), and one-row shapes also on that
// window (window_<shape>).
func BenchmarkGEMV(b *testing.B) {
	be := newTestBackend(b, Options{})
	if bw, err := be.MeasureCopyBandwidth(1<<30, 10); err == nil {
		b.Logf("%s: measured copy bandwidth %.0f GB/s (read + write)", be.Device(), bw/1e9)
	}
	for _, s := range gemvShapes {
		b.Run(s.name, func(b *testing.B) {
			gb := newGEMVBench(b, be, s, s.rows)
			defer gb.free()
			gb.report(b, be, gb.steps(b, be, false), "default")
		})
		if s.rows == 1 && s.form != "separate" && s.form != "swiglu_split" {
			b.Run("window_"+s.name, func(b *testing.B) { // one row on cuBLAS's window (REEL_WINDOW_CUBLAS=1)
				be.mv = mvTuning{winRows: 1}
				defer func() { be.mv = mvTuning{} }()
				gb := newGEMVBench(b, be, s, s.rows)
				defer gb.free()
				gb.report(b, be, gb.steps(b, be, false), "window")
			})
		}
		if s.rows > 1 {
			for _, k := range gemvWindowRoutes {
				b.Run(k.name+"_"+s.name, func(b *testing.B) {
					be.mv = k.tune
					defer func() { be.mv = mvTuning{} }()
					gb := newGEMVBench(b, be, s, s.rows)
					defer gb.free()
					gb.report(b, be, gb.steps(b, be, false), k.name)
				})
			}
		}
		if be.HasBLAS() && s.form == "matmul" {
			b.Run("cublas_"+s.name, func(b *testing.B) {
				gb := newGEMVBench(b, be, s, s.rows)
				defer gb.free()
				gb.report(b, be, gb.steps(b, be, true), "cuBLAS")
			})
		}
	}
}

// gemvBench is a gemvShape's graph with its buffers, one set of weights for
// each of copies instances.
type gemvBench struct {
	s      gemvShape
	rows   int
	g      *graph.Graph
	x      *graph.Value
	ws     []*graph.Value
	inst   [][]ops.Buffer // bound buffers by value ID, per instance
	owned  []ops.Buffer
	bytes  float64 // bytes one instance must move: weights, inputs, outputs
	be     *Backend
	copies int
}

// alloc allocates a buffer the bench owns (freed by close).
func (b *gemvBench) alloc(tb testing.TB, dt graph.DType, n int) ops.Buffer {
	tb.Helper()
	buf, err := b.be.Alloc(dt, n)
	if err != nil {
		tb.Fatal(err)
	}
	b.owned = append(b.owned, buf)
	return buf
}

// allocShared allocates every value of the graph but its weights, by ID:
// the buffers all instances share.
func (b *gemvBench) allocShared(tb testing.TB) []ops.Buffer {
	tb.Helper()
	shared := make([]ops.Buffer, len(b.g.Values))
	for _, v := range b.g.Values {
		if v.Kind != graph.Weight {
			shared[v.ID] = b.alloc(tb, v.DType, v.Shape.Elems())
		}
	}
	return shared
}

func newGEMVBench(tb testing.TB, be *Backend, s gemvShape, rows int) *gemvBench {
	tb.Helper()
	k := s.ws[0][1]
	gb := graph.NewBuilder("gemv")
	x := gb.Input("x", graph.F32, rows, k)
	var ws []*graph.Value
	for i, w := range s.ws {
		ws = append(ws, gb.Weight(fmt.Sprintf("w%d", i), graph.BF16, w[0], w[1]))
	}
	f := s.ws[0][0]
	switch s.form {
	case "matmul":
		gb.Output(ops.MatMul(gb, x, ws[0]))
	case "grouped":
		for _, y := range ops.GroupedMatMul(gb, x, ws...) {
			gb.Output(y)
		}
	case "separate":
		for _, w := range ws {
			gb.Output(ops.MatMul(gb, x, w))
		}
	case "norm":
		gb.Output(gb.Apply(ops.OpNormMatMul, ops.EpsAttrs{Eps: 1e-6}, 1, x, ws[0])[0])
	case "swiglu", "swiglu_split":
		sg, su := gb.Input("sg", graph.F32, f), gb.Input("su", graph.F32, f)
		if s.form == "swiglu" {
			gb.Output(gb.Apply(ops.OpMatMulSwiGLU, nil, 1, x, ws[0], ws[1], sg, su)[0])
		} else {
			g, u := ops.MatMul(gb, x, ws[0]), ops.MatMul(gb, x, ws[1])
			gb.Output(gb.Apply(ops.OpSwiGLU, nil, 1, g, u, sg, su)[0])
		}
	default:
		tb.Fatalf("unknown form %s", s.form)
	}
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	b := &gemvBench{s: s, rows: rows, g: g, x: x, ws: ws, be: be}
	wBytes := 0
	for _, w := range s.ws {
		wBytes += 2 * w[0] * w[1]
	}
	b.copies = max(1, min(32, (512<<20)/wBytes))
	shared := b.allocShared(tb)
	acts := 0
	for _, v := range g.Values {
		if v.Kind == graph.Input {
			acts += 4 * v.Shape.Elems()
		}
	}
	for _, o := range g.Outputs {
		acts += 4 * o.Shape.Elems()
	}
	b.bytes = float64(wBytes + acts)
	for i := 0; i < b.copies; i++ {
		bufs := append([]ops.Buffer(nil), shared...)
		for _, w := range ws {
			n := w.Shape.Elems()
			host := make([]byte, 2*n)
			for j := range host {
				host[j] = byte(j*7+j>>9+i) & 0x3f // small finite bf16 values
			}
			buf := b.alloc(tb, graph.BF16, n)
			if err := be.Write(buf, host); err != nil {
				tb.Fatal(err)
			}
			bufs[w.ID] = buf
		}
		b.inst = append(b.inst, bufs)
	}
	return b
}

// steps binds every node of every instance, at least 8 instances in a
// row; with blas a matmul is cuBLAS's bf16 GEMM instead (x read as bf16).
func (b *gemvBench) steps(tb testing.TB, be *Backend, blas bool) []ops.Step {
	tb.Helper()
	order, err := b.g.Order()
	if err != nil {
		tb.Fatal(err)
	}
	var st []ops.Step
	for i := 0; i < max(b.copies, 8); i++ {
		bufs := b.inst[i%b.copies]
		for _, n := range order {
			if blas {
				n, k := b.s.ws[0][0], b.s.ws[0][1]
				xp, wp, yp := bufs[b.x.ID].(*Buffer).ptr, bufs[b.ws[0].ID].(*Buffer).ptr, bufs[b.g.Outputs[0].ID].(*Buffer).ptr
				rows := b.rows
				st = append(st, ops.StepFunc(func() error {
					return be.blas.MatMulRowMajor(rows, n, k, xp, k, cu.BF16, wp, k, cu.BF16, yp, n, cu.F32)
				}))
				continue
			}
			s, err := ops.BindNode(be, n, bufs)
			if err != nil {
				tb.Fatal(err)
			}
			st = append(st, s)
		}
	}
	return st
}

// time records st, replays it once, then reps times, and gives the time
// of one instance and the GB/s moved.
func (b *gemvBench) time(tb testing.TB, be *Backend, st []ops.Step, reps int) (time.Duration, float64) {
	tb.Helper()
	rec, err := be.Record(st)
	if err != nil {
		tb.Fatal(err)
	}
	defer rec.Close()
	if err := rec.Replay(); err != nil {
		tb.Fatal(err)
	}
	if err := be.Sync(); err != nil {
		tb.Fatal(err)
	}
	start, _ := be.ctx.NewEvent()
	end, _ := be.ctx.NewEvent()
	defer start.Destroy()
	defer end.Destroy()
	be.ctx.Stream().Record(start)
	for i := 0; i < reps; i++ {
		if err := rec.Replay(); err != nil {
			tb.Fatal(err)
		}
	}
	be.ctx.Stream().Record(end)
	if err := end.Sync(); err != nil {
		tb.Fatal(err)
	}
	dt, err := cu.ElapsedTime(start, end)
	if err != nil {
		tb.Fatal(err)
	}
	n := reps * max(b.copies, 8)
	return dt / time.Duration(n), float64(n) * b.bytes / dt.Seconds() / 1e9
}

// report times st for b.N replays and reports GB/s, the share of the copy
// bound and the time of one instance; past matvecMaxRows rows (a GEMM) also
// TFLOP/s of the products.
func (b *gemvBench) report(tb *testing.B, be *Backend, st []ops.Step, what string) {
	tb.ResetTimer()
	per, gbps := b.time(tb, be, st, tb.N)
	tb.StopTimer()
	tb.ReportMetric(gbps, "GB/s")
	tb.ReportMetric(100*gbps*1e9/copyBound, "%copy")
	tb.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
	tflops := ""
	if b.rows > matvecMaxRows {
		flops := 0.0
		for _, w := range b.s.ws {
			flops += 2 * float64(b.rows) * float64(w[0]) * float64(w[1])
		}
		tb.ReportMetric(flops/per.Seconds()/1e12, "TFLOP/s")
		tflops = fmt.Sprintf(", %.1f TFLOP/s", flops/per.Seconds()/1e12)
	}
	tb.Logf("%s %s: %.0f GB/s, %.1f%% of %.2f TB/s, %v each%s", what, b.s.name, gbps, 100*gbps*1e9/copyBound, copyBound/1e12, per, tflops)
}

func (b *gemvBench) free() {
	for _, buf := range b.owned {
		b.be.Free(buf)
	}
}
