package cuda

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Products with quantized weights (quant_matmul): up to matvecMaxRows rows
// a bandwidth-bound matvec that dequantizes as it streams the codes: built
// as the bf16 matvec (split-K over the warps of a block, units of features
// sharing x, the launch shape by mvPlan; qmvs_*, kernels/quant.cu) when
// the codes can be read as 16-byte vectors, else a warp a feature reading
// them element by element (qmv_*, also the tuning's quantOld). More rows
// (a prompt chunk, quantProducts) dequantize the weight whole into scratch
// the backend shares between all such products (one runs at a time on the
// stream), just before its product: in the 16-bit type of its format
// (quantHalf: dequant16_*, kernels/quant_prompt.cu) for matmul's
// tensor-core path (products: the activations rounded once to that type,
// cuBLAS), or in f32 for an f32 GEMM with PrecisionExact (dequant_f32).
// The quantized experts of quant_expert_matmul take expert_matmul's forms
// (moe.go): a warp per (unit, feature) streaming its expert's codes as qmv
// does (qmoe_warp_*), the units grouped by expert and a tiled f32 product
// that dequantizes the tiles of codes as it loads them (qmoe_tile_*: a few
// rows, or PrecisionExact), or over matvecMaxRows rows moe_expert_mma on
// the tensor cores reading the codes dequantized into the 16-bit type
// (qmoe_mma_*).

// quantBinders are the binders of the quantized products.
var quantBinders = map[string]binder{"quant_matmul": bindQuantMatMul, "quant_expert_matmul": bindQuantExpertMatMul}

// quantKernels are their kernels.
var quantKernels = append(append(append(append([]string{"qmv_f8_r1", "qmv_f8_r8", "qmv_i8_r1", "qmv_i8_r8", "qmv_u4_r1", "qmv_u4_r8", "dequant_f32",
	"qmoe_warp_f8", "qmoe_warp_i8", "qmoe_warp_u4", "qmoe_tile_f8", "qmoe_tile_i8", "qmoe_tile_u4"}, qmvsKernelNames()...), qmmaKernelNames()...),
	quantPromptKernelNames()...), append(append(qfuseKernelNames(), qmvrKernelNames()...), qmvxKernelNames()...)...)

// quantPromptKernelNames are the prompt products' kernels
// (kernels/quant_prompt.cu): for each format and 16-bit type, the
// dequantization for cuBLAS and the experts' tensor-core product.
func quantPromptKernelNames() []string {
	var out []string
	for _, q := range []string{"f8", "i8", "u4"} {
		for _, h := range wtypeNames[1:] {
			out = append(out, "dequant16_"+q+"_"+h, "qmoe_mma_"+q+"_"+h)
		}
	}
	return out
}

// quantHalf is the 16-bit type (wtype's code: 1 bf16, 2 f16) that a prompt
// product dequantizes codes of dt into, and rounds its activations to:
// the backend's quantHalfOverride when set (REEL_QUANT_HALF), else f16 for
// q8 and bf16 for FP8 and q4. q8's step (a group's largest weight / 127)
// is about twice bf16's at a typical weight, so bf16 would add about a
// tenth to its error variance; f16 (3 more bits) adds about 0.2 %, and
// q8's weights fit f16 as the f16 scales they are multiples of do (|w| ≤
// 127 · scale, the group's largest weight). FP8's scales are f32 of any
// exponent and its codes keep 4 significant bits, so bf16 keeps f32's
// range and adds 2⁻⁹ of a weight to a format whose own step is 2⁻³ of
// one; q4's own error is some 2,500 times bf16's, and bf16 keeps the
// activations in f32's range too (f16 overflows past 65504).
func (be *Backend) quantHalf(dt graph.DType) int32 {
	if be.quantHalfOverride != 0 {
		return be.quantHalfOverride
	}
	if dt == graph.I8 {
		return 2
	}
	return 1
}

// parseQuantHalf reads REEL_QUANT_HALF: "" (quantHalf by format), bf16 or
// f16 (every format).
func parseQuantHalf(v string) (int32, error) {
	switch v {
	case "":
		return 0, nil
	case "bf16":
		return 1, nil
	case "f16":
		return 2, nil
	}
	return 0, fmt.Errorf("REEL_QUANT_HALF %q: want bf16 or f16", v)
}

// quantF32 says whether prompt products with quantized weights compute in
// f32 (dequantized to f32, f32 GEMMs, the experts' f32 tiles):
// PrecisionExact, or the backend's quantPromptF32 (benchmarks comparing
// the two).
func (be *Backend) quantF32() bool {
	return be.opts.Precision == PrecisionExact || be.quantPromptF32
}

// quantWeight is a quantized matrix [nOut, k] as its products read it:
// codes w (stride bytes a row), scales sc of type st (wtype's code) in
// blocks of br x bc, scols blocks a row.
type quantWeight struct {
	w, sc             *Buffer
	code              int32  // the kernels' QT_* code
	name              string // the kernels' name of the format
	perVec            int    // codes in a 16-byte vector
	stride            int
	st, scols, br, bc int32
}

// quantProducts appends y_i[rows, n_i] = x[rows, k] · W_iᵀ for the
// quantized weight of every seg, for rows past matvecMaxRows (eps as
// products takes it: each row of x normalized first). With quantF32 each
// weight is dequantized to f32 into the backend's shared deq scratch and
// multiplied as it is (products' f32 path), one after the other. Else x is
// converted once for all weights of one 16-bit type (quantHalfX: the
// 16-bit copy x carries, made by a slerp before, when it is of that type),
// and the weights are taken in batches of one 16-bit type and shape (q and
// g, k and v; gate and up), in order: a batch is dequantized whole into
// the deq scratch (dequantBatch: one dequant16_* launch a weight) just
// before its products, which gemm16 takes as one strided batched cuBLAS
// call, as it takes 16-bit weights of one shape. The scratch holds the
// largest batch (Dory 4B's gate and up: 73 MB in bf16).
func (be *Backend) quantProducts(s *steps, x *Buffer, segs []qfuseSeg, rows, k int, eps *float32) error {
	if rows == 0 {
		return nil
	}
	if k == 0 {
		for _, sg := range segs {
			s.zero(sg.y)
		}
		return nil
	}
	if be.quantF32() {
		for _, sg := range segs {
			if sg.n == 0 {
				continue
			}
			q, nOut := sg.q, sg.n
			deq, err := be.reuse(&be.deq, 4*nOut*k)
			if err != nil {
				return err
			}
			g, b := grid1(int64(nOut) * int64(k))
			s.add("dequant_f32", g, b, 0, q.w.ptr, int64(q.stride), q.code, q.sc.ptr, q.st, q.scols, q.br, q.bc, deq, int32(nOut), int32(k))
			wb := &Buffer{ptr: deq, dt: graph.F32, store: graph.F32, n: nOut * k, bytes: 4 * nOut * k, be: be}
			if err := be.products(s, x, []mvSeg{{w: wb, y: sg.y, n: nOut}}, rows, k, eps); err != nil {
				return err
			}
		}
		return nil
	}
	type shape struct {
		ht int32
		n  int
	}
	var order []shape
	batches := map[shape][]qfuseSeg{}
	for _, sg := range segs {
		if sg.n == 0 {
			continue
		}
		sh := shape{be.quantHalf(sg.q.w.store), sg.n}
		if batches[sh] == nil {
			order = append(order, sh)
		}
		batches[sh] = append(batches[sh], sg)
	}
	hx := &quantHalfX{be: be, x: x, rows: rows, k: k, eps: eps}
	for _, sh := range order {
		b := batches[sh]
		xv, err := hx.view(s, b[0].q)
		if err != nil {
			return err
		}
		ws, err := be.dequantBatch(s, b, k, sh.ht)
		if err != nil {
			return err
		}
		if err := be.products(s, xv, ws, rows, k, hx.productEps()); err != nil {
			return err
		}
	}
	return nil
}

// deqAlign is the alignment of each weight in a batch of dequantized
// weights (dequantBatch) in the deq scratch.
const deqAlign = 256

// dequantBatch appends the dequantization of the weights of segs (each
// [sg.n, k], into 16-bit type ht) into one area of the deq scratch, in
// the order of their outputs' addresses (as given where an output is nil),
// so that gemmRuns, which wants the weights and the outputs of a batched
// call in one order, can take the products of equal shapes as one call;
// it gives each as a 16-bit weight with its output, in the order of segs.
func (be *Backend) dequantBatch(s *steps, segs []qfuseSeg, k int, ht int32) ([]mvSeg, error) {
	idx := make([]int, len(segs))
	for i := range idx {
		idx[i] = i
	}
	yptr := func(i int) cu.DevicePtr {
		if segs[i].y == nil {
			return 0
		}
		return segs[i].y.ptr
	}
	sort.SliceStable(idx, func(a, b int) bool { return yptr(idx[a]) < yptr(idx[b]) })
	offs := make([]int, len(segs))
	total := 0
	for _, i := range idx {
		offs[i] = total
		total += (2*segs[i].n*k + deqAlign - 1) / deqAlign * deqAlign
	}
	deq, err := be.reuse(&be.deq, total)
	if err != nil {
		return nil, err
	}
	store := graph.BF16
	if ht == 2 {
		store = graph.F16
	}
	out := make([]mvSeg, len(segs))
	for _, i := range idx {
		q, nOut := segs[i].q, segs[i].n
		p := deq.Offset(uint64(offs[i]))
		vec, per := int32(0), 1
		if k%q.perVec == 0 && int(q.bc)%q.perVec == 0 && q.stride%16 == 0 && q.w.ptr%16 == 0 {
			vec, per = 1, q.perVec
		}
		g, b := grid1(int64(nOut) * int64(k/per))
		s.add("dequant16_"+q.name+"_"+wtypeNames[ht], g, b, 0,
			q.w.ptr, int64(q.stride), q.sc.ptr, q.st, q.scols, q.br, q.bc, p, int32(nOut), int32(k), vec)
		out[i] = mvSeg{w: &Buffer{ptr: p, dt: graph.F32, store: store, n: nOut * k, bytes: 2 * nOut * k, be: be}, y: segs[i].y, n: nOut}
	}
	return out, nil
}

// qmvWarps is the warps (features) of a qmv block.
const qmvWarps = 8

// The split-K quantized matvec (qmvs_*, kernels/quant.cu): qmvLoads 16-byte
// code loads per lane per iteration (QMV_LOADS), at most qmvSharedMax bytes
// of x staged in shared memory (larger x is read through L1), and the
// features of a unit by format when the tuning names none: the unit's
// features share every x value a lane reads, and a 16-byte vector of 4-bit
// codes multiplies 32 of them, so q4 takes the most.
const (
	qmvLoads     = 4
	qmvSharedMax = 96 << 10
)

// qmvFeats are the default features of a qmvs unit, by the kernels' name of
// the format.
var qmvFeats = map[string]int{"f8": 2, "i8": 2, "u4": 4}

// qmvsKernelNames are the qmvs kernels' names (quant.cu's instances).
func qmvsKernelNames() []string {
	var out []string
	for _, q := range []string{"f8", "i8", "u4"} {
		for _, rb := range []int{1, matvecMaxRows} {
			for _, f := range []int{1, 2, 4} {
				out = append(out, fmt.Sprintf("qmvs_%s_r%d_f%d", q, rb, f))
			}
		}
	}
	return out
}

// The one-row matvec built for latency (qmvr_*, kernels/quant_row.cu;
// qmvRowDefault): a warp computes qmvrFeats whole rows of codes (1 or 2),
// each lane holding up to qmvrVecs[i] 16-byte vectors of each row (the
// kernels' VM: the fewest that hold the row), in blocks of qmvrWarps
// warps. Four rows a warp (a lane holding 16 vectors) were slower at every
// shape on the H200 (session 7, BenchmarkQuantGEMV, q4 µs four/two:
// 2560x2560 6.78/5.35, 2560 features of 4096 inputs 9.34/7.88, q/k/v/g
// 25.62/20.24).
const (
	qmvrWarps = 4
	qmvrFeats = 2
	// qmvrMaxOut is the most features of a plain one-row product that
	// qmvRowDefault gives the qmvr kernels.
	qmvrMaxOut = 3072
)

// qmvrVecs are the vectors a lane holds of a row in each of the kernels'
// builds (their names' _v<VM>), fewest first.
var qmvrVecs = []int{4, 8}

// qmvrKernelNames are the plain qmvr kernels' names (quant_row.cu's
// instances; its fused ones are in qfuseKernelNames).
func qmvrKernelNames() []string {
	var out []string
	for _, q := range []string{"f8", "i8", "u4"} {
		for _, f := range []int{1, 2} {
			for _, v := range qmvrVecs {
				out = append(out, fmt.Sprintf("qmvr_%s_f%d_v%d", q, f, v))
			}
		}
	}
	return out
}

// qmvrFit is the fewest vectors a lane of the qmvr kernels must hold for
// a row of k codes, perVec a vector (qmvrVecs), or 0 where none holds it.
func qmvrFit(k, perVec int) int {
	for _, v := range qmvrVecs {
		if k/perVec <= 32*v {
			return v
		}
	}
	return 0
}

// qmvIn is what decides a quantized matvec's launch.
type qmvIn struct {
	name                  string // the format's kernel name (quantCode)
	perVec                int    // codes in a 16-byte vector
	rows, k, nOut, stride int
	blockCols             int
	aligned               bool // codes and x 16-byte aligned
	// grouped: the product of several weights (qmvg_*); swiglu: the
	// gate/up product with its SwiGLU (qmvsw_*).
	grouped, swiglu bool
	// f32x: x must be multiplied as f32 (PrecisionExact): not the staged
	// kernels (qmvxPlan).
	f32x bool
}

// qmvLaunch is a quantized matvec's launch: the old qmv_* kernel (old, a
// warp a feature), or a qmvs_* kernel over units of shape.feats features in
// nb blocks of units on a grid of grid blocks, x staged in shared bytes of
// shared memory when shared is not 0, or (row) a qmvr_* kernel, a warp a
// unit, launched as qmvs_* with split 1 and nb the grid, or (staged, its
// kind) a qmvx kernel, launched as qmvs_* with x staged narrow in shared
// bytes.
type qmvLaunch struct {
	old    bool
	row    bool
	staged string
	vecs   int  // row: the kernel's vectors a lane (its VM)
	vec    bool // old: 16-byte code vectors
	name   string
	shape  mvShape
	nb     int
	grid   int
	shared int
}

// qmvPlan chooses the launch of quant_matmul's product for 1..matvecMaxRows
// rows: the qmvs kernels when the rows, the blocks and the pointers allow
// 16-byte code vectors (a scale block a power of two of them: q_vshift)
// and the tuning does not ask for the old ones, the
// launch shape by mvPlan as the bf16 matvec's; one row takes qmvr_*
// (qmvRowPlan) where the tuning asks for it (quantRow) and its codes fit
// the most qmvrVecs a lane, else the staged kernels (qmvxPlan) where they
// apply, else qmvr_* where qmvRowDefault says.
func qmvPlan(t mvTuning, in qmvIn, maxChunk, sms int) qmvLaunch {
	rb := 1
	if in.rows > 1 {
		rb = matvecMaxRows
	}
	vec := in.k%in.perVec == 0 && in.blockCols%in.perVec == 0 && in.stride%16 == 0 && in.aligned
	if !vec || !isPow2(in.blockCols/in.perVec) || t.quantOld {
		return qmvLaunch{old: true, vec: vec, name: fmt.Sprintf("qmv_%s_r%d", in.name, rb),
			shape: mvShape{feats: 1, split: 1, warps: qmvWarps, blocks: (in.nOut + qmvWarps - 1) / qmvWarps}}
	}
	v := qmvrFit(in.k, in.perVec)
	if in.rows == 1 && v > 0 && t.quantRow {
		return qmvRowPlan(t, in, v)
	}
	if l, ok := qmvxPlan(t, in, sms); ok {
		return l
	}
	if in.rows == 1 && v > 0 && !t.quantNoRow && qmvRowDefault(in) {
		return qmvRowPlan(t, in, v)
	}
	feats := qmvFeats[in.name]
	if t.feats == 1 || t.feats == 2 || t.feats == 4 {
		feats = t.feats
	}
	sh := mvPlan(t, (in.nOut+feats-1)/feats, feats, in.k, in.perVec, maxChunk, sms)
	l := qmvLaunch{name: fmt.Sprintf("qmvs_%s_r%d_f%d", in.name, rb, feats), shape: sh, nb: sh.blocks, grid: sh.blocks}
	l.capGrid(t, sms)
	l.stage(t, in)
	return l
}

// qmvRowDefault reports whether a one-row product whose codes fit takes
// the qmvr kernels when the tuning does not say: FP8 products but the
// gate/up SwiGLU and plain products of more than qmvrMaxOut features.
// Alone, qmvr is faster at those shapes (q4 here; FP8 alike, README)
// (TestQuantMatVecSweep on the H200, session 7, q4, best launch of each
// family, GB/s split-K/qmvr: 2560x2560 569/701, 2560 features of 4096
// inputs 633/778, 2560 of 7168 671/666, q/k/v/g grouped 671/769; but
// 4096x2560 797/643, 7168x2560 873/601 and the gate/up SwiGLU 737/715),
// yet in a decode token only FP8 gains (Dory 4B, `reel bench --quant`,
// tok/s with these on qmvr against none, one run: FP8 200.0/192.7, q8
// 172.5/179.8, q4 150.3/158.3 and 150.1/160.1). q8 and q4 keep split-K.
func qmvRowDefault(in qmvIn) bool {
	return in.name == "f8" && !in.swiglu && (in.grouped || in.nOut <= qmvrMaxOut)
}

// qmvRowPlan is the launch of qmvr_* holding vecs vectors a lane: units
// of the tuning's feats (1 or 2, else qmvrFeats) a warp, the tuning's
// warps (a power of two up to mvMaxWarps, else qmvrWarps) a block, a block
// for each of them (no split over K: Options.MatvecMaxChunk does not
// apply).
func qmvRowPlan(t mvTuning, in qmvIn, vecs int) qmvLaunch {
	feats := qmvrFeats
	if t.feats == 1 || t.feats == 2 {
		feats = t.feats
	}
	warps := qmvrWarps
	if t.warps > 0 {
		warps = min(pow2Floor(t.warps), mvMaxWarps)
	}
	units := (in.nOut + feats - 1) / feats
	blocks := (units + warps - 1) / warps
	return qmvLaunch{row: true, vecs: vecs, name: fmt.Sprintf("qmvr_%s_f%d_v%d", in.name, feats, vecs),
		shape: mvShape{feats: feats, split: 1, warps: warps, blocks: blocks}, nb: blocks, grid: blocks}
}

// The one-row products with x staged narrow (qmvx kernels,
// kernels/quant_int.cu: qmvi_* for 4-bit and i8 codes in integers, qmvh_*
// for FP8 in f16): every block stages all of x in shared memory
// (qmvxShared bytes), so the launch takes few blocks of many warps
// (qmvxWarps), at most qmvxGrid an SM, each looping over blocks of units
// of qmvxFeats features.
const (
	qmvxWarps    = 16
	qmvxMaxWarps = 16 // QMVX_MAXWARPS
	qmvxGrid     = 2
	qmvxFeats    = 1
)

// qmvxKinds are the staged kernels' kinds by the formats' kernel names: i
// (integers) or h (halves); formats not here have none.
var qmvxKinds = map[string]string{"u4": "i", "i8": "i", "f8": "h"}

// qmvxShared is the shared memory of a qmvx launch over k inputs, perVec
// codes a 16-byte vector: for each chunk of 32 vectors, x as 16-bit
// values (64 bytes a vector of 32 inputs, 32 of 16), the vectors' scales
// and Σx² (128 bytes each).
func qmvxShared(k, perVec int) int { return (k/perVec + 31) / 32 * 32 * (2*perVec + 8) }

// qmvxKernelNames are the staged kernels' names (quant_int.cu's
// instances): plain, grouped and normalized products by features a unit,
// and gate/up with SwiGLU, for each format.
func qmvxKernelNames() []string {
	var out []string
	for _, q := range []string{"u4", "i8", "f8"} {
		k := qmvxKinds[q]
		for _, f := range []int{1, 2, 4} {
			out = append(out, fmt.Sprintf("qmv%s_%s_f%d", k, q, f), fmt.Sprintf("qmvg%s_%s_f%d", k, q, f), fmt.Sprintf("qmvn%s_%s_f%d", k, q, f),
				fmt.Sprintf("qmvsg%s_%s_f%d", k, q, f))
		}
		out = append(out, fmt.Sprintf("qmvsw%s_%s", k, q), fmt.Sprintf("qmvssw%s_%s", k, q))
	}
	return out
}

// qmvxPlan is the launch of a staged kernel for one row of codes read as
// 16-byte vectors (qmvPlan checks them), unless the tuning or f32x rules
// them out or x does not fit qmvSharedMax: the tuning's qmvx
// (REEL_QMVX_SHAPE), else its warps, quantGrid and feats (1, 2 or 4),
// else qmvxWarps, qmvxGrid and qmvxFeats; K split across as many warps of
// a unit as fill the grid's warps, up to its chunks of 32 vectors
// (mvPlan's rule over the capped grid).
func qmvxPlan(t mvTuning, in qmvIn, sms int) (qmvLaunch, bool) {
	kind, ok := qmvxKinds[in.name]
	if !ok || in.rows != 1 || in.f32x || t.quantNoStaged || qmvxShared(in.k, in.perVec) > qmvSharedMax {
		return qmvLaunch{}, false
	}
	pick := func(vs ...int) int {
		for _, v := range vs {
			if v > 0 {
				return v
			}
		}
		return 0
	}
	warps := min(pow2Floor(pick(t.qmvx[0], t.warps, qmvxWarps)), qmvxMaxWarps)
	perSM := pick(t.qmvx[1], t.quantGrid, qmvxGrid)
	feats := pick(t.qmvx[2], t.feats, qmvxFeats)
	if feats != 1 && feats != 2 && feats != 4 {
		feats = qmvxFeats
	}
	if in.swiglu {
		feats = 2
	}
	units := (in.nOut + feats - 1) / feats
	chunks := max(1, (in.k/in.perVec+31)/32)
	split := t.split
	if split <= 0 {
		split = 1
		for split*2 <= warps && split*2 <= chunks && units*split*2 <= warps*perSM*sms {
			split *= 2
		}
	}
	split = max(1, min(pow2Ceil(split), warps))
	group := warps / split
	nb := (units + group - 1) / group
	l := qmvLaunch{staged: kind, name: fmt.Sprintf("qmv%s_%s_f%d", kind, in.name, feats),
		shape: mvShape{feats: feats, split: split, warps: warps, blocks: nb}, nb: nb, grid: nb, shared: qmvxShared(in.k, in.perVec)}
	l.capGrid(mvTuning{quantGrid: perSM}, sms)
	return l, true
}

// parseQMVXShape reads REEL_QMVX_SHAPE: "" for qmvxPlan's choice, else
// three counts W,G,F (warps a block, blocks an SM, features a unit: 1, 2
// or 4), each 0 for qmvxPlan's choice.
func parseQMVXShape(v string) ([3]int, error) {
	var s [3]int
	if v == "" {
		return s, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return s, fmt.Errorf("REEL_QMVX_SHAPE=%q: want W,G,F (warps a block up to %d, blocks an SM, features a unit 1, 2 or 4; 0 for the default)", v, qmvxMaxWarps)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || i == 0 && n > qmvxMaxWarps || i == 1 && n > 64 || i == 2 && n != 0 && n != 1 && n != 2 && n != 4 {
			return s, fmt.Errorf("REEL_QMVX_SHAPE=%q: count %d (%q): want W,G,F (warps a block up to %d, blocks an SM up to 64, features a unit 1, 2 or 4; 0 for the default)", v, i+1, p, qmvxMaxWarps)
		}
		s[i] = n
	}
	return s, nil
}

// capGrid caps the grid at the tuning's quantGrid blocks an SM, each
// looping over as even a share of the blocks of units as the grid allows.
func (l *qmvLaunch) capGrid(t mvTuning, sms int) {
	if t.quantGrid > 0 {
		per := (l.nb + t.quantGrid*sms - 1) / (t.quantGrid * sms)
		l.grid = (l.nb + per - 1) / per
	}
}

// stage sets the shared memory that holds x staged (qmvs_stage) for two
// rows and more where it fits qmvSharedMax and the tuning does not read x
// through L1. One row reads x through L1: on the H200 (session 6,
// BenchmarkQuantGEMV, µs staged against through L1) q4 2560x2560 8.75
// against 7.07, 4096x2560 8.95/7.43, 2560x4096 12.32/10.59, 7168x2560
// 14.92/14.20, 2560x7168 19.80/17.05; q8 and FP8 alike (FP8 2560x7168
// 16.57/12.71). Two to eight rows are not measured yet.
func (l *qmvLaunch) stage(t mvTuning, in qmvIn) {
	chunks := (in.k/in.perVec + 31) / 32
	if b := 4 * in.rows * chunks * 32 * in.perVec; in.rows > 1 && b <= qmvSharedMax && !t.quantNoStage {
		l.shared = b
	}
}

// quantCode is the kernels' code (QT_*) and name of a quantized dtype, and
// the codes in a 16-byte vector.
func quantCode(dt graph.DType) (code int32, name string, perVec int, err error) {
	switch dt {
	case graph.F8E4M3:
		return 0, "f8", 16, nil
	case graph.I8:
		return 1, "i8", 16, nil
	case graph.U8:
		return 2, "u4", 32, nil
	}
	return 0, "", 0, fmt.Errorf("weight stored as %s: want f8_e4m3, i8 or u8", dt)
}

func bindQuantMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	a, err := ops.NodeAttrs[ops.QuantAttrs](n)
	if err != nil {
		return nil, err
	}
	x, w, sc, y := in[0], in[1], in[2], out[0]
	if err := f32("x", x); err != nil {
		return nil, err
	}
	if err := f32("output", y); err != nil {
		return nil, err
	}
	code, name, perVec, err := quantCode(w.store)
	if err != nil {
		return nil, err
	}
	st, err := wtype(sc)
	if err != nil {
		return nil, fmt.Errorf("scales: %w", err)
	}
	xv, sv := n.Inputs[0], n.Inputs[2]
	k, rows, nOut := xv.Shape.Last(), xv.Shape.Rows(), n.Inputs[1].Shape[0]
	stride := ops.QuantCols(w.store, k)
	if w.n != nOut*stride || x.n != rows*k || y.n != rows*nOut || sc.n != sv.Shape.Elems() || len(sv.Shape) != 2 {
		return nil, fmt.Errorf("x of %d, w of %d, scales of %d, output of %d elements do not fit %d rows of %d -> %d",
			x.n, w.n, sc.n, y.n, rows, k, nOut)
	}
	s := be.newSteps()
	if rows == 0 || nOut == 0 {
		return s, nil
	}
	if k == 0 {
		s.zero(y)
		return s, nil
	}
	q := quantWeight{w: w, sc: sc, code: code, name: name, perVec: perVec, stride: stride, st: st,
		scols: int32(sv.Shape[1]), br: int32(a.BlockRows), bc: int32(a.BlockCols)}
	if rows <= matvecMaxRows {
		be.quantMatvec(s, x, q, y, rows, k, nOut)
		return s, nil
	}
	if err := be.quantProducts(s, x, []qfuseSeg{{q: q, y: y, n: nOut}}, rows, k, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// quantMatvec appends y[rows, nOut] = x[rows, k] · Wᵀ for the quantized
// weight q and 1..matvecMaxRows rows (k and nOut not 0): the tensor-core
// qmma_* where qmmaPlan takes the product, else qmvs_*, qmvr_* or the
// staged qmvi_*/qmvh_* (the same arguments) where qmvPlan does, else the
// warp a feature of qmv_*.
func (be *Backend) quantMatvec(s *steps, x *Buffer, q quantWeight, y *Buffer, rows, k, nOut int) {
	in := qmvIn{name: q.name, perVec: q.perVec, rows: rows, k: k, nOut: nOut, stride: q.stride,
		blockCols: int(q.bc), aligned: q.w.ptr%16 == 0 && x.ptr%16 == 0, f32x: be.opts.Precision == PrecisionExact}
	if l, ok := qmmaPlan(be.mv, in, be.kernels.sms); ok {
		s.add(l.name, [3]uint32{uint32(l.grid), 1, 1}, [3]uint32{uint32(32 * l.warps), 1, 1}, uint32(l.shared),
			x.ptr, q.w.ptr, int64(q.stride), q.sc.ptr, q.st, q.scols, q.br, int32(l.groupShift), y.ptr, int32(rows), int32(k), int32(nOut), int32(l.split))
		return
	}
	l := qmvPlan(be.mv, in, be.opts.MatvecMaxChunk, be.kernels.sms)
	if l.old {
		vec := int32(0)
		if l.vec {
			vec = 1
		}
		s.add(l.name, [3]uint32{uint32(l.shape.blocks), 1, 1}, [3]uint32{32 * qmvWarps, 1, 1}, 0,
			x.ptr, q.w.ptr, int64(q.stride), q.sc.ptr, q.st, q.scols, q.br, q.bc, y.ptr, int32(rows), int32(k), int32(nOut), vec)
		return
	}
	xsm := int32(0)
	if l.shared > 0 {
		xsm = 1
	}
	s.add(l.name, [3]uint32{uint32(l.grid), 1, 1}, [3]uint32{uint32(32 * l.shape.warps), 1, 1}, uint32(l.shared),
		x.ptr, q.w.ptr, int64(q.stride), q.sc.ptr, q.st, q.scols, q.br, q.bc, y.ptr, int32(rows), int32(k), int32(nOut),
		int32(l.shape.split), int32(l.nb), xsm)
}

// bindQuantExpertMatMul binds quant_expert_matmul as expert_matmul is
// bound (bindExpertMatMul): over matvecMaxRows rows the tensor-core form
// reading the codes dequantized into quantHalf's type (qmoe_mma_*, unless
// quantF32); else the warp form with 16-byte code loads when the rows and
// blocks allow them, or the grouped form in f32.
func bindQuantExpertMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	const op = "quant_expert_matmul"
	a, err := ops.NodeAttrs[ops.QuantAttrs](n)
	if err != nil {
		return nil, err
	}
	x, w, sc, ids, y := in[0], in[1], in[2], in[3], out[0]
	_, name, perVec, err := quantCode(w.store)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	st, err := wtype(sc)
	if err != nil {
		return nil, fmt.Errorf("%s: scales: %w", op, err)
	}
	d, err := expertDims(op, n, x, w, ids, y, n.Inputs[0].Shape.Last())
	if err != nil {
		return nil, err
	}
	sv := n.Inputs[2].Shape
	if len(sv) != 3 || sc.n != sv.Elems() {
		return nil, fmt.Errorf("%s: scales %v of %d elements: want [experts, row blocks, column blocks]", op, sv, sc.n)
	}
	stride := ops.QuantCols(w.store, d.nIn)
	sr, scols, br, bc := int32(sv[1]), int32(sv[2]), int32(a.BlockRows), int32(a.BlockCols)
	s := be.newSteps()
	if d.units == 0 {
		return s, nil
	}
	if ht := be.quantHalf(w.store); d.mma(ht) && !be.quantF32() {
		// 8 codes a load: 8 bytes (4 for 4-bit codes) of rows of nIn
		// (⌈nIn/2⌉) bytes, all under one scale.
		vw := int32(0)
		if d.nIn%8 == 0 && a.BlockCols%8 == 0 && w.ptr%8 == 0 {
			vw = 1
		}
		return be.expertMMA(s, d, x, "qmoe_mma_"+name+"_"+wtypeNames[ht],
			[]any{w.ptr, int64(stride), sc.ptr, st, sr, scols, br, bc}, vw, ids, y)
	}
	if d.grouped() {
		return be.expertGrouped(s, d, ids, func(offs, list cu.DevicePtr) {
			s.add("qmoe_tile_"+name, d.tileGrid(), [3]uint32{moeTileThreads, 1, 1}, 0,
				x.ptr, w.ptr, int64(stride), sc.ptr, st, sr, scols, br, bc, offs, list, y.ptr,
				int32(d.k), int32(d.nOut), int32(d.nIn), d.perUnit)
		})
	}
	grid, err := d.warpGrid()
	if err != nil {
		return nil, err
	}
	vec := int32(0)
	if d.nIn%perVec == 0 && a.BlockCols%perVec == 0 && stride%16 == 0 && w.ptr%16 == 0 && x.ptr%16 == 0 {
		vec = 1
	}
	s.add("qmoe_warp_"+name, grid, [3]uint32{32 * moeWarps, 1, 1}, 0,
		x.ptr, w.ptr, int64(stride), sc.ptr, st, sr, scols, br, bc, ids.ptr, y.ptr,
		int32(d.units), int32(d.k), int32(d.e), int32(d.nOut), int32(d.nIn), d.perUnit, vec, be.errRec)
	return s, nil
}
