package graph

import (
	"errors"
	"strings"
	"testing"
)

// wantErr fails unless err is non-nil and its message holds every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestShapeMismatchNamesNodeScopeAndShapes(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 2, 3)
	y := b.Weight("y", F32, 3, 2)
	one(b, "ew", nil, x, x) // node #0, fine
	pop := b.Push("layer %d", 7)
	pop2 := b.Push("attn")
	out := one(b, "ew", nil, x, y)
	pop2()
	pop()
	if out.ID != -1 {
		t.Errorf("output of a failed node has ID %d, want a placeholder", out.ID)
	}
	err := b.Err()
	wantErr(t, err, "node #1 ew", "(layer 7 / attn)", "x:f32[2 3]", "y:f32[3 2]")
	_, gerr := b.Graph()
	wantErr(t, gerr, "graph g", "node #1 ew", "[2 3]", "[3 2]")
	if !errors.Is(gerr, err) {
		t.Errorf("Graph error %v does not wrap the builder's %v", gerr, err)
	}
}

func TestNilInput(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 4)
	one(b, "ew", nil, x, nil)
	wantErr(t, b.Err(), "node #0 ew", "input 1 is nil")
}

func TestValueFromAnotherBuilder(t *testing.T) {
	other := NewBuilder("other")
	o := other.Input("x", F32, 4)
	oo := one(other, "ew", nil, o)

	for _, tc := range []struct {
		name string
		v    *Value
	}{
		{"leaf", o},
		{"temp", oo},
		{"placeholder", placeholder()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("g")
			x := b.Input("x", F32, 4) // same ID and name as o: must still be told apart
			one(b, "ew", nil, x)
			one(b, "ew", nil, x, tc.v)
			wantErr(t, b.Err(), "node #1 ew", "input 1", "not a value of this graph")
		})
	}
	b := NewBuilder("g")
	b.Input("x", F32, 4)
	b.Output(o)
	wantErr(t, b.Err(), "output", "not a value of this graph")
}

func TestRedeclaredLeaf(t *testing.T) {
	b := NewBuilder("g")
	w := b.Weight("w", BF16, 4, 8)
	if again := b.Weight("w", BF16, 4, 8); again != w {
		t.Fatalf("redeclaring w with the same spec gave a new value %v", again)
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	if n := len(b.g.Values); n != 1 {
		t.Fatalf("graph holds %d values after declaring one twice", n)
	}
	for _, tc := range []struct {
		name    string
		declare func(b *Builder) *Value
		parts   []string
	}{
		{"shape", func(b *Builder) *Value { return b.Weight("w", BF16, 8, 4) }, []string{`"w"`, "[8 4]", "[4 8]"}},
		{"rank", func(b *Builder) *Value { return b.Weight("w", BF16, 32) }, []string{`"w"`, "[32]", "[4 8]"}},
		{"dtype", func(b *Builder) *Value { return b.Weight("w", F32, 4, 8) }, []string{`"w"`, "f32", "bf16"}},
		{"kind", func(b *Builder) *Value { return b.Input("w", BF16, 4, 8) }, []string{`"w"`, "input", "weight"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("g")
			b.Weight("w", BF16, 4, 8)
			pop := b.Push("embed")
			v := tc.declare(b)
			pop()
			if v.ID != -1 {
				t.Errorf("conflicting declaration gave value %v, want a placeholder", v)
			}
			wantErr(t, b.Err(), append(tc.parts, "embed")...)
		})
	}
}

func TestLeafErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		declare func(b *Builder)
		parts   []string
	}{
		{"no name", func(b *Builder) { b.Input("", F32, 2) }, []string{"without a name"}},
		{"invalid dtype", func(b *Builder) { b.Input("x", Invalid, 2) }, []string{`"x"`, "invalid dtype"}},
		{"unknown dtype", func(b *Builder) { b.Weight("x", DType(200), 2) }, []string{`"x"`, "dtype(200)"}},
		{"negative extent", func(b *Builder) { b.Weight("x", F32, 2, -3) }, []string{`"x"`, "negative", "extent 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("g")
			tc.declare(b)
			wantErr(t, b.Err(), tc.parts...)
		})
	}
}

func TestDynOnlyInStateFirstExtent(t *testing.T) {
	b := NewBuilder("g")
	s := b.State("kv", F32, Dyn, 16)
	if b.Err() != nil {
		t.Fatalf("a state with a Dyn first extent: %v", b.Err())
	}
	if s.Shape.String() != "[? 16]" || s.Bytes() != -1 || s.Shape.Elems() != -1 {
		t.Errorf("state %v: shape %s, bytes %d, elems %d", s, s.Shape, s.Bytes(), s.Shape.Elems())
	}
	for _, tc := range []struct {
		name    string
		declare func(b *Builder)
	}{
		{"state second extent", func(b *Builder) { b.State("s", F32, 4, Dyn) }},
		{"input", func(b *Builder) { b.Input("s", F32, Dyn, 4) }},
		{"weight", func(b *Builder) { b.Weight("s", F32, Dyn, 4) }},
		{"state other negative", func(b *Builder) { b.State("s", F32, -2, 4) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("g")
			tc.declare(b)
			wantErr(t, b.Err(), `"s"`, "Dyn")
		})
	}
}

func TestStickyFirstError(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 2)
	y := b.Input("y", F32, 3)
	a := one(b, "ew", nil, x)
	one(b, "ew", nil, x, y) // the first error
	first := b.Err()
	wantErr(t, first, "node #1 ew")

	// Everything after adds nothing and changes nothing.
	nv, nn := len(b.g.Values), len(b.g.Nodes)
	if v := one(b, "ew", nil, a); v.ID != -1 {
		t.Errorf("Apply after an error gave %v, want a placeholder", v)
	}
	if v := b.Input("z", F32, 1); v.ID != -1 {
		t.Errorf("Input after an error gave %v, want a placeholder", v)
	}
	one(b, "ew", nil, x, nil)
	b.Fail(errors.New("second"))
	b.Output(a)
	if len(b.g.Values) != nv || len(b.g.Nodes) != nn || len(b.g.Outputs) != 0 {
		t.Errorf("builder grew after its first error: %d values, %d nodes, %d outputs", len(b.g.Values), len(b.g.Nodes), len(b.g.Outputs))
	}
	if b.Err() != first {
		t.Errorf("error changed from %v to %v", first, b.Err())
	}
	g, err := b.Graph()
	if g != nil || !errors.Is(err, first) {
		t.Errorf("Graph() = %v, %v; want nil and the first error", g, err)
	}
}

func TestFailAddsScope(t *testing.T) {
	b := NewBuilder("g")
	b.Fail(nil)
	if b.Err() != nil {
		t.Fatalf("Fail(nil) set %v", b.Err())
	}
	pop := b.Push("layer %d", 2)
	cause := errors.New("unsupported pattern")
	b.Fail(cause)
	pop()
	wantErr(t, b.Err(), "layer 2: unsupported pattern")
	if !errors.Is(b.Err(), cause) {
		t.Error("Fail does not wrap its error")
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *Builder, x, s *Value)
		parts []string
	}{
		{"rule panics", func(b *Builder, x, _ *Value) { one(b, "boom", nil, x) }, []string{"node #0 boom", "panicked", "boom rule"}},
		{"output count", func(b *Builder, x, _ *Value) { b.Apply(op("split"), tAttrs{K: 2}, 3, x) }, []string{"node #0 split", "makes 2 outputs", "takes 3"}},
		{"write to non-state", func(b *Builder, x, _ *Value) { b.Apply(op("liar"), nil, 0, x) }, []string{"node #0 liar", "writes input 0", "not a state"}},
		{"write out of range", func(b *Builder, _, _ *Value) { b.Apply(op("liar"), nil, 0) }, []string{"node #0 liar", "writes input 0"}},
		{"invalid output", func(b *Builder, x, _ *Value) { one(b, "bad", nil, x) }, []string{"node #0 bad", "output 0", "invalid"}},
		{"dyn output", func(b *Builder, _, s *Value) { one(b, "ew", nil, s) }, []string{"node #0 ew", "output 0", "[? 4]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("g")
			x := b.Input("x", F32, 4)
			s := b.State("s", F32, Dyn, 4)
			tc.build(b, x, s)
			wantErr(t, b.Err(), tc.parts...)
		})
	}
}

// TestFailedNodeAddsNothing: when a later output of a node is invalid, the
// earlier ones must not be returned or left in the graph.
func TestFailedNodeAddsNothing(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 2)
	outs := b.Apply(op("bad2"), nil, 2, x)
	wantErr(t, b.Err(), "node #0 bad2", "output 1", "[2 ?]")
	for i, o := range outs {
		if o.ID != -1 {
			t.Errorf("output %d of a failed node is %v, want a placeholder", i, o)
		}
	}
	if len(b.g.Values) != 1 || len(b.g.Nodes) != 0 {
		t.Errorf("failed node left %d values, %d nodes", len(b.g.Values), len(b.g.Nodes))
	}
}

func TestEmptyGraph(t *testing.T) {
	b := NewBuilder("g")
	b.Input("x", F32, 1)
	if _, err := b.Graph(); !errors.Is(err, ErrEmpty) {
		t.Errorf("Graph() of a builder without nodes: %v, want ErrEmpty", err)
	}
}

func TestBuildRecordsNodes(t *testing.T) {
	b := NewBuilder("g")
	x := b.Input("x", F32, 2, 4)
	s := b.State("s", F32, Dyn, 4)
	pop := b.Push("layer %d", 0)
	inner := b.Push("mlp")
	y := b.Label(one(b, "ew", tAttrs{K: 1}, x, x), "y")
	inner()
	parts := b.Apply(op("split"), tAttrs{K: 2}, 2, y)
	b.Apply(op("write"), nil, 0, s, parts[1])
	pop()
	if b.Scope() != "" {
		t.Errorf("scope %q after popping everything", b.Scope())
	}
	b.Label(x, "renamed") // not a temp: unchanged
	b.Output(parts[0])
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(testOp); err != nil {
		t.Fatal(err)
	}
	if x.Name != "x" || y.Name != "y" {
		t.Errorf("labels: x is %q, y is %q", x.Name, y.Name)
	}
	if len(g.Nodes) != 3 || len(g.Values) != 5 {
		t.Fatalf("%d nodes, %d values; want 3, 5", len(g.Nodes), len(g.Values))
	}
	n0, n1, n2 := g.Nodes[0], g.Nodes[1], g.Nodes[2]
	if n0.Scope != "layer 0 / mlp" || n1.Scope != "layer 0" || n2.Scope != "layer 0" {
		t.Errorf("scopes %q, %q, %q", n0.Scope, n1.Scope, n2.Scope)
	}
	if n0.String() != "#0 ew (layer 0 / mlp)" {
		t.Errorf("node string %q", n0.String())
	}
	if y.Producer != n0 || parts[0].Producer != n1 || parts[1].Producer != n1 || y.Kind != Temp {
		t.Error("producers are not recorded")
	}
	if len(n2.Writes) != 1 || n2.Writes[0] != s || len(n2.Outputs) != 0 {
		t.Errorf("write node: writes %v, outputs %v", n2.Writes, n2.Outputs)
	}
	if g.Lookup("s") != s || g.Lookup("x") != x || g.Lookup("y") != nil {
		t.Error("Lookup finds the wrong values")
	}
	if ins := g.OfKind(Input); len(ins) != 1 || ins[0] != x {
		t.Errorf("OfKind(Input) = %v", ins)
	}
	uses := g.Uses()
	if uses[x.ID] != 2 || uses[y.ID] != 1 || uses[parts[0].ID] != 1 || uses[s.ID] != 1 {
		t.Errorf("uses %v", uses)
	}
	if !g.IsOutput(parts[0]) || g.IsOutput(parts[1]) {
		t.Error("IsOutput is wrong")
	}
}
