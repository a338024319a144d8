package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// TestRopeBindRejectsBadScaling binds rope and norm_rope nodes whose
// attributes the rule would refuse (a NaN factor, an unknown rope type):
// binding fails with an error naming the field, never a panic.
func TestRopeBindRejectsBadScaling(t *testing.T) {
	be := New(1)
	x, _ := be.Alloc(graph.F32, 32)
	call, _ := be.Alloc(graph.I32, ops.CallLen)
	y, _ := be.Alloc(graph.F32, 32)
	xv := &graph.Value{ID: 0, Name: "x", DType: graph.F32, Shape: graph.Shape{2, 16}, Kind: graph.Input}
	cv := &graph.Value{ID: 1, Name: "call", DType: graph.I32, Shape: graph.Shape{ops.CallLen}, Kind: graph.Input}
	yv := &graph.Value{ID: 2, Name: "y", DType: graph.F32, Shape: graph.Shape{2, 16}, Kind: graph.Temp}
	for _, c := range []struct {
		s    ops.RopeScaling
		want string
	}{
		{ops.RopeScaling{Type: ops.RopeYarn, Factor: math.NaN(), OriginalMaxPositions: 64}, "factor NaN"},
		{ops.RopeScaling{Type: "longrope"}, `unknown rope type "longrope"`},
	} {
		rope := ops.RopeAttrs{HeadDim: 8, Rotary: 8, Theta: 1e4, Scaling: c.s}
		for _, n := range []*graph.Node{
			{Op: ops.OpRope.Op, Attrs: rope, Inputs: []*graph.Value{xv, cv}, Outputs: []*graph.Value{yv}},
			{Op: ops.OpNormRope.Op, Attrs: ops.NormRopeAttrs{Rope: rope, Eps: 1e-6}, Inputs: []*graph.Value{xv, cv}, Outputs: []*graph.Value{yv}},
		} {
			k, ok := be.Kernel(n.Op)
			if !ok {
				t.Fatalf("no kernel for %s", n.Op)
			}
			_, err := k.Bind(n, []ops.Buffer{x, call}, []ops.Buffer{y})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s with %v: error %v, want one containing %q", n.Op, c.s, err, c.want)
			}
		}
	}
}
