package planner_test

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// Example builds a graph (y = silu(x·Wᵀ) + x·Wᵀ), plans it and runs the
// plan on the CPU backend: graph, then planner, then a backend.
func Example() {
	b := graph.NewBuilder("example")
	x := b.Input("x", graph.F32, 1, 2)
	w := b.Weight("w", graph.F32, 2, 2)
	xw := ops.MatMul(b, x, w) // x·Wᵀ, [1, 2]
	b.Output(ops.Add(b, ops.SiLU(b, xw), xw))
	g, err := b.Graph()
	if err != nil {
		panic(err)
	}

	p, rep, err := planner.Plan(g, planner.DefaultOptions())
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d nodes in %d launches\n", rep.Nodes, len(p.Schedule))

	be := cpu.New(1)
	defer be.Close()
	load := func(v ...float32) ops.Buffer {
		raw := make([]byte, 4*len(v))
		half.EncodeF32(raw, v)
		buf, err := be.Load(graph.F32, len(v), raw)
		if err != nil {
			panic(err)
		}
		return buf
	}
	run, err := planner.Lower(p, be, map[*graph.Value]ops.Buffer{
		x: load(1, -2),
		w: load(1, 0, 0, 1), // the identity
	})
	if err != nil {
		panic(err)
	}
	defer run.Close()
	if err := run.Run(); err != nil {
		panic(err)
	}
	raw := make([]byte, 8)
	if err := be.Read(run.Output(0), raw); err != nil {
		panic(err)
	}
	y := make([]float32, 2)
	half.DecodeF32(y, raw)
	fmt.Printf("y = %.4f\n", y)
	// Output:
	// 3 nodes in 2 launches
	// y = [1.7311 -2.2384]
}
