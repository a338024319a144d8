package planner

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

func build(t *testing.T, f func(b *graph.Builder)) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("t")
	f(b)
	g, err := b.Graph()
	require.NoError(t, err)
	return g
}

// chainGraph: y = silu(sigmoid(x) ⊙ x) with a state written after it.
func chainGraph(t *testing.T) *graph.Graph {
	return build(t, func(b *graph.Builder) {
		x := b.Input("x", graph.F32, 2, 8)
		s := b.State("s", graph.F32, 2, 8)
		y := ops.SiLU(b, ops.Mul(b, ops.Sigmoid(b, x), x))
		ops.Store(b, y, s)
		b.Output(y)
	})
}

func TestValidatePass(t *testing.T) {
	g := chainGraph(t)
	s, err := Validate{}.Run(newPlanned(g, Options{}))
	require.NoError(t, err)
	require.Equal(t, "ok: 4 nodes, 5 values (1 inputs, 0 weights, 1 states, 3 temps), 1 outputs", s)
	g.Nodes[2].Op = "scale" // silu's node relabelled: scale wants ScaleAttrs
	_, err = Validate{}.Run(newPlanned(g, Options{}))
	require.ErrorContains(t, err, "scale")
}

func TestFusePass(t *testing.T) {
	g := chainGraph(t)
	p := newPlanned(g, Options{Fuse: true})
	s, err := Fuse{Off: true}.Run(p)
	require.NoError(t, err)
	require.Equal(t, "off", s)
	require.Same(t, g, p.Graph)

	s, err = Fuse{Rules: []Rule{ChainRule{}}}.Run(p)
	require.NoError(t, err)
	require.Equal(t, "4 -> 2 nodes: elementwise_chain 1 (3 nodes)", s)
	require.Len(t, p.Graph.Nodes, 2)
	chain, store := p.Graph.Nodes[0], p.Graph.Nodes[1]
	require.Equal(t, "elementwise_chain", chain.Op)
	require.Equal(t, "s0=sigmoid(in0) s1=mul(s0,in0) s2=silu(s1)", graph.AttrString(chain.Attrs))
	require.Equal(t, "store", store.Op)
	require.Equal(t, []*graph.Node{g.Nodes[0], g.Nodes[1], g.Nodes[2]}, p.Origin(chain))
	require.Equal(t, []*graph.Node{g.Nodes[3]}, p.Origin(store))
	require.Equal(t, RuleChain, p.Fusions[chain].Rule)
	require.Nil(t, p.Fusions[store])
	// leaves of the source map to the new graph's
	require.Equal(t, "s", p.Leaf(g.Lookup("s")).Name)
	require.Same(t, p.Graph.Lookup("s"), p.Leaf(g.Lookup("s")))
	require.Nil(t, p.Leaf(g.Nodes[0].Outputs[0]))
}

func TestSchedulePass(t *testing.T) {
	// b reads the state before a writes it, though b is built after the
	// write's producer: the schedule keeps the state accesses in build order
	g := build(t, func(b *graph.Builder) {
		s := b.State("s", graph.F32, 4)
		x := b.Input("x", graph.F32, 4)
		r := ops.Sigmoid(b, s)     // 0: reads s
		ops.Store(b, x, s)         // 1: writes s
		b.Output(ops.Add(b, r, s)) // 2: reads the new s
	})
	p := newPlanned(g, Options{})
	s, err := Schedule{}.Run(p)
	require.NoError(t, err)
	require.Equal(t, "3 launches, 0 out of build order", s)
	require.Equal(t, g.Nodes, p.Schedule)
}

func TestMemoryPass(t *testing.T) {
	g := chainGraph(t)
	p := newPlanned(g, Options{})
	_, err := Memory{}.Run(p)
	require.ErrorContains(t, err, "schedule first")
	_, err = Schedule{}.Run(p)
	require.NoError(t, err)
	s, err := Memory{Align: 64}.Run(p)
	require.NoError(t, err)
	// sigmoid's output dies at mul, mul's at silu: both run in place, one
	// 64-byte block for all three
	require.Equal(t, 64, p.ArenaBytes)
	require.Equal(t, 3*64, p.TempBytes)
	require.Contains(t, s, "2 in place")
}

// TestFreeList drives the free list with random allocations and frees and
// checks its blocks against a byte map: never two owners of a byte, free
// blocks sorted, disjoint, merged, inside the top.
func TestFreeList(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var f freeList
		type span struct{ off, size int }
		var live []span
		for range 100 {
			if len(live) > 0 && rng.IntN(2) == 0 {
				i := rng.IntN(len(live))
				f.free(live[i].off, live[i].size)
				live = append(live[:i], live[i+1:]...)
			} else {
				size := 16 * (1 + rng.IntN(8))
				live = append(live, span{f.alloc(size), size})
			}
			owner := make([]int, f.top)
			for i, s := range live {
				for b := s.off; b < s.off+s.size; b++ {
					if owner[b] != 0 {
						t.Fatalf("byte %d owned twice", b)
					}
					owner[b] = i + 1
				}
			}
			for i, b := range f.blocks {
				if b.size <= 0 || b.off+b.size > f.top {
					t.Fatalf("free block %+v in an arena of %d", b, f.top)
				}
				if i > 0 && f.blocks[i-1].off+f.blocks[i-1].size >= b.off {
					t.Fatalf("free blocks %+v and %+v overlap, touch or are out of order", f.blocks[i-1], b)
				}
				for x := b.off; x < b.off+b.size; x++ {
					if owner[x] != 0 {
						t.Fatalf("free byte %d is owned", x)
					}
				}
			}
		}
	}
	// best fit: the smallest hole that holds the size
	var f freeList
	a, b, c, d := f.alloc(64), f.alloc(16), f.alloc(32), f.alloc(16)
	f.free(a, 64)
	f.free(c, 32)
	require.Equal(t, c, f.alloc(32))
	require.Equal(t, a, f.alloc(48))
	_, _ = b, d
	// the block at the top grows
	var g freeList
	x := g.alloc(32)
	y := g.alloc(32)
	g.free(y, 32)
	require.Equal(t, y, g.alloc(64))
	require.Equal(t, x+32+64, g.top)
}

func TestCommonScope(t *testing.T) {
	n := func(s string) *graph.Node { return &graph.Node{Scope: s} }
	require.Equal(t, "loop 0 / layer 3", commonScope([]*graph.Node{n("loop 0 / layer 3 / attn"), n("loop 0 / layer 3 / mlp")}))
	require.Equal(t, "", commonScope([]*graph.Node{n("a"), n("b")}))
	require.Equal(t, "a / b", commonScope([]*graph.Node{n("a / b")}))
	require.Equal(t, "", commonScope(nil))
}

// TestBrokenRule: a rule whose template cannot be built, or that panics,
// is an error of the fuse pass, not a panic.
func TestBrokenRule(t *testing.T) {
	p := newPlanned(chainGraph(t), Options{Fuse: true})
	bad := &TemplateRule{Op: ops.OpSlerp, Variants: []Example{{Inputs: []ExampleInput{{Kind: graph.Input, DType: graph.F32, Shape: graph.Shape{2}}}}}}
	_, err := Fuse{Rules: []Rule{bad}}.Run(p)
	require.ErrorContains(t, err, "rule slerp")
	_, err = Fuse{Rules: []Rule{panicRule{}}}.Run(p)
	require.ErrorContains(t, err, "rule boom panicked")
}

type panicRule struct{}

func (panicRule) Name() string                            { return "boom" }
func (panicRule) Match(*graph.Graph, *Uses) []Replacement { panic("boom") }
