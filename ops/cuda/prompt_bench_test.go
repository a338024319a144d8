package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
	"github.com/reel-runtime/reel/ops/optest"
)

// promptRows, and Dory 4B's MLP and attention widths, are the shapes of
// BenchmarkPromptMLP: one 2048-row prompt chunk.
const (
	promptRows   = 2048
	promptHidden = 2560
	promptFFN    = 7168
	promptQ      = 4096
	promptKV     = 1024
)

// BenchmarkPromptMLP measures Dory 4B's MLP and q/k/v/g products on one
// 2048-row chunk (bf16 weights, auto precision), replayed as a CUDA graph,
// in TFLOP/s of the products and µs a chunk:
//
//   - mlp_old: matmul_swiglu (two GEMMs into f32, swiglu into f32), then
//     norm_matmul (to_half_norm, the down GEMM), every GEMM its own call: the
//     plan before swiglu_norm_matmul;
//   - mlp_old_batched: the same nodes, gate and up as one batched call;
//   - mlp_fused: swiglu_norm_matmul (gate and up in one batched call into f32,
//     swiglu_norm_half to the down product's bf16 input, the down GEMM);
//   - mlp_fused_unbatched: the same, gate and up as two calls;
//   - mlp_fused_halfglu: the same with Options.HalfGLU (gate and up written
//     in bf16);
//   - qkvg and qkvg_unbatched: grouped_matmul of q/k/v/g, with q and g, k
//     and v batched where their addresses allow, and without;
//   - slerp_qkvg: slerp_matmul (the slerp writing the bf16 copy of h that
//     q/k/v/g read);
//   - q4_mlp_old: the MLP with q4 weights as quant_matmul_swiglu and
//     quant_norm_matmul (the quantized prompt plan before
//     quant_swiglu_norm_matmul: gate and up dequantized and multiplied one
//     at a time, swiglu in f32, to_half_norm);
//   - q4_mlp_fused: quant_swiglu_norm_matmul (mlp_fused over gate and up
//     dequantized together, down after them);
//   - q4_qkvg and q4_qkvg_unbatched: quant_grouped_matmul (each batch of
//     one shape dequantized together, then its batched call), and every
//     product its own call;
//   - q4_slerp_qkvg: quant_slerp_matmul, as slerp_qkvg;
//   - gemm_gate_up_f32, gemm_gate_up_bf16 and gemm_down_f32: cuBLAS alone,
//     one bf16 GEMM of the gate and up weights as one [14336, 2560] matrix
//     (f32 or bf16 out) and the down GEMM: what the products cost without
//     any of our passes.
//
// e.g. ops_cuda.test -test.run '^$' -test.bench PromptMLP.
func BenchmarkPromptMLP(b *testing.B) {
	be := newTestBackend(b, Options{})
	if !be.HasBLAS() {
		b.Skip("no cuBLAS")
	}
	for _, v := range []struct {
		name             string
		form             string
		unbatched, halve bool
	}{
		{"mlp_old", "mlp_old", true, false},
		{"mlp_old_batched", "mlp_old", false, false},
		{"mlp_fused", "mlp_fused", false, false},
		{"mlp_fused_unbatched", "mlp_fused", true, false},
		{"mlp_fused_halfglu", "mlp_fused", false, true},
		{"qkvg", "qkvg", false, false},
		{"qkvg_unbatched", "qkvg", true, false},
		{"slerp_qkvg", "slerp_qkvg", false, false},
		{"q4_mlp_old", "q4_mlp_old", false, false},
		{"q4_mlp_fused", "q4_mlp_fused", false, false},
		{"q4_qkvg", "q4_qkvg", false, false},
		{"q4_qkvg_unbatched", "q4_qkvg", true, false},
		{"q4_slerp_qkvg", "q4_slerp_qkvg", false, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			be.opts.NoBatchedGemm, be.opts.HalfGLU = v.unbatched, v.halve
			defer func() { be.opts.NoBatchedGemm, be.opts.HalfGLU = false, false }()
			pb, flops := newPromptBench(b, be, v.form)
			defer pb.free()
			st := pb.steps(b, be, false)
			b.ResetTimer()
			per, _ := pb.time(b, be, st, b.N)
			b.StopTimer()
			b.ReportMetric(flops/per.Seconds()/1e12, "TFLOP/s")
			b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
			b.Logf("%s: %.1f TFLOP/s, %v a chunk", v.name, flops/per.Seconds()/1e12, per)
		})
	}
	for _, g := range []struct {
		name string
		n, k int
		yt   cu.DataType
	}{{"gemm_gate_up_f32", 2 * promptFFN, promptHidden, cu.F32}, {"gemm_gate_up_bf16", 2 * promptFFN, promptHidden, cu.BF16},
		{"gemm_down_f32", promptHidden, promptFFN, cu.F32}} {
		b.Run(g.name, func(b *testing.B) {
			ptrs := make([]cu.DevicePtr, 3)
			for i, bytes := range []int{2 * promptRows * g.k, 2 * g.n * g.k, g.yt.Size() * promptRows * g.n} {
				p, err := be.ctx.Alloc(uint64(bytes))
				if err != nil {
					b.Fatal(err)
				}
				defer be.ctx.Free(p)
				if err := be.ctx.Memset(p, 0, uint64(bytes)); err != nil {
					b.Fatal(err)
				}
				ptrs[i] = p
			}
			st := make([]ops.Step, 8)
			for i := range st {
				st[i] = ops.StepFunc(func() error {
					return be.blas.MatMulRowMajor(promptRows, g.n, g.k, ptrs[0], g.k, cu.BF16, ptrs[1], g.k, cu.BF16, ptrs[2], g.n, g.yt)
				})
			}
			pb := &gemvBench{copies: 1}
			b.ResetTimer()
			per, _ := pb.time(b, be, st, b.N)
			b.StopTimer()
			flops := 2 * promptRows * float64(g.n*g.k)
			b.ReportMetric(flops/per.Seconds()/1e12, "TFLOP/s")
			b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
			b.Logf("%s: %.1f TFLOP/s, %v a product", g.name, flops/per.Seconds()/1e12, per)
		})
	}
}

// newPromptBench builds form's graph at the prompt shapes with its buffers
// (one set of weights: the products are bound by the tensor cores, not by
// reading the weights) and gives the products' flops.
func newPromptBench(tb testing.TB, be *Backend, form string) (*gemvBench, float64) {
	tb.Helper()
	const rows, h, f = promptRows, promptHidden, promptFFN
	gb := graph.NewBuilder("prompt_" + form)
	x := gb.Input("x", graph.F32, rows, h)
	var ws []*graph.Value
	weight := func(name string, n, k int) *graph.Value {
		w := gb.Weight(name, graph.BF16, n, k)
		ws = append(ws, w)
		return w
	}
	// qweight declares a q4 weight [n, k] (codes and scales, groups of 32)
	// and gives both.
	q4 := ops.QuantAttrs{BlockRows: 1, BlockCols: 32}
	qweight := func(name string, n, k int) []*graph.Value {
		w, sc := gb.Weight(name, graph.U8, n, (k+1)/2), gb.Weight(name+"_scale", graph.F16, n, (k+31)/32)
		ws = append(ws, w, sc)
		return []*graph.Value{w, sc}
	}
	qkvgFlops := 2 * rows * float64(h*(2*promptQ+2*promptKV))
	var flops float64
	switch form {
	case "q4_mlp_old", "q4_mlp_fused":
		gw, uw := qweight("wg", f, h), qweight("wu", f, h)
		sg, su := gb.Input("sg", graph.F32, f), gb.Input("su", graph.F32, f)
		dw := qweight("wd", h, f)
		if form == "q4_mlp_old" {
			a := ops.QuantMatMulSwiGLU(gb, x, gw[0], gw[1], uw[0], uw[1], sg, su, q4)
			gb.Output(ops.QuantNormMatMul(gb, a, dw[0], dw[1], ops.QuantNormAttrs{Blocks: q4, Eps: 1e-6}))
		} else {
			gb.Output(ops.QuantSwiGLUNormMatMul(gb, x, gw[0], gw[1], uw[0], uw[1], sg, su, dw[0], dw[1], ops.QuantNormAttrs{Blocks: q4, Eps: 1e-6}))
		}
		flops = 2 * rows * float64(3*f*h)
	case "q4_qkvg", "q4_slerp_qkvg":
		var qws []*graph.Value
		for _, w := range []struct {
			name string
			n    int
		}{{"wq", promptQ}, {"wk", promptKV}, {"wv", promptKV}, {"wg", promptQ}} {
			qws = append(qws, qweight(w.name, w.n, h)...)
		}
		var outs []*graph.Value
		if form == "q4_qkvg" {
			outs = ops.QuantGroupedMatMul(gb, x, q4, qws...)
		} else {
			y, alpha := gb.Input("y", graph.F32, rows, h), gb.Input("alpha", graph.F32, h)
			outs = ops.QuantSlerpMatMul(gb, x, y, alpha, ops.QuantNormAttrs{Blocks: q4, Eps: 1e-6}, qws...)
		}
		for _, y := range outs {
			gb.Output(y)
		}
		flops = qkvgFlops
	case "slerp_qkvg":
		y, alpha := gb.Input("y", graph.F32, rows, h), gb.Input("alpha", graph.F32, h)
		for _, o := range ops.SlerpMatMul(gb, x, y, alpha, 1e-6, weight("wq", promptQ, h), weight("wk", promptKV, h),
			weight("wv", promptKV, h), weight("wg", promptQ, h)) {
			gb.Output(o)
		}
		flops = qkvgFlops
	case "mlp_old", "mlp_fused":
		wg, wu := weight("wg", f, h), weight("wu", f, h)
		sg, su := gb.Input("sg", graph.F32, f), gb.Input("su", graph.F32, f)
		wd := weight("wd", h, f)
		eps := ops.EpsAttrs{Eps: 1e-6}
		if form == "mlp_old" {
			a := gb.Apply(ops.OpMatMulSwiGLU, nil, 1, x, wg, wu, sg, su)[0]
			gb.Output(gb.Apply(ops.OpNormMatMul, eps, 1, a, wd)[0])
		} else {
			gb.Output(gb.Apply(ops.OpSwiGLUNormMatMul, eps, 1, x, wg, wu, sg, su, wd)[0])
		}
		flops = 2 * rows * float64(3*f*h)
	case "qkvg":
		for _, y := range ops.GroupedMatMul(gb, x, weight("wq", promptQ, h), weight("wk", promptKV, h),
			weight("wv", promptKV, h), weight("wg", promptQ, h)) {
			gb.Output(y)
		}
		flops = 2 * rows * float64(h*(2*promptQ+2*promptKV))
	default:
		tb.Fatalf("unknown form %s", form)
	}
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	b := &gemvBench{s: gemvShape{name: form}, rows: rows, g: g, x: x, ws: ws, be: be, copies: 1}
	bufs := b.allocShared(tb)
	for _, v := range g.Values {
		switch {
		case v.Kind == graph.Weight:
			host := make([]byte, v.Shape.Elems())
			switch v.DType {
			case graph.U8:
				for j := range host {
					host[j] = byte(j*7 + j>>9) // any 4-bit codes
				}
			case graph.F16:
				host = make([]byte, 2*v.Shape.Elems())
				for j := 0; j < len(host); j += 2 {
					host[j], host[j+1] = byte(j*5), 0x1c // f16 scales about 2⁻⁸
				}
			default:
				host = make([]byte, 2*v.Shape.Elems())
				for j := range host {
					host[j] = byte(j*7+j>>9) & 0x3f // small finite bf16 values
				}
			}
			buf := b.alloc(tb, v.DType, v.Shape.Elems())
			if err := be.Write(buf, host); err != nil {
				tb.Fatal(err)
			}
			bufs[v.ID] = buf
		case v.Kind == graph.Input:
			host := make([]float32, v.Shape.Elems())
			for j := range host {
				host[j] = float32(j%13-6) / 8
			}
			if err := be.Write(bufs[v.ID], cu.Bytes(host)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	b.inst = [][]ops.Buffer{bufs}
	return b, flops
}

// TestHalfGLU runs the swiglu_norm_matmul cases (and the quantized MLP's)
// with the gate and up products written in 16 bits (Options.HalfGLU), and
// again with every product its own cuBLAS call (Options.NoBatchedGemm,
// the grouped and quantized grouped products too), against the float64
// reference and the CPU.
func TestHalfGLU(t *testing.T) {
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	ref := cpu.New(0)
	for _, o := range []struct {
		name            string
		half, unbatched bool
	}{{"halfglu", true, false}, {"unbatched", false, true}} {
		n := 0
		for _, c := range optest.Cases() {
			if !slices.ContainsFunc([]string{"swiglu_norm_matmul", "matmul_swiglu", "grouped_matmul", "quant_swiglu_norm_matmul",
				"quant_grouped_matmul", "quant_slerp_matmul"}, func(p string) bool { return strings.HasPrefix(c.Name, p) }) {
				continue
			}
			n++
			t.Run(o.name+"/"+c.Name, func(t *testing.T) {
				be.opts.HalfGLU, be.opts.NoBatchedGemm = o.half, o.unbatched
				defer func() { be.opts.HalfGLU, be.opts.NoBatchedGemm = false, false }()
				if o.half {
					// The gate and up products are rounded to 16 bits once
					// more, after x was: two roundings of about equal
					// size where the case's bound allows for one (the
					// card measured 1.1e-5 to 1.3e-5 against TolBF16's 1e-5).
					c.Tol *= 2
				}
				optest.Check(t, be, c)
				optest.Compare(t, ref, be, c)
			})
		}
		if n == 0 {
			t.Fatal("no swiglu_norm_matmul cases in the table")
		}
	}
}
