package planner_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// TestTraceKeepsEveryValue plans the tiny block with a trace of every
// node, fused and unfused, and checks each kept value against the
// node-by-node reference run of the source graph (every temporary in a
// buffer of its own): unfused bit for bit, fused within 1e-5. The plan's
// outputs are those of the plan without the trace, bit for bit.
func TestTraceKeepsEveryValue(t *testing.T) {
	g := buildTiny(t, tinyShape)
	e := newEnv(g, 3, 5, 16)
	be := cpu.New(2)
	bound := e.bind(t, be, g)
	ref, err := ops.NewRunner(be, g, byValue(g, bound))
	require.NoError(t, err)
	defer ref.Close()
	require.NoError(t, ref.Run())
	want := map[string][]float32{}
	paths := g.Paths()
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			want[paths[v.ID]] = copyOut(ref.Buffer(v))
		}
	}

	names := map[bool][]string{}
	for _, fuse := range []bool{false, true} {
		observed := 0
		opts := planner.Options{Fuse: fuse, Trace: &planner.Trace{Observe: func(pl *planner.Lowered) error {
			observed++
			return nil
		}}}
		p, rep, err := planner.Plan(g, opts)
		require.NoError(t, err)
		require.Len(t, p.Graph.Outputs, len(g.Outputs), "the trace adds no graph output")
		require.Contains(t, rep.String(), "trace")
		bound := e.bind(t, be, g)
		pl, err := planner.Lower(p, be, byValue(g, bound))
		require.NoError(t, err)
		require.NoError(t, pl.Run())
		require.Zero(t, observed, "Observe is for the engine that runs the plan")
		bufs := pl.Traced()
		require.Len(t, bufs, len(p.Traced))
		seen := map[string]bool{}
		for i, tp := range p.Traced {
			require.False(t, seen[tp.Name], "name %s twice", tp.Name)
			seen[tp.Name] = true
			names[fuse] = append(names[fuse], tp.Name)
			w, ok := want[tp.Name]
			require.True(t, ok, "traced %s is no value of the source graph", tp.Name)
			got := copyOut(bufs[i])
			if !fuse {
				require.Equal(t, bits(w), bits(got), tp.Name)
				continue
			}
			d := maxRelDiff(t, result{outputs: [][]float32{got}}, result{outputs: [][]float32{w}})
			require.Less(t, d, 1e-5, "%s (%s)", tp.Name, tp.Node.Op)
		}
		plain, _ := runPlanned(t, g, planner.Options{Fuse: fuse}, e)
		requireSame(t, collect(g, bound, pl.Outputs()), plain, "traced against plain")
		pl.Close()
	}
	outputs := 0
	for _, n := range g.Nodes {
		outputs += len(n.Outputs)
	}
	require.Len(t, names[false], outputs, "every output of every node")
	require.Less(t, len(names[true]), len(names[false]))
	for _, n := range names[true] {
		require.Contains(t, names[false], n, "a fused launch is named after a value the unfused plan has")
	}
	require.Contains(t, names[true], "head / logits")
}

// TestTraceMatch keeps only the values whose names Match accepts, and the
// arena grows by what the trace keeps alive.
func TestTraceMatch(t *testing.T) {
	g := buildTiny(t, tinyShape)
	plain, _, err := planner.Plan(g, fused)
	require.NoError(t, err)
	p, _, err := planner.Plan(g, planner.Options{Fuse: true, Trace: &planner.Trace{Match: func(n string) bool {
		return strings.HasPrefix(n, "mlp / ")
	}}})
	require.NoError(t, err)
	require.NotEmpty(t, p.Traced)
	for _, tp := range p.Traced {
		require.True(t, strings.HasPrefix(tp.Name, "mlp / "), tp.Name)
		require.Equal(t, "mlp", tp.Node.Scope)
	}
	require.GreaterOrEqual(t, p.ArenaBytes, plain.ArenaBytes)
	all, _, err := planner.Plan(g, planner.Options{Fuse: true, Trace: &planner.Trace{}})
	require.NoError(t, err)
	require.Greater(t, all.ArenaBytes, plain.ArenaBytes)
	outputs := 0
	for _, n := range all.Schedule {
		outputs += len(n.Outputs)
	}
	require.Len(t, all.Traced, outputs, "every output of every launch")
}

// TestPaths names values by scope and label, uniquely.
func TestPaths(t *testing.T) {
	b := graph.NewBuilder("paths")
	x := b.Input("x", graph.F32, 1, 4)
	pop := b.Push("layer 0")
	y := b.Label(ops.SiLU(b, x), "y")
	z := b.Label(ops.SiLU(b, y), "y")
	pop()
	w := ops.SiLU(b, z)
	b.Output(w)
	g, err := b.Graph()
	require.NoError(t, err)
	require.Equal(t, []string{"x", "layer 0 / y", "layer 0 / y (2)", w.Name}, g.Paths())
	require.Equal(t, "layer 0 / y", y.Path())
}
