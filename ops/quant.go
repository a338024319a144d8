package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// quantDefs are the products with quantized weights, registered beside the
// common ops.
var quantDefs = []*Def{OpQuantMatMul, OpQuantExpertMatMul}

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
		if len(w.Shape) != 2 || len(x.Shape) < 1 {
			return graph.Signature{}, fmt.Errorf("x %s · w %s: w must be [out, in]", x, w)
		}
		if err := checkQuantized(x, w, s, a); err != nil {
			return graph.Signature{}, err
		}
		out := append(graph.Shape(nil), x.Shape...)
		out[len(out)-1] = w.Shape[0]
		return one(graph.F32, out), nil
	},
}

// checkQuantized checks the codes w of a quantized weight [out, in] (or a
// stack of them [E, out, in]: the last two dimensions) for rows x of in
// features, and its scales s: one table of blocks per matrix of the stack.
func checkQuantized(x, w, s *graph.Value, a QuantAttrs) error {
	if !w.DType.IsQuantized() {
		return fmt.Errorf("w %s: dtype %s is not a quantized type (f8_e4m3, i8, u8)", w, w.DType)
	}
	k, n, lead := x.Shape.Last(), w.Shape[len(w.Shape)-2], w.Shape[:len(w.Shape)-2]
	if c := QuantCols(w.DType, k); w.Shape.Last() != c {
		return fmt.Errorf("x %s · w %s: x has %d features, which %s codes store in %d columns", x, w, k, w.DType, c)
	}
	want := append(append(graph.Shape(nil), lead...), ceilDiv(n, a.BlockRows), ceilDiv(k, a.BlockCols))
	if !s.DType.IsFloat() || len(s.Shape) != len(want) {
		return fmt.Errorf("scales %s must be f32, bf16 or f16 %v", s, want)
	}
	if !s.Shape.Equal(want) {
		return fmt.Errorf("scales %s of w %s in %s: want %v", s, w, a, want)
	}
	return nil
}

// QuantMatMul is x · Wᵀ for a quantized weight w stored [out, in] (u8:
// [out, ⌈in/2⌉]) with its block scales s.
func QuantMatMul(b *graph.Builder, x, w, s *graph.Value, a QuantAttrs) *graph.Value {
	return apply1(b, OpQuantMatMul, a, x, w, s)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// OpQuantExpertMatMul multiplies each row by the quantized experts it was
// routed to: expert_matmul over codes and block scales as quant_matmul
// reads them.
var OpQuantExpertMatMul = &Def{
	Op: "quant_expert_matmul",
	Doc: "quant_expert_matmul(x[T, K] or [T, k, K], w[E, N, K'], s[E, ⌈N/R⌉, ⌈K/C⌉], ids i32[T, k]) = y[T, k, N], " +
		"y[t, j, n] = sum_c W_e[n, c] x[t, c] (or x[t, j, c]) for e = ids[t, j], accumulated in f32: expert_matmul over " +
		"quantized experts, each expert e its own matrix W_e = the dequantized weight of codes w[e] and scales s[e] as " +
		"quant_matmul states it (blocks R x C of the attributes, partial at a matrix's edges; w f8_e4m3 or i8 [E, N, K], " +
		"u8 [E, N, ⌈K/2⌉]). Only the rows of the routed experts are read, each decoded as it is read. An id outside " +
		"[0, E) is an error at run time.",
	Arity: 4,
	Rule: func(attrs any, in []*graph.Value) (graph.Signature, error) {
		a, err := attrsAs[QuantAttrs]("quant_expert_matmul", attrs)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkPositive("quant_expert_matmul", "BlockRows", a.BlockRows, "BlockCols", a.BlockCols); err != nil {
			return graph.Signature{}, err
		}
		x, w, s, ids := in[0], in[1], in[2], in[3]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if len(w.Shape) != 3 || w.Shape.Elems() <= 0 || len(x.Shape) < 2 {
			return graph.Signature{}, fmt.Errorf("w %s must be [experts, out, in]", w)
		}
		if err := checkExpertRows(x, w, ids, x.Shape.Last()); err != nil {
			return graph.Signature{}, err
		}
		if err := checkQuantized(x, w, s, a); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, graph.Shape{ids.Shape[0], ids.Shape[1], w.Shape[1]}), nil
	},
}

// QuantExpertMatMul is W_e · x[t] (or x[t, j]) for every unit (t, j), e =
// ids[t, j], over quantized experts: codes w [E, out, in] (u8: [E, out,
// ⌈in/2⌉]) with their block scales s [E, ⌈out/R⌉, ⌈in/C⌉].
func QuantExpertMatMul(b *graph.Builder, x, w, s, ids *graph.Value, a QuantAttrs) *graph.Value {
	return apply1(b, OpQuantExpertMatMul, a, x, w, s, ids)
}
