package cuda

import (
	"fmt"
	"slices"
	"sort"

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
	// quantMMARows, when positive, is the fewest rows that take qmma (else
	// qmmaMinRows).
	quantNoMMA   bool
	quantMMARows int
	// quantRow takes every one-row product (plain and fused) whose row of
	// codes fits qmvrVecs vectors a lane to the qmvr kernels (a warp MF
	// whole rows; REEL_QMV_ROW=1), quantNoRow none of them
	// (REEL_QMV_ROW=0), rather than qmvRowDefault's choice; for them feats
	// is 1 or 2 (0: qmvrFeats) and warps the block's warps (0: qmvrWarps).
	quantRow, quantNoRow bool
	// quantNoStaged keeps one-row products on the f32 kernels rather than
	// those that stage x narrow (qmvx kernels, qmvxPlan; REEL_QMV_STAGED=0);
	// qmvx, when set, is the staged launch's warps a block, blocks an SM and
	// features a unit (REEL_QMVX_SHAPE; 0 for qmvxPlan's choice), before
	// warps, quantGrid and feats.
	quantNoStaged bool
	qmvx          [3]int
	// slerpStaged computes the slerp before a one-row quantized product as
	// the staged kernel stages its x (the slerp forms qmvsg*, qmvssw*;
	// REEL_SLERP_STAGED=1), rather than as its own launch.
	slerpStaged bool
	// qkvFold takes qkv_attention_gate of one row as the attention's
	// launches only, its blocks preparing their queries and the key and
	// value rows (attn_prep_*; REEL_QKV_ATTN=1), rather than qkv_prep's
	// launch first. (A field of the decode tuning, beside the products'.)
	qkvFold bool
	// prefetch, when positive, is the bytes of a matvec launch's weights
	// its warps ask L2 for before they wait on the kernel before it
	// (mvPrefetch; REEL_MV_PREFETCH_MB); 0 for only their first two
	// batches.
	prefetch int
	// winRows, when not 0, overrides the fewest rows of a product of
	// 16-bit weights that cuBLAS computes as a window (Backend.winRows,
	// REEL_WINDOW_CUBLAS); negative: never (the matvec kernels above).
	winRows int
}

// mvPrefetch is the chunks (32 16-byte vectors of each of a unit's rows)
// each warp of a matvec asks L2 for before it waits on the kernel before
// it (matvec.cu's pf): all of its chunks when the launch's weightBytes fit
// budget bytes (mvTuning.prefetch, REEL_MV_PREFETCH_MB), that share of
// them when they do not, and with no budget (0, the default) none past
// the kernel's first two batches. The idea: the kernels before a product
// are mostly latency-bound (attention, the residual), so what a product
// asks for during them is memory's work done before its own time starts.
// Measured on the H200 it is not a win, so it is off (session 11, device
// runs 5 and 6, each one command, by default against a budget): Dory 4B
// bf16 230.0, 228.8, 228.9 and 233.6 tok/s without, 230.5, 226.1 and
// 225.4 with 16 MB, 217.9 and 214.1 with 32, 203.0 with 64 (its
// latency-bound kernels slow down beside the prefetches: the residual's
// 4.0 µs a launch became 5.7, the attention finish's 5.2 became 7.0);
// qwen4-12l 418.3, 428.5 and 422.1 without, 437.6 and 430.0 with 32 MB,
// 428.3 and 440.6 with 16, 434.1 with 8: within the runs' spread. The
// staged quantized products asking for all their codes so (run 5) lost
// too: q4 273.4 and 269.8 tok/s without, 266.0 and 266.2 with; FP8 241.3
// against 228.2.
func mvPrefetch(budget, weightBytes, chunks int) int32 {
	if budget <= 0 || weightBytes <= 0 || chunks <= 0 {
		return 0
	}
	if weightBytes <= budget {
		return int32(chunks)
	}
	return int32(int64(chunks) * int64(budget) / int64(weightBytes))
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

// isPow2 reports whether n is a power of two (1, 2, 4, ...).
func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func pow2Floor(n int) int {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}

// wtypeNames are the kernels' names of the weight types (wtype's codes).
var wtypeNames = [...]string{"f32", "bf16", "f16"}

// segEnds gives the ends of segments' virtual features, the e0..e2 of the
// kernels that take up to mvSegs weights as one virtual matrix: the running
// sums of the segments' features (n), the last repeated past len(segs).
func segEnds[S any](segs []S, n func(S) int) [mvSegs - 1]int32 {
	var ends [mvSegs - 1]int32
	e := 0
	for i := range ends {
		if i < len(segs) {
			e += n(segs[i])
		}
		ends[i] = int32(e)
	}
	return ends
}

// mvSeg is one weight of a matvec launch and its output.
type mvSeg struct {
	w, y *Buffer
	n    int // rows (output features)
}

// matvec appends one launch computing y_s[rows, n_s] = x[rows, k] · w_sᵀ
// for up to mvSegs weights of one stored type; with swiglu (two weights,
// gate and up, and the scales sg, su) it writes silu(g·sg)·(u·su) into
// swiglu's output instead; with norm (its epsilon) the product of each row
// is divided by sqrt(Σx² + eps) of that row (norm_matmul). A window of
// 16-bit weights (windowed: windowMinRows to 8 rows by default) goes to
// cuBLAS instead (window); every other product, and every window the
// cuBLAS route refuses (f32 weights, no cuBLAS, REEL_WINDOW_CUBLAS=0,
// fewer rows), takes the CUDA-core kernels (mv_*, mvsw_*, mvn_*:
// matvec.cu).
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
	}
	// Loaded weights only (never a kernel's output) may be read before the
	// kernel waits on the previous one (matvec.cu's MV_EARLY).
	if vec == 1 && !slices.ContainsFunc(segs, func(sg mvSeg) bool { return !sg.w.weight }) {
		vec = 3
	}
	ends := segEnds(segs, func(sg mvSeg) int { return sg.n })
	if k > 0 && be.windowed(wt, rows) {
		return be.window(s, x, segs, rows, k, wt, swiglu, norm)
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
	pf := int32(0)
	if vec != 0 {
		es := 2
		if wt == 0 {
			es = 4
		}
		rowsOf := nf
		if swiglu != nil {
			rowsOf = 2 * nf
		}
		chunks := ((k/elems+31)/32 + shape.split - 1) / shape.split
		pf = mvPrefetch(be.mv.prefetch, rowsOf*k*es, chunks)
	}
	args := []any{x.ptr, int32(rows), int32(k), int32(nf), int32(shape.split), pf, vec,
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
		for _, sg := range segs {
			s.zero(sg.y)
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
	if x.half != nil && eps == nil {
		halves[x.half.wt] = x.half.h
	}
	type shape struct {
		wt   int32
		nOut int
	}
	var order []shape
	batches := map[shape][]mvSeg{} // 16-bit products by type and shape, in order
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
		if _, ok := halves[wt]; !ok {
			h, err := be.toHalf(s, x, rows, k, wt, eps, len(halves))
			if err != nil {
				return err
			}
			halves[wt] = h
		}
		sh := shape{wt, nOut}
		if batches[sh] == nil {
			order = append(order, sh)
		}
		batches[sh] = append(batches[sh], sg)
	}
	for _, sh := range order {
		var ws []*Buffer
		var ys []cu.DevicePtr
		for _, sg := range batches[sh] {
			ws, ys = append(ws, sg.w), append(ys, sg.y.ptr)
		}
		be.gemm16(s, halves[sh.wt], ws, ys, cu.F32, rows, k, sh.nOut, sh.wt)
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
	n := rows * k
	h, err := be.halfBuf(slot, n)
	if err != nil {
		return h, err
	}
	if eps != nil {
		s.add("to_half_norm", [3]uint32{uint32(rows), 1, 1}, [3]uint32{256, 1, 1}, 0, x.ptr, h[0], h[1], int32(k), wt, *eps)
		return h, nil
	}
	g, b := grid1(int64(n))
	s.add("to_half", g, b, 0, x.ptr, h[0], h[1], int64(n), wt)
	return h, nil
}

// halfBuf gives scratch slot's room for n activations in 16 bits: hi, and
// lo with PrecisionExact (else 0).
func (be *Backend) halfBuf(slot, n int) ([2]cu.DevicePtr, error) {
	parts := 1
	if be.opts.Precision == PrecisionExact {
		parts = 2
	}
	p, err := be.reuse(&be.half[slot], 2*parts*n)
	if err != nil {
		return [2]cu.DevicePtr{}, err
	}
	h := [2]cu.DevicePtr{p, 0}
	if parts == 2 {
		h[1] = p.Offset(uint64(2 * n))
	}
	return h, nil
}

// gemm16 appends y_i[rows, nOut] = (hi + lo)[rows, k] · w_iᵀ for weights
// ws of one 16-bit type and shape [nOut, k] into ys (of type yt: f32, or
// the weights' type when lo is 0) with cuBLAS (lo 0: hi alone),
// accumulating in f32. Weights whose addresses and outputs' addresses step
// evenly (in address order; any two do) are one strided batched call
// (cublasGemmStridedBatchedEx), unless Options.NoBatchedGemm: the gate and
// up products, q and g, k and v.
func (be *Backend) gemm16(s *steps, h [2]cu.DevicePtr, ws []*Buffer, ys []cu.DevicePtr, yt cu.DataType, rows, k, nOut int, wt int32) {
	dt := cu.BF16
	if wt == 2 {
		dt = cu.F16
	}
	blas := be.blas
	for _, r := range gemmRuns(ws, ys, dt.Size(), yt.Size(), !be.opts.NoBatchedGemm && blas.CanBatch()) {
		s.work = append(s.work, func() error {
			for p, in := range h {
				if in == 0 {
					continue
				}
				err := blas.GemmEx(cu.Gemm{
					TransA: cu.Trans, TransB: cu.NoTrans,
					M: nOut, N: rows, K: k,
					Alpha: 1, Beta: float32(p),
					A: r.w, AType: dt, LDA: k,
					B: in, BType: dt, LDB: k,
					C: r.y, CType: yt, LDC: nOut,
					Compute: cu.Compute32F,
					Batch:   r.n, StrideA: r.strideW, StrideC: r.strideY,
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// gemmRun is one cuBLAS call of gemm16: n products, the first weight at w
// and output at y, each next one strideW and strideY elements on.
type gemmRun struct {
	w, y             cu.DevicePtr
	n                int
	strideW, strideY int64
}

// gemmRuns splits products of weights ws into outputs ys (elements of wsz
// and ysz bytes) into calls: with batch, runs of weights in address order
// whose weights and outputs both step by one positive stride each; else one
// call a product.
func gemmRuns(ws []*Buffer, ys []cu.DevicePtr, wsz, ysz int, batch bool) []gemmRun {
	idx := make([]int, len(ws))
	for i := range idx {
		idx[i] = i
	}
	if !batch {
		out := make([]gemmRun, len(ws))
		for i, w := range ws {
			out[i] = gemmRun{w: w.ptr, y: ys[i], n: 1}
		}
		return out
	}
	sort.SliceStable(idx, func(a, b int) bool { return ws[idx[a]].ptr < ws[idx[b]].ptr })
	var out []gemmRun
	for _, i := range idx {
		w, y := ws[i].ptr, ys[i]
		if len(out) > 0 {
			r := &out[len(out)-1]
			last := r.n - 1
			lw := r.w + cu.DevicePtr(int64(last)*r.strideW*int64(wsz))
			ly := r.y + cu.DevicePtr(int64(last)*r.strideY*int64(ysz))
			if w > lw && y > ly && uint64(w-lw)%uint64(wsz) == 0 && uint64(y-ly)%uint64(ysz) == 0 {
				dw, dy := int64(w-lw)/int64(wsz), int64(y-ly)/int64(ysz)
				if r.n == 1 || dw == r.strideW && dy == r.strideY {
					r.n, r.strideW, r.strideY = r.n+1, dw, dy
					continue
				}
			}
		}
		out = append(out, gemmRun{w: w, y: y, n: 1})
	}
	return out
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

// bindMatMulSwiGLU binds matmul_swiglu (matmulSwiGLU).
func bindMatMulSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) != 5 || len(out) != 1 {
		return nil, fmt.Errorf("matmul_swiglu: %d inputs and %d outputs", len(in), len(out))
	}
	xv, wg := n.Inputs[0], n.Inputs[1]
	s := be.newSteps()
	if err := be.matmulSwiGLU(s, in, out[0], xv.Shape.Rows(), xv.Shape.Last(), wg.Shape[0]); err != nil {
		return nil, err
	}
	return s, nil
}

// matmulSwiGLU appends y[rows, f] = swiglu(x·wgᵀ, x·wuᵀ, sg, su) for in =
// x, wg, wu, sg, su: up to matvecMaxRows rows (gate and up stored alike)
// one launch that writes the gated activation directly; more rows the gate
// and up products into scratch, then swiglu.
func (be *Backend) matmulSwiGLU(s *steps, in []*Buffer, y *Buffer, rows, k, f int) error {
	if err := f32All([]string{"sg", "su"}, in[3:5]); err != nil {
		return err
	}
	if rows > 0 && rows <= matvecMaxRows && k > 0 && f > 0 && in[1].store == in[2].store {
		for i := range 2 {
			if err := checkProduct(in[0], in[1+i], y, rows, k, f); err != nil {
				return fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
			}
		}
		if in[3].n != f || in[4].n != f {
			return fmt.Errorf("scales of %d and %d elements for %d features", in[3].n, in[4].n, f)
		}
		segs := []mvSeg{{w: in[1], n: f}, {w: in[2], n: f}}
		return be.matvec(s, in[0], segs, rows, k, &[3]*Buffer{y, in[3], in[4]}, nil)
	}
	tmp, err := be.gluScratch(rows, f, graph.F32)
	if err != nil {
		return err
	}
	for i := range tmp {
		if err := checkProduct(in[0], in[1+i], tmp[i], rows, k, f); err != nil {
			return fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
		}
	}
	if rows <= matvecMaxRows {
		for i := range tmp {
			if err := be.matmul(s, in[0], in[1+i], tmp[i], rows, k, f); err != nil {
				return fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
			}
		}
		_, err = be.swiglu(tmp[0], tmp[1], in[3], in[4], y, s)
		return err
	}
	g, u := gluOrder(in[1], in[2], tmp)
	if err := be.products(s, in[0], []mvSeg{{w: in[1], y: g, n: f}, {w: in[2], y: u, n: f}}, rows, k, nil); err != nil {
		return err
	}
	_, err = be.swiglu(g, u, in[3], in[4], y, s)
	return err
}

// gluOrder gives the gate's and the up product's scratch of glu (first and
// second, or second and first) in the order of their weights' addresses,
// so that the two products can be one batched call (gemmRuns).
func gluOrder(wg, wu *Buffer, glu [2]*Buffer) (g, u *Buffer) {
	if wu.ptr < wg.ptr {
		return glu[1], glu[0]
	}
	return glu[0], glu[1]
}

// gluScratch gives the gate and up products' scratch: two [rows, f]
// buffers of dt (f32, or a 16-bit type: the elements stored so), one after
// the other.
func (be *Backend) gluScratch(rows, f int, dt graph.DType) ([2]*Buffer, error) {
	size := 4
	if dt != graph.F32 {
		size = 2
	}
	p, err := be.reuse(&be.glu, 2*size*rows*f)
	if err != nil {
		return [2]*Buffer{}, err
	}
	var tmp [2]*Buffer
	for i := range tmp {
		tmp[i] = &Buffer{ptr: p.Offset(uint64(size * i * rows * f)), dt: graph.F32, store: dt, n: rows * f, bytes: size * rows * f, be: be}
	}
	return tmp, nil
}
