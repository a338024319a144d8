// Package optest is Reel's golden op-case table, in the manner of llama.cpp's
// test-backend-ops: a list of small graphs (usually one node) with
// deterministic inputs, a float64 reference for each written independently of
// any kernel, and a runner that checks any ops.Backend against the reference
// or against another backend.
//
// Every case is run with its outputs (and every temporary) placed inside a
// larger block whose margins hold a sentinel, and with its inputs and states
// placed the same way: a kernel that writes outside its output, or writes an
// input it does not own, fails the case. Outputs start as NaN so an element a
// kernel forgets to write is caught. Ops that may run in place are also run
// with their output sharing input 0's buffer, and fused ops are also run as
// their decomposition on the same backend and compared with the fused run.
//
// A backend's tests use it as
//
//	for _, c := range optest.Cases() {
//		t.Run(c.Name, func(t *testing.T) { optest.Check(t, be, c) })
//	}
//
// and a second backend is compared against the CPU with Compare.
package optest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// The normalized mean squared error (NMSE, see NMSE) a case allows, by the
// weight type its arithmetic reads. The references use the same rounded
// weights the kernels get, so the CPU backend, which decodes weights exactly
// and computes in f32, meets TolF32 everywhere; TolBF16 and TolF16 leave room
// for a backend that rounds activations to the weight's type (bf16 rounding
// alone gives an NMSE of about 1e-6, f16 rounding about 2e-8).
const (
	// TolF32 is for f32 arithmetic over f32 data.
	TolF32 = 1e-10
	// TolBF16 is for products with bf16 weights.
	TolBF16 = 1e-5
	// TolF16 is for products with f16 weights.
	TolF16 = 1e-6
	// TolSplit is for products of decode rows with 16-bit weights, which
	// a backend may compute on 16-bit hardware by splitting each f32
	// activation into two 16-bit parts, x ≈ hi + lo (CUDA's window of rows
	// on cuBLAS): bf16's 8 significant bits twice keep x to 2⁻¹⁶ of itself
	// at worst (f16's 11 twice, after a power-of-two scale of the row, to
	// 2⁻²²), so the products' NMSE is at most 2⁻³²
	// (2.3e-10) for random weights, about 5e-12 for uniform x (ops/cuda
	// TestWindowSplitBound); 1e-9 leaves room for f32 sums in another
	// order and the SwiGLU and norm around them.
	// A backend that rounds x once to 16 bits (NMSE about 1e-6) fails it.
	TolSplit = 1e-9
)

// Tensor is one leaf of a case's graph (an input, weight or state) with its data.
type Tensor struct {
	Name  string
	Kind  graph.Kind // graph.Input, graph.Weight or graph.State
	DType graph.DType
	// Shape is as declared; a State's first extent may be graph.Dyn.
	Shape graph.Shape
	// Rows is the bound number of rows of a Dyn first extent (a slot's capacity).
	Rows int
	// Data holds the elements, each exactly representable in DType.
	Data []float64
}

// Len is the number of elements of the bound buffer.
func (t Tensor) Len() int {
	if n := t.Shape.Elems(); n >= 0 {
		return n
	}
	return t.Rows * graph.Shape(t.Shape[1:]).Elems()
}

// Case is one golden test: a graph over leaves with data, and its expected results.
type Case struct {
	// Name identifies the case: op, variant and shapes ("matmul/bf16/3x65x129").
	Name string
	// Inputs are the graph's leaves, declared on the builder in this order.
	Inputs []Tensor
	// Build adds the nodes under test over the leaves (one value per Input,
	// in order) and returns the graph's outputs.
	Build func(b *graph.Builder, in []*graph.Value) []*graph.Value
	// Ref computes the expected results in float64 from the leaves' data (in
	// Inputs order): Build's outputs, then the final contents of each State
	// leaf in Inputs order.
	Ref func(in [][]float64) [][]float64
	// Tol is the largest NMSE allowed for each float result; integer results
	// must match exactly.
	Tol float64
	// WantErr, when set, says binding or running must fail with an error
	// containing it (an error, never a panic).
	WantErr string
}

// Graph builds the case's graph.
func (c Case) Graph() (*graph.Graph, error) {
	g, _, err := c.build()
	return g, err
}

// build declares the leaves and builds the graph, returning the leaf values.
func (c Case) build() (*graph.Graph, []*graph.Value, error) {
	b := graph.NewBuilder(c.Name)
	leaves := make([]*graph.Value, len(c.Inputs))
	for i, t := range c.Inputs {
		switch t.Kind {
		case graph.Input:
			leaves[i] = b.Input(t.Name, t.DType, t.Shape...)
		case graph.Weight:
			leaves[i] = b.Weight(t.Name, t.DType, t.Shape...)
		case graph.State:
			leaves[i] = b.State(t.Name, t.DType, t.Shape...)
		default:
			return nil, nil, fmt.Errorf("case %s: leaf %s has kind %s", c.Name, t.Name, t.Kind)
		}
		if len(t.Data) != t.Len() {
			return nil, nil, fmt.Errorf("case %s: leaf %s has %d values for %d elements", c.Name, t.Name, len(t.Data), t.Len())
		}
	}
	b.Output(c.Build(b, leaves)...)
	g, err := b.Graph()
	if err != nil {
		return nil, nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	if err := g.Validate(ops.LookupOp); err != nil {
		return nil, nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	return g, leaves, nil
}

// data lists the leaves' data in Inputs order.
func (c Case) data() [][]float64 {
	d := make([][]float64, len(c.Inputs))
	for i, t := range c.Inputs {
		d[i] = t.Data
	}
	return d
}

// Check runs a case on a backend and compares it with the case's reference,
// in every variant that applies (plain, in place, unfused); a fused run is
// also compared with the unfused run on the same backend.
func Check(t testing.TB, be ops.Backend, c Case) {
	t.Helper()
	if c.WantErr != "" {
		checkError(t, be, c)
		return
	}
	want := c.Ref(c.data())
	var plain *Result
	for _, v := range []Variant{Plain, InPlace, Unfused} {
		res, err := Run(be, c, v)
		if err == ErrNotApplicable {
			continue
		}
		if err != nil {
			t.Errorf("%s (%s): %v", c.Name, v, err)
			continue
		}
		if res.Err != nil {
			t.Errorf("%s (%s): %v", c.Name, v, res.Err)
			continue
		}
		if err := match(res, want, c.Tol); err != nil {
			t.Errorf("%s (%s) against the reference: %v", c.Name, v, err)
		}
		switch v {
		case Plain:
			plain = &res
		case Unfused:
			if plain != nil {
				if err := match(res, plain.Outputs, c.Tol); err != nil {
					t.Errorf("%s: unfused against fused on %s: %v", c.Name, be.Name(), err)
				}
			}
		}
	}
}

// checkError runs an error case: it must fail with an error naming WantErr,
// not panic, and must not write outside its buffers.
func checkError(t testing.TB, be ops.Backend, c Case) {
	t.Helper()
	res, err := Run(be, c, Plain)
	if err != nil {
		t.Errorf("%s: %v", c.Name, err)
		return
	}
	switch {
	case res.Err == nil:
		t.Errorf("%s: ran without error, want one containing %q", c.Name, c.WantErr)
	case strings.Contains(res.Err.Error(), "panicked"):
		t.Errorf("%s: a panic instead of an error: %v", c.Name, res.Err)
	case !strings.Contains(res.Err.Error(), c.WantErr):
		t.Errorf("%s: error %q does not contain %q", c.Name, res.Err, c.WantErr)
	}
}

// Compare runs a case on two backends and compares their results: the
// second (be) against the first (ref) at the case's tolerance. For an error
// case both must fail.
func Compare(t testing.TB, ref, be ops.Backend, c Case) {
	t.Helper()
	a, err := Run(ref, c, Plain)
	if err != nil {
		t.Errorf("%s on %s: %v", c.Name, ref.Name(), err)
		return
	}
	b, err := Run(be, c, Plain)
	if err != nil {
		t.Errorf("%s on %s: %v", c.Name, be.Name(), err)
		return
	}
	if c.WantErr != "" {
		if a.Err == nil || b.Err == nil {
			t.Errorf("%s: want an error from both, got %s: %v, %s: %v", c.Name, ref.Name(), a.Err, be.Name(), b.Err)
		}
		return
	}
	if a.Err != nil || b.Err != nil {
		t.Errorf("%s: %s: %v; %s: %v", c.Name, ref.Name(), a.Err, be.Name(), b.Err)
		return
	}
	if err := match(b, a.Outputs, c.Tol); err != nil {
		t.Errorf("%s: %s against %s: %v", c.Name, be.Name(), ref.Name(), err)
	}
}

// NMSE is the normalized mean squared error of got against want:
// Σ(got−want)² / Σwant², or the plain Σ(got−want)² when want is all zeros.
// Entries where want is not finite are skipped (match checks them).
func NMSE(got, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			continue
		}
		d := got[i] - w
		num += d * d
		den += w * w
	}
	if den == 0 {
		return num
	}
	return num / den
}

// match compares a run's results with the expected ones: same count and
// lengths, non-finite values only where expected, integers exactly, floats
// within tol NMSE.
func match(res Result, want [][]float64, tol float64) error {
	if len(res.Outputs) != len(want) {
		return fmt.Errorf("%d results, want %d", len(res.Outputs), len(want))
	}
	for i, w := range want {
		got := res.Outputs[i]
		if len(got) != len(w) {
			return fmt.Errorf("result %d has %d elements, want %d", i, len(got), len(w))
		}
		for j := range w {
			g, e := got[j], w[j]
			switch {
			case math.IsNaN(e) && !math.IsNaN(g), math.IsInf(e, 0) && g != e:
				return fmt.Errorf("result %d[%d] = %v, want %v", i, j, g, e)
			case !math.IsNaN(e) && !math.IsInf(e, 0) && (math.IsNaN(g) || math.IsInf(g, 0)):
				return fmt.Errorf("result %d[%d] = %v, want the finite %v", i, j, g, e)
			case !res.DTypes[i].IsFloat() && g != e:
				return fmt.Errorf("result %d[%d] = %v, want %v exactly", i, j, g, e)
			}
		}
		if res.DTypes[i].IsFloat() {
			if e := NMSE(got, w); !(e <= tol) {
				k := worst(got, w)
				return fmt.Errorf("result %d: NMSE %.3g over %.3g (worst at %d: %v, want %v)", i, e, tol, k, got[k], w[k])
			}
		}
	}
	return nil
}

// worst is the index of the largest absolute difference.
func worst(got, want []float64) int {
	k, m := 0, -1.0
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > m {
			k, m = i, d
		}
	}
	return k
}
