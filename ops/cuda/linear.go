package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Binder of embed (the products are in matmul.go).

func bindEmbed(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	table, ids, y := in[0], in[1], out[0]
	tv := n.Inputs[0]
	wt, err := wtype(table)
	if err != nil {
		return nil, err
	}
	if ids.dt != graph.I32 {
		return nil, fmt.Errorf("ids are %s, want i32", ids.dt)
	}
	if err := f32("output", y); err != nil {
		return nil, err
	}
	vocab, h, rows := tv.Shape[0], tv.Shape[1], ids.n
	if y.n != rows*h || table.n != vocab*h {
		return nil, fmt.Errorf("embed: table of %d, %d ids, output of %d elements", table.n, rows, y.n)
	}
	s := be.newSteps()
	if rows*h == 0 {
		return s, nil
	}
	g, b := grid1(int64(rows * h))
	s.add("embed", g, b, 0, table.ptr, wt, ids.ptr, y.ptr, int32(rows), int32(h), int32(vocab), be.errRec)
	return s, nil
}
