package cuda

import (
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// gdnShape is one gdn_scan call over rows rows of nk key heads of dk and
// nv value heads of dv.
type gdnShape struct {
	name                 string
	rows, nk, nv, dk, dv int
}

// gdnShapes are qwen4-12l's gdn_scan over prompt chunks of 512 and 2048
// rows.
var gdnShapes = []gdnShape{
	{"qwen4_512rows", 512, 16, 48, 128, 128},
	{"qwen4_2048rows", 2048, 16, 48, 128, 128},
}

// BenchmarkGDNScan measures gdn_scan at qwen4-12l's prompt shapes, the
// chunked kernels and the recurrent one (rowbyrow): the time of one call
// (both launches of the chunked form), replayed as one CUDA graph, e.g.
// ops_cuda.test -test.run '^$' -test.bench GDNScan.
func BenchmarkGDNScan(b *testing.B) {
	be := newTestBackend(b, Options{})
	for _, s := range gdnShapes {
		for _, rowByRow := range []bool{false, true} {
			name := s.name + "/chunked"
			if rowByRow {
				name = s.name + "/rowbyrow"
			}
			b.Run(name, func(b *testing.B) {
				be.gdnRowByRow = rowByRow
				defer func() { be.gdnRowByRow = false }()
				gb := newGDNBench(b, be, s)
				defer gb.free()
				st := gb.steps(b, be, false)
				b.ResetTimer()
				per, gbps := gb.time(b, be, st, b.N)
				b.StopTimer()
				b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
				b.ReportMetric(gbps, "GB/s")
				b.Logf("gdn_scan %s on %s: %v a call", name, be.Device(), per)
			})
		}
	}
}

// newGDNBench binds gdn_scan of shape s over zeroed inputs and state (the
// time does not depend on the values) at position 0.
func newGDNBench(tb testing.TB, be *Backend, s gdnShape) *gemvBench {
	tb.Helper()
	gb := graph.NewBuilder("gdn_scan")
	kd := s.nk * s.dk
	q, k := gb.Input("q", graph.F32, s.rows, kd), gb.Input("k", graph.F32, s.rows, kd)
	v := gb.Input("v", graph.F32, s.rows, s.nv*s.dv)
	g, beta := gb.Input("g", graph.F32, s.rows, s.nv), gb.Input("beta", graph.F32, s.rows, s.nv)
	st := gb.State("S", graph.F32, s.nv, s.dk, s.dv)
	gb.Output(ops.GDNScan(gb, q, k, v, g, beta, st, ops.Call(gb)))
	gr, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	b := &gemvBench{s: gemvShape{name: s.name}, rows: s.rows, g: gr, be: be, copies: 1}
	b.inst = [][]ops.Buffer{b.allocShared(tb)}
	for _, val := range gr.Values {
		b.bytes += float64(val.Bytes())
	}
	b.bytes += float64(st.Bytes()) // the state is read and written
	return b
}
