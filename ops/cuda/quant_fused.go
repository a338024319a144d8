package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// The fused quantized products (ops/quant_fused.go): quant_grouped_matmul,
// quant_matmul_swiglu and quant_norm_matmul.
//
// Decode rows, up to the tuning's quantFuseRows (qfuseRows by default),
// take one launch of the fused split-K matvec (kernels/quant_fused.cu:
// qmvg_* over up to qfuseSegs weights of one format, qmvsw_* for gate and
// up with the SwiGLU, qmvn_* with the row norm), launched as quant_matmul's
// qmvs_* (qmvPlan) where the codes can be read as 16-byte vectors; one
// row whose codes fit takes their one-row forms (kernels/quant_row.cu:
// qmvgr_*, qmvswr_*, qmvnr_*, a warp a unit) where quant_matmul would take
// qmvr_* (qmvRowDefault, or the tuning's quantRow). Other decode rows
// (more rows than quantFuseRows: quant_matmul's tensor-core qmma_* is
// faster there; rows whose codes need element loads) take their parts:
// each weight's quant_matmul matvec (quantMatvec) into the outputs or
// scratch, then swiglu, or a norm of x into scratch first.
//
// One decode row takes the staged forms by default (kernels/quant_int.cu:
// qmvgi_*, qmvswi_*, qmvni_* for 4-bit and i8 codes, qmvgh_*, qmvswh_*,
// qmvnh_* for FP8; qmvxPlan), x staged in 16 bits once per block, unless
// PrecisionExact or the tuning's quantNoStaged.
//
// Prompt rows convert x to the format's 16-bit type once for the group
// (the row norm fused into that conversion for quant_norm_matmul; none
// where x carries the 16-bit copy a quant_slerp_matmul's slerp wrote),
// then dequantize the weights of one shape together into the shared deq
// scratch and multiply them as 16-bit weights of that shape are (one
// strided batched cuBLAS call: quantProducts); with quantF32 each weight
// is dequantized to f32 and multiplies x as it is.

// qfuseSegs is the most weights a qmvg launch takes (QF_SEGS): as many as
// an mv_* launch.
const qfuseSegs = mvSegs

// qfuseRows is the most decode rows the fused kernels take by default: one
// row, where they beat the tensor cores' qmma_* (q4 129.7 against 118.9
// tok/s on Dory 4B with one launch a weight), which win from two rows on.
// REEL_QFUSE_ROWS sets the backend's qfuseRows (0 for never).
const qfuseRows = 1

// quantFusedBinders are the binders of the fused quantized products.
var quantFusedBinders = map[string]binder{
	"quant_grouped_matmul": bindQuantGroupedMatMul,
	"quant_matmul_swiglu":  bindQuantMatMulSwiGLU,
	"quant_norm_matmul":    bindQuantNormMatMul,
	// quant_swiglu_norm_matmul: mlp.go's prompt path over the weights
	// dequantized into scratch.
	"quant_swiglu_norm_matmul":  bindQuantSwiGLUNormMatMul,
	"quant_slerp_matmul":        bindQuantSlerpMatMul,
	"quant_slerp_matmul_swiglu": bindQuantSlerpMatMulSwiGLU,
}

// qfuseKernelNames are the fused kernels' names (quant_fused.cu's
// instances, and quant_row.cu's qmvgr_*, qmvnr_* and qmvswr_*).
func qfuseKernelNames() []string {
	var out []string
	for _, q := range []string{"f8", "i8", "u4"} {
		for _, rb := range []int{1, matvecMaxRows} {
			for _, f := range []int{1, 2, 4} {
				out = append(out, fmt.Sprintf("qmvg_%s_r%d_f%d", q, rb, f), fmt.Sprintf("qmvn_%s_r%d_f%d", q, rb, f))
			}
			out = append(out, fmt.Sprintf("qmvsw_%s_r%d", q, rb))
		}
		// The one-row forms (quant_row.cu, the tuning's quantRow).
		for _, v := range qmvrVecs {
			for _, f := range []int{1, 2} {
				out = append(out, fmt.Sprintf("qmvgr_%s_f%d_v%d", q, f, v), fmt.Sprintf("qmvnr_%s_f%d_v%d", q, f, v))
			}
			out = append(out, fmt.Sprintf("qmvswr_%s_v%d", q, v))
		}
	}
	return out
}

// parseQuantFuseRows reads REEL_QFUSE_ROWS: "" (qfuseRows), or 0 to
// matvecMaxRows, as the backend's qfuseRows takes it (negative for 0).
func parseQuantFuseRows(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n < 0 || n > matvecMaxRows || fmt.Sprint(n) != v {
		return 0, fmt.Errorf("REEL_QFUSE_ROWS %q: want 0 to %d", v, matvecMaxRows)
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}

// fuseRows is the most decode rows the fused kernels take.
func (be *Backend) fuseRows() int {
	switch {
	case be.qfuseRows < 0:
		return 0
	case be.qfuseRows > 0:
		return be.qfuseRows
	}
	return qfuseRows
}

// quantWeightOf checks a quantized weight's codes w (value wv) and scales
// sc (value sv) for k input features and gives it as the products read it,
// with its output features.
func quantWeightOf(wv, sv *graph.Value, w, sc *Buffer, a ops.QuantAttrs, k int) (quantWeight, int, error) {
	code, name, perVec, err := quantCode(w.store)
	if err != nil {
		return quantWeight{}, 0, err
	}
	st, err := wtype(sc)
	if err != nil {
		return quantWeight{}, 0, fmt.Errorf("scales: %w", err)
	}
	if len(wv.Shape) != 2 || len(sv.Shape) != 2 {
		return quantWeight{}, 0, fmt.Errorf("codes %s and scales %s: want matrices", wv, sv)
	}
	nOut, stride := wv.Shape[0], ops.QuantCols(w.store, k)
	if w.n != nOut*stride || sc.n != sv.Shape.Elems() {
		return quantWeight{}, 0, fmt.Errorf("codes of %d and scales of %d elements do not fit %d features of %d", w.n, sc.n, nOut, k)
	}
	return quantWeight{w: w, sc: sc, code: code, name: name, perVec: perVec, stride: stride, st: st,
		scols: int32(sv.Shape[1]), br: int32(a.BlockRows), bc: int32(a.BlockCols)}, nOut, nil
}

// qfuseSeg is one weight of a fused quantized launch and its output.
type qfuseSeg struct {
	q quantWeight
	y *Buffer
	n int
}

// qfuseForm is a fused kernel's form: its name's prefix, and for the
// normalized form the epsilon; swiglu holds the output and the scales sg,
// su of the gate/up form; slerp, for the slerp forms (prefixes qmvsg and
// qmvssw, one row, staged kernels only), the slerp before the products.
type qfuseForm struct {
	prefix string // qmvg, qmvn, qmvsw, qmvsg or qmvssw
	eps    float32
	swiglu *[3]*Buffer
	slerp  *qfuseSlerp
}

// qfuseSlerp is the rest of the slerp h' = slerp(x, y, α) that a slerp
// form computes as it stages its x (kernels/quant_int.cu): y, α, the
// output h' and the slerp's epsilon.
type qfuseSlerp struct {
	y, alpha, h *Buffer
	eps         float32
}

// qfuseLaunch appends one fused decode launch over segs (all of one
// format: the caller checks), or reports false where the fused kernels
// cannot take them: more rows than the tuning's fuseRows, more than
// qfuseSegs weights, or codes, blocks or pointers that rule out 16-byte
// vectors (qmvPlan's old kernels); a slerp form also where the launch is
// not a staged one or its vectors are not 16-byte aligned.
func (be *Backend) qfuseLaunch(s *steps, x *Buffer, segs []qfuseSeg, rows, k int, form qfuseForm) bool {
	if rows < 1 || rows > be.fuseRows() || k < 1 || len(segs) < 1 || len(segs) > qfuseSegs {
		return false
	}
	sl := form.slerp
	if sl != nil && (rows != 1 || !aligned16(x.ptr, sl.y.ptr, sl.alpha.ptr, sl.h.ptr)) {
		return false
	}
	q0 := segs[0].q
	aligned := x.ptr%16 == 0
	nf := 0
	for _, sg := range segs {
		if sg.q.w.store != q0.w.store || sg.q.st != q0.st || sg.q.stride != q0.stride || sg.q.scols != q0.scols ||
			sg.q.br != q0.br || sg.q.bc != q0.bc || sg.n < 1 {
			return false
		}
		aligned = aligned && sg.q.w.ptr%16 == 0
		nf += sg.n
	}
	// The launch as qmvPlan gives it for nf features; the gate/up form's
	// units are a gate row and its up row: qmvPlan's units of two
	// features over twice the gate's rows.
	t, units := be.mv, nf
	if form.swiglu != nil {
		if len(segs) != 2 || segs[1].n != segs[0].n {
			return false
		}
		t.feats, units = 2, segs[0].n
	}
	l := qmvPlan(t, qmvIn{name: q0.name, perVec: q0.perVec, rows: rows, k: k, nOut: nf, stride: q0.stride,
		blockCols: int(q0.bc), aligned: aligned, grouped: form.prefix == "qmvg" || form.prefix == "qmvsg", swiglu: form.swiglu != nil,
		f32x: be.opts.Precision == PrecisionExact},
		be.opts.MatvecMaxChunk, be.kernels.sms)
	if l.old || sl != nil && l.staged == "" {
		return false
	}
	rb := 1
	if rows > 1 {
		rb = matvecMaxRows
	}
	name := l.fusedName(form.prefix, q0.name, rb, form.swiglu != nil)
	var w, sc, y [qfuseSegs]cu.DevicePtr
	for i, sg := range segs {
		w[i], sc[i] = sg.q.w.ptr, sg.q.sc.ptr
		if sg.y != nil {
			y[i] = sg.y.ptr
		}
	}
	ends := segEnds(segs, func(sg qfuseSeg) int { return sg.n })
	var sgp, sup cu.DevicePtr
	if form.swiglu != nil {
		nf = units
		y = [qfuseSegs]cu.DevicePtr{form.swiglu[0].ptr}
		ends = [qfuseSegs - 1]int32{int32(nf), int32(nf), int32(nf)}
		sgp, sup = form.swiglu[1].ptr, form.swiglu[2].ptr
	}
	xsm := int32(0)
	if l.shared > 0 {
		xsm = 1
	}
	eps := form.eps
	if sl != nil {
		eps = sl.eps // the slerp's: the slerp forms have no norm
	}
	args := []any{x.ptr, int64(q0.stride), q0.st, q0.scols, q0.br, q0.bc, int32(rows), int32(k), int32(nf), int32(l.shape.split), int32(l.nb),
		w[0], w[1], w[2], w[3], sc[0], sc[1], sc[2], sc[3], y[0], y[1], y[2], y[3], ends[0], ends[1], ends[2],
		sgp, sup, eps, xsm}
	if sl != nil {
		args = append(args, sl.y.ptr, sl.alpha.ptr, sl.h.ptr)
	}
	s.add(name, [3]uint32{uint32(l.grid), 1, 1}, [3]uint32{uint32(32 * l.shape.warps), 1, 1}, uint32(l.shared), args...)
	return true
}

// fusedName is the kernel of the fused form prefix (qmvg, qmvn or qmvsw)
// that takes the launch l of qmvPlan over codes named format, rb the row
// bucket: the split-K <prefix>_<format>_r<rb>_f<feats>, the one-row
// <prefix>r_<format>_f<feats>_v<vecs> or the staged
// <prefix><kind>_<format>_f<feats>; the gate/up form's names have no _f.
func (l qmvLaunch) fusedName(prefix, format string, rb int, swiglu bool) string {
	feats := ""
	if !swiglu {
		feats = fmt.Sprintf("_f%d", l.shape.feats)
	}
	switch {
	case l.row:
		return fmt.Sprintf("%sr_%s%s_v%d", prefix, format, feats, l.vecs)
	case l.staged != "":
		return fmt.Sprintf("%s%s_%s%s", prefix, l.staged, format, feats)
	}
	return fmt.Sprintf("%s_%s_r%d%s", prefix, format, rb, feats)
}

// quantRuns splits segs into runs of one format (codes and scales of one
// type) of up to qfuseSegs weights, in order.
func quantRuns(segs []qfuseSeg) [][]qfuseSeg {
	var runs [][]qfuseSeg
	for i, sg := range segs {
		if n := len(runs); n > 0 {
			last := runs[n-1]
			if len(last) < qfuseSegs && last[0].q.w.store == sg.q.w.store && last[0].q.st == sg.q.st {
				runs[n-1] = append(last, segs[i])
				continue
			}
		}
		runs = append(runs, []qfuseSeg{sg})
	}
	return runs
}

// quantHalfX gives x as the prompt products of a group read it: for each
// 16-bit type a view of x carrying its 16-bit copy (Buffer.half), made
// once by the first weight that needs it (normalized by eps when not nil),
// so that every product of the group reads one conversion. With quantF32
// or without cuBLAS the products read x in f32, and quantHalfX gives x
// itself (eps must then be applied by the products).
type quantHalfX struct {
	be    *Backend
	x     *Buffer
	rows  int
	k     int
	eps   *float32
	views map[int32]*Buffer
}

// converts says whether the group's products read x converted here.
func (h *quantHalfX) converts() bool { return h.be.blas != nil && !h.be.quantF32() }

// view gives x for a product of weight q.
func (h *quantHalfX) view(s *steps, q quantWeight) (*Buffer, error) {
	if !h.converts() {
		return h.x, nil
	}
	ht := h.be.quantHalf(q.w.store)
	if v, ok := h.views[ht]; ok {
		return v, nil
	}
	if h.views == nil {
		h.views = map[int32]*Buffer{}
	}
	if h.x.half != nil && h.x.half.wt == ht && h.eps == nil {
		h.views[ht] = h.x
		return h.x, nil
	}
	// The scratch slot of the conversion: the first free one, or, where x
	// carries a copy the products read (in the first), the second (only
	// one type is then converted).
	slot := len(h.views)
	if h.x.half != nil && h.eps == nil {
		slot = 1
	}
	hp, err := h.be.toHalf(s, h.x, h.rows, h.k, ht, h.eps, slot)
	if err != nil {
		return nil, err
	}
	v := *h.x
	v.half = &halfCopy{wt: ht, h: hp}
	h.views[ht] = &v
	return &v, nil
}

// productEps is the eps the products must apply themselves: eps, unless x
// was converted (normalized) here.
func (h *quantHalfX) productEps() *float32 {
	if h.converts() {
		return nil
	}
	return h.eps
}

// quantGroup appends y_i = x · W_iᵀ for every weight of segs: fused
// launches for decode rows where qfuseLaunch takes a run of one format,
// else each weight's own quant_matmul matvec; prompt rows quantProducts
// (x converted once a 16-bit type, the weights dequantized a batch of one
// shape at a time).
func (be *Backend) quantGroup(s *steps, x *Buffer, segs []qfuseSeg, rows, k int) error {
	if rows == 0 {
		return nil
	}
	if k == 0 {
		for _, sg := range segs {
			s.zero(sg.y)
		}
		return nil
	}
	if rows <= matvecMaxRows {
		for _, run := range quantRuns(segs) {
			if be.qfuseLaunch(s, x, run, rows, k, qfuseForm{prefix: "qmvg"}) {
				continue
			}
			for _, sg := range run {
				if sg.n > 0 {
					be.quantMatvec(s, x, sg.q, sg.y, rows, k, sg.n)
				}
			}
		}
		return nil
	}
	return be.quantProducts(s, x, segs, rows, k, nil)
}

func bindQuantGroupedMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	a, err := ops.NodeAttrs[ops.QuantAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) < 3 || len(in)%2 != 1 || len(out) != (len(in)-1)/2 {
		return nil, fmt.Errorf("quant_grouped_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	x := in[0]
	if err := f32("x", x); err != nil {
		return nil, err
	}
	xv := n.Inputs[0]
	k, rows := xv.Shape.Last(), xv.Shape.Rows()
	if x.n != rows*k {
		return nil, fmt.Errorf("x of %d elements is not %d rows of %d", x.n, rows, k)
	}
	segs, err := quantGroupSegs(n, in, out, a, rows, k)
	if err != nil {
		return nil, err
	}
	s := be.newSteps()
	if err := be.quantGroup(s, x, segs, rows, k); err != nil {
		return nil, err
	}
	return s, nil
}

// quantGroupSegs checks and reads the weights of a quantized grouped
// product whose node n takes x [rows, k] and then each weight's codes and
// scales (in and out its buffers): a segment a weight, its output set.
func quantGroupSegs(n *graph.Node, in, out []*Buffer, a ops.QuantAttrs, rows, k int) ([]qfuseSeg, error) {
	var segs []qfuseSeg
	for i := range out {
		q, nOut, err := quantWeightOf(n.Inputs[1+2*i], n.Inputs[2+2*i], in[1+2*i], in[2+2*i], a, k)
		if err != nil {
			return nil, fmt.Errorf("weight %d: %w", i, err)
		}
		if err := f32("output", out[i]); err != nil {
			return nil, fmt.Errorf("weight %d: %w", i, err)
		}
		if out[i].n != rows*nOut {
			return nil, fmt.Errorf("weight %d: output of %d elements is not %d rows of %d", i, out[i].n, rows, nOut)
		}
		segs = append(segs, qfuseSeg{q: q, y: out[i], n: nOut})
	}
	return segs, nil
}

// quantGateUp checks and reads the operands that quant_matmul_swiglu and
// quant_swiglu_norm_matmul share: x (input 0), the gate's and up's codes
// and scales (inputs 1-4), the SwiGLU scales (inputs 5, 6) and the output,
// all f32 but the weights. It gives x's inputs k and rows, and the gate
// and up weights (their outputs not set).
func quantGateUp(n *graph.Node, in, out []*Buffer, a ops.QuantAttrs) (k, rows int, segs [2]qfuseSeg, err error) {
	if err := f32All([]string{"x", "sg", "su", "output"}, []*Buffer{in[0], in[5], in[6], out[0]}); err != nil {
		return 0, 0, segs, err
	}
	xv := n.Inputs[0]
	k, rows = xv.Shape.Last(), xv.Shape.Rows()
	for i := range segs {
		q, f, err := quantWeightOf(n.Inputs[1+2*i], n.Inputs[2+2*i], in[1+2*i], in[2+2*i], a, k)
		if err != nil {
			return 0, 0, segs, fmt.Errorf("%s: %w", [...]string{"gate", "up"}[i], err)
		}
		segs[i] = qfuseSeg{q: q, n: f}
	}
	return k, rows, segs, nil
}

func bindQuantMatMulSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	a, err := ops.NodeAttrs[ops.QuantAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 7 || len(out) != 1 {
		return nil, fmt.Errorf("quant_matmul_swiglu: %d inputs and %d outputs", len(in), len(out))
	}
	x, sg, su, y := in[0], in[5], in[6], out[0]
	k, rows, segs, err := quantGateUp(n, in, out, a)
	if err != nil {
		return nil, err
	}
	if err := checkGateUp(x, segs, sg, su, y, rows, k); err != nil {
		return nil, err
	}
	f := segs[0].n
	s := be.newSteps()
	if err := be.quantMatMulSwiGLU(s, x, segs, sg, su, y, rows, k, f); err != nil {
		return nil, err
	}
	return s, nil
}

// checkGateUp checks that x [rows, k], the gate and up weights of segs,
// the SwiGLU scales sg, su and the output y fit together.
func checkGateUp(x *Buffer, segs [2]qfuseSeg, sg, su, y *Buffer, rows, k int) error {
	f := segs[0].n
	if segs[1].n != f || x.n != rows*k || sg.n != f || su.n != f || y.n != rows*f {
		return fmt.Errorf("x of %d, gate of %d and up of %d features, scales of %d and %d, output of %d elements do not fit %d rows of %d",
			x.n, f, segs[1].n, sg.n, su.n, y.n, rows, k)
	}
	return nil
}

// quantMatMulSwiGLU appends y[rows, f] = swiglu(x·Wgᵀ, x·Wuᵀ, sg, su) for
// the quantized gate and up weights of segs (outputs not set): decode rows
// one fused launch where qfuseLaunch takes them, else the gate and up
// products into scratch (their matvecs, or quantGroup for prompt rows),
// then swiglu.
func (be *Backend) quantMatMulSwiGLU(s *steps, x *Buffer, segs [2]qfuseSeg, sg, su, y *Buffer, rows, k, f int) error {
	if rows == 0 || f == 0 {
		return nil
	}
	if k == 0 {
		s.zero(y)
		return nil
	}
	if rows <= matvecMaxRows && be.qfuseLaunch(s, x, segs[:], rows, k, qfuseForm{prefix: "qmvsw", swiglu: &[3]*Buffer{y, sg, su}}) {
		return nil
	}
	tmp, err := be.gluScratch(rows, f, graph.F32)
	if err != nil {
		return err
	}
	segs[0].y, segs[1].y = tmp[0], tmp[1]
	if rows <= matvecMaxRows {
		// The parts: the gate and up matvecs one by one (not a qmvg
		// launch: a fused launch was just ruled out).
		for _, sg := range segs {
			be.quantMatvec(s, x, sg.q, sg.y, rows, k, f)
		}
	} else if err := be.quantGroup(s, x, segs[:], rows, k); err != nil {
		return err
	}
	_, err = be.swiglu(tmp[0], tmp[1], sg, su, y, s)
	return err
}

func bindQuantNormMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	a, err := ops.NodeAttrs[ops.QuantNormAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 3 || len(out) != 1 {
		return nil, fmt.Errorf("quant_norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	x, y := in[0], out[0]
	if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
		return nil, err
	}
	xv := n.Inputs[0]
	k, rows := xv.Shape.Last(), xv.Shape.Rows()
	q, nOut, err := quantWeightOf(n.Inputs[1], n.Inputs[2], in[1], in[2], a.Blocks, k)
	if err != nil {
		return nil, err
	}
	if x.n != rows*k || y.n != rows*nOut || k == 0 {
		return nil, fmt.Errorf("x of %d, output of %d elements do not fit %d rows of %d -> %d", x.n, y.n, rows, k, nOut)
	}
	s := be.newSteps()
	if err := be.quantNormMatMul(s, x, q, y, rows, k, nOut, a.Eps); err != nil {
		return nil, err
	}
	return s, nil
}

// quantNormMatMul appends y[rows, nOut] = l2norm(x[rows, k]) · Wᵀ for the
// quantized weight q (k not 0): decode rows one fused launch where
// qfuseLaunch takes it, else the rows normalized into scratch and the
// matvec; prompt rows quantProducts with the norm fused into x's
// conversion.
func (be *Backend) quantNormMatMul(s *steps, x *Buffer, q quantWeight, y *Buffer, rows, k, nOut int, eps float32) error {
	if rows == 0 || nOut == 0 {
		return nil
	}
	seg := []qfuseSeg{{q: q, y: y, n: nOut}}
	if rows <= matvecMaxRows {
		if be.qfuseLaunch(s, x, seg, rows, k, qfuseForm{prefix: "qmvn", eps: eps}) {
			return nil
		}
		// The parts: the rows normalized into scratch, then the matvec.
		p, err := be.reuse(&be.normed, 4*rows*k)
		if err != nil {
			return err
		}
		xn := &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * k, bytes: 4 * rows * k, be: be}
		s.add("norm_rows_long", [3]uint32{uint32(rows), 1, 1}, [3]uint32{256, 1, 1}, 0,
			x.ptr, cu.DevicePtr(0), int32(0), xn.ptr, int32(k), int32(k), int32(0), eps, int32(0))
		be.quantMatvec(s, xn, q, y, rows, k, nOut)
		return nil
	}
	return be.quantProducts(s, x, seg, rows, k, &eps)
}

// bindQuantSwiGLUNormMatMul binds quant_swiglu_norm_matmul. A prompt chunk
// (more than matvecMaxRows rows) on cuBLAS in a 16-bit precision runs
// swiglu_norm_matmul's prompt path (mlpHalf) over the weights dequantized
// into the deq scratch: gate and up together (one batched call), down
// after their products, into the same scratch. Otherwise (decode rows,
// quantF32, no cuBLAS, gate and up of two 16-bit types) the parts:
// quant_matmul_swiglu into f32 scratch, then quant_norm_matmul of it.
func bindQuantSwiGLUNormMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	a, err := ops.NodeAttrs[ops.QuantNormAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 9 || len(out) != 1 {
		return nil, fmt.Errorf("quant_swiglu_norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	x, sg, su, y := in[0], in[5], in[6], out[0]
	k, rows, segs, err := quantGateUp(n, in, out, a.Blocks)
	if err != nil {
		return nil, err
	}
	f := segs[0].n
	down, nOut, err := quantWeightOf(n.Inputs[7], n.Inputs[8], in[7], in[8], a.Blocks, f)
	if err != nil {
		return nil, fmt.Errorf("down: %w", err)
	}
	if segs[1].n != f || x.n != rows*k || sg.n != f || su.n != f || y.n != rows*nOut {
		return nil, fmt.Errorf("x of %d, gate of %d and up of %d features, scales of %d and %d, output of %d elements "+
			"do not fit %d rows of %d -> %d -> %d", x.n, f, segs[1].n, sg.n, su.n, y.n, rows, k, f, nOut)
	}
	s := be.newSteps()
	if rows == 0 || nOut == 0 {
		return s, nil
	}
	if f == 0 {
		// An empty activation normalizes to zeros.
		s.zero(y)
		return s, nil
	}
	wt, wtd := be.quantHalf(segs[0].q.w.store), be.quantHalf(down.w.store)
	if rows > matvecMaxRows && be.blas != nil && !be.quantF32() && k > 0 && be.quantHalf(segs[1].q.w.store) == wt {
		gu, err := be.dequantBatch(s, segs[:], k, wt)
		if err != nil {
			return nil, err
		}
		deqDown := func() (*Buffer, error) {
			d, err := be.dequantBatch(s, []qfuseSeg{{q: down, n: nOut}}, f, wtd)
			if err != nil {
				return nil, err
			}
			return d[0].w, nil
		}
		if err := be.mlpHalf(s, x, gu[0].w, gu[1].w, sg, su, y, rows, k, f, nOut, wt, wtd, a.Eps, deqDown); err != nil {
			return nil, err
		}
		return s, nil
	}
	p, err := be.reuse(&be.act, 4*rows*f)
	if err != nil {
		return nil, err
	}
	act := &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * f, bytes: 4 * rows * f, be: be}
	if err := be.quantMatMulSwiGLU(s, x, segs, sg, su, act, rows, k, f); err != nil {
		return nil, err
	}
	if err := be.quantNormMatMul(s, act, down, y, rows, f, nOut, a.Eps); err != nil {
		return nil, fmt.Errorf("down: %w", err)
	}
	return s, nil
}

// bindQuantSlerpMatMul binds quant_slerp_matmul: one row, with the
// tuning's slerpStaged, one launch of a staged slerp form where it takes
// the weights (quantSlerpRow); otherwise as slerp_matmul is bound
// (slerpThen): for prompt rows on cuBLAS in a 16-bit precision the slerp
// writes the 16-bit copy of h in the weights' type (quantHalf), which the
// group's products read instead of converting h (quantHalfX).
func bindQuantSlerpMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if s, ok, err := be.quantSlerpRow(n, in, out); err != nil || ok {
		return s, err
	}
	return be.slerpThen(n, in, out, ops.OpQuantGroupedMatMul.Op, bindQuantGroupedMatMul, be.quantSlerpHalf)
}

// bindQuantSlerpMatMulSwiGLU binds quant_slerp_matmul_swiglu as
// bindQuantSlerpMatMul binds quant_slerp_matmul, over the gate and up
// weights of quant_matmul_swiglu.
func bindQuantSlerpMatMulSwiGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if s, ok, err := be.quantSlerpRow(n, in, out); err != nil || ok {
		return s, err
	}
	return be.slerpThen(n, in, out, ops.OpQuantMatMulSwiGLU.Op, bindQuantMatMulSwiGLU, be.quantSlerpHalf)
}

// quantSlerpHalf is the 16-bit type of the copy of h that a quantized
// slerp product's prompt products read (slerpThen's half): the first
// weight's (quantHalf), none with quantF32.
func (be *Backend) quantSlerpHalf(ws []*Buffer) int32 {
	if be.quantF32() || len(ws) == 0 {
		return 0
	}
	if _, _, _, err := quantCode(ws[0].store); err != nil {
		return 0
	}
	return be.quantHalf(ws[0].store)
}

// quantSlerpRow appends a quantized slerp product of one row as one
// launch, the slerp computed as the staged kernel stages h (qfuseForm's
// slerp), with the tuning's slerpStaged (REEL_SLERP_STAGED=1) and where
// qfuseLaunch takes the weights; ok false, and nothing appended,
// otherwise.
func (be *Backend) quantSlerpRow(n *graph.Node, in, out []*Buffer) (s *steps, ok bool, err error) {
	if !be.mv.slerpStaged || len(in) < 5 || len(out) < 2 || len(n.Inputs) != len(in) || len(n.Outputs) != len(out) {
		return nil, false, nil
	}
	sa, pa, err := ops.SlerpParts(n.Op, n.Attrs)
	if err != nil {
		return nil, false, err
	}
	a, isQuant := pa.(ops.QuantAttrs)
	k, rows := n.Inputs[0].Shape.Last(), n.Inputs[0].Shape.Rows()
	if !isQuant || rows != 1 || k < 1 {
		return nil, false, nil
	}
	x, y, alpha, h := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"x", "y", "alpha", "h"}, []*Buffer{x, y, alpha, h}); err != nil {
		return nil, false, err
	}
	if x.n != k || y.n != k || alpha.n != k || h.n != k {
		return nil, false, fmt.Errorf("x of %d, y of %d, alpha of %d and h of %d elements do not fit a row of %d", x.n, y.n, alpha.n, h.n, k)
	}
	sl := &qfuseSlerp{y: y, alpha: alpha, h: h, eps: sa.Eps}
	s = be.newSteps()
	// The product's node over h, for its operands' shapes.
	sub := &graph.Node{ID: n.ID, Attrs: pa, Inputs: append([]*graph.Value{n.Outputs[0]}, n.Inputs[3:]...), Outputs: n.Outputs[1:], Scope: n.Scope}
	pin := append([]*Buffer{x}, in[3:]...)
	switch n.Op {
	case ops.OpQuantSlerpMatMul.Op:
		if len(pin)%2 != 1 || len(out)-1 != (len(pin)-1)/2 {
			return nil, false, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
		}
		segs, err := quantGroupSegs(sub, pin, out[1:], a, 1, k)
		if err != nil {
			return nil, false, err
		}
		if len(quantRuns(segs)) != 1 {
			return nil, false, nil
		}
		return s, be.qfuseLaunch(s, x, segs, 1, k, qfuseForm{prefix: "qmvsg", slerp: sl}), nil
	case ops.OpQuantSlerpMatMulSwiGLU.Op:
		if len(pin) != 7 || len(out) != 2 {
			return nil, false, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
		}
		_, _, segs, err := quantGateUp(sub, pin, out[1:], a)
		if err != nil {
			return nil, false, err
		}
		if err := checkGateUp(x, segs, pin[5], pin[6], out[1], 1, k); err != nil {
			return nil, false, err
		}
		return s, be.qfuseLaunch(s, x, segs[:], 1, k, qfuseForm{prefix: "qmvssw", swiglu: &[3]*Buffer{out[1], pin[5], pin[6]}, slerp: sl}), nil
	}
	return nil, false, nil
}
