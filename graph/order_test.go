package graph

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ids lists the IDs of nodes.
func ids(ns []*Node) []int {
	out := make([]int, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// handGraph makes a graph by hand, as a rewriting pass might: node i is an
// "ew" node over the outputs of the nodes in reads[i] (over the input x when
// empty), and has one f32[1] output. Node IDs need not be topological.
func handGraph(reads [][]int) *Graph {
	g := &Graph{Name: "hand"}
	x := &Value{ID: 0, Name: "x", DType: F32, Shape: Shape{1}, Kind: Input}
	g.Values = append(g.Values, x)
	for i := range reads {
		n := &Node{ID: i, Op: "ew"}
		v := &Value{ID: len(g.Values), Name: "t", DType: F32, Shape: Shape{1}, Kind: Temp, Producer: n}
		n.Outputs = []*Value{v}
		g.Values = append(g.Values, v)
		g.Nodes = append(g.Nodes, n)
	}
	for i, rs := range reads {
		n := g.Nodes[i]
		if len(rs) == 0 {
			n.Inputs = []*Value{x}
		}
		for _, r := range rs {
			n.Inputs = append(n.Inputs, g.Nodes[r].Outputs[0])
		}
	}
	return g
}

// refOrder is the order Order promises, computed the slow way: repeatedly
// the lowest-numbered node whose dependencies have all been taken.
func refOrder(deps [][]int) []int {
	done := make([]bool, len(deps))
	var out []int
	for len(out) < len(deps) {
		found := false
		for i, ds := range deps {
			if done[i] {
				continue
			}
			if !slices.ContainsFunc(ds, func(d int) bool { return !done[d] }) {
				done[i], found = true, true
				out = append(out, i)
				break
			}
		}
		if !found {
			return nil // a cycle
		}
	}
	return out
}

// sorted returns a sorted copy.
func sorted(xs []int) []int {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return ys
}

func TestDepsOfStateAccesses(t *testing.T) {
	b := NewBuilder("g")
	s := b.State("s", F32, Dyn, 4)
	u := b.State("u", F32, 8, 4)
	x := b.Input("x", F32, 1, 4)
	r0 := one(b, "read", nil, s)               // #0
	one(b, "read", nil, s, x)                  // #1
	b.Apply(op("write"), nil, 0, s, x)         // #2: after both reads
	r3 := one(b, "read", nil, s)               // #3: after the write
	one(b, "ew", nil, x)                       // #4: independent
	b.Apply(op("write"), nil, 0, u, x)         // #5: another state: independent of s
	b.Apply(op("write"), nil, 0, s, x, r3, r0) // #6: after write #2, read #3 and the producers
	one(b, "read", nil, u, s)                  // #7: after #5 (u) and #6 (s)
	b.Apply(op("write"), nil, 0, s, x)         // #8: after #6 and #7
	b.Apply(op("write"), nil, 0, s, x)         // #9: right after #8 (write after write)
	if _, err := b.Graph(); err != nil {
		t.Fatal(err)
	}
	want := [][]int{
		0: nil,
		1: nil,
		2: {0, 1},
		3: {2},
		4: nil,
		5: nil,
		6: {0, 2, 3},
		7: {5, 6},
		8: {6, 7},
		9: {8},
	}
	deps := b.g.Deps()
	for i := range want {
		if got := sorted(deps[i]); !slices.Equal(got, want[i]) {
			t.Errorf("node #%d deps %v, want %v", i, got, want[i])
		}
	}
	order, err := b.g.Order()
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(order); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Errorf("order %v, want build order", got)
	}
}

func TestOrderTopologicalAndLowestFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads [][]int
		want  []int
	}{
		{"independent keep build order", [][]int{{}, {}, {}, {}, {}}, []int{0, 1, 2, 3, 4}},
		{"consumer built first", [][]int{{1}, {}}, []int{1, 0}},
		{"independent node goes first", [][]int{{2}, {}, {}}, []int{1, 2, 0}},
		{"chain reversed", [][]int{{1}, {2}, {3}, {}}, []int{3, 2, 1, 0}},
		{"diamond", [][]int{{3}, {0}, {0}, {}, {1, 2}}, []int{3, 0, 1, 2, 4}},
		{"lowest ready wins", [][]int{{4}, {}, {0}, {1}, {}}, []int{1, 3, 4, 0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := handGraph(tc.reads)
			if err := g.Validate(testOp); err != nil {
				t.Fatal(err)
			}
			order, err := g.Order()
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(order); !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOrderRandomDAGs checks Order against the slow reference on random
// hand-made DAGs whose node IDs are shuffled, and that it is deterministic.
func TestOrderRandomDAGs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(30)
		perm := rng.Perm(n) // node perm[k] is the k-th in some topological order
		reads := make([][]int, n)
		for k := range n {
			for j := range k {
				if rng.IntN(4) == 0 {
					reads[perm[k]] = append(reads[perm[k]], perm[j])
				}
			}
		}
		g := handGraph(reads)
		want := refOrder(g.Deps())
		for range 2 {
			order, err := g.Order()
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if got := ids(order); !slices.Equal(got, want) {
				t.Fatalf("trial %d, reads %v: order %v, want %v", trial, reads, got, want)
			}
		}
		pos := make([]int, n)
		for i, id := range want {
			pos[id] = i
		}
		for i, rs := range reads {
			for _, r := range rs {
				if pos[r] >= pos[i] {
					t.Fatalf("trial %d: node %d comes before its producer %d", trial, i, r)
				}
			}
		}
	}
}

func TestOrderCycle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads [][]int
	}{
		{"two nodes", [][]int{{1}, {0}}},
		{"three nodes and a bystander", [][]int{{}, {3}, {1}, {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := handGraph(tc.reads)
			_, err := g.Order()
			wantErr(t, err, "graph hand", "cycle")
			if !strings.Contains(err.Error(), " ew") {
				t.Errorf("error %q names no node", err)
			}
			wantErr(t, g.Validate(testOp), "cycle")
		})
	}
	t.Run("node reads its own output", func(t *testing.T) {
		g := handGraph([][]int{{}, {1}})
		if _, err := g.Order(); err == nil {
			t.Fatal("Order accepts a node that reads its own output")
		}
		wantErr(t, g.Validate(testOp), "#1 ew")
	})
}
