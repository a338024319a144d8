package cuda

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the norms (l2norm, rmsnorm) and the fused row ops (slerp,
// mix, gated_norm); the kernels are in kernels/norm.cu.

// bindNorm binds l2norm (rms false) or rmsnorm (rms true): one block per
// run of the group (norm_rows, its _wide variant, or _long for runs past the
// register kernels' reach); rmsnorm's weight is [group] or [row], of any
// weight type.
func bindNorm(rms bool) binder {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
		at, err := ops.NodeAttrs[ops.NormAttrs](n)
		if err != nil {
			return nil, err
		}
		x, y := in[0], out[0]
		if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
			return nil, err
		}
		last := n.Inputs[0].Shape.Last()
		g := at.Group
		if g == 0 {
			g = last
		}
		if g <= 0 || last%g != 0 || x.n%g != 0 || y.n != x.n || last > math.MaxInt32 {
			return nil, fmt.Errorf("group %d does not divide rows of %d (x %d, output %d elements)", at.Group, last, x.n, y.n)
		}
		var (
			w      cu.DevicePtr
			wt, wn int32
			r      int32
		)
		if rms {
			if wt, err = wtype(in[1]); err != nil {
				return nil, fmt.Errorf("w: %w", err)
			}
			if in[1].n != g && in[1].n != last {
				return nil, fmt.Errorf("w has %d elements, want %d (the group) or %d (the row)", in[1].n, g, last)
			}
			w, wn, r = in[1].ptr, int32(in[1].n), 1
		}
		s := be.newSteps()
		if x.n == 0 {
			return s, nil
		}
		runs := x.n / g
		if runs > math.MaxInt32 {
			return nil, fmt.Errorf("%d runs of %d elements: more than one launch takes", runs, g)
		}
		name, threads := "norm_rows_long", uint32(1024)
		if g <= 1024*32 {
			if name, threads, err = rowKernel("norm_rows", g, runs); err != nil {
				return nil, err
			}
		}
		s.add(name, [3]uint32{uint32(runs), 1, 1}, [3]uint32{threads, 1, 1}, 0,
			x.ptr, w, wt, y.ptr, int32(g), int32(last), wn, at.Eps, r)
		return s, nil
	}
}

// rowManyRows is the rows from which a row kernel's blocks are sized for
// throughput (several resident on an SM) rather than latency.
const rowManyRows = 256

// rowKernel picks the variant of a row kernel (norm_rows, rowfuse) for
// rows rows of n and its block size: each thread keeps up to 8 elements in
// registers (the _wide variant 32). A few rows (decode) take at least four
// a thread so reductions stay short; many rows (a prompt chunk) take eight,
// so that blocks are small enough for several to be resident on an SM
// (640 threads of 64 registers for Dory's rows of 2560 let one).
func rowKernel(base string, n, rows int) (string, uint32, error) {
	per := 4
	if rows >= rowManyRows {
		per = 8
	}
	switch {
	case n <= 1024*8:
		return base, threadsFor((n+per-1)/per, 1024), nil
	case n <= 1024*32:
		// up to 32 elements a thread; the kernel is bounded to 1024 threads
		// (__launch_bounds__), so its registers fit a full block
		return base + "_wide", threadsFor((n+31)/32, 1024), nil
	}
	return "", 0, fmt.Errorf("rows of %d elements: the row kernels take at most %d", n, 1024*32)
}

// The row programs of rowfuse (norm.cu's ROW_SLERP, ROW_MIX,
// ROW_GATED_NORM).
const (
	rowSlerp int32 = iota
	rowMix
	rowGatedNorm
)

// bindRowFuse binds a row op that rowfuse computes, kind its program.
func bindRowFuse(kind int32) binder {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
		at, err := ops.NodeAttrs[ops.EpsAttrs](n)
		if err != nil {
			return nil, err
		}
		y := out[0]
		if err := f32("output", y); err != nil {
			return nil, err
		}
		w := n.Outputs[0].Shape.Last()
		if w <= 0 || y.n%w != 0 {
			return nil, fmt.Errorf("output of %d elements in rows of %d", y.n, w)
		}
		nRows := 2
		for i, b := range in {
			if err := f32(fmt.Sprintf("input %d", i), b); err != nil {
				return nil, err
			}
			want := y.n
			if i >= nRows {
				want = w
			}
			if b.n != want {
				return nil, fmt.Errorf("input %d has %d elements, want %d", i, b.n, want)
			}
		}
		var v cu.DevicePtr
		if len(in) > 2 {
			v = in[2].ptr
		}
		s := be.newSteps()
		if y.n == 0 {
			return s, nil
		}
		if err := addRowFuse(s, kind, in[0].ptr, in[1].ptr, v, y.ptr, y.n/w, w, at.Eps); err != nil {
			return nil, err
		}
		return s, nil
	}
}

// addRowFuse appends rowfuse's program kind over rows rows of n: y from
// a, b and the row vector v (0 for none), as norm.cu's rowfuse takes them.
func addRowFuse(s *steps, kind int32, a, b, v, y cu.DevicePtr, rows, n int, eps float32) error {
	name, threads, err := rowKernel("rowfuse", n, rows)
	if err != nil {
		return err
	}
	s.add(name, [3]uint32{uint32(rows), 1, 1}, [3]uint32{threads, 1, 1}, 0, kind, a, b, v, y, int32(n), eps)
	return nil
}
