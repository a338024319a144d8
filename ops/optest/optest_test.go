package optest

import (
	"math"
	"reflect"
	"testing"

	"github.com/reel-runtime/reel/graph"
)

// TestCasesWellFormed checks that every case builds, has a unique name, a
// reference of the right shape (or an expected error) and deterministic data.
func TestCasesWellFormed(t *testing.T) {
	a, b := Cases(), Cases()
	seen := map[string]bool{}
	for i, c := range a {
		if seen[c.Name] {
			t.Errorf("case name %s is used twice", c.Name)
		}
		seen[c.Name] = true
		if !reflect.DeepEqual(c.data(), b[i].data()) && !hasNaN(c.data()) {
			t.Errorf("%s: data differs between two calls", c.Name)
		}
		g, err := c.Graph()
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if c.WantErr != "" {
			continue
		}
		if c.Ref == nil || c.Tol < 0 {
			t.Errorf("%s: no reference or a negative tolerance", c.Name)
			continue
		}
		want := c.Ref(c.data())
		n := len(g.Outputs)
		for _, in := range c.Inputs {
			if in.Kind == graph.State {
				n++
			}
		}
		if len(want) != n {
			t.Errorf("%s: reference gives %d results, the graph %d", c.Name, len(want), n)
		}
		for j, o := range g.Outputs {
			if j < len(want) && len(want[j]) != o.Shape.Elems() {
				t.Errorf("%s: reference result %d has %d elements, output %s", c.Name, j, len(want[j]), o)
			}
		}
	}
}

func hasNaN(d [][]float64) bool {
	for _, x := range d {
		for _, v := range x {
			if math.IsNaN(v) {
				return true
			}
		}
	}
	return false
}

// TestMatch checks the comparison: NaN where a number is due, an integer
// off by one, a float error over the bound, and a clean pass.
func TestMatch(t *testing.T) {
	f := []graph.DType{graph.F32}
	want := [][]float64{{1, 2, 3}}
	for _, tc := range []struct {
		name string
		res  Result
		ok   bool
	}{
		{"equal", Result{Outputs: [][]float64{{1, 2, 3}}, DTypes: f}, true},
		{"NaN", Result{Outputs: [][]float64{{1, math.NaN(), 3}}, DTypes: f}, false},
		{"Inf", Result{Outputs: [][]float64{{1, 2, math.Inf(1)}}, DTypes: f}, false},
		{"off", Result{Outputs: [][]float64{{1, 2, 3.001}}, DTypes: f}, false},
		{"close", Result{Outputs: [][]float64{{1, 2, 3 + 1e-9}}, DTypes: f}, true},
		{"int", Result{Outputs: [][]float64{{1, 2, 3 + 1e-9}}, DTypes: []graph.DType{graph.I32}}, false},
		{"short", Result{Outputs: [][]float64{{1, 2}}, DTypes: f}, false},
		{"missing", Result{}, false},
	} {
		if err := match(tc.res, want, TolF32); (err == nil) != tc.ok {
			t.Errorf("%s: match gave %v", tc.name, err)
		}
	}
	if err := match(Result{Outputs: [][]float64{{math.NaN()}}, DTypes: f}, [][]float64{{math.NaN()}}, 0); err != nil {
		t.Errorf("expected NaN: %v", err)
	}
}

// TestEncodeRoundTrip checks that case data survives the trip to bytes.
func TestEncodeRoundTrip(t *testing.T) {
	m := newMaker("round trip")
	for _, dt := range []graph.DType{graph.F32, graph.BF16, graph.F16} {
		x := m.tensor("x", graph.Input, dt, 100, 257)
		raw, err := Encode(dt, x.Data)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decode(dt, raw)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, x.Data) {
			t.Errorf("%s: data changed in the round trip", dt)
		}
	}
}
