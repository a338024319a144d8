package graph

import (
	"testing"
)

// validGraph builds a small graph that passes Validate:
//
//	#0 ew(x, x) -> y       @ layer 0
//	#1 write(s, y)         @ layer 0
//	#2 read(s) -> r        @ layer 0
//	#3 split{K:2}(y) -> p, q
//	outputs r, y
func validGraph(t *testing.T) *Graph {
	t.Helper()
	b := NewBuilder("v")
	x := b.Input("x", F32, 2, 4)
	s := b.State("s", F32, Dyn, 4)
	pop := b.Push("layer 0")
	y := one(b, "ew", nil, x, x)
	b.Apply(op("write"), nil, 0, s, y)
	r := one(b, "read", nil, s)
	pop()
	b.Apply(op("split"), tAttrs{K: 2}, 2, y)
	b.Output(r, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(testOp); err != nil {
		t.Fatalf("the uncorrupted graph: %v", err)
	}
	return g
}

func TestValidateDetectsCorruption(t *testing.T) {
	// Values: 0 x, 1 s, 2 y, 3 r, 4 p, 5 q.
	for _, tc := range []struct {
		name    string
		corrupt func(g *Graph)
		parts   []string
	}{
		{"value ID", func(g *Graph) { g.Values[1].ID = 7 }, []string{"graph v", "value 1", "ID mismatch"}},
		{"nil value", func(g *Graph) { g.Values[3] = nil }, []string{"value 3", "ID mismatch"}},
		{"temp without producer", func(g *Graph) { g.Values[2].Producer = nil }, []string{"temp", "has no producer"}},
		{"leaf with producer", func(g *Graph) { g.Values[0].Producer = g.Nodes[0] }, []string{"input x:f32[2 4]", "produced by #0 ew (layer 0)"}},
		{"node ID", func(g *Graph) { g.Nodes[1].ID = 0 }, []string{"node 1", "ID mismatch"}},
		{"nil node", func(g *Graph) { g.Nodes[2] = nil }, []string{"node 2", "ID mismatch"}},
		{"unknown op", func(g *Graph) { g.Nodes[0].Op = "nope" }, []string{"#0 nope (layer 0)", `unknown op "nope"`}},
		{"foreign input", func(g *Graph) {
			g.Nodes[0].Inputs[1] = &Value{ID: 0, Name: "x", DType: F32, Shape: Shape{2, 4}, Kind: Input}
		}, []string{"#0 ew (layer 0)", "input 1 is not in the graph"}},
		{"nil input", func(g *Graph) { g.Nodes[2].Inputs[0] = nil }, []string{"#2 read", "input 0 is not in the graph"}},
		{"rule fails", func(g *Graph) { g.Nodes[0].Inputs[1] = g.Values[1] }, []string{"#0 ew (layer 0)", "x:f32[2 4]", "s:f32[? 4]"}},
		{"rule panics", func(g *Graph) { g.Nodes[2].Op = "boom" }, []string{"#2 boom", "panicked"}},
		{"bad attrs", func(g *Graph) { g.Nodes[3].Attrs = nil }, []string{"#3 split", "tAttrs"}},
		{"extra output", func(g *Graph) {
			v := &Value{ID: len(g.Values), Name: "extra", DType: F32, Shape: Shape{1}, Producer: g.Nodes[2]}
			g.Values = append(g.Values, v)
			g.Nodes[2].Outputs = append(g.Nodes[2].Outputs, v)
		}, []string{"#2 read", "rule gives 1 outputs, node has 2"}},
		{"output of another node", func(g *Graph) { g.Nodes[2].Outputs[0] = g.Values[2] }, []string{"#2 read", "output 0 is not produced by it"}},
		{"output not in graph", func(g *Graph) {
			g.Nodes[2].Outputs[0] = &Value{ID: 3, Name: "r", DType: F32, Shape: Shape{1}, Producer: g.Nodes[2]}
		}, []string{"#2 read", "output 0 is not produced by it"}},
		{"producer outside the graph", func(g *Graph) {
			g.Values[3].Producer = &Node{ID: 2, Op: "read", Inputs: g.Nodes[2].Inputs}
		}, []string{"#2 read", "output 0 is not produced by it"}},
		{"output shape", func(g *Graph) { g.Values[3].Shape = Shape{2} }, []string{"#2 read", "output 0 is f32[2], the rule says f32[1]"}},
		{"output dtype", func(g *Graph) { g.Values[3].DType = I32 }, []string{"#2 read", "output 0 is i32[1], the rule says f32[1]"}},
		{"missing write", func(g *Graph) { g.Nodes[1].Writes = nil }, []string{"#1 write (layer 0)", "rule writes 1 states, node 0"}},
		{"wrong write", func(g *Graph) { g.Nodes[1].Writes[0] = g.Values[0] }, []string{"#1 write", "write 0 is not the state input"}},
		{"extra write", func(g *Graph) { g.Nodes[2].Writes = []*Value{g.Values[1]} }, []string{"#2 read", "rule writes 0 states, node 1"}},
		{"graph output not in graph", func(g *Graph) {
			g.Outputs = append(g.Outputs, &Value{ID: 0, Name: "ghost", DType: F32, Shape: Shape{1}})
		}, []string{"output ghost:f32[1] is not in the graph"}},
		{"nil graph output", func(g *Graph) { g.Outputs[0] = nil }, []string{"output <nil> is not in the graph"}},
		{"cycle", func(g *Graph) { g.Nodes[1].Inputs[1] = g.Values[3] }, []string{"graph v", "cycle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := validGraph(t)
			tc.corrupt(g)
			wantErr(t, g.Validate(testOp), tc.parts...)
		})
	}
}

// TestValidateProducedOnce covers corruptions where a temp's producer claim
// and the node's outputs disagree in ways the per-node checks do not see.
func TestValidateProducedOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(g *Graph)
	}{
		{"orphan temp claims a producer", func(g *Graph) {
			g.Values = append(g.Values, &Value{ID: len(g.Values), Name: "orphan", DType: F32, Shape: Shape{1}, Producer: g.Nodes[2]})
		}},
		{"one temp twice among a node's outputs", func(g *Graph) { g.Nodes[3].Outputs[1] = g.Nodes[3].Outputs[0] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := validGraph(t)
			tc.corrupt(g)
			if err := g.Validate(testOp); err == nil {
				t.Fatal("Validate accepts a temp that is not exactly one output of its producer")
			}
		})
	}
}
