package optest

import (
	"fmt"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// quantFormat is a quantized weight's format in a case: codes, scales and
// blocks.
type quantFormat struct {
	dt, sdt graph.DType
	blocks  ops.QuantAttrs
}

// quantFormats are the formats as checkpoints hold them: FP8 with 128 x
// 128 blocks and f32 scales, 8- and 4-bit groups of 32 with f16 scales.
var quantFormats = []quantFormat{
	{graph.F8E4M3, graph.F32, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}},
	{graph.I8, graph.F16, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}},
	{graph.U8, graph.F16, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}},
}

// quantWeight is the codes and scales of an n x k weight of format f.
func (m *maker) quantWeight(name string, f quantFormat, n, k int) []Tensor {
	br, bc := f.blocks.BlockRows, f.blocks.BlockCols
	return []Tensor{m.codes(name, f.dt, n, k), m.scales(name+"_scale", f.sdt, (n+br-1)/br, (k+bc-1)/bc)}
}

// refQuant is x · Wᵀ for the dequantized weight of codes w and scales s.
func refQuant(f quantFormat, x, w, s []float64, n, k int) []float64 {
	return RefMatMul(x, k, RefDequant(f.dt, w, s, n, k, f.blocks))
}

// tolQuantFormats is the loosest bound of tolQuantCase over formats.
func tolQuantFormats(rows int, fs ...quantFormat) float64 {
	tol := 0.0
	for _, f := range fs {
		tol = max(tol, tolQuantCase(f.dt, rows, false))
	}
	return tol
}

// swigluErrors is the factor on one product's bound for a SwiGLU of two
// products of rows rows: 2 where the products round to 16 bits (over 8
// rows), 1 for the f32 decode products.
func swigluErrors(rows int) float64 {
	if rows > 8 {
		return 2
	}
	return 1
}

// quantFusedCases are the fused quantized products (ops/quant_fused.go),
// each as its single node, in every format: decode rows (1 to 8: CUDA's
// split-K matvec over segments, the gate/up pair with SwiGLU, the
// normalized form) with K of a vector's worth to Dory-4B's 2560 and 7168,
// K that is not a whole number of 16-byte vectors (the element path), odd
// output counts, more weights than one launch takes and weights of two
// formats in one group; and prompt rows (16 and more: x converted to 16
// bits once for the group, each weight dequantized in turn).
func quantFusedCases() []Case {
	var cs []Case
	type shape struct {
		rows, k int
		ns      []int
	}
	grouped := []shape{
		{1, 256, []int{64, 32, 32, 64}}, {3, 2560, []int{40, 17, 17, 40}}, {8, 100, []int{33, 9}},
		{1, 7168, []int{5, 3, 7, 2, 9}}, {2, 64, []int{1, 1}}, {5, 255, []int{13, 6}},
		{16, 300, []int{130, 70}}, {33, 256, []int{33, 65, 17}},
	}
	for _, f := range quantFormats {
		for _, s := range grouped {
			cs = append(cs, quantGroupedCase(s.rows, s.k, s.ns, []quantFormat{f}))
		}
	}
	// Two formats in one group (a node the planner does not make: the
	// backend takes each format's weights apart).
	i8, u4 := quantFormats[1], quantFormats[2]
	for _, rows := range []int{1, 4, 20} {
		cs = append(cs, quantGroupedCase(rows, 128, []int{24, 8, 16}, []quantFormat{i8, u4, i8}))
	}
	for _, f := range quantFormats {
		for _, s := range [][3]int{{1, 256, 96}, {3, 2560, 70}, {8, 65, 33}, {1, 7168, 40}, {2, 255, 7}, {16, 300, 130}, {40, 256, 48}, {1, 512, 200}} {
			cs = append(cs, quantSwiGLUCase(f, s[0], s[1], s[2]))
		}
		for _, s := range [][3]int{{1, 256, 300}, {3, 2560, 70}, {8, 65, 33}, {1, 7168, 9}, {4, 255, 5}, {17, 256, 40}, {33, 96, 17}} {
			cs = append(cs, quantNormCase(f, s[0], s[1], s[2]))
		}
	}
	// quant_swiglu_norm_matmul: decode rows (CUDA's parts) and prompt rows
	// (the weights dequantized into scratch, swiglu_norm_matmul's row kernel
	// between the products), odd sizes (the element path of the
	// dequantization), a zero row; an activation too long for the row
	// kernel's registers (f > 8192) in one format.
	for _, f := range quantFormats {
		for _, s := range [][4]int{{1, 256, 96, 40}, {3, 65, 33, 17}, {8, 128, 64, 24}, {16, 64, 96, 48}, {17, 300, 130, 31}, {33, 256, 64, 40}} {
			cs = append(cs, quantSwiGLUNormCase(f, s[0], s[1], s[2], s[3]))
		}
	}
	cs = append(cs, quantSwiGLUNormCase(u4, 17, 64, 8200, 24))
	// quant_slerp_matmul: decode and prompt rows (the slerp writing the
	// 16-bit copy the products read), K of whole vectors and odd, one to
	// four weights; two formats in one group (the copy in the first
	// weight's 16-bit type, the other converted).
	for _, f := range quantFormats {
		for _, s := range []shape{{1, 256, []int{64, 32, 32, 64}}, {5, 65, []int{17, 9}}, {16, 64, []int{32, 8, 8, 32}}, {33, 300, []int{70}}} {
			cs = append(cs, quantSlerpCase(s.rows, s.k, s.ns, []quantFormat{f}))
		}
	}
	for _, fs := range [][]quantFormat{{i8, u4, i8}, {u4, i8}} {
		cs = append(cs, quantSlerpCase(20, 128, []int{24, 8, 16}, fs))
	}
	// quant_slerp_matmul_swiglu: one row (on CUDA the slerp computed as the
	// staged products stage h; a K of 512 and an odd F spread over many
	// blocks), a few rows (the slerp row kernel, then the fused products),
	// a K that is no whole number of vectors.
	for _, f := range quantFormats {
		for _, s := range [][3]int{{1, 256, 96}, {1, 512, 131}, {3, 128, 40}, {1, 65, 24}} {
			cs = append(cs, quantSlerpSwiGLUCase(f, s[0], s[1], s[2]))
		}
	}
	return cs
}

// quantSlerpSwiGLUCase is quant_slerp_matmul_swiglu of rows x k by gate
// and up weights of f features: h = slerp(x, y, α) and the gated
// activation of h.
func quantSlerpSwiGLUCase(qf quantFormat, rows, k, f int) Case {
	const eps = 1e-6
	name := fmt.Sprintf("quant_slerp_matmul_swiglu/%s/%s/%dx%dx%d/blocks=%dx%d", qf.dt, qf.sdt, rows, k, f, qf.blocks.BlockRows, qf.blocks.BlockCols)
	m := newMaker(name)
	in := []Tensor{m.in("x", rows, k), m.in("y", rows, k), m.in("alpha", k)}
	in = append(in, m.quantWeight("wg", qf, f, k)...)
	in = append(in, m.quantWeight("wu", qf, f, k)...)
	in = append(in, m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f))
	at := ops.QuantNormAttrs{Blocks: qf.blocks, Eps: eps}
	return Case{
		Name:   name,
		Inputs: in,
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return ops.QuantSlerpMatMulSwiGLU(b, in[0], in[1], in[2], at, in[3], in[4], in[5], in[6], in[7], in[8])
		},
		Ref: func(in [][]float64) [][]float64 {
			h := refSlerp(in[0], in[1], in[2], float64(float32(eps)))
			g := refQuant(qf, h, in[3], in[4], f, k)
			u := refQuant(qf, h, in[5], in[6], f, k)
			return [][]float64{h, refSwiGLU(g, u, in[7], in[8])}
		},
		// As quantSwiGLUCase's (h itself within f32's).
		Tol: max(TolF32, tolQuantFormats(rows, qf)*swigluErrors(rows)),
	}
}

// quantSwiGLUNormCase is quant_swiglu_norm_matmul of rows x k by gate and
// up weights of f features and a down weight of n; from 16 rows the second
// row is zero (and its output stays zero).
func quantSwiGLUNormCase(qf quantFormat, rows, k, f, n int) Case {
	const eps = 1e-6
	name := fmt.Sprintf("quant_swiglu_norm_matmul/%s/%s/%dx%dx%dx%d/blocks=%dx%d", qf.dt, qf.sdt, rows, k, f, n,
		qf.blocks.BlockRows, qf.blocks.BlockCols)
	m := newMaker(name)
	x := m.in("x", rows, k)
	if rows >= 16 {
		clear(x.Data[k : 2*k])
	}
	in := []Tensor{x}
	in = append(in, m.quantWeight("wg", qf, f, k)...)
	in = append(in, m.quantWeight("wu", qf, f, k)...)
	in = append(in, m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f))
	in = append(in, m.quantWeight("wd", qf, n, f)...)
	at := ops.QuantNormAttrs{Blocks: qf.blocks, Eps: eps}
	return Case{
		Name:   name,
		Inputs: in,
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return []*graph.Value{ops.QuantSwiGLUNormMatMul(b, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], at)}
		},
		Ref: func(in [][]float64) [][]float64 {
			g := refQuant(qf, in[0], in[1], in[2], f, k)
			u := refQuant(qf, in[0], in[3], in[4], f, k)
			a := refL2Norm(refSwiGLU(g, u, in[5], in[6]), f, float64(float32(eps)))
			return [][]float64{refQuant(qf, a, in[7], in[8], n, f)}
		},
		// The SwiGLU's two products' errors (swigluErrors), then the down
		// product's own: its input and weight rounded once more each over
		// 8 rows.
		Tol: tolQuantFormats(rows, qf) * (swigluErrors(rows) + 1),
	}
}

// quantGroupName names a case of op over rows x k by weights of ns
// features, weight i in format fs[i mod len(fs)].
func quantGroupName(op string, rows, k int, ns []int, fs []quantFormat) string {
	var fmts []string
	for _, f := range fs {
		fmts = append(fmts, f.dt.String()+"/"+f.sdt.String())
	}
	outs := make([]string, len(ns))
	for i, n := range ns {
		outs[i] = fmt.Sprint(n)
	}
	return fmt.Sprintf("%s/%s/%dx%dx%s/blocks=%dx%d", op, strings.Join(fmts, "+"), rows, k, strings.Join(outs, ","),
		fs[0].blocks.BlockRows, fs[0].blocks.BlockCols)
}

// quantSlerpCase is quant_slerp_matmul of rows x k: h = slerp(x, y, α) and
// its products by weights of ns features, weight i in format fs[i mod
// len(fs)].
func quantSlerpCase(rows, k int, ns []int, fs []quantFormat) Case {
	const eps = 1e-6
	name := quantGroupName("quant_slerp_matmul", rows, k, ns, fs)
	m := newMaker(name)
	in := []Tensor{m.in("x", rows, k), m.in("y", rows, k), m.in("alpha", k)}
	for i, n := range ns {
		in = append(in, m.quantWeight(fmt.Sprintf("w%d", i), fs[i%len(fs)], n, k)...)
	}
	at := ops.QuantNormAttrs{Blocks: fs[0].blocks, Eps: eps}
	return Case{
		Name:   name,
		Inputs: in,
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return ops.QuantSlerpMatMul(b, in[0], in[1], in[2], at, in[3:]...)
		},
		Ref: func(in [][]float64) [][]float64 {
			h := refSlerp(in[0], in[1], in[2], float64(float32(eps)))
			out := [][]float64{h}
			for i, n := range ns {
				out = append(out, refQuant(fs[i%len(fs)], h, in[3+2*i], in[4+2*i], n, k))
			}
			return out
		},
		Tol: max(TolF32, tolQuantFormats(rows, fs...)),
	}
}

// quantGroupedCase is quant_grouped_matmul of rows x k by weights of ns
// features, weight i in format fs[i mod len(fs)].
func quantGroupedCase(rows, k int, ns []int, fs []quantFormat) Case {
	name := quantGroupName("quant_grouped_matmul", rows, k, ns, fs)
	m := newMaker(name)
	in := []Tensor{m.in("x", rows, k)}
	for i, n := range ns {
		in = append(in, m.quantWeight(fmt.Sprintf("w%d", i), fs[i%len(fs)], n, k)...)
	}
	return Case{
		Name:   name,
		Inputs: in,
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return ops.QuantGroupedMatMul(b, in[0], fs[0].blocks, in[1:]...)
		},
		Ref: func(in [][]float64) [][]float64 {
			var out [][]float64
			for i, n := range ns {
				out = append(out, refQuant(fs[i%len(fs)], in[0], in[1+2*i], in[2+2*i], n, k))
			}
			return out
		},
		Tol: tolQuantFormats(rows, fs...),
	}
}

// quantSwiGLUCase is quant_matmul_swiglu of rows x k by gate and up weights
// of f features.
func quantSwiGLUCase(qf quantFormat, rows, k, f int) Case {
	name := fmt.Sprintf("quant_matmul_swiglu/%s/%s/%dx%dx%d/blocks=%dx%d", qf.dt, qf.sdt, rows, k, f, qf.blocks.BlockRows, qf.blocks.BlockCols)
	m := newMaker(name)
	in := []Tensor{m.in("x", rows, k)}
	in = append(in, m.quantWeight("wg", qf, f, k)...)
	in = append(in, m.quantWeight("wu", qf, f, k)...)
	in = append(in, m.tensor("sg", graph.Input, graph.F32, 2, f), m.tensor("su", graph.Input, graph.F32, 2, f))
	return Case{
		Name:   name,
		Inputs: in,
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return []*graph.Value{ops.QuantMatMulSwiGLU(b, in[0], in[1], in[2], in[3], in[4], in[5], in[6], qf.blocks)}
		},
		Ref: func(in [][]float64) [][]float64 {
			g := refQuant(qf, in[0], in[1], in[2], f, k)
			u := refQuant(qf, in[0], in[3], in[4], f, k)
			return [][]float64{refSwiGLU(g, u, in[5], in[6])}
		},
		// The gated activation is a product of the gate's and the up
		// projection's results, so their independent relative errors add:
		// over 8 rows, where each rounds x and the dequantized weights to
		// 16 bits, about twice one product's NMSE (the H200 measured
		// 1.06e-5 and 1.56e-5 for FP8 and q4 in bf16 against TolBF16's
		// 1e-5, session 5 run 4).
		Tol: tolQuantFormats(rows, qf) * swigluErrors(rows),
	}
}

// quantNormCase is quant_norm_matmul of rows x k to n features; with 3 rows
// the second row is zero (and stays zero).
func quantNormCase(qf quantFormat, rows, k, n int) Case {
	const eps = 1e-6
	name := fmt.Sprintf("quant_norm_matmul/%s/%s/%dx%dx%d/blocks=%dx%d", qf.dt, qf.sdt, rows, k, n, qf.blocks.BlockRows, qf.blocks.BlockCols)
	m := newMaker(name)
	x := m.tensor("x", graph.Input, graph.F32, 5, rows, k)
	if rows == 3 {
		clear(x.Data[k : 2*k])
	}
	at := ops.QuantNormAttrs{Blocks: qf.blocks, Eps: eps}
	return Case{
		Name:   name,
		Inputs: append([]Tensor{x}, m.quantWeight("w", qf, n, k)...),
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			return []*graph.Value{ops.QuantNormMatMul(b, in[0], in[1], in[2], at)}
		},
		Ref: func(in [][]float64) [][]float64 {
			return [][]float64{refQuant(qf, refL2Norm(in[0], k, float64(float32(eps))), in[1], in[2], n, k)}
		},
		Tol: tolQuantFormats(rows, qf),
	}
}
