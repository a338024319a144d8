package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the fused slerp ops (ops/fused_slerp.go): the slerp writes h
// (prompt rows: slerp_rows, with the 16-bit copy of h the products read
// when cuBLAS multiplies them, instead of converting it again; decode rows:
// rowfuse, the slerp op's own kernel), then the product's binder runs on h.
// The planner makes slerp_matmul and slerp_matmul_swiglu for prompt rows
// only (planner.SlerpProductRule says why), and the quantized ones for
// decode rows too, whose one row quant_fused.go's quantSlerpRow can take
// as one launch.

func bindSlerpMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	return be.slerpThen(n, in, out, ops.OpGroupedMatMul.Op, bindMatMul, halfType)
}

func bindSlerpMatMulSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	return be.slerpThen(n, in, out, ops.OpMatMulSwiGLU.Op, bindMatMulSwiGLU, halfType)
}

// slerpThen binds a fused slerp op whose product part is op, bound by
// product; half gives the 16-bit type (wtype's code) of the copy of h the
// product reads from its weights (the inputs after α), 0 for none.
func (be *Backend) slerpThen(n *graph.Node, in, out []*Buffer, op string, product binder, half func([]*Buffer) int32) (*steps, error) {
	at, pa, err := ops.SlerpParts(n.Op, n.Attrs)
	if err != nil {
		return nil, err
	}
	if len(in) < 4 || len(out) < 2 || len(in) != len(n.Inputs) || len(out) != len(n.Outputs) {
		return nil, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
	}
	x, y, alpha, h := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"x", "y", "alpha", "h"}, []*Buffer{x, y, alpha, h}); err != nil {
		return nil, err
	}
	k, rows := n.Inputs[0].Shape.Last(), n.Inputs[0].Shape.Rows()
	if x.n != rows*k || y.n != x.n || h.n != x.n || alpha.n != k {
		return nil, fmt.Errorf("x of %d, y of %d, alpha of %d and h of %d elements do not fit %d rows of %d", x.n, y.n, alpha.n, h.n, rows, k)
	}
	sub := &graph.Node{ID: n.ID, Op: op, Attrs: pa, Inputs: append([]*graph.Value{n.Outputs[0]}, n.Inputs[3:]...), Outputs: n.Outputs[1:], Scope: n.Scope}
	s := be.newSteps()
	hv := h
	if rows > 0 && k > 0 {
		var hi, lo cu.DevicePtr
		wt := int32(0)
		if rows > matvecMaxRows && be.blas != nil {
			if wt = half(in[3:]); wt != 0 {
				c, err := be.halfCopy(rows*k, wt)
				if err != nil {
					return nil, err
				}
				hi, lo = c.h[0], c.h[1]
				view := *h
				view.half = c
				hv = &view
			}
		}
		// Decode rows take the slerp op's own kernel, as an unfused plan
		// runs it (slerp_rows re-reads its row; rowfuse keeps it), where
		// its rows fit (addRowFuse appends nothing when they do not).
		if hi != 0 || rows > matvecMaxRows || addRowFuse(s, rowSlerp, x.ptr, y.ptr, alpha.ptr, h.ptr, rows, k, at.Eps) != nil {
			threads := threadsFor((k+3)/4, 1024)
			if rows >= rowManyRows {
				threads = 256
			}
			s.add("slerp_rows", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threads, 1, 1}, 0,
				x.ptr, y.ptr, alpha.ptr, h.ptr, hi, lo, int32(k), wt, at.Eps)
		}
	}
	ps, err := product(be, sub, append([]*Buffer{hv}, in[3:]...), out[1:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s.then(ps)
	return s, nil
}

// halfType is the 16-bit type (wtype's code) of the first weight of ws
// stored in 16 bits, the one a 16-bit copy of the products' input serves;
// 0 when none is.
func halfType(ws []*Buffer) int32 {
	for _, w := range ws {
		if t, err := wtype(w); err == nil && t != 0 {
			return t
		}
	}
	return 0
}

// halfCopy makes the scratch of a 16-bit copy of n activations of type wt
// (toHalf's first area and layout: lo with PrecisionExact).
func (be *Backend) halfCopy(n int, wt int32) (*halfCopy, error) {
	parts := 1
	if be.opts.Precision == PrecisionExact {
		parts = 2
	}
	p, err := be.reuse(&be.half[0], 2*parts*n)
	if err != nil {
		return nil, err
	}
	c := &halfCopy{wt: wt, h: [2]cu.DevicePtr{p, 0}}
	if parts == 2 {
		c.h[1] = p.Offset(uint64(2 * n))
	}
	return c, nil
}
