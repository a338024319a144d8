package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// moeShape is one expert_matmul of a prompt chunk: rows rows routed to k
// of e experts of out x in bf16 weights, x one row a token (gate_up) or
// one a unit (down, perUnit).
type moeShape struct {
	name                string
	rows, k, e, out, in int
	perUnit             bool
}

// moeShapes are qwen4-12l's expert products over a prompt chunk of 512
// rows (64 experts, top 10, hidden 2560, expert FFN 640).
var moeShapes = []moeShape{
	{"qwen4_gate_up_512rows", 512, 10, 64, 1280, 2560, false},
	{"qwen4_down_512rows", 512, 10, 64, 2560, 640, true},
}

// moeFormat is how a benchmark's experts are stored: bf16 (dt BF16), or
// quantized codes of dt with scales of sdt in blocks.
type moeFormat struct {
	name    string
	dt, sdt graph.DType
	blocks  ops.QuantAttrs
}

// moeFormats are BenchmarkMoEPrompt's: bf16, and FP8 and q4 as reel
// quantizes them, computed in their 16-bit types (the default) and in f32
// (f32: qmoe_tile, as PrecisionExact).
var moeFormats = []struct {
	moeFormat
	f32 bool
}{
	{moeFormat{"bf16", graph.BF16, 0, ops.QuantAttrs{}}, false},
	{moeFormat{"fp8", graph.F8E4M3, graph.F32, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}}, false},
	{moeFormat{"fp8_f32", graph.F8E4M3, graph.F32, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}}, true},
	{moeFormat{"q4", graph.U8, graph.F16, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}}, false},
	{moeFormat{"q4_f32", graph.U8, graph.F16, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}}, true},
}

// BenchmarkMoEPrompt measures expert_matmul and quant_expert_matmul at
// qwen4-12l's prompt shapes in each of moeFormats (<shape> for bf16,
// <format>_<shape> else): TFLOP/s of the products (2·units·out·in), GB/s
// of the weights and activations moved, and the time of one product,
// replayed as one CUDA graph; every row takes k distinct experts, drawn
// uniformly, e.g. ops_cuda.test -test.run '^$' -test.bench MoEPrompt.
func BenchmarkMoEPrompt(b *testing.B) {
	be := newTestBackend(b, Options{})
	for _, f := range moeFormats {
		for _, s := range moeShapes {
			name := s.name
			if f.dt != graph.BF16 {
				name = f.name + "_" + s.name
			}
			b.Run(name, func(b *testing.B) {
				be.quantPromptF32 = f.f32
				defer func() { be.quantPromptF32 = false }()
				mb := newMoEBench(b, be, s, f.moeFormat)
				defer mb.free()
				st := mb.steps(b, be, false)
				b.ResetTimer()
				per, gbps := mb.time(b, be, st, b.N)
				b.StopTimer()
				units := s.rows * s.k
				tflops := 2 * float64(units) * float64(s.out) * float64(s.in) / per.Seconds() / 1e12
				b.ReportMetric(tflops, "TFLOP/s")
				b.ReportMetric(gbps, "GB/s")
				b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
				b.Logf("%s on %s: %.1f TFLOP/s, %.0f GB/s, %v each", name, be.Device(), tflops, gbps, per)
			})
		}
	}
}

// newMoEBench is newGEMVBench for one expert product of shape s with
// experts stored as f says: x zeros (the time does not depend on the
// values), ids drawn once, and enough copies of the weights (and scales)
// to miss the L2 cache.
func newMoEBench(tb testing.TB, be *Backend, s moeShape, f moeFormat) *gemvBench {
	tb.Helper()
	gb := graph.NewBuilder("moe")
	xs := []int{s.rows, s.in}
	if s.perUnit {
		xs = []int{s.rows, s.k, s.in}
	}
	x := gb.Input("x", graph.F32, xs...)
	ids := gb.Input("ids", graph.I32, s.rows, s.k)
	var ws []*graph.Value
	if f.dt == graph.BF16 {
		w := gb.Weight("w", graph.BF16, s.e, s.out, s.in)
		ws = []*graph.Value{w}
		gb.Output(ops.ExpertMatMul(gb, x, w, ids))
	} else {
		a := f.blocks
		w := gb.Weight("w", f.dt, s.e, s.out, ops.QuantCols(f.dt, s.in))
		sc := gb.Weight("s", f.sdt, s.e, (s.out+a.BlockRows-1)/a.BlockRows, (s.in+a.BlockCols-1)/a.BlockCols)
		ws = []*graph.Value{w, sc}
		gb.Output(ops.QuantExpertMatMul(gb, x, w, sc, ids, a))
	}
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	b := &gemvBench{s: gemvShape{name: s.name}, rows: s.rows, g: g, x: x, ws: ws, be: be}
	wBytes := 0
	for _, w := range ws {
		wBytes += w.Bytes()
	}
	b.copies = max(1, min(32, (512<<20)/wBytes))
	units := s.rows * s.k
	b.bytes = float64(wBytes + x.Bytes() + ids.Bytes() + 4*units*s.out)
	shared := b.allocShared(tb)
	r := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 0, 4*units)
	for range s.rows {
		for _, e := range r.Perm(s.e)[:s.k] {
			raw = binary.LittleEndian.AppendUint32(raw, uint32(e))
		}
	}
	if err := be.Write(shared[ids.ID], raw); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < b.copies; i++ {
		bufs := append([]ops.Buffer(nil), shared...)
		for _, w := range ws {
			host := make([]byte, w.Bytes())
			for j := range host {
				host[j] = byte(j*7+j>>9+i) & 0x3b // small finite bf16 values, codes, f16 and f32 scales
			}
			buf := b.alloc(tb, w.DType, w.Shape.Elems())
			if err := be.Write(buf, host); err != nil {
				tb.Fatal(err)
			}
			bufs[w.ID] = buf
		}
		b.inst = append(b.inst, bufs)
	}
	return b
}

// moeDecodeRows are the windows BenchmarkMoEDecode measures: a decode
// token and speculation windows.
var moeDecodeRows = []int{1, 2, 5, 8}

// moeDecodeShape is qwen4-12l's routed experts: top k of e, hidden and
// expert FFN features.
const moeDecodeK, moeDecodeE, moeDecodeHidden, moeDecodeFFN = 10, 64, 2560, 640

// BenchmarkMoEDecode measures one layer's routed experts of qwen4-12l at
// decode (64 experts, top 10, hidden 2560, expert FFN 640, bf16): the
// gate_up product with its activation (expert_matmul_glu) and the down
// product (expert_matmul) over 1, 2, 5 and 8 rows, each row taking 10
// distinct experts drawn uniformly, 8 instances of different ids cycled
// over one copy of the experts (629 MB, past L2), replayed as one CUDA
// graph; in the window form (window_<rows>rows, the default from 2 rows)
// and in the forms before it (old_<rows>rows: the warp forms, and past 64
// units moe_expert_group and moe_expert_tile; REEL_MOE_WINDOW=off). GB/s
// counts each instance's distinct experts once (what it must read), so
// %copy is the share of the copy bound, e.g. ops_cuda.test -test.run '^$'
// -test.bench MoEDecode.
func BenchmarkMoEDecode(b *testing.B) {
	be := newTestBackend(b, Options{})
	// The experts, one copy for every sub-benchmark: small finite bf16
	// values.
	weights := make([]ops.Buffer, 2)
	for i, n := range []int{2 * moeDecodeFFN * moeDecodeHidden, moeDecodeHidden * moeDecodeFFN} {
		host := make([]byte, 2*moeDecodeE*n)
		for j := range host {
			host[j] = byte(j*7+j>>9+i) & 0x3b
		}
		buf, err := be.Load(graph.BF16, moeDecodeE*n, host)
		if err != nil {
			b.Fatal(err)
		}
		defer be.Free(buf)
		weights[i] = buf
	}
	for _, form := range []string{"window", "old"} {
		for _, rows := range moeDecodeRows {
			b.Run(fmt.Sprintf("%s_%drows", form, rows), func(b *testing.B) {
				mb := newMoEDecodeBench(b, be, rows, weights)
				defer mb.free()
				be.moeWindowRows = moeWindowMinRows
				if form == "old" {
					be.moeWindowRows = 0
				}
				st := mb.steps(b, be, false)
				be.moeWindowRows = moeWindowMinRows
				mb.report(b, be, st, form)
			})
		}
	}
}

// newMoEDecodeBench is a gemvBench of one layer's routed experts at decode
// (BenchmarkMoEDecode): rows rows of x [rows, hidden], k of e experts a
// row, the experts gate_up [e, 2·ffn, hidden] and down [e, hidden, ffn]
// in weights (bf16), 8 instances each with its own ids and x; bytes is the
// mean over the instances of their distinct experts' bytes and the
// activations.
func newMoEDecodeBench(tb testing.TB, be *Backend, rows int, weights []ops.Buffer) *gemvBench {
	tb.Helper()
	const k, e, hidden, ffn = moeDecodeK, moeDecodeE, moeDecodeHidden, moeDecodeFFN
	gb := graph.NewBuilder("moe_decode")
	x := gb.Input("x", graph.F32, rows, hidden)
	ids := gb.Input("ids", graph.I32, rows, k)
	wgu := gb.Weight("gate_up", graph.BF16, e, 2*ffn, hidden)
	wd := gb.Weight("down", graph.BF16, e, hidden, ffn)
	h := gb.Apply(ops.OpExpertMatMulGLU, nil, 1, x, wgu, ids)[0]
	gb.Output(ops.ExpertMatMul(gb, h, wd, ids))
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	const instances = 8
	b := &gemvBench{s: gemvShape{name: fmt.Sprintf("qwen4_experts_%drows", rows)}, rows: rows, g: g, x: x,
		ws: []*graph.Value{wgu, wd}, be: be, copies: instances}
	perExpert := (wgu.Bytes() + wd.Bytes()) / e
	acts := 4 * (rows*hidden + rows*k + 2*rows*k*ffn + rows*k*ffn + rows*k*hidden)
	r := rand.New(rand.NewPCG(5, 6))
	total := 0
	for range instances {
		bufs := b.allocShared(tb)
		bufs[wgu.ID], bufs[wd.ID] = weights[0], weights[1]
		raw := make([]byte, 0, 4*rows*k)
		chosen := map[int]bool{}
		for range rows {
			for _, ex := range r.Perm(e)[:k] {
				raw = binary.LittleEndian.AppendUint32(raw, uint32(ex))
				chosen[ex] = true
			}
		}
		if err := be.Write(bufs[ids.ID], raw); err != nil {
			tb.Fatal(err)
		}
		total += len(chosen)*perExpert + acts
		b.inst = append(b.inst, bufs)
	}
	b.bytes = float64(total) / instances
	return b
}
