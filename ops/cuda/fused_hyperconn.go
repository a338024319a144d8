package cuda

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
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
	at, err := ops.NodeAttrs[ops.HCInjectNormAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 4 || len(out) != 2 {
		return nil, fmt.Errorf("hc_inject_norm: %d inputs and %d outputs", len(in), len(out))
	}
	x, yb, l, w, xo, xn := in[0], in[1], in[2], in[3], out[0], out[1]
	if err := f32All([]string{"x", "y", "l", "output 0", "output 1"}, []*Buffer{x, yb, l, xo, xn}); err != nil {
		return nil, err
	}
	width := n.Inputs[0].Shape.Last()
	c, h, err := hcStreams("hc_inject_norm", &graph.Node{Op: n.Op, Attrs: ops.StreamAttrs{Streams: at.Streams}}, width)
	if err != nil {
		return nil, err
	}
	g := at.Norm.Group
	if g == 0 {
		g = width
	}
	if g <= 0 || width%g != 0 {
		return nil, fmt.Errorf("hc_inject_norm: group %d does not divide rows of %d", at.Norm.Group, width)
	}
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("w: %w", err)
	}
	if w.n != g && w.n != width {
		return nil, fmt.Errorf("hc_inject_norm: w has %d elements, want %d (the group) or %d (the row)", w.n, g, width)
	}
	rows := x.n / width
	if x.n%width != 0 || yb.n != rows*h || l.n != rows*c || xo.n != x.n || xn.n != x.n {
		return nil, fmt.Errorf("hc_inject_norm: x of %d, y of %d, l of %d, outputs of %d and %d elements do not fit rows of %d streams of %d",
			x.n, yb.n, l.n, xo.n, xn.n, c, h)
	}
	if g > 1024*32 || c > hcMaxInjectStreams {
		// past the row kernels' registers: the parts
		s, err := bindHCInject(be, subNode(n, "hc_inject", ops.StreamAttrs{Streams: at.Streams}, n.Inputs[:3], n.Outputs[:1]), in[:3], out[:1])
		if err != nil {
			return nil, err
		}
		ns, err := bindNorm(true)(be, subNode(n, "rmsnorm", at.Norm, []*graph.Value{n.Outputs[0], n.Inputs[3]}, n.Outputs[1:]),
			[]*Buffer{xo, w}, out[1:])
		if err != nil {
			return nil, err
		}
		s.work = append(s.work, ns.work...)
		return s, nil
	}
	s := be.newSteps()
	runs := x.n / g
	if runs == 0 {
		return s, nil
	}
	if runs > math.MaxInt32 {
		return nil, fmt.Errorf("hc_inject_norm: %d runs of %d elements: more than one launch takes", runs, g)
	}
	name, threads, err := rowKernel("hc_inject_norm", g, runs)
	if err != nil {
		return nil, err
	}
	s.add(name, [3]uint32{uint32(runs), 1, 1}, [3]uint32{threads, 1, 1}, uint32(4*c),
		x.ptr, yb.ptr, l.ptr, xo.ptr, w.ptr, wt, xn.ptr, int32(c), int32(h), int32(g), int32(w.n), at.Norm.Eps)
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
