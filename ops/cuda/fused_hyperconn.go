package cuda

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the fused stream ops (ops/fused_hyperconn.go): moe_inject_norm
// is one row kernel (runs past the row kernels' reach: moe_combine,
// hc_inject, then rmsnorm); hc_mix_matmul is one matvec over the up
// projection with the activation before it and the mix after it for decode
// rows (up to matvecMaxRows, at most hcMixMaxStreams streams, the rows'
// activations within hcMixMaxShared bytes), else its parts: the activation
// into scratch, the product (cuBLAS) and hc_mix.

// hcMixMaxStreams is the most streams hc_mix_mv takes (HC_MIX_MAXC).
const hcMixMaxStreams = 4

// hcMixWarps is hc_mix_mv's warps a block, a column each.
const hcMixWarps = 8

// hcMixMaxShared bounds hc_mix_mv's dynamic shared memory (the rows'
// activations): the default 48 KiB a block.
const hcMixMaxShared = 48 << 10

// hcFusedKernels are the kernels of the fused stream ops.
var hcFusedKernels = []string{
	"moe_inject_norm", "moe_inject_norm_wide", "hc_mix_act",
	"hc_mix_mv_f32_r1", "hc_mix_mv_bf16_r1", "hc_mix_mv_f16_r1",
	"hc_mix_mv_f32_r8", "hc_mix_mv_bf16_r8", "hc_mix_mv_f16_r8",
}

// subNode is a part of fused node n: op over in to out, with attrs.
func subNode(n *graph.Node, op string, attrs any, in, out []*graph.Value) *graph.Node {
	return &graph.Node{ID: n.ID, Op: op, Attrs: attrs, Inputs: in, Outputs: out, Scope: n.Scope}
}

// bindMoEInjectNorm binds moe_inject_norm: x' = hc_inject(x,
// moe_combine(y, p[, s, sg]), l) (output 0, which may be x's buffer) and
// rmsnorm(x', w) (output 1), moe_combine's output computed where hc_inject
// reads it: one row kernel a run of the norm, or past the row kernels'
// reach the parts.
func bindMoEInjectNorm(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if (len(in) != 5 && len(in) != 7) || len(out) != 2 {
		return nil, fmt.Errorf("moe_inject_norm: %d inputs and %d outputs", len(in), len(out))
	}
	at, err := ops.NodeAttrs[ops.MoEInjectNormAttrs](n)
	if err != nil {
		return nil, err
	}
	x, l, w, xo, xn, comb := in[0], in[1], in[2], out[0], out[1], in[3:]
	if err := f32All([]string{"x", "l", "y", "p", "output 0", "output 1"}, []*Buffer{x, l, comb[0], comb[1], xo, xn}); err != nil {
		return nil, err
	}
	if len(comb) == 4 {
		if err := f32All([]string{"s", "sg"}, comb[2:]); err != nil {
			return nil, err
		}
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
	ys := n.Inputs[3].Shape
	if len(ys) != 3 || ys[1] <= 0 || ys[2] != h {
		return nil, fmt.Errorf("%s: y %v must be [rows, k, %d]", n.Op, ys, h)
	}
	k := ys[1]
	if comb[0].n != rows*k*h || comb[1].n != rows*k || (len(comb) == 4 && (comb[2].n != rows*h || comb[3].n != rows)) {
		return nil, fmt.Errorf("%s: the experts' products, weights and shared expert do not fit %d rows of k %d, hidden %d", n.Op, rows, k, h)
	}
	if g > 1024*32 || c+1 > hcMaxInjectStreams {
		return be.moeInjectNormParts(n, at, in, out, rows, h)
	}
	s := be.newSteps()
	runs := x.n / g
	if runs == 0 {
		return s, nil
	}
	if runs > math.MaxInt32 {
		return nil, fmt.Errorf("%s: %d runs of %d elements: more than one launch takes", n.Op, runs, g)
	}
	name, threads, err := rowKernel("moe_inject_norm", g, runs)
	if err != nil {
		return nil, err
	}
	var sh, sg cu.DevicePtr
	if len(comb) == 4 {
		sh, sg = comb[2].ptr, comb[3].ptr
	}
	s.add(name, [3]uint32{uint32(runs), 1, 1}, [3]uint32{threads, 1, 1}, uint32(4*(c+1)),
		x.ptr, l.ptr, xo.ptr, w.ptr, wt, xn.ptr, int32(c), int32(h), int32(g), int32(w.n), at.Norm.Eps,
		comb[0].ptr, comb[1].ptr, sh, sg, int32(k))
	return s, nil
}

// moeInjectNormParts binds moe_inject_norm's parts over its inputs in (x,
// l, w, y, p and optionally s, sg): moe_combine into scratch, hc_inject of
// it into out[0], then rmsnorm of that into out[1].
func (be *Backend) moeInjectNormParts(n *graph.Node, at ops.MoEInjectNormAttrs, in, out []*Buffer, rows, h int) (*steps, error) {
	s := be.newSteps()
	p, err := be.reuse(&be.hcMix, 4*rows*h)
	if err != nil {
		return nil, err
	}
	y := &Buffer{ptr: p, dt: graph.F32, store: graph.F32, n: rows * h, bytes: 4 * rows * h, be: be}
	yv := &graph.Value{ID: -1, Name: "moe_out", DType: graph.F32, Shape: graph.Shape{rows, h}, Kind: graph.Temp}
	cs, err := bindMoECombine(be, subNode(n, "moe_combine", nil, n.Inputs[3:], []*graph.Value{yv}), in[3:], []*Buffer{y})
	if err != nil {
		return nil, err
	}
	is, err := bindHCInject(be, subNode(n, "hc_inject", ops.StreamAttrs{Streams: at.Streams}, []*graph.Value{n.Inputs[0], yv, n.Inputs[1]}, n.Outputs[:1]),
		[]*Buffer{in[0], y, in[1]}, out[:1])
	if err != nil {
		return nil, err
	}
	ns, err := bindNorm(true)(be, subNode(n, "rmsnorm", at.Norm, []*graph.Value{n.Outputs[0], n.Inputs[2]}, n.Outputs[1:]), []*Buffer{out[0], in[2]}, out[1:])
	if err != nil {
		return nil, err
	}
	s.then(cs, is, ns)
	return s, nil
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
