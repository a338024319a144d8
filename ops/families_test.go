package ops

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
)

// TestFamilyDefs checks that every op of the families (deltanet, hyperconn,
// moe, ngram, sparseattn) is registered under its name with
// a statement of its math.
func TestFamilyDefs(t *testing.T) {
	for _, d := range familyDefs {
		if got, ok := Lookup(d.Op); !ok || got != d {
			t.Errorf("op %s is not registered", d.Op)
		}
		if len(d.Doc) < 40 || d.Rule == nil {
			t.Errorf("op %s lacks its math or its rule", d.Op)
		}
	}
}

// familyTypicalAttrs are attributes each family op accepts, for the fuzz test.
var familyTypicalAttrs = map[string]any{
	"hc_expand":      StreamAttrs{Streams: 2},
	"hc_mix":         StreamAttrs{Streams: 2},
	"hc_inject":      StreamAttrs{Streams: 2},
	"reshape":        ReshapeAttrs{Shape: graph.Shape{4, 2}},
	"split":          SplitAttrs{Heads: 2, Parts: []int{2, 2}},
	"causal_conv":    ConvAttrs{Dilation: 1, Act: ActSiLU},
	"gdn_prep":       GDNPrepAttrs{KeyHeads: 1, KeyDim: 2, ValueHeads: 2, ValueDim: 2, Eps: 1e-6},
	"gated_rmsnorm":  GatedRMSNormAttrs{Group: 4, Eps: 1e-6, Act: ActSigmoid},
	"qsa_block_keys": BlockKeyAttrs{Block: 2, Rope: RopeAttrs{HeadDim: 4, Rotary: 2, Theta: 1e4}},
	"qsa_select":     SelectAttrs{Heads: 2, Block: 2, Keep: 2},
	"qsa_attention":  SparseAttentionAttrs{Heads: 2, KVHeads: 1, HeadDim: 4, Block: 2, Scale: 0.5},
	"ple_hash":       PLEHashAttrs{NGram: 3, HeadsPerNGram: 1, EOS: 1, Mult: []int64{1, 3, 5}, Sizes: []int64{7, 11}, Offsets: []int64{0, 7}},
	"ple_gate":       StreamAttrs{Streams: 2},
	"moe_route":      RouteAttrs{K: 2, Norm: true},
}

// TestFamilyRulesNeverPanic applies every family op to random inputs (kinds,
// dtypes, ranks and extents, Dyn included) with no, zero-valued, typical and
// pointer attributes: a rule may refuse them, but only with an error of its
// own, never a panic caught by the builder.
func TestFamilyRulesNeverPanic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	kinds := []graph.Kind{graph.Input, graph.Weight, graph.State}
	dts := []graph.DType{graph.F32, graph.F32, graph.BF16, graph.I32, graph.I64}
	for _, d := range familyDefs {
		typical := familyTypicalAttrs[d.Op]
		attrs := []any{nil, typical, &typical, struct{}{}}
		for trial := 0; trial < 300; trial++ {
			b := graph.NewBuilder("fuzz")
			n := r.IntN(9)
			in := make([]*graph.Value, n)
			for i := range in {
				shape := make([]int, r.IntN(4))
				for j := range shape {
					shape[j] = r.IntN(9)
				}
				k := kinds[r.IntN(len(kinds))]
				if k == graph.State && len(shape) > 0 && r.IntN(3) == 0 {
					shape[0] = graph.Dyn
				}
				name := string(rune('a' + i))
				switch k {
				case graph.Input:
					in[i] = b.Input(name, dts[r.IntN(len(dts))], shape...)
				case graph.Weight:
					in[i] = b.Weight(name, dts[r.IntN(len(dts))], shape...)
				default:
					in[i] = b.State(name, dts[r.IntN(len(dts))], shape...)
				}
			}
			if b.Err() != nil {
				t.Fatal(b.Err())
			}
			a := attrs[r.IntN(len(attrs))]
			b.Apply(d, a, r.IntN(3), in...)
			if err := b.Err(); err != nil && strings.Contains(err.Error(), "panicked") {
				t.Fatalf("%s with %d inputs, attrs %+v: %v", d.Op, n, a, err)
			}
		}
	}
}

// TestFamilyRuleErrors checks that a shape mismatch is an error naming the
// node and the shapes involved.
func TestFamilyRuleErrors(t *testing.T) {
	type bad struct {
		name  string
		build func(b *graph.Builder)
		want  []string
	}
	for _, c := range []bad{
		{"hc_inject y width", func(b *graph.Builder) {
			HCInject(b, b.Input("x", graph.F32, 2, 8), b.Input("y", graph.F32, 2, 3), b.Input("l", graph.F32, 2, 2), 2)
		}, []string{"hc_inject", "y:f32[2 3]", "x:f32[2 8]", "[rows, 4]"}},
		{"hc_mix streams", func(b *graph.Builder) {
			HCMix(b, b.Input("xn", graph.F32, 2, 9), b.Input("g", graph.F32, 2, 9), 2)
		}, []string{"xn:f32[2 9]", "2 streams"}},
		{"rmsnorm weight", func(b *graph.Builder) {
			RMSNorm(b, b.Input("x", graph.F32, 3, 8), b.Weight("w", graph.F32, 3), 4, 1e-6)
		}, []string{"x:f32[3 8]", "w:f32[3]", "[4]", "[8]"}},
		{"rmsnorm weight type", func(b *graph.Builder) {
			RMSNorm(b, b.Input("x", graph.F32, 3, 8), b.Weight("w", graph.I32, 8), 4, 1e-6)
		}, []string{"w:i32[8]", "not a weight type"}},
		{"causal_conv ring", func(b *graph.Builder) {
			CausalConv(b, b.Input("x", graph.F32, 2, 5), b.Weight("w", graph.BF16, 5, 1, 4), b.State("ring", graph.F32, 2, 5), Call(b), ConvAttrs{Dilation: 1})
		}, []string{"causal_conv", "ring:f32[2 5]", "w:bf16[5 1 4]", "[3 5]"}},
		{"gdn_scan v", func(b *graph.Builder) {
			q := b.Input("q", graph.F32, 2, 8)
			GDNScan(b, q, q, b.Input("v", graph.F32, 2, 7), b.Input("g", graph.F32, 2, 4), b.Input("beta", graph.F32, 2, 4),
				b.State("S", graph.F32, 4, 4, 2), Call(b))
		}, []string{"v:f32[2 7]", "S:f32[4 4 2]", "[rows, 8]"}},
		{"gdn_prep width", func(b *graph.Builder) {
			b.Apply(OpGDNPrep, GDNPrepAttrs{KeyHeads: 1, KeyDim: 4, ValueHeads: 2, ValueDim: 4, Eps: 1e-6}, 3, b.Input("mix", graph.F32, 2, 15))
		}, []string{"mix:f32[2 15]", "[rows, 16]"}},
		{"split widths", func(b *graph.Builder) {
			Split(b, b.Input("x", graph.F32, 2, 10), 2, 2, 2)
		}, []string{"x:f32[2 10]", "2 heads × 4"}},
		{"qsa_select keys", func(b *graph.Builder) {
			QSASelect(b, b.Input("qi", graph.F32, 1, 8), b.State("keys", graph.F32, graph.Dyn, 3), Call(b), SelectAttrs{Heads: 2, Block: 2, Keep: 2})
		}, []string{"keys:f32[? 3]", "qi:f32[1 8]", "[capacity 4]"}},
		{"qsa_attention sel", func(b *graph.Builder) {
			k := b.State("k", graph.F32, graph.Dyn, 4)
			QSAAttention(b, b.Input("q", graph.F32, 2, 8), k, b.State("v", graph.F32, graph.Dyn, 4), b.Input("sel", graph.I32, 3, 2), Call(b),
				SparseAttentionAttrs{Heads: 2, KVHeads: 1, HeadDim: 4, Block: 2, Scale: 1})
		}, []string{"sel:i32[3 2]", "q:f32[2 8]"}},
		{"moe_route k", func(b *graph.Builder) {
			MoERoute(b, b.Input("logits", graph.F32, 2, 4), 5, true)
		}, []string{"logits:f32[2 4]", "top-k 5"}},
		{"expert_matmul x", func(b *graph.Builder) {
			ExpertMatMul(b, b.Input("x", graph.F32, 2, 5), b.Weight("w", graph.BF16, 8, 3, 4), b.Input("ids", graph.I32, 2, 2))
		}, []string{"x:f32[2 5]", "w:bf16[8 3 4]", "ids:i32[2 2]"}},
		{"moe_combine shared", func(b *graph.Builder) {
			MoECombine(b, b.Input("y", graph.F32, 2, 3, 4), b.Input("w", graph.F32, 2, 3), b.Input("s", graph.F32, 2, 5), b.Input("sg", graph.F32, 2, 1))
		}, []string{"s:f32[2 5]", "y:f32[2 3 4]"}},
		{"ple_hash constants", func(b *graph.Builder) {
			PLEHash(b, b.Input("ids", graph.I32, 3), b.State("hist", graph.I32, 2), Call(b), PLEHashAttrs{NGram: 3, HeadsPerNGram: 2, Mult: []int64{1, 2, 3}, Sizes: []int64{5}, Offsets: []int64{0}})
		}, []string{"ple_hash", "1 sizes", "want 3, 4, 4"}},
		{"ngram_embed widths", func(b *graph.Builder) {
			NGramEmbed(b, b.Input("rows", graph.I32, 2, 4), b.Weight("s0", graph.F32, 9, 8), b.Weight("s1", graph.F32, 9, 7))
		}, []string{"s1:f32[9 7]", "s0:f32[9 8]"}},
		{"reshape count", func(b *graph.Builder) {
			Reshape(b, b.Input("x", graph.F32, 2, 3), 7)
		}, []string{"x:f32[2 3]", "[7]"}},
	} {
		b := graph.NewBuilder("bad")
		pop := b.Push("layer 3")
		c.build(b)
		pop()
		err := b.Err()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range append(c.want, "layer 3") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", c.name, err, w)
			}
		}
	}
}

// TestFamilyFusedDecompose checks that each fused family op's decomposition
// makes outputs of the specs its rule gives.
func TestFamilyFusedDecompose(t *testing.T) {
	type fused struct {
		d     *Def
		attrs any
		in    func(b *graph.Builder) []*graph.Value
	}
	for _, c := range []fused{
		{OpGDNPrep, GDNPrepAttrs{KeyHeads: 2, KeyDim: 4, ValueHeads: 4, ValueDim: 3, Eps: 1e-6}, func(b *graph.Builder) []*graph.Value {
			return []*graph.Value{b.Input("mix", graph.F32, 3, 28)}
		}},
		{OpGateMerge, nil, func(b *graph.Builder) []*graph.Value {
			return []*graph.Value{b.Input("y", graph.F32, 3, 8), b.Input("g", graph.F32, 3, 8)}
		}},
	} {
		b := graph.NewBuilder(c.d.Op)
		in := c.in(b)
		sig, err := c.d.Infer(c.attrs, in)
		if err != nil {
			t.Fatalf("%s: %v", c.d.Op, err)
		}
		out := c.d.Decompose(b, c.attrs, in)
		if b.Err() != nil || len(out) != len(sig.Outputs) {
			t.Fatalf("%s: decomposition gives %d outputs (%v), the rule %d", c.d.Op, len(out), b.Err(), len(sig.Outputs))
		}
		for i, o := range out {
			if o.DType != sig.Outputs[i].DType || !o.Shape.Equal(sig.Outputs[i].Shape) {
				t.Errorf("%s: output %d is %s, the rule says %s", c.d.Op, i, o, sig.Outputs[i])
			}
		}
	}
}
