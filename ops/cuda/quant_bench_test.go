package cuda

import (
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// BenchmarkQuantGEMV measures quant_matmul at Dory-4B's decode shapes
// (one row) in FP8 (128 x 128 blocks, f32 scales), q8 and q4 (groups of 32,
// f16 scales): GB/s of codes, scales and activations moved, and the share
// of the copy bound, as BenchmarkGEMV reports the bf16 products; and the
// gate/up shape at 64 rows (the prompt path: dequantize, then the GEMM),
// e.g. ops_cuda.test -test.run '^$' -test.bench QuantGEMV.
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
		for _, s := range gemvShapes {
			if s.form != "matmul" || s.ws[0][0] > 65536 {
				continue
			}
			b.Run(f+"_"+s.name, func(b *testing.B) {
				gb := newQuantBench(b, be, s, formats[f].dt, formats[f].sdt, formats[f].blocks)
				defer gb.free()
				gb.report(b, be, gb.steps(b, be, false), f)
			})
		}
		s := gemvShape{"gate_up_7168x2560_rows64", "matmul", [][2]int{{7168, 2560}}, 64}
		b.Run(f+"_"+s.name, func(b *testing.B) {
			gb := newQuantBench(b, be, s, formats[f].dt, formats[f].sdt, formats[f].blocks)
			defer gb.free()
			gb.report(b, be, gb.steps(b, be, false), f)
		})
	}
}

// newQuantBench is newGEMVBench for one quant_matmul of shape s's weight
// stored as codes of dt with scales of sdt.
func newQuantBench(tb testing.TB, be *Backend, s gemvShape, dt, sdt graph.DType, a ops.QuantAttrs) *gemvBench {
	tb.Helper()
	n, k := s.ws[0][0], s.ws[0][1]
	gb := graph.NewBuilder("quant_gemv")
	x := gb.Input("x", graph.F32, s.rows, k)
	w := gb.Weight("w", dt, n, ops.QuantCols(dt, k))
	sc := gb.Weight("s", sdt, (n+a.BlockRows-1)/a.BlockRows, (k+a.BlockCols-1)/a.BlockCols)
	gb.Output(ops.QuantMatMul(gb, x, w, sc, a))
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	b := &gemvBench{s: s, rows: s.rows, g: g, x: x, ws: []*graph.Value{w}, be: be}
	wBytes := w.Bytes() + sc.Bytes()
	b.copies = max(1, min(32, (512<<20)/wBytes))
	b.bytes = float64(wBytes + 4*s.rows*(k+n))
	shared := b.allocShared(tb)
	for i := 0; i < b.copies; i++ {
		bufs := append([]ops.Buffer(nil), shared...)
		for _, v := range []*graph.Value{w, sc} {
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
