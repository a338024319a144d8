package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// SliceAttrs pick rows From (inclusive) to To (exclusive).
type SliceAttrs struct {
	From, To int
}

// OpSliceRows takes a range of rows.
var OpSliceRows = &Def{
	Op:    "slice_rows",
	Doc:   "slice_rows(x[T, N]) = x[From:To, :].",
	Arity: 1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[SliceAttrs]("slice_rows", a)
		if err != nil {
			return graph.Signature{}, err
		}
		x := in[0]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if len(x.Shape) != 2 || at.From < 0 || at.To > x.Shape[0] || at.From >= at.To {
			return graph.Signature{}, fmt.Errorf("rows [%d, %d) of %s", at.From, at.To, x)
		}
		return one(graph.F32, graph.Shape{at.To - at.From, x.Shape[1]}), nil
	},
}

// SliceRows is x[from:to].
func SliceRows(b *graph.Builder, x *graph.Value, from, to int) *graph.Value {
	return apply1(b, OpSliceRows, SliceAttrs{From: from, To: to}, x)
}

// OpLastRow takes the last row a call computes.
var OpLastRow = &Def{
	Op: "last_row",
	Doc: "last_row(x[T, N], call) = x[u−1 : u, :], u = call[rows] (T when 0): the last row the call computes, as [1, N]. " +
		"A plan built for a bucket of T rows reads out the last row in use of a shorter call.",
	Arity: 2,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		x := in[0]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if len(x.Shape) != 2 || x.Shape[0] < 1 {
			return graph.Signature{}, fmt.Errorf("x %s must be [rows ≥ 1, width]", x)
		}
		if err := checkCall(in[1]); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, graph.Shape{1, x.Shape[1]}), nil
	},
}

// LastRow is the last row of x that the call record's rows cover: the
// last row in use of a plan built for a bucket of rows.
func LastRow(b *graph.Builder, x, call *graph.Value) *graph.Value {
	return apply1(b, OpLastRow, nil, x, call)
}

// OpArgmax finds each row's largest entry.
var OpArgmax = &Def{
	Op:    "argmax",
	Doc:   "argmax(x[T, N]) = i32[T], the index of each row's largest entry, the lowest index on ties; NaN entries are skipped, and a row of NaNs gives -1.",
	Arity: 1,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		x := in[0]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if len(x.Shape) != 2 || x.Shape[1] == 0 {
			return graph.Signature{}, fmt.Errorf("x %s must be [rows, n > 0]", x)
		}
		return one(graph.I32, graph.Shape{x.Shape[0]}), nil
	},
}

// Argmax is the index of each row's largest entry.
func Argmax(b *graph.Builder, x *graph.Value) *graph.Value { return apply1(b, OpArgmax, nil, x) }

// OpStore copies a value into a State value of the same shape, so a later
// graph can read it (the loop state a gated token carries between stages).
var OpStore = &Def{
	Op:    "store",
	Doc:   "store(x, s) writes s ← x, elementwise; s is a state of x's dtype and shape. It makes no output.",
	Arity: 2,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		x, s := in[0], in[1]
		if s.Kind != graph.State || s.DType != x.DType || !s.Shape.Equal(x.Shape) {
			return graph.Signature{}, fmt.Errorf("store %s into %s: want a state of the same dtype and shape", x, s)
		}
		return graph.Signature{Writes: []int{1}}, nil
	},
}

// Store writes x into the state s.
func Store(b *graph.Builder, x, s *graph.Value) { b.Apply(OpStore, nil, 0, x, s) }
