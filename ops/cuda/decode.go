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
