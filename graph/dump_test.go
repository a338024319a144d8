package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var dumpers = []struct {
	name  string
	write func(io.Writer, *Graph) error
}{
	{"text", WriteText},
	{"dot", WriteDOT},
	{"json", WriteJSON},
}

func dump(t *testing.T, write func(io.Writer, *Graph) error, g *Graph) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, g); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteTextExact(t *testing.T) {
	g := validGraph(t)
	want := "graph v: 6 values, 4 nodes\n" +
		"  input  %0 x:f32[2 4]\n" +
		"  state  %1 s:f32[? 4]\n" +
		"  #0    ew             %2 t2:f32[2 4] = (%0, %0)  @ layer 0\n" +
		"  #1    write           = (%1, %2) writes %1  @ layer 0\n" +
		"  #2    read           %3 t3:f32[1] = (%1)  @ layer 0\n" +
		"  #3    split          %4 t4:f32[2 4], %5 t5:f32[2 4] = (%2) {K:2 F:0}\n" +
		"  outputs: %3, %2\n"
	if got := string(dump(t, WriteText, g)); got != want {
		t.Errorf("text dump:\n%s\nwant:\n%s", got, want)
	}
}

func TestDumpsAreStable(t *testing.T) {
	for _, d := range dumpers {
		t.Run(d.name, func(t *testing.T) {
			g := validGraph(t)
			first := dump(t, d.write, g)
			if again := dump(t, d.write, g); !bytes.Equal(first, again) {
				t.Errorf("two dumps of one graph differ:\n%s\n---\n%s", first, again)
			}
			if other := dump(t, d.write, validGraph(t)); !bytes.Equal(first, other) {
				t.Errorf("dumps of two builds of one graph differ:\n%s\n---\n%s", first, other)
			}
		})
	}
}

// jsonGraph mirrors the JSON dump with plain types, as an outside reader
// (a script, another tool) would decode it.
type jsonGraph struct {
	Name   string `json:"name"`
	Values []struct {
		ID       int    `json:"id"`
		Name     string `json:"name"`
		DType    string `json:"dtype"`
		Shape    []int  `json:"shape"`
		Kind     string `json:"kind"`
		Producer *int   `json:"producer"`
	} `json:"values"`
	Nodes []struct {
		ID      int             `json:"id"`
		Op      string          `json:"op"`
		Scope   string          `json:"scope"`
		Attrs   json.RawMessage `json:"attrs"`
		Inputs  []int           `json:"inputs"`
		Outputs []int           `json:"outputs"`
		Writes  []int           `json:"writes"`
	} `json:"nodes"`
	Outputs []int `json:"outputs"`
}

func valueIDs(vs []*Value) []int {
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = v.ID
	}
	return out
}

func TestJSONRoundTrip(t *testing.T) {
	g := validGraph(t)
	data := dump(t, WriteJSON, g)
	var j jsonGraph
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("JSON dump does not parse: %v\n%s", err, data)
	}
	if j.Name != g.Name || len(j.Values) != len(g.Values) || len(j.Nodes) != len(g.Nodes) {
		t.Fatalf("name %q, %d values, %d nodes", j.Name, len(j.Values), len(j.Nodes))
	}
	for i, v := range g.Values {
		jv := j.Values[i]
		dt, err := ParseDType(jv.DType)
		if jv.ID != v.ID || jv.Name != v.Name || err != nil || dt != v.DType || jv.Kind != v.Kind.String() || !v.Shape.Equal(jv.Shape) {
			t.Errorf("value %d: JSON %+v, graph %v %s", i, jv, v, v.Kind)
		}
		switch {
		case v.Producer == nil && jv.Producer != nil:
			t.Errorf("value %d: JSON producer %d, graph none", i, *jv.Producer)
		case v.Producer != nil && (jv.Producer == nil || *jv.Producer != v.Producer.ID):
			t.Errorf("value %d: JSON producer %v, graph %d", i, jv.Producer, v.Producer.ID)
		}
	}
	for i, n := range g.Nodes {
		jn := j.Nodes[i]
		if jn.ID != n.ID || jn.Op != n.Op || jn.Scope != n.Scope ||
			!slices.Equal(jn.Inputs, valueIDs(n.Inputs)) || !slices.Equal(jn.Outputs, valueIDs(n.Outputs)) ||
			!slices.Equal(jn.Writes, valueIDs(n.Writes)) {
			t.Errorf("node %d: JSON %+v, graph %v", i, jn, n)
		}
	}
	var attrs bytes.Buffer
	if err := json.Compact(&attrs, j.Nodes[3].Attrs); err != nil || attrs.String() != `{"K":2,"F":0}` {
		t.Errorf("attrs of #3: %s (%v)", j.Nodes[3].Attrs, err)
	}
	if j.Nodes[0].Attrs != nil {
		t.Errorf("nil attrs written as %s", j.Nodes[0].Attrs)
	}
	if !slices.Equal(j.Outputs, valueIDs(g.Outputs)) {
		t.Errorf("outputs %v, want %v", j.Outputs, valueIDs(g.Outputs))
	}
}

func TestDOTHasAnEdgePerInput(t *testing.T) {
	g := validGraph(t)
	dot := string(dump(t, WriteDOT, g))
	if !strings.HasPrefix(dot, "digraph \"v\" {\n") || !strings.HasSuffix(dot, "}\n") {
		t.Fatalf("not a digraph:\n%s", dot)
	}
	lines := strings.Split(dot, "\n")
	count := func(s string) int {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), s) {
				n++
			}
		}
		return n
	}
	edges, want := 0, 0
	for _, l := range lines {
		if strings.Contains(l, " -> ") {
			edges++
		}
	}
	for _, n := range g.Nodes {
		if c := count(fmt.Sprintf("n%d [shape=box", n.ID)); c != 1 {
			t.Errorf("node %d declared %d times", n.ID, c)
		}
		for _, v := range n.Inputs {
			from := fmt.Sprintf("v%d", v.ID)
			if v.Producer != nil {
				from = fmt.Sprintf("n%d", v.Producer.ID)
			}
			edge := fmt.Sprintf("%s -> n%d [label=%q];", from, n.ID, v.DType.String()+v.Shape.String())
			if count(edge) < 1 {
				t.Errorf("no edge %s", edge)
			}
			want++
		}
		for _, v := range n.Writes {
			if count(fmt.Sprintf("n%d -> v%d [style=dashed", n.ID, v.ID)) != 1 {
				t.Errorf("no write edge from node %d to %s", n.ID, v)
			}
			want++
		}
	}
	for _, k := range []Kind{Input, Weight, State} {
		for _, v := range g.OfKind(k) {
			if count(fmt.Sprintf("v%d [shape=ellipse", v.ID)) != 1 {
				t.Errorf("leaf %s not declared once", v)
			}
		}
	}
	want += len(g.Outputs)
	if edges != want {
		t.Errorf("%d edges, want %d (one per input, write and output):\n%s", edges, want, dot)
	}
	if !strings.Contains(dot, `label="ew"`) || !strings.Contains(dot, `label="split\n{K:2 F:0}"`) {
		t.Errorf("node labels lack op or attributes:\n%s", dot)
	}
	// The nodes of scope "layer 0", and the leaves they read first, are in
	// its cluster; the split, of no scope, is outside.
	i := strings.Index(dot, "  subgraph cluster_")
	j := strings.Index(dot, "\n  }\n")
	if i < 0 || j < i {
		t.Fatalf("no cluster:\n%s", dot)
	}
	cluster := dot[i:j]
	for _, s := range []string{`label="layer 0";`, "v0 [shape=ellipse", "v1 [shape=ellipse", "n0 [shape=box", "n1 [shape=box", "n2 [shape=box"} {
		if !strings.Contains(cluster, s) {
			t.Errorf("cluster of layer 0 lacks %s:\n%s", s, cluster)
		}
	}
	if strings.Contains(cluster, "n3 [") {
		t.Errorf("the split is in layer 0's cluster:\n%s", cluster)
	}
}

// TestDOTFanOut: a leaf read by more than DOTFanOut nodes has no edges; its
// readers name it, and its own label says why.
func TestDOTFanOut(t *testing.T) {
	b := NewBuilder("fan")
	c := b.Input("call", I32, 8)
	x := b.Input("x", F32, 2, 4)
	for i := range DOTFanOut + 1 {
		pop := b.Push("layer %d", i)
		x = one(b, "ew", nil, x, x)
		x = one(b, "ew", nil, x, b.Input(fmt.Sprintf("c%d", i), F32, 2, 4))
		pop()
	}
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	// Give the call record DOTFanOut+1 readers, as rope and attention
	// nodes read it in a model (the test ops take no extra input: it is
	// added after the build).
	for _, n := range g.Nodes[:DOTFanOut+1] {
		n.Inputs = append(n.Inputs, c)
	}
	dot := string(dump(t, WriteDOT, g))
	if strings.Contains(dot, fmt.Sprintf("v%d -> ", c.ID)) {
		t.Errorf("edges from the call record:\n%s", dot)
	}
	if got := strings.Count(dot, `\nreads call"`); got != DOTFanOut+1 {
		t.Errorf("%d labels name the call record, want %d:\n%s", got, DOTFanOut+1, dot)
	}
	if !strings.Contains(dot, fmt.Sprintf(`read by %d nodes: not drawn`, DOTFanOut+1)) {
		t.Errorf("the call record's label does not say why it has no edges:\n%s", dot)
	}
	if strings.Count(dot, "subgraph cluster_") != DOTFanOut+1 {
		t.Errorf("want a cluster per layer:\n%s", dot)
	}
	// Graphviz reads it, where installed.
	if path, err := exec.LookPath("dot"); err == nil {
		cmd := exec.Command(path, "-Tsvg")
		cmd.Stdin = strings.NewReader(dot)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("dot: %v\n%s", err, out)
		}
	}
}

// failWriter fails after n bytes.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, io.ErrShortWrite
	}
	w.n -= len(p)
	return len(p), nil
}

func TestDumpsReportWriteErrors(t *testing.T) {
	g := validGraph(t)
	for _, d := range dumpers {
		for _, n := range []int{0, 10, 100} {
			if err := d.write(&failWriter{n: n}, g); err == nil {
				t.Errorf("%s dump into a writer failing after %d bytes: no error", d.name, n)
			}
		}
	}
}

func TestAttrString(t *testing.T) {
	if s := AttrString(nil); s != "" {
		t.Errorf("nil attrs: %q", s)
	}
	if s := AttrString(tAttrs{K: 3, F: 0.5}); s != "{K:3 F:0.5}" {
		t.Errorf("struct attrs: %q", s)
	}
	if s := AttrString(Shape{2, Dyn}); s != "[2 ?]" {
		t.Errorf("Stringer attrs: %q", s)
	}
}
