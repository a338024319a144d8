package cuda

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the fused stream ops (ops/fused_hyperconn.go): hc_inject_norm
// is one row kernel (runs past the row kernels' reach: hc_inject, then
// rmsnorm); hc_mix_matmul is one matvec over the up projection with the
// activation before it and the mix after it for decode rows (up to
// matvecMaxRows, at most hcMixMaxStreams streams, the rows' activations
// within hcMixMaxShared bytes), else its parts: the activation into
// scratch, the product (cuBLAS) and hc_mix.

// hcMixMaxStreams is the most streams hc_mix_mv takes (HC_MIX_MAXC).
const hcMixMaxStreams = 4

// hcMixWarps is hc_mix_mv's warps a block, a column each.
const hcMixWarps = 8

// hcMixMaxShared bounds hc_mix_mv's dynamic shared memory (the rows'
// activations): the default 48 KiB a block.
const hcMixMaxShared = 48 << 10

// hcFusedKernels are the kernels of the fused stream ops.
var hcFusedKernels = []string{
	"hc_inject_norm", "hc_inject_norm_wide", "hc_mix_act",
	"hc_mix_mv_f32_r1", "hc_mix_mv_bf16_r1", "hc_mix_mv_f16_r1",
	"hc_mix_mv_f32_r8", "hc_mix_mv_bf16_r8", "hc_mix_mv_f16_r8",
}

// subNode is a part of fused node n: op over in to out, with attrs.
func subNode(n *graph.Node, op string, attrs any, in, out []*graph.Value) *graph.Node {
	return &graph.Node{ID: n.ID, Op: op, Attrs: attrs, Inputs: in, Outputs: out, Scope: n.Scope}
}

// bindHCInjectNorm binds hc_inject_norm: x' = hc_inject(x, y, l) (output
// 0, which may be x's buffer) and rmsnorm(x', w) (output 1).
func bindHCInjectNorm(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) != 4 || len(out) != 2 {
		return nil, fmt.Errorf("hc_inject_norm: %d inputs and %d outputs", len(in), len(out))
	}
	if err := f32("y", in[1]); err != nil {
		return nil, err
	}
	return be.injectNorm(n, in[0], in[2], in[3], out[0], out[1], in[1], nil, nil)
}

// bindMoEInjectNorm binds moe_inject_norm: hc_inject_norm of moe_combine's
// output, computed where hc_inject reads it.
func bindMoEInjectNorm(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if (len(in) != 5 && len(in) != 7) || len(out) != 2 {
		return nil, fmt.Errorf("moe_inject_norm: %d inputs and %d outputs", len(in), len(out))
	}
	if err := f32All([]string{"y", "p"}, in[3:5]); err != nil {
		return nil, err
	}
	if len(in) == 7 {
		if err := f32All([]string{"s", "sg"}, in[5:7]); err != nil {
			return nil, err
		}
	}
	return be.injectNorm(n, in[0], in[1], in[2], out[0], out[1], nil, n, in[3:])
}

// injectNorm binds hc_inject_norm (y given) or moe_inject_norm (moe its
// node, comb moe_combine's inputs y, p and optionally s, sg): one row
// kernel a run of the norm, or past the row kernels' reach the parts
// (moe_combine into scratch, hc_inject, rmsnorm).
func (be *Backend) injectNorm(n *graph.Node, x, l, w, xo, xn, y *Buffer, moe *graph.Node, comb []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.HCInjectNormAttrs](n)
	if err != nil {
		return nil, err
	}
	if err := f32All([]string{"x", "l", "output 0", "output 1"}, []*Buffer{x, l, xo, xn}); err != nil {
		return nil, err
	}
	width := n.Inputs[0].Shape.Last()
	c, h, err := hcStreams(n.Op, &graph.Node{Op: n.Op, Attrs: ops.StreamAttrs{Streams: at.Streams}}, width)
	if err != nil {
		return nil, err
	}
	g := at.Norm.Group
	if g == 0 {
		g = width
	}
	if g <= 0 || width%g != 0 {
		return nil, fmt.Errorf("%s: group %d does not divide rows of %d", n.Op, at.Norm.Group, width)
	}
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("w: %w", err)
	}
	if w.n != g && w.n != width {
		return nil, fmt.Errorf("%s: w has %d elements, want %d (the group) or %d (the row)", n.Op, w.n, g, width)
	}
	rows := x.n / width
	if x.n%width != 0 || l.n != rows*c || xo.n != x.n || xn.n != x.n {
		return nil, fmt.Errorf("%s: x of %d, l of %d, outputs of %d and %d elements do not fit rows of %d streams of %d",
			n.Op, x.n, l.n, xo.n, xn.n, c, h)
	}
	var ye, ew, sh, sg cu.DevicePtr
	k := 0
	if moe != nil {
		ys := moe.Inputs[3].Shape
		if len(ys) != 3 || ys[1] <= 0 || ys[2] != h {
			return nil, fmt.Errorf("%s: y %v must be [rows, k, %d]", n.Op, ys, h)
		}
		k = ys[1]
		if comb[0].n != rows*k*h || comb[1].n != rows*k || (len(comb) == 4 && (comb[2].n != rows*h || comb[3].n != rows)) {
			return nil, fmt.Errorf("%s: the experts' products, weights and shared expert do not fit %d rows of k %d, hidden %d", n.Op, rows, k, h)
		}
		ye, ew = comb[0].ptr, comb[1].ptr
		if len(comb) == 4 {
			sh, sg = comb[2].ptr, comb[3].ptr
		}
	} else if y.n != rows*h {
		return nil, fmt.Errorf("%s: y of %d elements does not fit %d rows of %d", n.Op, y.n, rows, h)
	}
	if g > 1024*32 || c+1 > hcMaxInjectStreams {
		return be.injectNormParts(n, at, x, l, w, xo, xn, y, moe, comb, rows, h)
	}
	s := be.newSteps()
	runs := x.n / g
	if runs == 0 {
		return s, nil
	}
	if runs > math.MaxInt32 {
		return nil, fmt.Errorf("%s: %d runs of %d elements: more than one launch takes", n.Op, runs, g)
	}
	name, threads, err := rowKernel("hc_inject_norm", g, runs)
	if err != nil {
		return nil, err
	}
	var yp cu.DevicePtr
	if y != nil {
		yp = y.ptr
	}
	s.add(name, [3]uint32{uint32(runs), 1, 1}, [3]uint32{threads, 1, 1}, uint32(4*(c+1)),
		x.ptr, yp, l.ptr, xo.ptr, w.ptr, wt, xn.ptr, int32(c), int32(h), int32(g), int32(w.n), at.Norm.Eps,
		ye, ew, sh, sg, int32(k))
	return s, nil
}

// injectNormParts binds injectNorm's parts: moe_combine into scratch (moe
// only), hc_inject, then rmsnorm of its result.
func (be *Backend) injectNormParts(n *graph.Node, at ops.HCInjectNormAttrs, x, l, w, xo, xn, y *Buffer, moe *graph.Node, comb []*Buffer,
	rows, h int) (*steps, error) {
	s := be.newSteps()
	yv := n.Inputs[1]
	if moe != nil {
		p, err := be.reuse(&be.hcMix, 4*rows*h)
		if err != nil {
			return nil, err
		}
		y = &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * h, bytes: 4 * rows * h, be: be}
		yv = &graph.Value{ID: -1, Name: "moe_out", DType: graph.F32, Shape: graph.Shape{rows, h}, Kind: graph.Temp}
		cs, err := bindMoECombine(be, subNode(n, "moe_combine", nil, n.Inputs[3:], []*graph.Value{yv}), comb, []*Buffer{y})
		if err != nil {
			return nil, err
		}
		s.work = append(s.work, cs.work...)
	}
	is, err := bindHCInject(be, subNode(n, "hc_inject", ops.StreamAttrs{Streams: at.Streams}, []*graph.Value{n.Inputs[0], yv, l0(n)}, n.Outputs[:1]),
		[]*Buffer{x, y, l}, []*Buffer{xo})
	if err != nil {
		return nil, err
	}
	ns, err := bindNorm(true)(be, subNode(n, "rmsnorm", at.Norm, []*graph.Value{n.Outputs[0], w0(n)}, n.Outputs[1:]), []*Buffer{xo, w}, []*Buffer{xn})
	if err != nil {
		return nil, err
	}
	s.work = append(append(s.work, is.work...), ns.work...)
	return s, nil
}

// l0 and w0 are the inject logits and the norm's weight of an
// hc_inject_norm or moe_inject_norm node.
func l0(n *graph.Node) *graph.Value {
	if n.Op == ops.OpMoEInjectNorm.Op {
		return n.Inputs[1]
	}
	return n.Inputs[2]
}

func w0(n *graph.Node) *graph.Value {
	if n.Op == ops.OpMoEInjectNorm.Op {
		return n.Inputs[2]
	}
	return n.Inputs[3]
}

// bindHCMixMatMul binds hc_mix_matmul: u = hc_mix(xn, silu(Scale·d)·wᵀ).
func bindHCMixMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.HCMixMatMulAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 3 || len(out) != 1 {
		return nil, fmt.Errorf("hc_mix_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	xn, d, w, u := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"xn", "d", "output"}, []*Buffer{xn, d, u}); err != nil {
		return nil, err
	}
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("w: %w", err)
	}
	width, r := n.Inputs[0].Shape.Last(), n.Inputs[1].Shape.Last()
	c, h, err := hcStreams("hc_mix_matmul", &graph.Node{Op: n.Op, Attrs: ops.StreamAttrs{Streams: at.Streams}}, width)
	if err != nil {
		return nil, err
	}
	rows := xn.n / width
	if r <= 0 || xn.n%width != 0 || d.n != rows*r || w.n != width*r || u.n != rows*h {
		return nil, fmt.Errorf("hc_mix_matmul: xn of %d, d of %d, w of %d, output of %d elements do not fit rows of %d streams of %d and a rank of %d",
			xn.n, d.n, w.n, u.n, c, h, r)
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	if rows <= matvecMaxRows && c <= hcMixMaxStreams && 4*rows*r <= hcMixMaxShared {
		elems := 8
		if wt == 0 {
			elems = 4
		}
		vec := int32(0)
		if r%elems == 0 && w.ptr%16 == 0 {
			vec = 1
		}
		rb := 1
		if rows > 1 {
			rb = matvecMaxRows
		}
		name := fmt.Sprintf("hc_mix_mv_%s_r%d", wtypeNames[wt], rb)
		s.add(name, [3]uint32{uint32((h + hcMixWarps - 1) / hcMixWarps), 1, 1}, [3]uint32{32 * hcMixWarps, 1, 1}, uint32(4*rows*r),
			xn.ptr, d.ptr, w.ptr, u.ptr, int32(rows), int32(c), int32(h), int32(r), at.Scale, vec)
		return s, nil
	}
	// the parts: the activation and the logits in scratch
	tBytes := (4*rows*r + 255) / 256 * 256
	p, err := be.reuse(&be.hcMix, tBytes+4*rows*width)
	if err != nil {
		return nil, err
	}
	t := &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * r, bytes: 4 * rows * r, be: be}
	gl := &Buffer{ptr: p.Offset(uint64(tBytes)), dt: graph.F32, store: graph.F32, n: rows * width, bytes: 4 * rows * width, be: be}
	grid, block := grid1(int64(rows * r))
	s.add("hc_mix_act", grid, block, 0, d.ptr, t.ptr, int64(rows*r), at.Scale)
	if err := be.matmul(s, t, w, gl, rows, r, width); err != nil {
		return nil, fmt.Errorf("hc_mix_matmul: %w", err)
	}
	mixGrid, mixBlock, chunks, err := hcLayout("hc_mix_matmul", rows, h)
	if err != nil {
		return nil, err
	}
	s.add("hc_mix", mixGrid, mixBlock, 0, xn.ptr, gl.ptr, u.ptr, int32(c), int32(h), chunks)
	return s, nil
}
