package cuda

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Binders of the gated residual streams (ops/hyperconn.go): hc_expand,
// hc_mix, hc_inject and reshape (their norm is rmsnorm). The kernels are
// in kernels/hyperconn.cu; reshape is a device copy (nothing in place).

// hcBinders are the binders of the gated residual (hyper-connection) ops, by op name.
var hcBinders = map[string]binder{
	"hc_expand": bindHCExpand,
	"hc_mix":    bindHCMix,
	"hc_inject": bindHCInject,
	"reshape":   bindReshape,
	// the fused stream ops (fused_hyperconn.go)
	"moe_inject_norm": bindMoEInjectNorm,
	"hc_mix_matmul":   bindHCMixMatMul,
}

// hcKernels are the kernels of kernels/hyperconn.cu the binders launch.
var hcKernels = append([]string{
	"hc_expand", "hc_mix", "hc_inject",
}, hcFusedKernels...)

// hcKernelErr words the error record's codes of the hc kernels; they report
// none (codes 30..39 are unused), so it is nil for every record.
func hcKernelErr(w [errRecWords]int32) error {
	return nil
}

// hcThreads is the block size of the stream kernels (hc_expand, hc_mix,
// hc_inject): a thread per column of a row.
const hcThreads = 256

// hcMaxInjectStreams bounds hc_inject's streams: their weights live in the
// block's shared memory (4 bytes each, within the default 48 KiB).
const hcMaxInjectStreams = 48 << 10 / 4

// hcLayout is the stream kernels' launch over rows of h columns: grid.x =
// rows·chunks blocks of up to hcThreads columns, a thread per column.
func hcLayout(op string, rows, h int) (grid, block [3]uint32, chunks int32, err error) {
	chunks = int32((h + hcThreads - 1) / hcThreads)
	if int64(rows)*int64(chunks) > math.MaxInt32 {
		return grid, block, 0, fmt.Errorf("%s: %d rows of %d columns: more blocks than one launch takes", op, rows, h)
	}
	return [3]uint32{uint32(rows * int(chunks)), 1, 1}, [3]uint32{threadsFor(h, hcThreads), 1, 1}, chunks, nil
}

// hcStreams gives the streams c of an hc node (StreamAttrs) and the width h
// of one stream, given the width of the node's hyper-state [T, C·H].
func hcStreams(op string, n *graph.Node, width int) (c, h int, err error) {
	at, err := ops.NodeAttrs[ops.StreamAttrs](n)
	if err != nil {
		return 0, 0, err
	}
	c = at.Streams
	if c <= 0 || width <= 0 || width%c != 0 || width > math.MaxInt32 {
		return 0, 0, fmt.Errorf("%s: %d streams do not divide rows of %d", op, c, width)
	}
	return c, width / c, nil
}

// bindHCExpand binds hc_expand: x[T, H] tiled into [T, C·H].
func bindHCExpand(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, y := in[0], out[0]
	if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
		return nil, err
	}
	at, err := ops.NodeAttrs[ops.StreamAttrs](n)
	if err != nil {
		return nil, err
	}
	c, h := at.Streams, n.Inputs[0].Shape.Last()
	if c <= 0 || h <= 0 || int64(c)*int64(h) > math.MaxInt32 || x.n%h != 0 || y.n != c*x.n {
		return nil, fmt.Errorf("hc_expand: x of %d elements in rows of %d, output of %d for %d streams", x.n, h, y.n, c)
	}
	s := be.newSteps()
	rows := x.n / h
	if rows == 0 {
		return s, nil
	}
	grid, block, chunks, err := hcLayout("hc_expand", rows, h)
	if err != nil {
		return nil, err
	}
	s.add("hc_expand", grid, block, 0, x.ptr, y.ptr, int32(c), int32(h), chunks)
	return s, nil
}

// bindHCMix binds hc_mix: u[T, H] = (1/C) Σ_c sigmoid(g_c) ⊙ xn_c.
func bindHCMix(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	xn, g, u := in[0], in[1], out[0]
	if err := f32All([]string{"xn", "g", "output"}, []*Buffer{xn, g, u}); err != nil {
		return nil, err
	}
	width := n.Inputs[0].Shape.Last()
	c, h, err := hcStreams("hc_mix", n, width)
	if err != nil {
		return nil, err
	}
	rows := xn.n / width
	if xn.n%width != 0 || g.n != xn.n || u.n != rows*h {
		return nil, fmt.Errorf("hc_mix: xn of %d, g of %d, output of %d elements do not fit rows of %d streams of %d",
			xn.n, g.n, u.n, c, h)
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	grid, block, chunks, err := hcLayout("hc_mix", rows, h)
	if err != nil {
		return nil, err
	}
	s.add("hc_mix", grid, block, 0, xn.ptr, g.ptr, u.ptr, int32(c), int32(h), chunks)
	return s, nil
}

// bindHCInject binds hc_inject: x_c + 2·sigmoid(l_c / C) · y for every
// stream c (the output may be x's buffer).
func bindHCInject(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, yb, l, o := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"x", "y", "l", "output"}, []*Buffer{x, yb, l, o}); err != nil {
		return nil, err
	}
	width := n.Inputs[0].Shape.Last()
	c, h, err := hcStreams("hc_inject", n, width)
	if err != nil {
		return nil, err
	}
	if c > hcMaxInjectStreams {
		return nil, fmt.Errorf("hc_inject: %d streams: this backend takes at most %d", c, hcMaxInjectStreams)
	}
	rows := x.n / width
	if x.n%width != 0 || yb.n != rows*h || l.n != rows*c || o.n != x.n {
		return nil, fmt.Errorf("hc_inject: x of %d, y of %d, l of %d, output of %d elements do not fit rows of %d streams of %d",
			x.n, yb.n, l.n, o.n, c, h)
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	grid, block, chunks, err := hcLayout("hc_inject", rows, h)
	if err != nil {
		return nil, err
	}
	s.add("hc_inject", grid, block, uint32(4*c), x.ptr, yb.ptr, l.ptr, o.ptr, int32(c), int32(h), chunks)
	return s, nil
}

// bindReshape binds reshape: a device copy of the bytes, or nothing when
// the output is the input's buffer (in place).
func bindReshape(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, y := in[0], out[0]
	if x.bytes != y.bytes || x.store != y.store {
		return nil, fmt.Errorf("reshape: input of %d bytes (stored %s), output of %d bytes (stored %s)", x.bytes, x.store, y.bytes, y.store)
	}
	s := be.newSteps()
	if x.ptr != y.ptr {
		s.copyBytes(y.ptr, x.ptr, x.bytes)
	}
	return s, nil
}
