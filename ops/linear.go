package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// OpEmbed gathers rows of an embedding table.
var OpEmbed = &Def{
	Op:    "embed",
	Doc:   "embed(table[V,H], ids[T]) = out[T,H], out[t] = table[ids[t]] as f32. An id outside [0,V) is an error at run time.",
	Arity: 2,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		table, ids := in[0], in[1]
		if err := wantWeightType("table", table); err != nil {
			return graph.Signature{}, err
		}
		if len(table.Shape) != 2 {
			return graph.Signature{}, fmt.Errorf("table %s must be [vocab, hidden]", table)
		}
		if ids.DType != graph.I32 || len(ids.Shape) != 1 {
			return graph.Signature{}, fmt.Errorf("ids %s must be i32 [rows]", ids)
		}
		return one(graph.F32, graph.Shape{ids.Shape[0], table.Shape[1]}), nil
	},
}

// Embed is table[ids]: one f32 row of the table per id.
func Embed(b *graph.Builder, table, ids *graph.Value) *graph.Value {
	return apply1(b, OpEmbed, nil, table, ids)
}

// OpMatMul multiplies rows by a weight matrix stored [out, in].
var OpMatMul = &Def{
	Op:    "matmul",
	Doc:   "matmul(x[...,K], w[N,K]) = y[...,N], y[r,n] = sum_k x[r,k] w[n,k], accumulated in f32 whatever w's type (f32, bf16, f16). One row is a matvec; many rows are a GEMM.",
	Arity: 2,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		x, w := in[0], in[1]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if err := wantWeightType("w", w); err != nil {
			return graph.Signature{}, err
		}
		if len(w.Shape) != 2 || len(x.Shape) < 1 {
			return graph.Signature{}, fmt.Errorf("x %s · w %s: w must be [out, in]", x, w)
		}
		if x.Shape.Last() != w.Shape[1] {
			return graph.Signature{}, fmt.Errorf("x %s · w %s: x has %d features, w takes %d", x, w, x.Shape.Last(), w.Shape[1])
		}
		out := append(graph.Shape(nil), x.Shape...)
		out[len(out)-1] = w.Shape[0]
		return one(graph.F32, out), nil
	},
}

// MatMul is x · wᵀ for a weight stored [out, in].
func MatMul(b *graph.Builder, x, w *graph.Value) *graph.Value {
	return apply1(b, OpMatMul, nil, x, w)
}

// OpGroupedMatMul multiplies one input by several weights in one launch.
var OpGroupedMatMul = &Def{
	Op:    "grouped_matmul",
	Doc:   "grouped_matmul(x, w1..wn) = (matmul(x, w1), ..., matmul(x, wn)): sibling projections of one input (q/k/v/g, gate/up) in one pass over x.",
	Arity: -1,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		if len(in) < 2 {
			return graph.Signature{}, fmt.Errorf("grouped_matmul takes an input and at least one weight, got %d inputs", len(in))
		}
		var sig graph.Signature
		for i, w := range in[1:] {
			s, err := OpMatMul.Rule(nil, []*graph.Value{in[0], w})
			if err != nil {
				return graph.Signature{}, fmt.Errorf("weight %d: %w", i, err)
			}
			sig.Outputs = append(sig.Outputs, s.Outputs...)
		}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, _ any, in []*graph.Value) []*graph.Value {
		out := make([]*graph.Value, 0, len(in)-1)
		for _, w := range in[1:] {
			out = append(out, MatMul(b, in[0], w))
		}
		return out
	},
}

// GroupedMatMul is MatMul of x by each weight, as one node.
func GroupedMatMul(b *graph.Builder, x *graph.Value, ws ...*graph.Value) []*graph.Value {
	return b.Apply(OpGroupedMatMul, nil, len(ws), append([]*graph.Value{x}, ws...)...)
}
