package planner_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// randomGraph builds a random graph of the ops the planner handles:
// elementwise ops with and without broadcast, norms, matmuls that change the
// width, the fused helpers' chains, reads and writes of a state. Widths are
// few so that values of equal size meet (and in-place reuse happens), and
// some values are made and never read.
func randomGraph(rng *rand.Rand, nodes int, store bool) (*graph.Graph, error) {
	b := graph.NewBuilder(fmt.Sprintf("random%d", nodes))
	rows := 1 + rng.IntN(3)
	widths := []int{4, 8, 12 + 4*rng.IntN(3)}
	type pool struct{ vals []*graph.Value }
	byWidth := map[int]*pool{}
	add := func(v *graph.Value) {
		w := v.Shape.Last()
		if byWidth[w] == nil {
			byWidth[w] = &pool{}
		}
		byWidth[w].vals = append(byWidth[w].vals, v)
	}
	pick := func(w int) *graph.Value {
		p := byWidth[w]
		// prefer recent values, as models do, so chains form
		i := len(p.vals) - 1 - int(rng.ExpFloat64()*2)
		if i < 0 {
			i = rng.IntN(len(p.vals))
		}
		return p.vals[i]
	}
	vec := func(w int) *graph.Value { return b.Weight(fmt.Sprintf("v%d_%d", w, rng.IntN(3)), graph.F32, w) }
	for i, w := range widths {
		add(b.Input(fmt.Sprintf("x%d", i), graph.F32, rows, w))
	}
	state := b.State("s", graph.F32, rows, widths[0])
	add(state)
	var made []*graph.Value
	for range nodes {
		w := widths[rng.IntN(len(widths))]
		x := pick(w)
		var y *graph.Value
		switch k := rng.IntN(16); k {
		case 0, 1:
			y = ops.Add(b, x, pick(w))
		case 2:
			y = ops.Sub(b, x, pick(w))
		case 3:
			y = ops.Mul(b, x, vec(w))
		case 4:
			y = ops.Mul(b, x, pick(w))
		case 5:
			y = ops.Sigmoid(b, x)
		case 6:
			y = ops.SiLU(b, x)
		case 7:
			y = ops.Scale(b, x, float32(rng.NormFloat64()))
		case 8:
			y = ops.L2Norm(b, x, 0, eps)
		case 9:
			w2 := widths[rng.IntN(len(widths))]
			y = ops.MatMul(b, x, b.Weight(fmt.Sprintf("m%d_%d_%d", w2, w, rng.IntN(2)), graph.F32, w2, w))
		case 10:
			y = ops.Slerp(b, x, pick(w), vec(w), eps)
		case 11:
			y = ops.Mix(b, x, pick(w), eps)
		case 12:
			y = ops.SwiGLU(b, x, pick(w), vec(w), vec(w))
		case 13:
			y = ops.GatedNorm(b, x, pick(w), vec(w), eps)
		case 14:
			if store && w == widths[0] && x != state {
				ops.Store(b, x, state)
				continue
			}
			y = ops.Sigmoid(b, x)
		case 15:
			w2 := widths[rng.IntN(len(widths))]
			y = ops.MatMul(b, x, b.Weight(fmt.Sprintf("m%d_%d_%d", w2, w, rng.IntN(2)), graph.F32, w2, w))
		}
		add(y)
		made = append(made, y)
	}
	for _, v := range made {
		if rng.IntN(8) == 0 {
			b.Output(v)
		}
	}
	if len(made) > 0 {
		b.Output(made[len(made)-1])
	}
	return b.Graph()
}

// checkMemory checks a plan's layout against the rules, independently of
// how the planner computed it: every temporary aligned and inside the
// arena; no two temporaries live at the same step share a byte unless one
// took the other's memory in place, where its op allows it, as the input
// dies; the arena no larger than the temporaries' sum.
func checkMemory(t *testing.T, p *planner.Planned) {
	t.Helper()
	g := p.Graph
	step := map[*graph.Node]int{}
	for i, n := range p.Schedule {
		step[n] = i
	}
	outputs := map[*graph.Value]bool{}
	for _, v := range g.Outputs {
		outputs[v] = true
	}
	// liveness, computed here from the schedule
	type live struct {
		v         *graph.Value
		a         planner.Alloc
		def, last int
	}
	lastRead := map[*graph.Value]int{}
	for i, n := range p.Schedule {
		for _, in := range n.Inputs {
			lastRead[in] = i
		}
	}
	var temps []live
	for _, v := range g.Values {
		if v.Kind != graph.Temp {
			continue
		}
		a, ok := p.Alloc(v)
		if !ok {
			t.Fatalf("temp %s has no placement", v)
		}
		l := live{v: v, a: a, def: step[v.Producer], last: step[v.Producer]}
		if r, ok := lastRead[v]; ok && r > l.last {
			l.last = r
		}
		if outputs[v] {
			l.last = len(p.Schedule)
		}
		if a.Bytes != v.Bytes() || a.Def != l.def || a.Last != l.last {
			t.Fatalf("%s: placed as %d bytes live [%d,%d], is %d bytes live [%d,%d]", v, a.Bytes, a.Def, a.Last, v.Bytes(), l.def, l.last)
		}
		if a.Offset%planner.Align != 0 || a.Offset < 0 || a.Offset+a.Bytes > p.ArenaBytes {
			t.Fatalf("%s at %d+%d: unaligned or outside the arena of %d", v, a.Offset, a.Bytes, p.ArenaBytes)
		}
		if a.Alias != nil {
			checkInPlace(t, p, v, a.Alias, outputs)
		}
		temps = append(temps, l)
	}
	for i, x := range temps {
		for _, y := range temps[i+1:] {
			if x.a.Bytes == 0 || y.a.Bytes == 0 || x.last < y.def || y.last < x.def {
				continue
			}
			if x.a.Offset >= y.a.Offset+y.a.Bytes || y.a.Offset >= x.a.Offset+x.a.Bytes {
				continue
			}
			// overlapping in time and memory: only an in-place pair may
			if !(y.a.Alias == x.v && x.last == y.def) && !(x.a.Alias == y.v && y.last == x.def) {
				t.Fatalf("%s [%d,%d] @%d+%d and %s [%d,%d] @%d+%d overlap", x.v, x.def, x.last, x.a.Offset, x.a.Bytes,
					y.v, y.def, y.last, y.a.Offset, y.a.Bytes)
			}
		}
	}
	require.LessOrEqual(t, p.ArenaBytes, p.TempBytes)
}

// checkInPlace: v reuses u's memory only where allowed.
func checkInPlace(t *testing.T, p *planner.Planned, v, u *graph.Value, outputs map[*graph.Value]bool) {
	t.Helper()
	n := v.Producer
	def, ok := ops.Lookup(n.Op)
	require.True(t, ok)
	j := -1
	for i, o := range n.Outputs {
		if o == v {
			j = i
		}
	}
	require.Less(t, j, len(def.InPlace), "%s in place of %s: %s allows none", v, u, n.Op)
	k := def.InPlace[j]
	require.True(t, k >= 0 && n.Inputs[k] == u, "%s in place of %s, not the input %s allows", v, u, n.Op)
	count := 0
	for _, x := range n.Inputs {
		if x == u {
			count++
		}
	}
	require.Equal(t, 1, count, "%s in place of %s, read twice by %s", v, u, n)
	require.Equal(t, graph.Temp, u.Kind)
	require.False(t, outputs[u], "%s in place of the graph output %s", v, u)
	require.Equal(t, u.Bytes(), v.Bytes())
	a, _ := p.Alloc(u)
	b, _ := p.Alloc(v)
	require.Equal(t, a.Offset, b.Offset)
	require.Equal(t, a.Last, b.Def, "%s in place of %s, which is read after", v, u)
}

// TestMemoryRandomGraphs is the property test: thousands of random graphs,
// fused and unfused, each layout checked and planned twice for equal offsets.
func TestMemoryRandomGraphs(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	rng := rand.New(rand.NewPCG(11, 13))
	inPlace, planned := 0, 0
	for i := range n {
		g, err := randomGraph(rng, 2+rng.IntN(40), true)
		require.NoError(t, err, "graph %d", i)
		for _, opts := range []planner.Options{fused, unfused} {
			p, rep, err := planner.Plan(g, opts)
			require.NoError(t, err, "graph %d", i)
			checkMemory(t, p)
			q, _, err := planner.Plan(g, opts)
			require.NoError(t, err)
			require.Equal(t, layoutOf(p), layoutOf(q), "graph %d: the plan is not deterministic", i)
			inPlace += rep.InPlace
			planned++
		}
	}
	require.Positive(t, inPlace, "no in-place reuse in %d plans", planned)
}

// layoutOf is a plan's layout by value ID, comparable across plans.
func layoutOf(p *planner.Planned) []string {
	out := []string{fmt.Sprint("arena ", p.ArenaBytes)}
	for _, v := range p.Graph.Values {
		if a, ok := p.Alloc(v); ok {
			alias := -1
			if a.Alias != nil {
				alias = a.Alias.ID
			}
			out = append(out, fmt.Sprintf("%d %s %d+%d [%d,%d] %d", v.ID, v.Name, a.Offset, a.Bytes, a.Def, a.Last, alias))
		}
	}
	return out
}

// TestRandomGraphsRun runs random graphs fused, unfused and node by node:
// the unfused plan equals the plain run bit for bit (so the arena layout
// never clobbers a live value), the fused within 1e-5.
func TestRandomGraphsRun(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	rng := rand.New(rand.NewPCG(17, 19))
	fusions := map[string]int{}
	_, store := cpu.New(1).Kernel(ops.OpStore.Op)
	if !store {
		t.Log("the cpu backend has no store kernel yet: random graphs without state writes")
	}
	for i := range n {
		g, err := randomGraph(rng, 2+rng.IntN(30), store)
		require.NoError(t, err)
		e := newEnv(g, uint64(i), 0, 1)
		ref := runReference(t, g, e)
		plain, _ := runPlanned(t, g, unfused, e)
		requireSame(t, plain, ref, fmt.Sprintf("graph %d unfused", i))
		got, rep := runPlanned(t, g, fused, e)
		require.LessOrEqual(t, maxRelDiff(t, got, ref), 1e-5, "graph %d fused", i)
		for r, c := range rep.Fusions {
			fusions[r] += c
		}
	}
	for _, r := range []string{planner.RuleSlerp, planner.RuleMix, planner.RuleSwiGLU, planner.RuleGatedNorm, planner.RuleChain, planner.RuleGroupMatMul} {
		require.Positive(t, fusions[r], "rule %s never fired: %v", r, fusions)
	}
	t.Logf("fusions over %d random graphs: %v", n, fusions)
}

// TestBestFit checks a layout worked out by hand: a (1 KiB) dies where c
// is made past it; the later 256-byte values take a's hole (best fit) or
// their input's memory in place, so the arena is 1 KiB + 256 B.
func TestBestFit(t *testing.T) {
	g := small(t, func(b *graph.Builder) {
		big := b.Input("big", graph.F32, 256)
		sm := b.Input("sm", graph.F32, 64)
		w := b.Weight("w", graph.F32, 64, 256)
		a := b.Label(ops.Sigmoid(b, big), "a")      // step 0: @0, 1024 bytes
		c := b.Label(ops.MatMul(b, a, w), "c")      // step 1: @1024; a dies
		s1 := b.Label(ops.Sigmoid(b, sm), "s1")     // step 2: best fit in a's hole, @0
		d := b.Label(ops.Add(b, s1, c), "d")        // step 3: in place of s1; c dies
		s2 := b.Label(ops.SiLU(b, sm), "s2")        // step 4: @256, the merged hole
		b.Output(b.Label(ops.Add(b, d, s2), "out")) // step 5: in place of d
	})
	p, _, err := planner.Plan(g, unfused)
	require.NoError(t, err)
	checkMemory(t, p)
	require.Equal(t, 1024+256, p.ArenaBytes)
	want := map[string]int{"a": 0, "c": 1024, "s1": 0, "d": 0, "s2": 256, "out": 0}
	for _, v := range p.Graph.Values {
		if off, ok := want[v.Name]; ok {
			a, _ := p.Alloc(v)
			require.Equal(t, off, a.Offset, v.Name)
		}
	}
}
