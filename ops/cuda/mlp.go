package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// snhPer is the activations a thread of swiglu_norm_half keeps in
// registers (SNH_PER in elementwise.cu).
const snhPer = 8

// bindSwiGLUNormMatMul binds swiglu_norm_matmul. A prompt chunk (more than
// matvecMaxRows rows) with gate, up and down in 16 bits and cuBLAS: x
// converted to 16 bits once, the gate and up products into scratch (one
// batched call; in 16 bits with Options.HalfGLU), one row kernel
// (swiglu_norm_half) from them to the down product's 16-bit input, and the
// down product: the gated activation is never written in f32, and read
// once. A decode window of 16-bit weights on cuBLAS (windowed) is the same
// in two 16-bit parts (windowMLP). Otherwise matmul_swiglu into f32
// scratch, then norm_matmul of it (decode rows: two matvec launches, as
// the two nodes took).
func bindSwiGLUNormMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.EpsAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 6 || len(out) != 1 {
		return nil, fmt.Errorf("swiglu_norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	xv, wgv, wdv := n.Inputs[0], n.Inputs[1], n.Inputs[5]
	if len(wgv.Shape) != 2 || len(wdv.Shape) != 2 || wdv.Shape[1] != wgv.Shape[0] {
		return nil, fmt.Errorf("down weight %s does not take the %s gate's outputs", wdv, wgv)
	}
	rows, k, f, nOut := xv.Shape.Rows(), xv.Shape.Last(), wgv.Shape[0], wdv.Shape[0]
	x, wg, wu, sg, su, wd, y := in[0], in[1], in[2], in[3], in[4], in[5], out[0]
	if err := f32All([]string{"x", "sg", "su", "output"}, []*Buffer{x, sg, su, y}); err != nil {
		return nil, err
	}
	if x.n != rows*k || wg.n != f*k || wu.n != f*k || sg.n != f || su.n != f || wd.n != nOut*f || y.n != rows*nOut {
		return nil, fmt.Errorf("x of %d, gate and up of %d and %d, scales of %d and %d, down of %d, output of %d elements "+
			"do not fit %d rows of %d -> %d -> %d", x.n, wg.n, wu.n, sg.n, su.n, wd.n, y.n, rows, k, f, nOut)
	}
	wt, err := wtype(wg)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	wtd, err := wtype(wd)
	if err != nil {
		return nil, fmt.Errorf("down: %w", err)
	}
	s := be.newSteps()
	if rows == 0 || nOut == 0 {
		return s, nil
	}
	if rows <= matvecMaxRows && k > 0 && f > 0 && wg.store == wu.store && be.windowed(wt, rows) && be.windowed(wtd, rows) {
		if err := be.windowMLP(s, x, wg, wu, sg, su, wd, y, rows, k, f, nOut, wt, wtd, at.Eps); err != nil {
			return nil, err
		}
		return s, nil
	}
	if rows <= matvecMaxRows || be.blas == nil || k == 0 || f == 0 || wg.store != wu.store || wt == 0 || wtd == 0 {
		p, err := be.reuse(&be.act, 4*rows*f)
		if err != nil {
			return nil, err
		}
		a := &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * f, bytes: 4 * rows * f, be: be}
		if err := be.matmulSwiGLU(s, in[:5], a, rows, k, f); err != nil {
			return nil, err
		}
		if err := be.normMatMul(s, a, wd, y, rows, f, nOut, at.Eps); err != nil {
			return nil, fmt.Errorf("down: %w", err)
		}
		return s, nil
	}
	if err := be.mlpHalf(s, x, wg, wu, sg, su, y, rows, k, f, nOut, wt, wtd, at.Eps, func() (*Buffer, error) { return wd, nil }); err != nil {
		return nil, err
	}
	return s, nil
}

// mlpHalf appends the prompt path of swiglu_norm_matmul (and of
// quant_swiglu_norm_matmul, whose weights are dequantized into 16-bit
// scratch): x converted to 16 bits of wt, the gate and up products of the
// 16-bit weights wg and wu (one type wt) into scratch (one batched call;
// in 16 bits with Options.HalfGLU), one row kernel (swiglu_norm_half) from
// them to the down product's 16-bit input (of wtd), and the down product,
// whose weight down gives after the gate and up products are appended (a
// quantized down is dequantized there, into scratch the gate and up
// weights no longer need).
func (be *Backend) mlpHalf(s *steps, x, wg, wu, sg, su, y *Buffer, rows, k, f, nOut int, wt, wtd int32, eps float32,
	down func() (*Buffer, error)) error {
	// gt and yt: the type of the gate and up products (the kernels' code,
	// cuBLAS's); 16-bit only when one GEMM a product (not exact's hi + lo).
	gt, gdt, yt := int32(0), graph.F32, cu.F32
	if be.opts.HalfGLU && be.opts.Precision != PrecisionExact {
		gt, gdt, yt = wt, wg.store, cu.BF16
		if wt == 2 {
			yt = cu.F16
		}
	}
	glu, err := be.gluScratch(rows, f, gdt)
	if err != nil {
		return err
	}
	hx, err := be.toHalf(s, x, rows, k, wt, nil, 0)
	if err != nil {
		return err
	}
	g, u := gluOrder(wg, wu, glu)
	be.gemm16(s, hx, []*Buffer{wg, wu}, []cu.DevicePtr{g.ptr, u.ptr}, yt, rows, k, f, wt)
	ha, err := be.halfBuf(1, rows*f)
	if err != nil {
		return err
	}
	s.add("swiglu_norm_half", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threadsFor((f+snhPer-1)/snhPer, 1024), 1, 1}, 0,
		g.ptr, u.ptr, gt, sg.ptr, su.ptr, ha[0], ha[1], int32(f), wtd, eps)
	wd, err := down()
	if err != nil {
		return fmt.Errorf("down: %w", err)
	}
	be.gemm16(s, ha, []*Buffer{wd}, []cu.DevicePtr{y.ptr}, cu.F32, rows, f, nOut, wtd)
	return nil
}
