package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the fused slerp ops (ops/fused_slerp.go). Up to slerpRows
// rows, when the product is one matvec launch (every weight stored alike,
// at most mvSegs of them), it is one mvs_* launch whose blocks each compute
// the slerp of the rows into shared memory, write their share of h and
// multiply from shared memory: the slerp's own launch is gone. Otherwise
// slerp_rows writes h (and, for prompt rows multiplied by cuBLAS, the
// 16-bit copy of h the products read instead of converting it again), then
// the product's binder runs on h.

// slerpMatvecRows is the default of slerpRows: at most this many rows take
// the slerp inside the matvec. Each block keeps R·K floats in shared
// memory (10 KB a row for Dory's 2560), which cuts the blocks resident on
// an SM as rows grow; REEL_SLERP_MV_ROWS sets it (0: never). It is 0: on
// the H200 every block's slerp before its stream made Dory 4B's decode
// slower (session 5, run 2: 141.6 tok/s against 215.5 with the slerp as its
// own launch), so the fused node launches slerp_rows and its product.
const slerpMatvecRows = 0

// mvsSharedMax is the most dynamic shared memory the mvs_* kernels take
// (R·K floats); past it the slerp runs as its own launch.
const mvsSharedMax = 96 << 10

// mvSlerp is the slerp of a matvec's input: h = slerp(x, y, alpha).
type mvSlerp struct {
	y, alpha, h *Buffer
	eps         float32
}

func bindSlerpMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	return be.slerpThen(n, in, out, ops.OpGroupedMatMul.Op, bindMatMul)
}

func bindSlerpMatMulSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	return be.slerpThen(n, in, out, ops.OpMatMulSwiGLU.Op, bindMatMulSwiGLU)
}

// slerpThen binds a fused slerp op whose product part is op, bound by
// product.
func (be *Backend) slerpThen(n *graph.Node, in, out []*Buffer, op string, product binder) (*steps, error) {
	at, err := ops.NodeAttrs[ops.EpsAttrs](n)
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
	sub := &graph.Node{ID: n.ID, Op: op, Inputs: append([]*graph.Value{n.Outputs[0]}, n.Inputs[3:]...), Outputs: n.Outputs[1:], Scope: n.Scope}
	s := be.newSteps()
	if rows > 0 && k > 0 && rows <= min(be.slerpRows, matvecMaxRows) && 4*rows*k <= mvsSharedMax {
		sl := &mvSlerp{y: y, alpha: alpha, h: h, eps: at.Eps}
		ok, err := be.slerpMatvec(s, sub, x, sl, in[3:], out[1:], rows, k)
		if err != nil {
			return nil, err
		}
		if ok {
			return s, nil
		}
	}
	hv := h
	if rows > 0 && k > 0 {
		var hi, lo cu.DevicePtr
		wt := int32(0)
		if rows > matvecMaxRows && be.blas != nil {
			if wt = halfType(in[3:]); wt != 0 {
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
		threads := threadsFor((k+3)/4, 1024)
		if rows >= rowManyRows {
			threads = 256
		}
		s.add("slerp_rows", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threads, 1, 1}, 0,
			x.ptr, y.ptr, alpha.ptr, h.ptr, hi, lo, int32(k), wt, at.Eps)
	}
	ps, err := product(be, sub, append([]*Buffer{hv}, in[3:]...), out[1:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s.work = append(s.work, ps.work...)
	return s, nil
}

// slerpMatvec appends the mvs_* launch of a fused slerp op's product (sub,
// whose weights and outputs are ws and ys) and reports true, or appends
// nothing and reports false when the product is not one matvec launch.
func (be *Backend) slerpMatvec(s *steps, sub *graph.Node, x *Buffer, sl *mvSlerp, ws, ys []*Buffer, rows, k int) (bool, error) {
	for _, w := range ws[:min(len(ws), 2)] {
		if _, err := wtype(w); err != nil || w.store != ws[0].store {
			return false, nil
		}
	}
	if sub.Op == ops.OpMatMulSwiGLU.Op {
		f := sub.Inputs[1].Shape[0]
		if len(ws) != 4 || len(ys) != 1 || f == 0 {
			return false, nil
		}
		for i := range 2 {
			if err := checkProduct(sl.h, ws[i], ys[0], rows, k, f); err != nil {
				return false, fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
			}
		}
		if err := f32All([]string{"sg", "su"}, ws[2:]); err != nil {
			return false, err
		}
		if ws[2].n != f || ws[3].n != f {
			return false, fmt.Errorf("scales of %d and %d elements for %d features", ws[2].n, ws[3].n, f)
		}
		segs := []mvSeg{{w: ws[0], n: f}, {w: ws[1], n: f}}
		return true, be.matvecOf(s, x, segs, rows, k, &[3]*Buffer{ys[0], ws[2], ws[3]}, nil, sl)
	}
	if len(ws) > mvSegs || len(ws) != len(ys) {
		return false, nil
	}
	segs := make([]mvSeg, len(ws))
	for i, w := range ws {
		if w.store != ws[0].store {
			return false, nil
		}
		wv := sub.Inputs[1+i]
		if len(wv.Shape) != 2 || wv.Shape[1] != k || wv.Shape[0] == 0 {
			return false, nil
		}
		if err := checkProduct(sl.h, w, ys[i], rows, k, wv.Shape[0]); err != nil {
			return false, fmt.Errorf("weight %d: %w", i, err)
		}
		segs[i] = mvSeg{w: w, y: ys[i], n: wv.Shape[0]}
	}
	return true, be.matvecOf(s, x, segs, rows, k, nil, nil, sl)
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
