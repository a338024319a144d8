package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// matvecMaxRows is the most rows the bandwidth-bound matvec kernels take
// (MV_MAXR in matvec.cu); more rows go to cuBLAS (the tiled kernel without
// it).
const matvecMaxRows = 8

// The matvec kernels' compile-time shape (matvec.cu): mvLoads 16-byte loads
// per lane per iteration (MV_LOADS), at most mvMaxWarps warps a block
// (MV_MAXWARPS) and mvSegs weights a launch (MV_SEGS).
const (
	mvLoads    = 2
	mvMaxWarps = 8
	mvSegs     = 4
)

// The default launch: mvWarps warps a block, units of mvFeats features,
// and at most about mvWaveWarps warps an SM (one wave at the kernels'
// register use). With mvLoads these measured best on the H200 at Dory's
// one-row decode shapes, sweeping MV_LOADS 2..16, 4 or 8 warps a block,
// split 1..8 and 1 or 2 features a unit (TestMatVecSweep).
const (
	mvWarps     = 4
	mvFeats     = 2
	mvWaveWarps = 40
)

// mvTuning overrides the matvec launch shape (tests and tuning); a zero
// field takes the default.
type mvTuning struct {
	loads int // MV_LOADS the kernels were compiled with (0: mvLoads)
	warps int // warps a block, a power of two up to mvMaxWarps (0: mvWarps)
	split int // warps splitting one unit's K, a power of two up to warps (0: mvPlan's)
	feats int // features a unit (1 or 2; 4 too for quant_matmul's qmvs) for plain products (0: mvFeats, qmvFeats)
	// quant_matmul's matvec (qmvPlan): quantOld takes the qmv_* kernels (a
	// warp a feature) wherever it could take the qmvs_* ones; quantGrid,
	// when positive, caps the grid at that many blocks an SM, each looping
	// over blocks of units; quantNoStage reads x through L1 rather than
	// staging it in shared memory.
	quantOld     bool
	quantGrid    int
	quantNoStage bool
	// quantNoMMA takes the CUDA-core kernels (qmvs_*) where the tensor-core
	// ones (qmma_*, qmmaPlan) could run; for them warps and split are the
	// block's warps (up to qmmaMaxWarps) and the warps sharing a tile.
	quantNoMMA bool
	// The tensor-core products of 16-bit weights (mvmma_*, mvmmaPlan):
	// noMVMMA keeps every row count on mv_*; mmaMinRows, when positive,
	// is the fewest rows that take mvmma (else mvmmaMinRows); mmaDirect
	// has bf16's lanes read x rather than stage it in shared memory.
	noMVMMA    bool
	mmaMinRows int
	mmaDirect  bool
}

// mvShape is a matvec launch: units of feats features, split warps each,
// warps warps a block.
type mvShape struct {
	feats, split, warps, blocks int
}

// mvPlan chooses the launch of a matvec over units units of k inputs, elems
// elements to a 16-byte vector (1 when the kernel reads elements one by
// one) on sms multiprocessors: each unit's K split across as many warps as
// keep the grid within one wave of resident warps (mvWaveWarps an SM; a
// second wave costs more than a warp's longer stream) while every warp
// still has a chunk (32 vectors) to read, and at least ceil(k/maxChunk)
// warps when maxChunk is positive.
func mvPlan(t mvTuning, units, feats, k, elems, maxChunk, sms int) mvShape {
	warps := t.warps
	if warps <= 0 {
		warps = mvWarps
	}
	warps = min(pow2Floor(warps), mvMaxWarps)
	chunks := max(1, (k/max(1, elems)+31)/32)
	split := t.split
	if split <= 0 {
		split = 1
		for split*2 <= warps && split*2 <= chunks && units*split*2 <= mvWaveWarps*sms {
			split *= 2
		}
		if maxChunk > 0 {
			split = max(split, (k+maxChunk-1)/maxChunk)
		}
	}
	split = max(1, min(pow2Ceil(split), warps))
	group := warps / split
	return mvShape{feats: feats, split: split, warps: warps, blocks: (units + group - 1) / group}
}

func pow2Ceil(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

func pow2Floor(n int) int {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}

// wtypeNames are the kernels' names of the weight types (wtype's codes).
var wtypeNames = [...]string{"f32", "bf16", "f16"}

// mvSeg is one weight of a matvec launch and its output.
type mvSeg struct {
	w, y *Buffer
	n    int // rows (output features)
}

// matvec appends one launch computing y_s[rows, n_s] = x[rows, k] · w_sᵀ
// for up to mvSegs weights of one stored type; with swiglu (two weights,
// gate and up, and the scales sg, su) it writes silu(g·sg)·(u·su) into
// swiglu's output instead; with norm (its epsilon) the product of each row
// is divided by sqrt(Σx² + eps) of that row (norm_matmul).
func (be *Backend) matvec(s *steps, x *Buffer, segs []mvSeg, rows, k int, swiglu *[3]*Buffer, norm *float32) error {
	wt, err := wtype(segs[0].w)
	if err != nil {
		return err
	}
	elems := 8
	if wt == 0 {
		elems = 4
	}
	vec := int32(0)
	if k%elems == 0 && x.ptr%16 == 0 {
		vec = 1
	}
	var w [mvSegs]cu.DevicePtr
	var y [mvSegs]cu.DevicePtr
	ends := [mvSegs - 1]int32{}
	nf := 0
	for i, sg := range segs {
		if t, err := wtype(sg.w); err != nil || t != wt {
			return fmt.Errorf("weight %d stored as %s, weight 0 as %s", i, sg.w.store, segs[0].w.store)
		}
		if sg.w.ptr%16 != 0 {
			vec = 0
		}
		w[i] = sg.w.ptr
		if sg.y != nil {
			y[i] = sg.y.ptr
		}
		nf += sg.n
		if i < mvSegs-1 {
			ends[i] = int32(nf)
		}
	}
	for i := len(segs); i < mvSegs-1; i++ {
		ends[i] = int32(nf)
	}
	if vec == 0 {
		elems = 1
	}
	rb := 1
	if rows > 1 {
		rb = matvecMaxRows
	}
	var name string
	var sc [2]cu.DevicePtr
	var shape mvShape
	units := nf
	if swiglu != nil {
		units = segs[0].n
	}
	if mm, ok := mvmmaPlan(be.mv, wt, rows, k, units, vec == 1, be.kernels.sms); ok {
		if swiglu != nil {
			y[0] = swiglu[0].ptr
			ends = [mvSegs - 1]int32{int32(units), int32(units), int32(units)}
			sc = [2]cu.DevicePtr{swiglu[1].ptr, swiglu[2].ptr}
		}
		xsm := int32(0)
		if mm.shared > 0 {
			xsm = 1
		}
		args := []any{x.ptr, int32(rows), int32(k), int32(units), int32(mm.split), vec,
			w[0], w[1], w[2], w[3], y[0], y[1], y[2], y[3], ends[0], ends[1], ends[2], sc[0], sc[1], xsm}
		name := mm.name
		if norm != nil {
			if swiglu != nil {
				return fmt.Errorf("matvec: a normalized product with a swiglu epilogue")
			}
			name = "mvmma_n_" + name[len("mvmma_"):]
			args = append(args, *norm)
		} else if swiglu != nil {
			name = "mvmma_sw_" + name[len("mvmma_"):]
		}
		s.add(name, [3]uint32{uint32(mm.grid), 1, 1}, [3]uint32{uint32(32 * mm.warps), 1, 1}, uint32(mm.shared), args...)
		return nil
	}
	if swiglu != nil {
		nf = segs[0].n
		y[0] = swiglu[0].ptr
		ends = [mvSegs - 1]int32{int32(nf), int32(nf), int32(nf)}
		sc = [2]cu.DevicePtr{swiglu[1].ptr, swiglu[2].ptr}
		name = fmt.Sprintf("mvsw_%s_r%d", wtypeNames[wt], rb)
		shape = mvPlan(be.mv, nf, 2, k, elems, be.opts.MatvecMaxChunk, be.kernels.sms)
	} else {
		feats := mvFeats
		if be.mv.feats == 1 || be.mv.feats == 2 {
			feats = be.mv.feats
		}
		shape = mvPlan(be.mv, (nf+feats-1)/feats, feats, k, elems, be.opts.MatvecMaxChunk, be.kernels.sms)
		name = fmt.Sprintf("mv_%s_r%d_f%d", wtypeNames[wt], rb, feats)
	}
	args := []any{x.ptr, int32(rows), int32(k), int32(nf), int32(shape.split), vec,
		w[0], w[1], w[2], w[3], y[0], y[1], y[2], y[3], ends[0], ends[1], ends[2], sc[0], sc[1]}
	if norm != nil {
		if swiglu != nil {
			return fmt.Errorf("matvec: a normalized product with a swiglu epilogue")
		}
		name = "mvn_" + name[len("mv_"):]
		args = append(args, *norm)
	}
	s.add(name, [3]uint32{uint32(shape.blocks), 1, 1}, [3]uint32{uint32(32 * shape.warps), 1, 1}, 0, args...)
	return nil
}

// mvKernelNames are the matvec kernels' names (matvec.cu's instances).
func mvKernelNames() []string {
	var out []string
	for _, t := range wtypeNames {
		for _, rb := range []int{1, matvecMaxRows} {
			for _, f := range []int{1, 2} {
				out = append(out, fmt.Sprintf("mv_%s_r%d_f%d", t, rb, f), fmt.Sprintf("mvn_%s_r%d_f%d", t, rb, f))
			}
			out = append(out, fmt.Sprintf("mvsw_%s_r%d", t, rb))
		}
	}
	return out
}

// checkProduct checks x, w and y against rows of k -> nOut features.
func checkProduct(x, w, y *Buffer, rows, k, nOut int) error {
	if err := f32("x", x); err != nil {
		return err
	}
	if err := f32("output", y); err != nil {
		return err
	}
	if _, err := wtype(w); err != nil {
		return err
	}
	if x.n != rows*k || w.n != nOut*k || y.n != rows*nOut {
		return fmt.Errorf("x of %d, w of %d, output of %d elements do not fit %d rows of %d -> %d", x.n, w.n, y.n, rows, k, nOut)
	}
	return nil
}

// matmul appends y[rows, nOut] = x[rows, k] · w[nOut, k]ᵀ to s.
func (be *Backend) matmul(s *steps, x, w, y *Buffer, rows, k, nOut int) error {
	if err := checkProduct(x, w, y, rows, k, nOut); err != nil {
		return err
	}
	if rows <= matvecMaxRows && rows > 0 && nOut > 0 && k > 0 {
		return be.matvec(s, x, []mvSeg{{w: w, y: y, n: nOut}}, rows, k, nil, nil)
	}
	return be.products(s, x, []mvSeg{{w: w, y: y, n: nOut}}, rows, k, nil)
}

// products appends y_s[rows, n_s] = x[rows, k] · w_sᵀ for every weight of
// segs (checked by the caller), for rows past matvecMaxRows: cuBLAS, with
// x converted to 16 bits once for all weights of one 16-bit type. With eps
// each row of x is first divided by sqrt(Σx² + eps) (norm_matmul), fused
// into that conversion.
func (be *Backend) products(s *steps, x *Buffer, segs []mvSeg, rows, k int, eps *float32) error {
	if rows == 0 {
		return nil
	}
	if k == 0 {
		ctx := be.ctx
		for _, sg := range segs {
			y := sg.y
			s.work = append(s.work, func() error { return ctx.MemsetAsync(y.ptr, 0, uint64(4*y.n)) })
		}
		return nil
	}
	// f32 weights (and every weight without cuBLAS) read x as it is, or,
	// for a normalized product, normalized into f32 scratch.
	var normed *Buffer
	xFor := func() (*Buffer, error) {
		if eps == nil {
			return x, nil
		}
		if normed == nil {
			p, err := be.reuse(&be.normed, 4*rows*k)
			if err != nil {
				return nil, err
			}
			normed = &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * k, bytes: 4 * rows * k, be: be}
			s.add("norm_rows_long", [3]uint32{uint32(rows), 1, 1}, [3]uint32{256, 1, 1}, 0,
				x.ptr, cu.DevicePtr(0), int32(0), normed.ptr, int32(k), int32(k), int32(0), *eps, int32(0))
		}
		return normed, nil
	}
	halves := map[int32][2]cu.DevicePtr{} // x in 16 bits by weight type: hi, lo
	for _, sg := range segs {
		w, y, nOut := sg.w, sg.y, sg.n
		if nOut == 0 {
			continue
		}
		wt, err := wtype(w)
		if err != nil {
			return err
		}
		if be.blas == nil || wt == 0 {
			xs, err := xFor()
			if err != nil {
				return err
			}
			if be.blas != nil {
				blas := be.blas
				s.work = append(s.work, func() error {
					return blas.MatMulRowMajor(rows, nOut, k, xs.ptr, k, cu.F32, w.ptr, k, cu.F32, y.ptr, nOut, cu.F32)
				})
				continue
			}
			s.add("matmul_tiled", [3]uint32{uint32((nOut + 15) / 16), uint32((rows + 15) / 16), 1}, [3]uint32{16, 16, 1}, 0,
				xs.ptr, w.ptr, wt, y.ptr, int32(rows), int32(nOut), int32(k))
			continue
		}
		h, ok := halves[wt]
		if !ok {
			if h, err = be.toHalf(s, x, rows, k, wt, eps, len(halves)); err != nil {
				return err
			}
			halves[wt] = h
		}
		be.gemm16(s, h, w, y, rows, k, nOut, wt)
	}
	return nil
}

// toHalf appends the conversion of x (normalized by eps when not nil) to
// 16-bit numbers of weight type wt for cuBLAS, which multiplies like types
// only: x = hi + lo, both 16-bit, so that y = W·hi + W·lo keeps about 16
// bits of each activation, with PrecisionExact; else only hi (lo is 0), one
// rounding, as PyTorch, vLLM and llama.cpp multiply. slot picks one of two
// scratch areas (a product of two weight types keeps both).
func (be *Backend) toHalf(s *steps, x *Buffer, rows, k int, wt int32, eps *float32, slot int) ([2]cu.DevicePtr, error) {
	parts := 1
	if be.opts.Precision == PrecisionExact {
		parts = 2
	}
	n := rows * k
	p, err := be.reuse(&be.half[slot], 2*parts*n)
	if err != nil {
		return [2]cu.DevicePtr{}, err
	}
	h := [2]cu.DevicePtr{p, 0}
	if parts == 2 {
		h[1] = p.Offset(uint64(2 * n))
	}
	if eps != nil {
		s.add("to_half_norm", [3]uint32{uint32(rows), 1, 1}, [3]uint32{256, 1, 1}, 0, x.ptr, h[0], h[1], int32(k), wt, *eps)
		return h, nil
	}
	g, b := grid1(int64(n))
	s.add("to_half", g, b, 0, x.ptr, h[0], h[1], int64(n), wt)
	return h, nil
}

// gemm16 appends y[rows, nOut] = (hi + lo)[rows, k] · w[nOut, k]ᵀ with
// cuBLAS (lo 0: hi alone), accumulating in f32.
func (be *Backend) gemm16(s *steps, h [2]cu.DevicePtr, w, y *Buffer, rows, k, nOut int, wt int32) {
	dt := cu.BF16
	if wt == 2 {
		dt = cu.F16
	}
	blas := be.blas
	s.work = append(s.work, func() error {
		for p, in := range h {
			if in == 0 {
				continue
			}
			err := blas.GemmEx(cu.Gemm{
				TransA: cu.Trans, TransB: cu.NoTrans,
				M: nOut, N: rows, K: k,
				Alpha: 1, Beta: float32(p),
				A: w.ptr, AType: dt, LDA: k,
				B: in, BType: dt, LDB: k,
				C: y.ptr, CType: cu.F32, LDC: nOut,
				Compute: cu.Compute32F,
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// bindMatMul binds matmul and grouped_matmul. Up to matvecMaxRows rows,
// every run of up to mvSegs consecutive weights of one stored type is one
// launch (Dory's q/k/v/g: one); more rows take one product per weight.
func bindMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) < 2 || len(out) != len(in)-1 {
		return nil, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
	}
	xv := n.Inputs[0]
	k, rows := xv.Shape.Last(), xv.Shape.Rows()
	s := be.newSteps()
	var segs, many []mvSeg
	flush := func() error {
		if len(segs) == 0 {
			return nil
		}
		err := be.matvec(s, in[0], segs, rows, k, nil, nil)
		segs = segs[:0]
		return err
	}
	for i, wv := range n.Inputs[1:] {
		if len(wv.Shape) != 2 || wv.Shape[1] != k {
			return nil, fmt.Errorf("weight %d %s does not take %d features", i, wv, k)
		}
		nOut := wv.Shape[0]
		w, y := in[i+1], out[i]
		if err := checkProduct(in[0], w, y, rows, k, nOut); err != nil {
			return nil, fmt.Errorf("weight %d: %w", i, err)
		}
		if rows == 0 || nOut == 0 || k == 0 || rows > matvecMaxRows {
			many = append(many, mvSeg{w: w, y: y, n: nOut})
			continue
		}
		if len(segs) == mvSegs || len(segs) > 0 && segs[0].w.store != w.store {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		segs = append(segs, mvSeg{w: w, y: y, n: nOut})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := be.products(s, in[0], many, rows, k, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// bindMatMulSwiGLU binds matmul_swiglu: up to matvecMaxRows rows (gate and
// up stored alike) one launch that writes the gated activation directly;
// more rows the gate and up products into scratch, then swiglu.
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
	if rows > 0 && rows <= matvecMaxRows && k > 0 && f > 0 && in[1].store == in[2].store {
		for i := range 2 {
			if err := checkProduct(in[0], in[1+i], out[0], rows, k, f); err != nil {
				return nil, fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
			}
		}
		if in[3].n != f || in[4].n != f {
			return nil, fmt.Errorf("scales of %d and %d elements for %d features", in[3].n, in[4].n, f)
		}
		segs := []mvSeg{{w: in[1], n: f}, {w: in[2], n: f}}
		if err := be.matvec(s, in[0], segs, rows, k, &[3]*Buffer{out[0], in[3], in[4]}, nil); err != nil {
			return nil, err
		}
		return s, nil
	}
	p, err := be.reuse(&be.glu, 8*rows*f)
	if err != nil {
		return nil, err
	}
	tmp := make([]*Buffer, 2)
	for i := range tmp {
		tmp[i] = &Buffer{ptr: p.Offset(uint64(4 * i * rows * f)), dt: graph.F32, store: graph.F32, n: rows * f, bytes: 4 * rows * f, be: be}
		if err := checkProduct(in[0], in[1+i], tmp[i], rows, k, f); err != nil {
			return nil, fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
		}
	}
	if rows <= matvecMaxRows {
		for i := range tmp {
			if err := be.matmul(s, in[0], in[1+i], tmp[i], rows, k, f); err != nil {
				return nil, fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
			}
		}
	} else if err := be.products(s, in[0], []mvSeg{{w: in[1], y: tmp[0], n: f}, {w: in[2], y: tmp[1], n: f}}, rows, k, nil); err != nil {
		return nil, err
	}
	return be.swiglu(tmp[0], tmp[1], in[3], in[4], out[0], s)
}
