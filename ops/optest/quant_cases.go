package optest

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// TolQuant is the NMSE a product with a quantized weight allows against the
// float64 product of the dequantized weight at decode rows (up to 8). The
// CPU, which dequantizes in f32, is within about 1e-13; a wrong block or
// nibble gives an NMSE near 1.
const TolQuant = TolBF16

// TolQuantRows is the NMSE a quantized product of more than 8 rows (a
// prompt chunk) allows, by the codes' dtype: what a backend needs that
// rounds the dequantized weight and the activations once each to a 16-bit
// type for the tensor cores, as CUDA does in its default precision, bf16
// for FP8 and 4-bit codes and f16 for 8-bit ones. Each rounding is within
// 2⁻⁹ (bf16; 2⁻¹² f16) of a value, an NMSE of about 2.5e-6 (4e-8) a
// rounding on random data: about 5e-6 (1e-7) for the two.
var TolQuantRows = map[graph.DType]float64{graph.F8E4M3: TolBF16, graph.U8: TolBF16, graph.I8: TolF16}

// TolQuantF32 is the NMSE of a quantized product computed in f32 (the CPU;
// CUDA in PrecisionExact), by the codes' dtype: an i8 or 4-bit code times
// an f16 or bf16 scale is exact in f32 (at most 8 + 11 significant bits),
// so only the f32 sums differ from the float64 reference (about 1e-14):
// TolF32; an FP8 code (4 significant bits, magnitudes 2⁻⁹ to 448 here)
// times an f32 scale rounds once more, to 2⁻²⁴ of the weight: ten times
// more room. A weight read with another expert's or block's scales, or a
// wrong nibble, gives an NMSE above 1e-3.
var TolQuantF32 = map[graph.DType]float64{graph.F8E4M3: 10 * TolF32, graph.I8: TolF32, graph.U8: TolF32}

// tolQuantCase is the bound of a quantized product case of rows rows and
// codes of dt: f32's up to 8 rows for the experts (f32 decode kernels),
// decode for quant_matmul, TolQuantRows past 8.
func tolQuantCase(dt graph.DType, rows int, expert bool) float64 {
	switch {
	case rows > 8:
		return TolQuantRows[dt]
	case expert:
		return TolQuantF32[dt]
	}
	return TolQuant
}

// quantCases are quant_matmul's: FP8 with 128 x 128 blocks as published
// (partial blocks at the right and bottom edges, f32 scales; one with bf16
// scales), 8-bit and 4-bit groups of 32 and 64 along the input (K not a
// multiple of the group, odd K for 4-bit codes, f16 scales), from one row
// (a decode matvec) to GEMM row counts, and x with two leading dimensions.
func quantCases() []Case {
	type qcase struct {
		dt         graph.DType
		sdt        graph.DType
		rows, k, n int
		br, bc     int
	}
	var qs []qcase
	for _, s := range [][3]int{{1, 257, 300}, {3, 128, 256}, {8, 65, 129}, {9, 300, 130}, {33, 200, 70}, {1, 1, 1}} {
		qs = append(qs, qcase{graph.F8E4M3, graph.F32, s[0], s[1], s[2], 128, 128})
	}
	qs = append(qs,
		qcase{graph.F8E4M3, graph.BF16, 2, 100, 40, 16, 32},
		qcase{graph.F8E4M3, graph.F32, 1, 33, 7, 16, 16})
	for _, dt := range []graph.DType{graph.I8, graph.U8} {
		for _, s := range [][4]int{{1, 100, 33, 32}, {1, 255, 9, 32}, {3, 256, 65, 64}, {9, 130, 70, 32}, {33, 64, 129, 64}, {1, 2560, 40, 32}} {
			qs = append(qs, qcase{dt, graph.F16, s[0], s[1], s[2], 1, s[3]})
		}
		qs = append(qs, qcase{dt, graph.F32, 2, 96, 17, 1, 32})
	}
	// The decode kernels of 16-byte code vectors (CUDA's qmvs_* at one
	// row, qmma_* on the tensor cores from two; ops/cuda's tests run qmma
	// at one row too): 1 to 8 rows (one, two and four sets of two rows for
	// qmma, the last set half used); K of one vector's worth
	// to Dory-4B's 2560 and 7168 (x staged in shared memory or too large
	// for it), K not a multiple of a step of four vectors; outputs not a
	// multiple of a unit of 1, 2 or 4 features or of a tile of 16; groups
	// of 64; and the shapes that fall back to element loads: K not a
	// multiple of a vector (48 4-bit codes make rows of 24 bytes), groups
	// smaller than a vector; groups of 96 (not a power of two of vectors:
	// qmvs rather than qmma); and one row of 600 features, more blocks of
	// units than an H200's 132 SMs at a unit a block, so that a grid
	// capped at a block an SM loops over them.
	for _, dt := range []graph.DType{graph.F8E4M3, graph.I8, graph.U8} {
		sdt, br, bc := graph.F16, 1, 32
		if dt == graph.F8E4M3 {
			sdt, br, bc = graph.F32, 128, 128
		}
		for _, s := range [][3]int{{1, 64, 33}, {3, 2560, 70}, {8, 7168, 13}, {1, 7168, 9}, {8, 64, 5}, {1, 2560, 131}, {3, 4096, 6},
			{2, 160, 17}, {4, 1024, 48}, {5, 320, 40}, {6, 2560, 33}, {7, 96, 16}, {1, 1024, 600}} {
			qs = append(qs, qcase{dt, sdt, s[0], s[1], s[2], br, bc})
		}
		qs = append(qs, qcase{dt, graph.BF16, 2, 256, 11, 3, 64}, qcase{dt, sdt, 3, 48, 7, br, 16}, qcase{dt, sdt, 2, 192, 9, br, 96})
	}
	// Prompt rows (16 and more: CUDA dequantizes into a 16-bit type for
	// the tensor cores): whole 16-byte vectors of codes under one scale
	// (CUDA's vector dequantization, K up to Dory-4B's 2560) and the shapes
	// that take its element path (K not a multiple of a vector, odd K of
	// 4-bit codes, blocks narrower than a vector), outputs not a multiple of
	// a tile, partial FP8 blocks at both edges.
	qs = append(qs,
		qcase{graph.F8E4M3, graph.F32, 16, 300, 130, 128, 128}, qcase{graph.F8E4M3, graph.F32, 17, 256, 129, 128, 128},
		qcase{graph.F8E4M3, graph.F32, 64, 2560, 40, 128, 128}, qcase{graph.F8E4M3, graph.BF16, 20, 100, 40, 16, 32})
	for _, dt := range []graph.DType{graph.I8, graph.U8} {
		for _, s := range [][4]int{{16, 256, 33, 32}, {19, 130, 70, 32}, {24, 77, 65, 32}, {40, 2560, 24, 32}, {17, 192, 31, 64}, {16, 64, 9, 16}} {
			qs = append(qs, qcase{dt, graph.F16, s[0], s[1], s[2], 1, s[3]})
		}
		qs = append(qs, qcase{dt, graph.F32, 18, 96, 17, 1, 32}, qcase{dt, graph.BF16, 21, 128, 15, 1, 32})
	}
	var cs []Case
	for _, q := range qs {
		name := fmt.Sprintf("quant_matmul/%s/%s/%dx%dx%d/blocks=%dx%d", q.dt, q.sdt, q.rows, q.k, q.n, q.br, q.bc)
		m := newMaker(name)
		attrs := ops.QuantAttrs{BlockRows: q.br, BlockCols: q.bc}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.in("x", q.rows, q.k), m.codes("w", q.dt, q.n, q.k),
				m.scales("s", q.sdt, (q.n+q.br-1)/q.br, (q.k+q.bc-1)/q.bc)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.QuantMatMul(b, in[0], in[1], in[2], attrs)}
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{RefMatMul(in[0], q.k, RefDequant(q.dt, in[1], in[2], q.n, q.k, attrs))}
			},
			Tol: tolQuantCase(q.dt, q.rows, false),
		})
	}
	// x with two leading dimensions: 6 rows (a decode matvec) and 18 (a
	// prompt's product).
	for _, lead := range [][2]int{{2, 3}, {2, 9}} {
		name := fmt.Sprintf("quant_matmul/u8/f16/%dx%dx66x5/blocks=1x32", lead[0], lead[1])
		m := newMaker(name)
		attrs := ops.QuantAttrs{BlockRows: 1, BlockCols: 32}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{m.in("x", lead[0], lead[1], 66), m.codes("w", graph.U8, 5, 66), m.scales("s", graph.F16, 5, 3)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.QuantMatMul(b, in[0], in[1], in[2], attrs)}
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{RefMatMul(in[0], 66, RefDequant(graph.U8, in[1], in[2], 5, 66, attrs))}
			},
			Tol: tolQuantCase(graph.U8, lead[0]*lead[1], false),
		})
	}
	cs = append(cs, quantRangeCases()...)
	return append(cs, quantExpertCases()...)
}

// quantExpertCases are quant_expert_matmul's, in each format: decode shapes
// (no more units than experts: CUDA's warp path, with and without 16-byte
// rows) and prompt shapes (CUDA's tensor-core path past 8 rows, with 8
// codes a load or element by element, an expert taking more units than a
// tile holds, more features than a tile; its grouped f32 path in
// PrecisionExact), rows per unit, inputs not a multiple of the group (odd
// for 4-bit codes), FP8's 128 x 128 blocks partial at a matrix's edges
// and smaller blocks that leave each expert a partial row block (so an
// expert's scales must be read from its own table), and bad ids on every
// path. Up to 8 rows they are bound at f32's NMSE (TolQuantF32), past 8 at
// TolQuantRows.
func quantExpertCases() []Case {
	type qcase struct {
		dt, sdt             graph.DType
		br, bc              int
		rows, k, e, out, in int
		perUnit             bool
		bad                 int
	}
	var qs []qcase
	for _, s := range []qcase{
		{rows: 1, k: 2, e: 8, out: 130, in: 200}, {rows: 1, k: 3, e: 4, out: 256, in: 256},
		{rows: 9, k: 4, e: 6, out: 70, in: 300, perUnit: true},
		{rows: 40, k: 3, e: 5, out: 130, in: 256}, {rows: 20, k: 2, e: 3, out: 200, in: 136, perUnit: true},
	} {
		s.dt, s.sdt, s.br, s.bc = graph.F8E4M3, graph.F32, 128, 128
		qs = append(qs, s)
	}
	qs = append(qs,
		qcase{graph.F8E4M3, graph.BF16, 16, 32, 5, 2, 3, 40, 100, false, 0},
		qcase{graph.F8E4M3, graph.F32, 16, 16, 1, 2, 4, 24, 48, true, 0})
	for _, dt := range []graph.DType{graph.I8, graph.U8} {
		for _, s := range []qcase{
			{rows: 1, k: 2, e: 8, out: 16, in: 64}, {rows: 1, k: 3, e: 8, out: 12, in: 33},
			{rows: 1, k: 10, e: 64, out: 40, in: 256}, {rows: 7, k: 3, e: 5, out: 65, in: 77, perUnit: true},
			{rows: 3, k: 2, e: 4, out: 9, in: 130, bc: 64}, {rows: 70, k: 2, e: 2, out: 20, in: 40},
			{rows: 33, k: 4, e: 16, out: 20, in: 96, sdt: graph.BF16},
			{rows: 2, k: 2, e: 4, out: 8, in: 64, bad: 1}, {rows: 4, k: 3, e: 4, out: 8, in: 31, perUnit: true, bad: -1},
			{rows: 24, k: 3, e: 5, out: 65, in: 77, perUnit: true}, {rows: 50, k: 2, e: 3, out: 130, in: 64, bc: 64},
			{rows: 17, k: 2, e: 4, out: 33, in: 40, bc: 16}, {rows: 12, k: 2, e: 4, out: 8, in: 64, bad: 1},
		} {
			s.dt, s.br = dt, 1
			if s.bc == 0 {
				s.bc = 32
			}
			if s.sdt == graph.Invalid {
				s.sdt = graph.F16
			}
			qs = append(qs, s)
		}
	}
	var cs []Case
	for _, q := range qs {
		name := fmt.Sprintf("quant_expert_matmul/%s/%s/rows=%d/k=%d/e=%d/%dx%d/blocks=%dx%d/per_unit=%v",
			q.dt, q.sdt, q.rows, q.k, q.e, q.out, q.in, q.br, q.bc, q.perUnit)
		if q.bad != 0 {
			name = "quant_expert_matmul/error/" + name[len("quant_expert_matmul/"):]
		}
		m := newMaker(name)
		attrs := ops.QuantAttrs{BlockRows: q.br, BlockCols: q.bc}
		x := m.expertRows(q.rows, q.k, q.in, q.perUnit)
		w := m.codes("w", q.dt, q.e*q.out, q.in)
		w.Shape = graph.Shape{q.e, q.out, w.Shape[1]}
		sr, sc := (q.out+q.br-1)/q.br, (q.in+q.bc-1)/q.bc
		s := m.scales("s", q.sdt, q.e*sr, sc)
		s.Shape = graph.Shape{q.e, sr, sc}
		ids, want := m.expertIDs(q.rows, q.k, q.e, q.bad)
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{x, w, s, ids},
			Build:  applyAll(ops.OpQuantExpertMatMul, attrs, 1),
			Ref: func(in [][]float64) [][]float64 {
				stride := ops.QuantCols(q.dt, q.in)
				var deq []float64
				for e := range q.e {
					deq = append(deq, RefDequant(q.dt, in[1][e*q.out*stride:(e+1)*q.out*stride], in[2][e*sr*sc:(e+1)*sr*sc], q.out, q.in, attrs)...)
				}
				return [][]float64{refExpert(in[0], deq, in[3], q.out, q.in, q.perUnit)}
			},
			Tol:     tolQuantCase(q.dt, q.rows, true),
			WantErr: want,
		})
	}
	return cs
}

// codes is a quantized weight's codes for n rows of k features: every
// finite e4m3 pattern (magnitudes 2⁻⁹ to 448), every i8, or random bytes
// of two 4-bit codes ([n, ⌈k/2⌉]; the unused nibble of an odd k too).
func (m *maker) codes(name string, dt graph.DType, n, k int) Tensor {
	t := Tensor{Name: name, Kind: graph.Weight, DType: dt, Shape: graph.Shape{n, ops.QuantCols(dt, k)}}
	t.Data = make([]float64, t.Len())
	for i := range t.Data {
		c := m.r.intn(256)
		switch dt {
		case graph.F8E4M3:
			if c&0x7f == 0x7f {
				c &^= 1 // not a NaN: the largest finite magnitude instead
			}
			t.Data[i] = float64(half.E4M3ToF32(uint8(c)))
		case graph.I8:
			t.Data[i] = float64(int8(c))
		default:
			t.Data[i] = float64(c)
		}
	}
	return t
}

// quantRangeCases are decode products whose rows of x differ in range by
// 2^60: row r of x uniform in ±10^(5 − 3r) (CUDA's qmma kernels scale each
// row by its own power of two before splitting it into two f16 parts; a
// row past f16's range or under its normals must keep its precision: the
// table's NMSE is over all rows, so ops/cuda's TestQuantMMAPrecision also
// checks each row alone).
func quantRangeCases() []Case {
	var cs []Case
	for _, dt := range []graph.DType{graph.F8E4M3, graph.I8, graph.U8} {
		sdt, br, bc := graph.F16, 1, 32
		if dt == graph.F8E4M3 {
			sdt, br, bc = graph.F32, 128, 128
		}
		const rows, k, n = 5, 256, 24
		name := fmt.Sprintf("quant_matmul/%s/%s/%dx%dx%d/blocks=%dx%d/x_range", dt, sdt, rows, k, n, br, bc)
		m := newMaker(name)
		x := m.in("x", rows, k)
		for i := range x.Data {
			x.Data[i] = round(graph.F32, x.Data[i]*math.Pow(10, float64(5-3*(i/k))))
		}
		attrs := ops.QuantAttrs{BlockRows: br, BlockCols: bc}
		cs = append(cs, Case{
			Name:   name,
			Inputs: []Tensor{x, m.codes("w", dt, n, k), m.scales("s", sdt, (n+br-1)/br, (k+bc-1)/bc)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				return []*graph.Value{ops.QuantMatMul(b, in[0], in[1], in[2], attrs)}
			},
			Ref: func(in [][]float64) [][]float64 {
				return [][]float64{RefMatMul(in[0], k, RefDequant(dt, in[1], in[2], n, k, attrs))}
			},
			Tol: TolQuant,
		})
	}
	return cs
}

// scales are block scales near 1/100 (from 1/200 to 3/200, so that a
// block read with another block's scale is far off), rounded to dt.
func (m *maker) scales(name string, dt graph.DType, rows, cols int) Tensor {
	t := m.tensor(name, graph.Weight, dt, 1, rows, cols)
	for i := range t.Data {
		t.Data[i] = round(dt, 0.01*(1+t.Data[i]/2))
	}
	return t
}

// RefDequant is the dequantized weight [n, k] of codes w (as Tensor.Data
// holds them: e4m3 and i8 codes by value, u8 codes by byte) and block
// scales s, in float64, written from quant_matmul's statement.
func RefDequant(dt graph.DType, w, s []float64, n, k int, a ops.QuantAttrs) []float64 {
	sc := (k + a.BlockCols - 1) / a.BlockCols
	stride := ops.QuantCols(dt, k)
	out := make([]float64, n*k)
	for r := range n {
		for c := range k {
			var v float64
			switch dt {
			case graph.U8:
				b := int(w[r*stride+c/2])
				if c%2 == 1 {
					b /= 16
				}
				v = float64(b%16 - 8)
			default:
				v = w[r*stride+c]
			}
			out[r*k+c] = v * s[r/a.BlockRows*sc+c/a.BlockCols]
		}
	}
	return out
}
