package planner_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// TestLowerBindings: buffers keyed by the source graph's values, by the
// planned graph's, or by name all bind; a missing or mis-sized one is an
// error naming it.
func TestLowerBindings(t *testing.T) {
	g := buildTiny(t, tinyShape)
	e := newEnv(g, 4, 5, 8)
	be := cpu.New(1)
	p, _, err := planner.Plan(g, fused)
	require.NoError(t, err)
	bound := e.bind(t, be, g)

	viaSource, err := planner.Lower(p, be, byValue(g, bound))
	require.NoError(t, err)
	require.NoError(t, viaSource.Run())
	byName, err := planner.BindByName(p, bound)
	require.NoError(t, err)
	viaPlanned, err := planner.Lower(p, be, byName)
	require.NoError(t, err)
	require.NoError(t, viaPlanned.Run())
	require.Equal(t, copyOut(viaSource.Output(0)), copyOut(viaPlanned.Output(0)))
	require.Nil(t, viaSource.Output(1))
	require.Same(t, bound["wq"], viaSource.Buffer(g.Lookup("wq")))
	require.Same(t, p, viaSource.Planned())
	require.Len(t, viaSource.Steps(), len(p.Schedule))

	missing := byValue(g, bound)
	delete(missing, g.Lookup("sqk"))
	_, err = planner.Lower(p, be, missing)
	require.ErrorContains(t, err, "sqk")
	delete(bound, "sqk")
	_, err = planner.BindByName(p, bound)
	require.ErrorContains(t, err, "sqk")

	wrong := byValue(g, e.bind(t, be, g))
	short, err := be.Alloc(graph.F32, 3)
	require.NoError(t, err)
	wrong[g.Lookup("x")] = short
	_, err = planner.Lower(p, be, wrong)
	require.ErrorContains(t, err, "x")

	require.NoError(t, viaSource.Close())
	require.Error(t, viaSource.Run())
	require.NoError(t, viaSource.Close())
}

// TestRebind: a plan rebound to a grown slot runs as a plan lowered on it.
func TestRebind(t *testing.T) {
	g := buildTiny(t, tinyShape)
	be := cpu.New(1)
	p, _, err := planner.Plan(g, fused)
	require.NoError(t, err)
	small := newEnv(g, 5, 5, 8)
	pl, err := planner.Lower(p, be, byValue(g, small.bind(t, be, g)))
	require.NoError(t, err)
	require.NoError(t, pl.Run())

	grown := newEnv(g, 5, 9, 16) // other data, twice the slot capacity
	b1 := grown.bind(t, be, g)
	require.NoError(t, pl.Rebind(byValue(g, b1)))
	require.NoError(t, pl.Run())
	got := copyOut(pl.Output(0))
	fresh, err := planner.Lower(p, be, byValue(g, grown.bind(t, be, g)))
	require.NoError(t, err)
	require.NoError(t, fresh.Run())
	require.Equal(t, bits(copyOut(fresh.Output(0))), bits(got))
}

// TestDumps checks that each dump shows the launches, their fused members
// and the arena offsets, and that the stats carry the report.
func TestDumps(t *testing.T) {
	g := buildTiny(t, tinyShape)
	p, rep, err := planner.Plan(g, fused)
	require.NoError(t, err)

	var text bytes.Buffer
	require.NoError(t, planner.WriteText(&text, p))
	s := text.String()
	require.Contains(t, s, "arena")
	require.Contains(t, s, "grouped_matmul fuses")
	require.Contains(t, s, "slerp fuses")
	require.Contains(t, s, "(in place of %")
	require.Equal(t, len(p.Schedule)+len(p.Fusions)+2, strings.Count(s, "\n"))

	var dot bytes.Buffer
	require.NoError(t, planner.WriteDOT(&dot, p))
	require.True(t, strings.HasPrefix(dot.String(), "digraph"))
	require.Contains(t, dot.String(), "matmul_swiglu: matmul matmul mul silu mul mul")

	var js bytes.Buffer
	require.NoError(t, planner.WriteJSON(&js, p))
	var j planner.JSONPlan
	require.NoError(t, json.Unmarshal(js.Bytes(), &j))
	require.Equal(t, p.ArenaBytes, j.ArenaBytes)
	require.Len(t, j.Launches, len(p.Schedule))
	members := 0
	for _, l := range j.Launches {
		members += len(l.Members)
		for _, b := range l.Outputs {
			require.NotNil(t, b.Offset)
		}
	}
	require.Positive(t, members)

	var st bytes.Buffer
	require.NoError(t, planner.WriteStats(&st, rep))
	for _, want := range []string{"validate", "fuse", "schedule", "memory", "launches", "arena", "temporaries", "slerp 2 (12 nodes)"} {
		require.Contains(t, st.String(), want)
	}

	for _, pass := range []string{planner.PassGraph, planner.PassFused, planner.PassPlan} {
		for _, format := range []string{"text", "dot", "json"} {
			var w bytes.Buffer
			require.NoError(t, planner.Dump(&w, g, pass, format, fused), "%s %s", pass, format)
			require.NotEmpty(t, w.String())
		}
	}
	var w bytes.Buffer
	require.Error(t, planner.Dump(&w, g, "nope", "text", fused))
	require.Error(t, planner.Dump(&w, g, planner.PassPlan, "nope", fused))
	var fusedText bytes.Buffer
	require.NoError(t, planner.Dump(&fusedText, g, planner.PassFused, "text", fused))
	require.Contains(t, fusedText.String(), "elementwise_chain")
}

// TestPlanErrors: an invalid graph is an error naming the pass.
func TestPlanErrors(t *testing.T) {
	_, _, err := planner.Plan(nil, fused)
	require.Error(t, err)
	g := buildTiny(t, tinyShape)
	g.Nodes[3].Op = "no_such_op"
	_, _, err = planner.Plan(g, fused)
	require.ErrorContains(t, err, "validate")
	require.ErrorContains(t, err, "no_such_op")
}
