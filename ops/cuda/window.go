package cuda

import (
	"fmt"
	"strconv"

	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Decode windows of 16-bit weights on cuBLAS. A product of a few rows
// (a speculation window, a server's batch of decode rows) reads the whole
// weight like a one-row token, so it should cost about as much; our
// matvecs fall behind cuBLAS from 2 rows (H200, gate/up 7168x2560 bf16:
// cuBLAS 11.2-11.5 µs at 2 to 8 rows; a tensor-core matvec of 16-bit
// weights, measured and removed, 14.9-20.6). The windows cuBLAS does not
// take (f32 weights, no cuBLAS, REEL_WINDOW_CUBLAS=0, fewer rows than it)
// stay on the CUDA-core matvec (mv_*).
// cuBLAS multiplies like types only, so each row of x is split hi + lo in
// the weights' 16-bit type (win_half) and the two parts are stacked as the
// 2R rows of one GEMM, which reads the weight once (two GEMMs, or one with
// beta = 1 after the other, would read it twice); win_sum adds the two
// halves of each output row (and applies matmul_swiglu's SwiGLU). hi + lo
// keeps about 16 bits of each activation in bf16 (at any range) and about
// 22 in f16 (each row scaled by a power of two first), where the mv_*
// kernels keep all 24 of f32: the op table bounds these windows at
// optest.TolSplit.
//
// cuBLAS is deterministic for a fixed shape, alignment and workspace on
// one card (atomics stay off, its default), so a replayed graph gives the
// eager run's bits.

// windowMinRows is the fewest rows of a product of 16-bit weights that go
// to cuBLAS by default (REEL_WINDOW_CUBLAS). Two rows stay on mv_*: on the
// H200 (session 6, reel bench --windows, each window against one row)
// qwen4-12l's 2-row window took 1.82x one row with cuBLAS from 2 rows and
// 1.55x with REEL_WINDOW_CUBLAS=3 (3 rows 2.14x against 2.22x, 5 rows
// 2.53x against 2.73x: noise), and Dory 4B's 2 rows gained little from
// the route (1.50x before it, 1.45x with it; session 5).
const windowMinRows = 3

// parseWindowRows reads REEL_WINDOW_CUBLAS: the fewest rows (1 to
// matvecMaxRows) of a product of 16-bit weights that cuBLAS computes as a
// window, or 0 for never (every window on the matvec kernels); "" is the
// default, windowMinRows.
func parseWindowRows(v string) (int, error) {
	if v == "" {
		return windowMinRows, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > matvecMaxRows {
		return 0, fmt.Errorf("%q: want the fewest rows that take cuBLAS, 1 to %d, or 0 for never", v, matvecMaxRows)
	}
	return n, nil
}

// windowed reports whether a product of rows rows (at most matvecMaxRows)
// of weights of type wt (wtype's code) goes to cuBLAS as a window: bf16 or
// f16 weights, cuBLAS loaded, and at least the tuning's rows (mvTuning's
// winRows, else the backend's).
func (be *Backend) windowed(wt int32, rows int) bool {
	minRows := be.winRows
	if be.mv.winRows != 0 {
		minRows = be.mv.winRows
	}
	return be.blas != nil && (wt == 1 || wt == 2) && minRows > 0 && rows >= minRows && rows > 0 && rows <= matvecMaxRows
}

// winAlign aligns each part of a window's scratch (be.win): the GEMMs'
// outputs (f32 [2R, n] a weight), x split in 16 bits (u16 [2R, k]: the hi
// rows, then the lo rows) and the rows' unscale (f32 [R]).
const winAlign = 256

// winScratch gives be.win's memory cut into parts of the given sizes in
// bytes, each aligned to winAlign.
func (be *Backend) winScratch(sizes ...int) ([]cu.DevicePtr, error) {
	total := 0
	for _, n := range sizes {
		total += (n + winAlign - 1) / winAlign * winAlign
	}
	p, err := be.reuse(&be.win, total)
	if err != nil {
		return nil, err
	}
	out := make([]cu.DevicePtr, len(sizes))
	off := 0
	for i, n := range sizes {
		out[i] = p.Offset(uint64(off))
		off += (n + winAlign - 1) / winAlign * winAlign
	}
	return out, nil
}

// winHalf appends win_half: x [rows, k] (divided by its rows' norms with
// norm) split hi + lo in weight type wt into h [2·rows, k], its rows'
// unscale into us.
func (s *steps) winHalf(x, h, us cu.DevicePtr, rows, k int, wt int32, norm *float32) {
	nrm, eps := int32(0), float32(0)
	if norm != nil {
		nrm, eps = 1, *norm
	}
	s.add("win_half", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threadsFor((k+3)/4, 1024), 1, 1}, 0,
		x, h, us, int32(rows), int32(k), wt, nrm, eps)
}

// winGemms appends the GEMMs of a window: c_i [2·rows, n_i] = h [2·rows,
// k] · w_iᵀ for the weights of segs into cs, one gemm16 per shape in the
// segments' order (weights of one shape whose addresses step evenly are
// one batched call).
func (be *Backend) winGemms(s *steps, h cu.DevicePtr, segs []mvSeg, cs []cu.DevicePtr, rows, k int, wt int32) {
	done := make([]bool, len(segs))
	for i, sg := range segs {
		if done[i] || sg.n == 0 {
			continue
		}
		var ws []*Buffer
		var ys []cu.DevicePtr
		for j := i; j < len(segs); j++ {
			if !done[j] && segs[j].n == sg.n {
				done[j] = true
				ws, ys = append(ws, segs[j].w), append(ys, cs[j])
			}
		}
		be.gemm16(s, [2]cu.DevicePtr{h, 0}, ws, ys, cu.F32, 2*rows, k, sg.n, wt)
	}
}

// gluOutputs gives the gate's and the up GEMM's outputs of f features
// over rows rows, one after the other from c in the order of their
// weights' addresses (gluOrder's reason: the two are then one batched
// call).
func gluOutputs(c cu.DevicePtr, wg, wu *Buffer, rows, f int) (gOut, uOut cu.DevicePtr) {
	second := c.Offset(uint64(4 * 2 * rows * f))
	if wu.ptr < wg.ptr {
		return second, c
	}
	return c, second
}

// window appends a product of 16-bit weights over rows rows (2..8) as
// cuBLAS computes it: y_s[rows, n_s] = x[rows, k] · w_sᵀ for up to mvSegs
// weights of type wt (segs, as matvec takes them), or with swiglu (gate
// and up in segs, no outputs there) silu(g·sg)·(u·su) into swiglu[0], or
// with norm each row of x divided by sqrt(Σx² + eps) first (norm_matmul).
// Three steps: win_half, one GEMM of 2·rows rows a weight (winGemms),
// win_sum.
func (be *Backend) window(s *steps, x *Buffer, segs []mvSeg, rows, k int, wt int32, swiglu *[3]*Buffer, norm *float32) error {
	if len(segs) > mvSegs || swiglu != nil && (len(segs) != 2 || norm != nil) {
		return fmt.Errorf("window: %d weights, swiglu %v, norm %v", len(segs), swiglu != nil, norm != nil)
	}
	nf := 0
	for _, sg := range segs {
		nf += sg.n
	}
	units := nf
	if swiglu != nil {
		units = segs[0].n
		if segs[1].n != units {
			return fmt.Errorf("window: gate of %d and up of %d features", units, segs[1].n)
		}
	}
	if rows == 0 || units == 0 {
		return nil
	}
	p, err := be.winScratch(4*2*rows*nf, 2*2*rows*k, 4*rows)
	if err != nil {
		return err
	}
	c, h, us := p[0], p[1], p[2]
	s.winHalf(x.ptr, h, us, rows, k, wt, norm)
	var cs [mvSegs]cu.DevicePtr
	if swiglu != nil {
		cs[0], cs[1] = gluOutputs(c, segs[0].w, segs[1].w, rows, units)
	} else {
		off := 0
		for i, sg := range segs {
			cs[i] = c.Offset(uint64(4 * 2 * rows * off))
			off += sg.n
		}
	}
	be.winGemms(s, h, segs, cs[:len(segs)], rows, k, wt)

	var y [mvSegs]cu.DevicePtr
	ends := [mvSegs - 1]int32{}
	var sg, su cu.DevicePtr
	if swiglu != nil {
		y[0], sg, su = swiglu[0].ptr, swiglu[1].ptr, swiglu[2].ptr
		nf = units
		ends = [mvSegs - 1]int32{int32(nf), int32(nf), int32(nf)}
	} else {
		for i, seg := range segs {
			y[i] = seg.y.ptr
		}
		ends = segEnds(segs, func(sg mvSeg) int { return sg.n })
	}
	s.winSum(cs, y, ends, rows, nf, us, sg, su)
	return nil
}

// winSum appends win_sum: the halves of the GEMMs' outputs cs added (and
// unscaled) into the outputs y, segments ending at ends of nf features;
// with sg and su not 0, the SwiGLU of cs[0] and cs[1] into y[0].
func (s *steps) winSum(cs, y [mvSegs]cu.DevicePtr, ends [mvSegs - 1]int32, rows, nf int, us, sg, su cu.DevicePtr) {
	g, b := grid1(int64(rows * nf))
	s.add("win_sum", g, b, 0, cs[0], cs[1], cs[2], cs[3], y[0], y[1], y[2], y[3], ends[0], ends[1], ends[2],
		int32(rows), int32(nf), us, sg, su)
}

// windowMLP appends a window's SwiGLU MLP with its activation's norm in
// the down product (swiglu_norm_matmul) on cuBLAS: win_half of x, the gate
// and up GEMMs (one batched call where their addresses allow),
// win_glu_half (SwiGLU, the norm and the split of the down product's
// input in one row kernel), the down GEMM and win_sum: five launches where
// matmul_swiglu's window and norm_matmul's would take six, the gated
// activation never written in f32. wt and wtd are the gate's and the
// down weight's types (both windowed).
func (be *Backend) windowMLP(s *steps, x, wg, wu, sg, su, wd, y *Buffer, rows, k, f, nOut int, wt, wtd int32, eps float32) error {
	p, err := be.winScratch(4*2*2*rows*f, 2*2*rows*k, 4*rows, 2*2*rows*f, 4*2*rows*nOut, 4*rows)
	if err != nil {
		return err
	}
	cgu, hx, usx, ha, cd, usa := p[0], p[1], p[2], p[3], p[4], p[5]
	s.winHalf(x.ptr, hx, usx, rows, k, wt, nil)
	gOut, uOut := gluOutputs(cgu, wg, wu, rows, f)
	be.winGemms(s, hx, []mvSeg{{w: wg, n: f}, {w: wu, n: f}}, []cu.DevicePtr{gOut, uOut}, rows, k, wt)
	s.add("win_glu_half", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threadsFor((f+snhPer-1)/snhPer, 1024), 1, 1}, 0,
		gOut, uOut, usx, sg.ptr, su.ptr, ha, usa, int32(rows), int32(f), wtd, eps)
	be.winGemms(s, ha, []mvSeg{{w: wd, n: nOut}}, []cu.DevicePtr{cd}, rows, f, wtd)
	s.winSum([mvSegs]cu.DevicePtr{cd}, [mvSegs]cu.DevicePtr{y.ptr}, [mvSegs - 1]int32{int32(nOut), int32(nOut), int32(nOut)},
		rows, nOut, usa, 0, 0)
	return nil
}
