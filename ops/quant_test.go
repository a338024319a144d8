package ops

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
)

// TestQuantMatMulRule checks quant_matmul's shapes: the output, and each
// refusal naming what is wrong.
func TestQuantMatMulRule(t *testing.T) {
	blocks := QuantAttrs{BlockRows: 128, BlockCols: 128}
	for _, c := range []struct {
		name   string
		x      []int
		wdt    graph.DType
		w      []int
		sdt    graph.DType
		s      []int
		attrs  any
		want   string // "" : builds, output [..., N]
		output []int
	}{
		{"fp8 partial blocks", []int{3, 257}, graph.F8E4M3, []int{300, 257}, graph.F32, []int{3, 3}, blocks, "", []int{3, 300}},
		{"q4 odd k", []int{2, 5, 65}, graph.U8, []int{7, 33}, graph.F16, []int{7, 3}, QuantAttrs{1, 32}, "", []int{2, 5, 7}},
		{"q8", []int{1, 64}, graph.I8, []int{9, 64}, graph.BF16, []int{9, 1}, &QuantAttrs{1, 64}, "", []int{1, 9}},
		{"scale rows", []int{1, 256}, graph.F8E4M3, []int{256, 256}, graph.F32, []int{3, 2}, blocks, "want [2 2]", nil},
		{"scale cols", []int{1, 100}, graph.I8, []int{4, 100}, graph.F16, []int{4, 3}, QuantAttrs{1, 32}, "want [4 4]", nil},
		{"scale dtype", []int{1, 128}, graph.F8E4M3, []int{128, 128}, graph.I32, []int{1, 1}, blocks, "must be f32, bf16 or f16", nil},
		{"plain weight", []int{1, 128}, graph.BF16, []int{128, 128}, graph.F32, []int{1, 1}, blocks, "not a quantized type", nil},
		{"q4 columns", []int{1, 64}, graph.U8, []int{4, 64}, graph.F16, []int{4, 2}, QuantAttrs{1, 32}, "store in 32 columns", nil},
		{"features", []int{1, 96}, graph.I8, []int{4, 64}, graph.F16, []int{4, 2}, QuantAttrs{1, 32}, "x has 96 features", nil},
		{"zero block", []int{1, 64}, graph.I8, []int{4, 64}, graph.F16, []int{4, 2}, QuantAttrs{0, 32}, "BlockRows 0 must be positive", nil},
		{"no attrs", []int{1, 64}, graph.I8, []int{4, 64}, graph.F16, []int{4, 2}, nil, "attributes", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := graph.NewBuilder("q")
			x := b.Input("x", graph.F32, c.x...)
			w := b.Weight("w", c.wdt, c.w...)
			s := b.Weight("s", c.sdt, c.s...)
			y := b.Apply(OpQuantMatMul, c.attrs, 1, x, w, s)[0]
			_, err := b.Graph()
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !y.Shape.Equal(c.output) || y.DType != graph.F32 {
				t.Fatalf("output %s, want f32%v", y, c.output)
			}
		})
	}
}

// TestQuantMatMulRuleNeverPanics applies quant_matmul and
// quant_expert_matmul to random inputs:
// refused with an error, never a panic.
func TestQuantMatMulRuleNeverPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	dts := []graph.DType{graph.F32, graph.BF16, graph.F8E4M3, graph.I8, graph.U8, graph.I32}
	for range 2000 {
		b := graph.NewBuilder("fuzz")
		op, n := OpQuantMatMul, 3
		if r.IntN(2) == 0 {
			op, n = OpQuantExpertMatMul, 4
		}
		in := make([]*graph.Value, n)
		for i := range in {
			shape := make([]int, r.IntN(4))
			for j := range shape {
				shape[j] = r.IntN(5)
				if r.IntN(10) == 0 {
					shape[j] = graph.Dyn
				}
			}
			in[i] = b.Input("v", dts[r.IntN(len(dts))], shape...)
		}
		b.Apply(op, QuantAttrs{BlockRows: r.IntN(3), BlockCols: r.IntN(3)}, 1, in...)
		if _, err := b.Graph(); err != nil && strings.Contains(err.Error(), "panic") {
			t.Fatal(err)
		}
	}
}

// TestQuantExpertMatMulRule checks quant_expert_matmul's shapes: the
// output [T, k, N], scales of one table per expert, and each refusal naming
// what is wrong.
func TestQuantExpertMatMulRule(t *testing.T) {
	q4 := QuantAttrs{BlockRows: 1, BlockCols: 32}
	fp8 := QuantAttrs{BlockRows: 128, BlockCols: 128}
	for _, c := range []struct {
		name   string
		x      []int
		wdt    graph.DType
		w, s   []int
		ids    []int
		attrs  any
		want   string // "": builds, output [T, k, N]
		output []int
	}{
		{"q4 odd in", []int{3, 65}, graph.U8, []int{8, 7, 33}, []int{8, 7, 3}, []int{3, 2}, q4, "", []int{3, 2, 7}},
		{"fp8 per unit", []int{2, 4, 300}, graph.F8E4M3, []int{5, 130, 300}, []int{5, 2, 3}, []int{2, 4}, fp8, "", []int{2, 4, 130}},
		{"q8", []int{1, 64}, graph.I8, []int{4, 9, 64}, []int{4, 9, 2}, []int{1, 3}, q4, "", []int{1, 3, 9}},
		{"one scale table", []int{1, 64}, graph.I8, []int{4, 9, 64}, []int{9, 2}, []int{1, 3}, q4, "bf16 or f16 [4 9 2]", nil},
		{"scales per expert", []int{1, 256}, graph.F8E4M3, []int{4, 256, 256}, []int{4, 3, 2}, []int{1, 3}, fp8, "want [4 2 2]", nil},
		{"q4 columns", []int{1, 64}, graph.U8, []int{4, 9, 64}, []int{4, 9, 2}, []int{1, 3}, q4, "store in 32 columns", nil},
		{"plain experts", []int{1, 64}, graph.BF16, []int{4, 9, 64}, []int{4, 9, 2}, []int{1, 3}, q4, "not a quantized type", nil},
		{"rows", []int{2, 64}, graph.I8, []int{4, 9, 64}, []int{4, 9, 2}, []int{1, 3}, q4, "x must be [1, 64] or [1, 3, 64]", nil},
		{"matrix", []int{1, 64}, graph.I8, []int{9, 64}, []int{9, 2}, []int{1, 3}, q4, "must be [experts, out, in]", nil},
		{"no attrs", []int{1, 64}, graph.I8, []int{4, 9, 64}, []int{4, 9, 2}, []int{1, 3}, nil, "attributes", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := graph.NewBuilder("q")
			x := b.Input("x", graph.F32, c.x...)
			w := b.Weight("w", c.wdt, c.w...)
			s := b.Weight("s", graph.F16, c.s...)
			ids := b.Input("ids", graph.I32, c.ids...)
			y := b.Apply(OpQuantExpertMatMul, c.attrs, 1, x, w, s, ids)[0]
			_, err := b.Graph()
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !y.Shape.Equal(c.output) || y.DType != graph.F32 {
				t.Fatalf("output %s, want f32%v", y, c.output)
			}
		})
	}
}
