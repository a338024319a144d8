package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// matvecMaxRows is the most rows the bandwidth-bound matvec kernel takes
// (MV_MAXR in matvec.cu); more rows go to cuBLAS or the tiled kernel.
const matvecMaxRows = 8

// blasMin is the smallest output and input width cuBLAS is used for.
const blasMin = 64

// mvWarps is the warps (output features) of one matvec block.
const mvWarps = 8

// splitK chooses the matvec's split of the input features: enough warps to
// keep every SM busy (about 48 per SM), chunks of at most maxChunk features
// when it is positive, a multiple of 256
// features (one pass of a warp's 16-byte loads over bf16) and, when split,
// at least 512 long.
func splitK(sms, nOut, k, maxChunk int) (splits, chunk int) {
	want := (48*sms + nOut - 1) / nOut
	if maxChunk > 0 {
		want = max(want, (k+maxChunk-1)/maxChunk)
	}
	splits = max(1, min(want, k/512))
	chunk = (k + splits - 1) / splits
	chunk = (chunk + 255) / 256 * 256
	return (k + chunk - 1) / chunk, chunk
}

// matmul appends y[rows, nOut] = x[rows, k] · w[nOut, k]ᵀ to s.
func (be *Backend) matmul(s *steps, x, w, y *Buffer, rows, k, nOut int) error {
	if err := f32("x", x); err != nil {
		return err
	}
	if err := f32("output", y); err != nil {
		return err
	}
	wt, err := wtype(w)
	if err != nil {
		return err
	}
	if x.n != rows*k || w.n != nOut*k || y.n != rows*nOut {
		return fmt.Errorf("x of %d, w of %d, output of %d elements do not fit %d rows of %d -> %d", x.n, w.n, y.n, rows, k, nOut)
	}
	if rows == 0 || nOut == 0 {
		return nil
	}
	if k == 0 {
		ctx := be.ctx
		s.work = append(s.work, func() error { return ctx.MemsetAsync(y.ptr, 0, uint64(4*y.n)) })
		return nil
	}
	if rows <= matvecMaxRows {
		splits, chunk := splitK(be.kernels.sms, nOut, k, be.opts.MatvecMaxChunk)
		elems := 4
		if wt != 0 {
			elems = 8
		}
		vec := int32(0)
		if k%elems == 0 && chunk%elems == 0 && x.ptr%16 == 0 && w.ptr%16 == 0 {
			vec = 1
		}
		var part, cnt cu.DevicePtr
		cols := (nOut + mvWarps - 1) / mvWarps
		if splits > 1 {
			if part, err = be.scratchAlloc(4 * splits * rows * nOut); err != nil {
				return err
			}
			if cnt, err = be.scratchAlloc(4 * cols); err != nil {
				return err
			}
			if err := be.ctx.Memset(cnt, 0, uint64(4*cols)); err != nil {
				return err
			}
		}
		name := [...]string{"matvec_f32", "matvec_bf16", "matvec_f16"}[wt]
		s.add(name, [3]uint32{uint32(cols), uint32(splits), 1}, [3]uint32{32 * mvWarps, 1, 1}, 0,
			x.ptr, w.ptr, y.ptr, part, cnt, int32(rows), int32(nOut), int32(k), int32(chunk), vec)
		return nil
	}
	if be.blas != nil && nOut >= blasMin && k >= blasMin {
		blas := be.blas
		if wt == 0 {
			s.work = append(s.work, func() error {
				return blas.MatMulRowMajor(rows, nOut, k, x.ptr, k, cu.F32, w.ptr, k, cu.F32, y.ptr, nOut, cu.F32)
			})
			return nil
		}
		x16, err := be.scratchAlloc(2 * rows * k)
		if err != nil {
			return err
		}
		dt := cu.BF16
		if wt == 2 {
			dt = cu.F16
		}
		g, b := grid1(int64(rows * k))
		s.add("to_half", g, b, 0, x.ptr, x16, int64(rows*k), wt)
		s.work = append(s.work, func() error {
			return blas.MatMulRowMajor(rows, nOut, k, x16, k, dt, w.ptr, k, dt, y.ptr, nOut, cu.F32)
		})
		return nil
	}
	s.add("matmul_tiled", [3]uint32{uint32((nOut + 15) / 16), uint32((rows + 15) / 16), 1}, [3]uint32{16, 16, 1}, 0,
		x.ptr, w.ptr, wt, y.ptr, int32(rows), int32(nOut), int32(k))
	return nil
}

// bindMatMul binds matmul and grouped_matmul: one product per weight.
func bindMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) < 2 || len(out) != len(in)-1 {
		return nil, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
	}
	xv := n.Inputs[0]
	k, rows := xv.Shape.Last(), xv.Shape.Rows()
	s := be.newSteps()
	for i, wv := range n.Inputs[1:] {
		if len(wv.Shape) != 2 || wv.Shape[1] != k {
			return nil, fmt.Errorf("weight %d %s does not take %d features", i, wv, k)
		}
		if err := be.matmul(s, in[0], in[i+1], out[i], rows, k, wv.Shape[0]); err != nil {
			return nil, fmt.Errorf("weight %d: %w", i, err)
		}
	}
	return s, nil
}

// bindMatMulSwiGLU binds matmul_swiglu: the gate and up products into
// scratch, then swiglu into the output.
func bindMatMulSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) != 5 || len(out) != 1 {
		return nil, fmt.Errorf("matmul_swiglu: %d inputs and %d outputs", len(in), len(out))
	}
	xv, wg := n.Inputs[0], n.Inputs[1]
	k, rows, f := xv.Shape.Last(), xv.Shape.Rows(), wg.Shape[0]
	if err := f32All([]string{"sg", "su"}, in[3:5]); err != nil {
		return nil, err
	}
	s := be.newSteps()
	tmp := make([]*Buffer, 2)
	for i := range tmp {
		p, err := be.scratchAlloc(4 * rows * f)
		if err != nil {
			return nil, err
		}
		tmp[i] = &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * f, bytes: 4 * rows * f, be: be}
		if err := be.matmul(s, in[0], in[1+i], tmp[i], rows, k, f); err != nil {
			return nil, fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
		}
	}
	return be.swiglu(tmp[0], tmp[1], in[3], in[4], out[0], s)
}
