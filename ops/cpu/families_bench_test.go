package cpu

import (
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Benchmarks of the family kernels at Qwen4-Exp's released shapes for one
// decode row (the expert tensor cut to 64 experts: a row reads 10 of them
// whatever their number).

// benchOp binds a one-op graph over zeroed buffers (the call record at
// position pos, integer inputs given by ints) and times its runs.
func benchOp(b *testing.B, pos int, ints map[string][]int32, build func(*graph.Builder) []*graph.Value) {
	gb := graph.NewBuilder("bench")
	gb.Output(build(gb)...)
	g, err := gb.Graph()
	if err != nil {
		b.Fatal(err)
	}
	be := New(0)
	bound := map[*graph.Value]ops.Buffer{}
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			continue
		}
		n := v.Shape.Elems()
		if n < 0 {
			n = 4096 * graph.Shape(v.Shape[1:]).Elems()
		}
		buf, err := be.Alloc(v.DType, n)
		if err != nil {
			b.Fatal(err)
		}
		c := buf.(*Buffer)
		if v.Name == ops.CallName {
			c.I32[ops.CallPos] = int32(pos)
		}
		copy(c.I32, ints[v.Name])
		bound[v] = buf
	}
	r, err := ops.NewRunner(be, g, bound)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ResetTimer()
	for b.Loop() {
		if err := r.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExpertMatMul(b *testing.B) {
	ids := []int32{0, 5, 9, 13, 20, 31, 40, 47, 55, 63}
	benchOp(b, 0, map[string][]int32{"ids": ids}, func(gb *graph.Builder) []*graph.Value {
		return []*graph.Value{ops.ExpertMatMul(gb, gb.Input("x", graph.F32, 1, 2560), gb.Weight("w", graph.BF16, 64, 1280, 2560),
			gb.Input("ids", graph.I32, 1, 10))}
	})
}

func BenchmarkGDNScan(b *testing.B) {
	benchOp(b, 100, nil, func(gb *graph.Builder) []*graph.Value {
		q := gb.Input("q", graph.F32, 1, 16*128)
		return []*graph.Value{ops.GDNScan(gb, q, gb.Input("k", graph.F32, 1, 16*128), gb.Input("v", graph.F32, 1, 48*128),
			gb.Input("g", graph.F32, 1, 48), gb.Input("beta", graph.F32, 1, 48), gb.State("S", graph.F32, 48, 128, 128), ops.Call(gb))}
	})
}

func BenchmarkSelect(b *testing.B) {
	// position 16383: 4096 blocks of 4, 512 kept
	benchOp(b, 16383, nil, func(gb *graph.Builder) []*graph.Value {
		return []*graph.Value{ops.QSASelect(gb, gb.Input("qi", graph.F32, 1, 4*128), gb.State("keys", graph.F32, graph.Dyn, 128), ops.Call(gb),
			ops.SelectAttrs{Heads: 4, Block: 4, Keep: 512})}
	})
}

func BenchmarkSparseAttention(b *testing.B) {
	sel := make([]int32, 512)
	for i := range sel {
		sel[i] = int32(2 * i)
	}
	benchOp(b, 4095, map[string][]int32{"sel": sel}, func(gb *graph.Builder) []*graph.Value {
		return []*graph.Value{ops.QSAAttention(gb, gb.Input("q", graph.F32, 1, 24*256), gb.State("k", graph.F32, graph.Dyn, 512),
			gb.State("v", graph.F32, graph.Dyn, 512), gb.Input("sel", graph.I32, 1, 512), ops.Call(gb),
			ops.SparseAttentionAttrs{Heads: 24, KVHeads: 2, HeadDim: 256, Block: 4, Scale: 0.0625})}
	})
}

func BenchmarkCausalConv(b *testing.B) {
	benchOp(b, 100, nil, func(gb *graph.Builder) []*graph.Value {
		return []*graph.Value{ops.CausalConv(gb, gb.Input("x", graph.F32, 1, 10240), gb.Weight("w", graph.BF16, 10240, 1, 4),
			gb.State("ring", graph.F32, 3, 10240), ops.Call(gb), ops.ConvAttrs{Dilation: 1, Act: ops.ActSiLU})}
	})
}
