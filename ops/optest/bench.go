package optest

import (
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Bench measures a case on a backend, as test-backend-ops' perf mode does:
// the case's graph is bound once (plain buffers, no guards), then its
// steps run b.N times back to back with one sync at the end. The bytes of
// one run are those of its leaves (inputs, weights, states) and outputs,
// each counted once (b.SetBytes: `go test -bench` prints them as MB/s, to
// set against the machine's bandwidth). A case that expects an error is
// skipped.
func Bench(b *testing.B, be ops.Backend, c Case) {
	if c.WantErr != "" {
		b.Skip("an error case")
	}
	g, leaves, err := c.build()
	if err != nil {
		b.Fatal(err)
	}
	bufs := make([]ops.Buffer, len(g.Values))
	var owned []ops.Buffer
	defer func() {
		for _, buf := range owned {
			_ = be.Free(buf)
		}
	}()
	moved := 0
	for i, t := range c.Inputs {
		data, err := Encode(t.DType, t.Data)
		if err != nil {
			b.Fatalf("leaf %s: %v", t.Name, err)
		}
		var buf ops.Buffer
		if t.Kind == graph.Weight {
			buf, err = be.Load(t.DType, t.Len(), data)
		} else if buf, err = be.Alloc(t.DType, t.Len()); err == nil {
			err = be.Write(buf, data)
		}
		if err != nil {
			b.Fatalf("leaf %s: %v", t.Name, err)
		}
		owned = append(owned, buf)
		bufs[leaves[i].ID] = buf
		moved += len(data)
	}
	for _, v := range g.Values {
		if v.Kind != graph.Temp || bufs[v.ID] != nil {
			continue
		}
		buf, err := be.Alloc(v.DType, v.Shape.Elems())
		if err != nil {
			b.Fatalf("%s: %v", v, err)
		}
		owned = append(owned, buf)
		bufs[v.ID] = buf
	}
	for _, o := range g.Outputs {
		moved += o.Bytes()
	}
	order, err := g.Order()
	if err != nil {
		b.Fatal(err)
	}
	steps := make([]ops.Step, 0, len(order))
	for _, n := range order {
		st, err := ops.BindNode(be, n, bufs)
		if err != nil {
			b.Fatal(err)
		}
		steps = append(steps, st)
	}
	run := func() error {
		for _, st := range steps {
			if err := st.Run(); err != nil {
				return err
			}
		}
		return nil
	}
	// one run outside the clock: kernels load, caches warm
	if err := run(); err != nil {
		b.Fatal(err)
	}
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(moved))
	b.ResetTimer()
	for range b.N {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchCases runs Bench for every case on be as sub-benchmarks named after
// the cases (filter them with -bench, e.g. 'OpCases/matmul/').
func BenchCases(b *testing.B, be ops.Backend, skip func(Case) (string, bool)) {
	for _, c := range Cases() {
		b.Run(c.Name, func(b *testing.B) {
			if skip != nil {
				if why, ok := skip(c); ok {
					b.Skip(why)
				}
			}
			Bench(b, be, c)
		})
	}
}
