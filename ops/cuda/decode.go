package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the fused decode ops (ops/fused_decode.go): qkv_prep is one
// launch over every query, key and value head of the rows; attention_gate
// is attention with the gate in its finish step; norm_matmul is one
// normalizing matvec up to matvecMaxRows rows, else l2norm into scratch and
// the product.

func bindQKVPrep(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.QKVPrepAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 6 && len(in) != 7 {
		return nil, fmt.Errorf("qkv_prep takes q, k, v, call, kslot, vslot and an optional scale, got %d inputs", len(in))
	}
	q, k, v, call, ks, vs, y := in[0], in[1], in[2], in[3], in[4], in[5], out[0]
	if err := f32All([]string{"q", "k", "v", "kslot", "vslot", "output"}, []*Buffer{q, k, v, ks, vs, y}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	rope := at.NormRope.Rope
	hd, rot := rope.HeadDim, rope.Rotary
	qw, kw := n.Inputs[0].Shape.Last(), n.Inputs[1].Shape.Last()
	if err := rope.CheckWidth(qw); err != nil {
		return nil, fmt.Errorf("rope: q: %w", err)
	}
	if err := rope.CheckWidth(kw); err != nil {
		return nil, fmt.Errorf("rope: k: %w", err)
	}
	rows := q.n / qw
	if q.n%qw != 0 || y.n != q.n || k.n != rows*kw || v.n != k.n || ks.n%kw != 0 || vs.n%kw != 0 {
		return nil, fmt.Errorf("qkv_prep: q of %d, output of %d, k of %d, v of %d, slots of %d and %d elements do not fit rows of %d and %d",
			q.n, y.n, k.n, v.n, ks.n, vs.n, qw, kw)
	}
	var sc cu.DevicePtr
	if len(in) == 7 {
		if err := f32("scale", in[6]); err != nil {
			return nil, err
		}
		if in[6].n != qw {
			return nil, fmt.Errorf("scale has %d elements, want %d", in[6].n, qw)
		}
		sc = in[6].ptr
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	fp, m, err := be.uploadRope(rope)
	if err != nil {
		return nil, err
	}
	ring := int32(0)
	if at.Slot.Ring {
		ring = 1
	}
	hq, hk := qw/hd, kw/hd
	// Heads a block: one for decode and windows (as many blocks as heads,
	// for latency); a prompt chunk's rows take qkvHeadsPerBlock, so that its
	// blocks are fewer and each does more.
	per := 1
	if rows >= ops.AttentionChunkRows {
		per = qkvHeadsPerBlock
	}
	s.add("qkv_prep", [3]uint32{uint32(rows), uint32((hq + 2*hk + per - 1) / per), 1}, [3]uint32{threadsFor(max(rot/2, hd-rot), 128), 1, 1}, 0,
		q.ptr, k.ptr, v.ptr, y.ptr, ks.ptr, vs.ptr, call.ptr, be.errRec, fp, m, sc, int32(rows), int32(hq), int32(hk), int32(hd),
		int32(rot), at.NormRope.Eps, int32(ks.n/kw), int32(vs.n/kw), ring, int32(per))
	return s, nil
}

// bindQKVAttentionGate binds qkv_attention_gate: one row, with the
// tuning's qkvFold, as the attention's launches only (qkvAttentionRow);
// otherwise its parts, qkv_prep into the shared queries scratch, then
// attention_gate of them.
func bindQKVAttentionGate(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.QKVAttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 9 || len(out) != 1 || len(n.Inputs) != 9 {
		return nil, fmt.Errorf("qkv_attention_gate: %d inputs and %d outputs", len(in), len(out))
	}
	if s, ok, err := be.qkvAttentionRow(at, n, in, out[0]); err != nil || ok {
		return s, err
	}
	p, err := be.reuse(&be.queries, 4*in[0].n)
	if err != nil {
		return nil, err
	}
	q := &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: in[0].n, bytes: 4 * in[0].n, be: be}
	qv := &graph.Value{ID: -1, Name: "queries", DType: graph.F32, Shape: n.Inputs[0].Shape, Kind: graph.Temp}
	prep := &graph.Node{ID: n.ID, Op: ops.OpQKVPrep.Op, Attrs: at.Prep, Inputs: n.Inputs[:7], Outputs: []*graph.Value{qv}, Scope: n.Scope}
	ps, err := bindQKVPrep(be, prep, in[:7], []*Buffer{q})
	if err != nil {
		return nil, fmt.Errorf("qkv_prep: %w", err)
	}
	as, err := be.attention(at.Attention, q, in[4], in[5], in[3], out[0], in[7], in[8])
	if err != nil {
		return nil, fmt.Errorf("attention_gate: %w", err)
	}
	s := be.newSteps()
	s.then(ps, as)
	return s, nil
}

// qkvAttentionRow appends qkv_attention_gate of one row as attn_part's
// prep form (its blocks prepare their queries; the block holding the
// row's key prepares it and writes it and the value row) and attn_finish,
// where the tuning's qkvFold asks for it and the shapes suit: heads of a
// multiple of 4 dimensions in groups of 1, 2, 4 or 8, 16-byte aligned
// buffers. ok false, and nothing appended, otherwise.
func (be *Backend) qkvAttentionRow(at ops.QKVAttentionAttrs, n *graph.Node, in []*Buffer, y *Buffer) (s *steps, ok bool, err error) {
	a, rope := at.Attention, at.Prep.NormRope.Rope
	d := a.HeadDim
	if !be.mv.qkvFold || n.Inputs[0].Shape.Rows() != 1 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || d%4 != 0 || rope.HeadDim != d {
		return nil, false, nil
	}
	switch a.Heads / a.KVHeads {
	case 1, 2, 4, 8:
	default:
		return nil, false, nil
	}
	q, k, v, call, ks, vs, sq, g, sg := in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8]
	if err := f32All([]string{"q", "k", "v", "kslot", "vslot", "s", "g", "sg", "output"}, []*Buffer{q, k, v, ks, vs, sq, g, sg, y}); err != nil {
		return nil, false, err
	}
	if err := checkCall(call); err != nil {
		return nil, false, err
	}
	qw, kw := a.Heads*d, a.KVHeads*d
	if q.n != qw || k.n != kw || v.n != kw || g.n != qw || sq.n != qw || sg.n != qw || y.n != qw || ks.n%kw != 0 || vs.n != ks.n {
		return nil, false, fmt.Errorf("qkv_attention_gate: q of %d, k of %d, v of %d, slots of %d and %d, scales of %d and %d, gate of %d, output of %d elements "+
			"do not fit one row of %d query and %d kv heads of %d", q.n, k.n, v.n, ks.n, vs.n, sq.n, sg.n, g.n, y.n, a.Heads, a.KVHeads, d)
	}
	if !aligned16(q.ptr, k.ptr, v.ptr, ks.ptr, vs.ptr, y.ptr, g.ptr, sg.ptr) {
		return nil, false, nil
	}
	fp, m, err := be.uploadRope(rope)
	if err != nil {
		return nil, false, err
	}
	capacity := ks.n / kw
	ring, span := attnSlot(a, capacity, 1)
	s = be.newSteps()
	prep := &attnPrepIn{k: k, v: v, freq: fp, m: m, sq: sq.ptr, rot: rope.Rotary, eps: at.Prep.NormRope.Eps}
	if err := be.attnPart(s, a, q, ks, vs, call, y, g.ptr, sg.ptr, 1, capacity, span, ring, true, prep); err != nil {
		return nil, false, err
	}
	return s, true, nil
}

// qkvHeadsPerBlock is the heads one qkv_prep block prepares for a prompt
// chunk of many rows.
const qkvHeadsPerBlock = 8

func bindAttentionGate(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.AttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 6 || len(out) != 1 {
		return nil, fmt.Errorf("attention_gate: %d inputs and %d outputs", len(in), len(out))
	}
	return be.attention(at, in[0], in[1], in[2], in[3], out[0], in[4], in[5])
}

func bindNormMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.EpsAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 2 || len(out) != 1 {
		return nil, fmt.Errorf("norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	xv, wv := n.Inputs[0], n.Inputs[1]
	if len(wv.Shape) != 2 || wv.Shape[1] != xv.Shape.Last() {
		return nil, fmt.Errorf("weight %s does not take %d features", wv, xv.Shape.Last())
	}
	s := be.newSteps()
	if err := be.normMatMul(s, in[0], in[1], out[0], xv.Shape.Rows(), xv.Shape.Last(), wv.Shape[0], at.Eps); err != nil {
		return nil, err
	}
	return s, nil
}

// normMatMul appends y[rows, nOut] = l2norm(x)[rows, k] · wᵀ: one
// normalizing matvec up to matvecMaxRows rows, else the products with the
// norm fused into the conversion of x.
func (be *Backend) normMatMul(s *steps, x, w, y *Buffer, rows, k, nOut int, eps float32) error {
	if err := checkProduct(x, w, y, rows, k, nOut); err != nil {
		return err
	}
	if rows == 0 || nOut == 0 {
		return nil
	}
	segs := []mvSeg{{w: w, y: y, n: nOut}}
	if k > 0 && rows <= matvecMaxRows {
		return be.matvec(s, x, segs, rows, k, nil, &eps)
	}
	return be.products(s, x, segs, rows, k, &eps)
}
