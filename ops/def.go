// Package ops defines the operations Reel's graphs are made of: for each, its
// attributes, its shape and dtype rule, a statement of its math and, for a
// fused op, its decomposition into primitive ops. It also defines the Kernel
// and Backend interfaces that the backends (ops/cpu, ops/cuda) implement, and
// a plain executor that runs a graph node by node on any backend.
//
// Model code builds graphs through the typed helpers here, so it reads like the
// math:
//
//	q := ops.MatMul(b, x, w.Q)
//	q = ops.Rope(b, q, call, ops.RopeAttrs{HeadDim: 64, Rotary: 64, Theta: 1e4})
package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Def is one operation.
type Def struct {
	// Op is the op's name in graphs, dumps and kernel tables.
	Op string
	// Doc states the op's math in one paragraph.
	Doc string
	// Arity is the number of inputs, or -1 for a variable count (checked by Rule).
	Arity int
	// Rule checks the inputs and gives the outputs and the state writes.
	Rule func(attrs any, in []*graph.Value) (graph.Signature, error)
	// Decompose, set on fused ops only, rebuilds the op from primitive ops on b
	// over the same inputs and returns the same outputs: the reference the
	// fused kernel is tested against and what runs with fusion off.
	Decompose func(b *graph.Builder, attrs any, in []*graph.Value) []*graph.Value
	// InPlace lists, per output, the input it may share memory with when that
	// input dies at this node (-1: none). Elementwise ops allow it.
	InPlace []int
}

// Name gives the op's name (graph.Op).
func (d *Def) Name() string { return d.Op }

// Infer runs the op's rule (graph.Op), after checking the input count.
func (d *Def) Infer(attrs any, in []*graph.Value) (graph.Signature, error) {
	if d.Arity >= 0 && len(in) != d.Arity {
		return graph.Signature{}, fmt.Errorf("%s takes %d inputs, got %d", d.Op, d.Arity, len(in))
	}
	return d.Rule(attrs, in)
}

// Fused reports whether the op has a decomposition into primitive ops.
func (d *Def) Fused() bool { return d.Decompose != nil }

// attrsAs reads typed attributes, accepting the value or a pointer to it.
func attrsAs[T any](op string, a any) (T, error) {
	switch v := a.(type) {
	case T:
		return v, nil
	case *T:
		if v != nil {
			return *v, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("%s: attributes are %T, want %T", op, a, zero)
}

// one is the signature of an op with a single output and no writes.
func one(dt graph.DType, shape graph.Shape) graph.Signature {
	return graph.Signature{Outputs: []graph.Spec{{DType: dt, Shape: append(graph.Shape(nil), shape...)}}}
}

// wantF32 checks that an activation input is f32 with a fixed shape (only
// slots, read through their own checks, may have a Dyn extent).
func wantF32(what string, v *graph.Value) error {
	if v.DType != graph.F32 {
		return fmt.Errorf("%s %s must be f32", what, v)
	}
	if v.Shape.Elems() < 0 {
		return fmt.Errorf("%s %s has a Dyn extent: only KV slots may", what, v)
	}
	return nil
}

// wantWeightType checks that a matrix or table holds a type kernels read.
func wantWeightType(what string, v *graph.Value) error {
	switch v.DType {
	case graph.F32, graph.BF16, graph.F16:
		return nil
	}
	return fmt.Errorf("%s %s: dtype %s is not a weight type (f32, bf16, f16)", what, v, v.DType)
}

// apply1 adds a single-output node of d.
func apply1(b *graph.Builder, d *Def, attrs any, in ...*graph.Value) *graph.Value {
	return b.Apply(d, attrs, 1, in...)[0]
}

// attrsIn reads typed attributes inside a Decompose: a mismatch is recorded
// on the builder (its sticky error) and reported as false.
func attrsIn[T any](b *graph.Builder, op string, a any) (T, bool) {
	v, err := attrsAs[T](op, a)
	if err != nil {
		b.Fail(err)
		return v, false
	}
	return v, true
}

// failed gives n placeholder outputs after a Decompose met an error on b.
func failed(n int) []*graph.Value {
	out := make([]*graph.Value, n)
	for i := range out {
		out[i] = &graph.Value{ID: -1, Name: "<error>"}
	}
	return out
}

// NodeAttrs reads a node's typed attributes (the value or a pointer to it);
// kernels use it when they bind a node.
func NodeAttrs[T any](n *graph.Node) (T, error) {
	return attrsAs[T](n.Op, n.Attrs)
}
