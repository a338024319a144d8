package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// quantDefs are the products with quantized weights, registered beside the
// common ops.
var quantDefs = []*Def{OpQuantMatMul}

// QuantAttrs are the scale blocks of a quantized weight: one scale covers
// BlockRows consecutive output features by BlockCols consecutive input
// features. FP8 checkpoints as published use 128 x 128 blocks; 8- and 4-bit
// groups are 1 x the group size.
type QuantAttrs struct {
	BlockRows, BlockCols int
}

// String writes the blocks as dumps show them.
func (a QuantAttrs) String() string { return fmt.Sprintf("blocks=%dx%d", a.BlockRows, a.BlockCols) }

// QuantCols is the stored width of a row of k codes of a quantized weight
// of dtype dt: k, or ⌈k/2⌉ bytes for 4-bit codes (u8, two a byte).
func QuantCols(dt graph.DType, k int) int {
	if dt == graph.U8 {
		return (k + 1) / 2
	}
	return k
}

// OpQuantMatMul multiplies rows by a quantized weight matrix and its
// block scales.
var OpQuantMatMul = &Def{
	Op: "quant_matmul",
	Doc: "quant_matmul(x[...,K], w, s[⌈N/R⌉,⌈K/C⌉]) = y[...,N], y[r,n] = sum_k x[r,k] W[n,k], accumulated in f32, " +
		"with the dequantized weight W[n,k] = v(w,n,k) · s[⌊n/R⌋,⌊k/C⌋] for the blocks R x C of the attributes " +
		"(the last block of a row or a column may be partial). The codes v: w f8_e4m3 [N,K] (FP8 checkpoints as " +
		"published, s their weight_scale_inv), the float8_e4m3fn value; w i8 [N,K] (8-bit groups, R = 1), the " +
		"signed integer; w u8 [N,⌈K/2⌉] (4-bit groups, R = 1), two codes a byte, element 2j in the low nibble and " +
		"2j+1 in the high one, a nibble u meaning u − 8. s is f32, bf16 or f16. A dequantized weight is never made " +
		"whole: kernels decode blocks of it as they read them.",
	Arity: 3,
	Rule: func(attrs any, in []*graph.Value) (graph.Signature, error) {
		a, err := attrsAs[QuantAttrs]("quant_matmul", attrs)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkPositive("quant_matmul", "BlockRows", a.BlockRows, "BlockCols", a.BlockCols); err != nil {
			return graph.Signature{}, err
		}
		x, w, s := in[0], in[1], in[2]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if !w.DType.IsQuantized() {
			return graph.Signature{}, fmt.Errorf("w %s: dtype %s is not a quantized type (f8_e4m3, i8, u8)", w, w.DType)
		}
		if len(w.Shape) != 2 || len(x.Shape) < 1 {
			return graph.Signature{}, fmt.Errorf("x %s · w %s: w must be [out, in]", x, w)
		}
		k, n := x.Shape.Last(), w.Shape[0]
		if c := QuantCols(w.DType, k); w.Shape[1] != c {
			return graph.Signature{}, fmt.Errorf("x %s · w %s: x has %d features, which %s codes store in %d columns", x, w, k, w.DType, c)
		}
		if !s.DType.IsFloat() || len(s.Shape) != 2 {
			return graph.Signature{}, fmt.Errorf("scales %s must be f32, bf16 or f16 [row blocks, column blocks]", s)
		}
		if sr, sc := ceilDiv(n, a.BlockRows), ceilDiv(k, a.BlockCols); s.Shape[0] != sr || s.Shape[1] != sc {
			return graph.Signature{}, fmt.Errorf("scales %s of w %s in %s: want [%d %d]", s, w, a, sr, sc)
		}
		out := append(graph.Shape(nil), x.Shape...)
		out[len(out)-1] = n
		return one(graph.F32, out), nil
	},
}

// QuantMatMul is x · Wᵀ for a quantized weight w stored [out, in] (u8:
// [out, ⌈in/2⌉]) with its block scales s.
func QuantMatMul(b *graph.Builder, x, w, s *graph.Value, a QuantAttrs) *graph.Value {
	return apply1(b, OpQuantMatMul, a, x, w, s)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
