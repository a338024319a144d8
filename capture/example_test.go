package capture_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// mlpKey names the example's one graph.
type mlpKey struct{ rows int }

func (k mlpKey) String() string { return fmt.Sprintf("mlp/rows=%d", k.rows) }

// ExampleEngine runs one graph by key: planned and recorded on its first
// run, replayed after; then Ablate says what each of its ops costs inside
// a replay (here the ops and their launches: the times vary by machine).
func ExampleEngine() {
	be := cpu.New(1)
	e := capture.NewEngine(be, planner.Options{}, nil)
	defer e.Close()
	build := func() (*graph.Graph, error) {
		b := graph.NewBuilder("mlp")
		x := b.Input("x", graph.F32, 1, 4)
		h := ops.MatMul(b, x, b.Weight("w1", graph.F32, 8, 4))
		b.Output(ops.MatMul(b, ops.SiLU(b, h), b.Weight("w2", graph.F32, 4, 8)))
		return b.Graph()
	}
	bind := capture.Binding{}
	for name, n := range map[string]int{"x": 4, "w1": 32, "w2": 32} {
		raw := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(i%5)/10))
		}
		buf, err := be.Alloc(graph.F32, n)
		if err == nil {
			err = be.Write(buf, raw)
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		bind[name] = buf
	}
	for range 3 {
		if _, err := e.Run(mlpKey{1}, build, bind); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(e.Stats())
	a, err := e.Ablate(mlpKey{1}, 2, capture.AblateOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	sort.Slice(a.Ops, func(i, j int) bool { return a.Ops[i].Op < a.Ops[j].Op })
	for _, o := range a.Ops {
		fmt.Println(o.Op, o.Launches)
	}
	// Output:
	// plans 1, records 1, updates 0, hits 2, evictions 0
	// matmul 2
	// silu 1
}
