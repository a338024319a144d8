package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// benchData is deterministic data in [-1, 1).
func benchData(n int) []float32 {
	x := make([]float32, n)
	s := uint32(12345)
	for i := range x {
		s = s*1664525 + 1013904223
		x[i] = float32(s>>8)/(1<<23) - 1
	}
	return x
}

// weightBytes encodes values as dt.
func weightBytes(dt graph.DType, x []float32) []byte {
	b := make([]byte, len(x)*dt.Size())
	switch dt {
	case graph.F32:
		half.EncodeF32(b, x)
	case graph.BF16:
		half.EncodeBF16(b, x)
	case graph.F16:
		half.EncodeF16(b, x)
	}
	return b
}

// benchRunner binds a graph with every leaf filled with benchData.
func benchRunner(b *testing.B, be *Backend, g *graph.Graph, call []int32) *ops.Runner {
	b.Helper()
	bound := map[*graph.Value]ops.Buffer{}
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			continue
		}
		n := v.Shape.Elems()
		if n < 0 {
			n = 1024 * graph.Shape(v.Shape[1:]).Elems() // a slot of 1024 rows
		}
		var buf ops.Buffer
		var err error
		switch {
		case v.Name == ops.CallName:
			buf, err = be.Alloc(graph.I32, n)
			copy(buf.(*Buffer).I32, call)
		case v.Kind == graph.Weight:
			buf, err = be.Load(v.DType, n, weightBytes(v.DType, benchData(n)))
		default:
			buf, err = be.Alloc(v.DType, n)
			if err == nil {
				copy(buf.(*Buffer).F32, benchData(n))
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		bound[v] = buf
	}
	r, err := ops.NewRunner(be, g, bound)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func runBench(b *testing.B, r *ops.Runner, bytes int64) {
	b.Helper()
	b.SetBytes(bytes)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMatMul is x[rows, 2560] · w[2560, 2560]ᵀ (Dory's hidden size),
// bytes being the weight's plus the activations'. Rows of 64 and more also
// run gonum's Sgemm path, which the kernel does not take, for comparison.
func BenchmarkMatMul(b *testing.B) {
	const k, n = 2560, 2560
	for _, dt := range []graph.DType{graph.BF16, graph.F32} {
		for _, rows := range []int{1, 64, 512} {
			paths := []matmulPath{pathDots}
			if rows >= manyRows {
				paths = append(paths, pathGemm)
			}
			for _, path := range paths {
				name := fmt.Sprintf("%s/%dx%dx%d/%s", dt, rows, k, n, map[matmulPath]string{pathDots: "dots", pathGemm: "gemm"}[path])
				b.Run(name, func(b *testing.B) {
					be := New(0)
					gb := graph.NewBuilder("matmul")
					x := gb.Input("x", graph.F32, rows, k)
					w := gb.Weight("w", dt, n, k)
					y := ops.MatMul(gb, x, w)
					xb, _ := be.Alloc(graph.F32, rows*k)
					copy(xb.(*Buffer).F32, benchData(rows*k))
					wb, err := be.Load(dt, n*k, weightBytes(dt, benchData(n*k)))
					if err != nil {
						b.Fatal(err)
					}
					yb, _ := be.Alloc(graph.F32, rows*n)
					s, err := newMatMul(be, y.Producer, []*Buffer{xb.(*Buffer), wb.(*Buffer)}, []*Buffer{yb.(*Buffer)})
					if err != nil {
						b.Fatal(err)
					}
					s.path = path
					b.SetBytes(int64(n*k*dt.Size() + rows*(k+n)*4))
					b.ReportAllocs()
					for b.Loop() {
						if err := s.run(); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(rows*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkAttentionDecode is one row of Dory's attention (16 query heads
// over 4 KV heads of 256) at position 1023, reading 1024 keys and values.
func BenchmarkAttentionDecode(b *testing.B) {
	const heads, kvHeads, hd, keys = 16, 4, 256, 1024
	gb := graph.NewBuilder("attention")
	q := gb.Input("q", graph.F32, 1, heads*hd)
	k := gb.State("k", graph.F32, graph.Dyn, kvHeads*hd)
	v := gb.State("v", graph.F32, graph.Dyn, kvHeads*hd)
	c := ops.Call(gb)
	gb.Output(ops.Attention(gb, q, k, v, c, ops.AttentionAttrs{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}))
	g, err := gb.Graph()
	if err != nil {
		b.Fatal(err)
	}
	r := benchRunner(b, New(0), g, []int32{keys - 1, 1})
	defer r.Close()
	runBench(b, r, int64(2*keys*kvHeads*hd*4))
}
