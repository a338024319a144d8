package optest

import (
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// familyCases are the cases of the op families (ops/deltanet.go,
// hyperconn.go, moe.go, ngram.go, sparseattn.go), each family's in
// <family>_cases.go with its float64 references in <family>_ref.go (each
// op's Doc written out plainly, in the formulation of the reference PyTorch
// code where it differs from a kernel's), and whole patterns of several ops
// against references of the whole (families_cases.go).
func familyCases() []Case {
	var cs []Case
	for _, gen := range []func() []Case{
		gatedNormCases, hyperconnCases, splitReshapeCases, convCases, deltanetCases, blockKeyCases, selectCases, sparseAttentionCases,
		ngramCases, moeCases, familyBlockCases,
	} {
		cs = append(cs, gen()...)
	}
	return cs
}

// applyAll is a Build that applies one op over every leaf.
func applyAll(d *ops.Def, attrs any, nOut int) func(*graph.Builder, []*graph.Value) []*graph.Value {
	return func(b *graph.Builder, in []*graph.Value) []*graph.Value { return b.Apply(d, attrs, nOut, in...) }
}

// intLeaf is an i32 leaf holding vals.
func intLeaf(name string, kind graph.Kind, vals []int, shape ...int) Tensor {
	t := Tensor{Name: name, Kind: kind, DType: graph.I32, Shape: graph.Shape(shape), Data: make([]float64, len(vals))}
	for i, v := range vals {
		t.Data[i] = float64(v)
	}
	return t
}

// mapLeaf rounds f of every element of t to t's dtype, in place.
func mapLeaf(t Tensor, f func(float64) float64) Tensor {
	for i, v := range t.Data {
		t.Data[i] = round(t.DType, f(v))
	}
	return t
}

// epsOf is how an f32 epsilon attribute reaches a kernel.
func epsOf(eps float32) float64 { return float64(eps) }
