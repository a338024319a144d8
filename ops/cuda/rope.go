package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binder of rope and its fused forms (norm_rope, norm_rope_kv); the kernel
// is in kernels/norm.cu, rope_head in kernels/common.cuh.

func bindRope(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	var (
		rope     ops.RopeAttrs
		norm     bool
		eps      float32
		slot     *Buffer
		scale    *Buffer
		ring     bool
		optScale int
	)
	switch n.Op {
	case "rope":
		at, err := ops.NodeAttrs[ops.RopeAttrs](n)
		if err != nil {
			return nil, err
		}
		rope = at
	case "norm_rope":
		at, err := ops.NodeAttrs[ops.NormRopeAttrs](n)
		if err != nil {
			return nil, err
		}
		rope, norm, eps, optScale = at.Rope, true, at.Eps, 2
	default: // norm_rope_kv: x, call, slot[, scale]
		at, err := ops.NodeAttrs[ops.NormRopeKVAttrs](n)
		if err != nil {
			return nil, err
		}
		rope, norm, eps, ring, optScale = at.NormRope.Rope, true, at.NormRope.Eps, at.Slot.Ring, 3
		slot = in[2]
		if err := f32("slot", slot); err != nil {
			return nil, err
		}
	}
	if optScale > 0 && len(in) == optScale+1 {
		scale = in[optScale]
	}
	x := in[0]
	if err := f32("x", x); err != nil {
		return nil, err
	}
	call := in[1]
	if err := checkCall(call); err != nil {
		return nil, err
	}
	w := n.Inputs[0].Shape.Last()
	if err := rope.CheckWidth(w); err != nil {
		return nil, fmt.Errorf("rope: %w", err)
	}
	if x.n%w != 0 {
		return nil, fmt.Errorf("x of %d elements, rows of %d", x.n, w)
	}
	rows := x.n / w
	var y, sc, sl cu.DevicePtr
	capacity := 0
	if slot == nil {
		if err := f32("output", out[0]); err != nil {
			return nil, err
		}
		if out[0].n != x.n {
			return nil, fmt.Errorf("x of %d elements, output of %d", x.n, out[0].n)
		}
		y = out[0].ptr
	} else {
		if slot.n%w != 0 {
			return nil, fmt.Errorf("a slot of %d elements is not whole rows of %d", slot.n, w)
		}
		sl, capacity = slot.ptr, slot.n/w
	}
	if scale != nil {
		if err := f32("scale", scale); err != nil {
			return nil, err
		}
		if scale.n != w {
			return nil, fmt.Errorf("scale has %d elements, want %d", scale.n, w)
		}
		sc = scale.ptr
	}
	h := rope.Rotary / 2
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	fp, m, err := be.uploadRope(rope)
	if err != nil {
		return nil, err
	}
	nb, rg := int32(0), int32(0)
	if norm {
		nb = 1
	}
	if ring {
		rg = 1
	}
	s.add("rope", [3]uint32{uint32(rows), uint32(w / rope.HeadDim), 1}, [3]uint32{threadsFor(max(h, rope.HeadDim-rope.Rotary), 128), 1, 1}, 0,
		x.ptr, y, call.ptr, be.errRec, fp, m, sc, sl, int32(rows), int32(w), int32(rope.HeadDim), int32(rope.Rotary), nb, eps, int32(capacity), rg)
	return s, nil
}

// uploadRope uploads rope's table of frequencies f_j, j < Rotary/2, as f64
// into scratch the bound steps keep, and gives it with the attention factor
// m (ops.RopeAttrs.Frequencies).
func (be *Backend) uploadRope(rope ops.RopeAttrs) (cu.DevicePtr, float64, error) {
	f, m, err := rope.Frequencies()
	if err != nil {
		return 0, 0, fmt.Errorf("rope: %w", err)
	}
	freq := make([]byte, 8*len(f))
	for j, v := range f {
		binary.LittleEndian.PutUint64(freq[8*j:], math.Float64bits(v))
	}
	p, err := be.upload(freq)
	if err != nil {
		return 0, 0, err
	}
	return p, m, nil
}
