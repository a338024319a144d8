package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of the fused ops the planner makes (ops/fused_planner.go). On the
// CPU a fused op saves launches and passes over small vectors, not weight
// traffic, so matmul_swiglu and norm_rope_kv run the kernels of their parts
// in one step over a scratch buffer of their own: the same arithmetic as the
// unfused plan, bit for bit. elementwise_chain evaluates its steps blockwise
// with the arithmetic of the primitive kernels, so it too matches them
// exactly.

// plannerKernels are the kernels of the planner's fused ops.
var plannerKernels = map[string]kernelFunc{
	"matmul_swiglu":      matmulSwiGLUKernel,
	"swiglu_norm_matmul": swigluNormMatMulKernel,
	"norm_rope_kv":       normRopeKVKernel,
	"elementwise_chain":  chainKernel,
}

// part is a node standing for one part of a fused node, for binding that
// part's kernel.
func part(n *graph.Node, op string, attrs any, in, out []*graph.Value) *graph.Node {
	return &graph.Node{ID: n.ID, Op: op, Attrs: attrs, Inputs: in, Outputs: out, Scope: n.Scope}
}

// scratchOf allocates a buffer for an intermediate of spec s.
func (be *Backend) scratchOf(name string, s graph.Spec) (*graph.Value, *Buffer) {
	v := &graph.Value{ID: -1, Name: name, DType: s.DType, Shape: s.Shape, Kind: graph.Temp}
	n := s.Shape.Elems()
	nb, _ := byteLen(s.DType, n)
	return v, wrap(s.DType, n, alignedBytes(nb))
}

// steps runs several steps as one.
type steps []ops.Step

// Run runs each step in order.
func (s steps) Run() error {
	for _, st := range s {
		if err := st.Run(); err != nil {
			return err
		}
	}
	return nil
}

// matmulSwiGLUKernel is the grouped gate/up matmul into scratch, then swiglu.
func matmulSwiGLUKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	if len(in) != 5 || len(out) != 1 {
		return nil, fmt.Errorf("matmul_swiglu: %d inputs and %d outputs", len(in), len(out))
	}
	spec := graph.Spec{DType: graph.F32, Shape: n.Outputs[0].Shape}
	gv, g := be.scratchOf("gate", spec)
	uv, u := be.scratchOf("up", spec)
	mm, err := bindMatMul(be, part(n, "grouped_matmul", nil, n.Inputs[:3], []*graph.Value{gv, uv}), in[:3], []*Buffer{g, u})
	if err != nil {
		return nil, err
	}
	sw, err := swigluKernel(be, part(n, "swiglu", nil, []*graph.Value{gv, uv, n.Inputs[3], n.Inputs[4]}, n.Outputs),
		[]*Buffer{g, u, in[3], in[4]}, out)
	if err != nil {
		return nil, err
	}
	return steps{mm, sw}, nil
}

// swigluNormMatMulKernel is matmul_swiglu into scratch, then norm_matmul
// of it.
func swigluNormMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	if len(in) != 6 || len(out) != 1 {
		return nil, fmt.Errorf("swiglu_norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	at, err := ops.NodeAttrs[ops.EpsAttrs](n)
	if err != nil {
		return nil, err
	}
	spec := graph.Spec{DType: graph.F32, Shape: graph.Shape{n.Inputs[0].Shape.Rows(), n.Inputs[1].Shape[0]}}
	av, a := be.scratchOf("activation", spec)
	sw, err := matmulSwiGLUKernel(be, part(n, "matmul_swiglu", nil, n.Inputs[:5], []*graph.Value{av}), in[:5], []*Buffer{a})
	if err != nil {
		return nil, err
	}
	down, err := normMatMulKernel(be, part(n, "norm_matmul", at, []*graph.Value{av, n.Inputs[5]}, n.Outputs), []*Buffer{a, in[5]}, out)
	if err != nil {
		return nil, err
	}
	return steps{sw, down}, nil
}

// normRopeKVKernel is norm_rope into scratch, then kv_write of its rows.
func normRopeKVKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.NormRopeKVAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 3 && len(in) != 4 {
		return nil, fmt.Errorf("norm_rope_kv takes x, call, slot and an optional scale, got %d inputs", len(in))
	}
	kv, kb := be.scratchOf("rows", graph.Spec{DType: graph.F32, Shape: n.Inputs[0].Shape})
	nrIn, nrBuf := []*graph.Value{n.Inputs[0], n.Inputs[1]}, []*Buffer{in[0], in[1]}
	if len(in) == 4 {
		nrIn, nrBuf = append(nrIn, n.Inputs[3]), append(nrBuf, in[3])
	}
	nr, err := bindRope(be, part(n, "norm_rope", at.NormRope, nrIn, []*graph.Value{kv}), nrBuf, []*Buffer{kb}, at.NormRope.Rope, true, at.NormRope.Eps)
	if err != nil {
		return nil, err
	}
	wr, err := kvWriteKernel(be, part(n, "kv_write", at.Slot, []*graph.Value{kv, n.Inputs[2], n.Inputs[1]}, nil),
		[]*Buffer{kb, in[2], in[1]}, nil)
	if err != nil {
		return nil, err
	}
	return steps{nr, wr}, nil
}

// chainBlock is the elements of a chain evaluated at once per step.
const chainBlock = 512

// chainKernel evaluates an elementwise_chain block by block: for each block
// of output elements, every step over the block into scratch, the last one
// into the output. An input shorter than the output is read cyclically (its
// shape is a suffix of the output's), which is the broadcast of every step
// it feeds. Each block reads its inputs before writing its outputs, so the
// output may be input 0.
func chainKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.ChainAttrs](n)
	if err != nil {
		return nil, err
	}
	if _, err := ops.ChainShapes(at, n.Inputs); err != nil {
		return nil, err
	}
	y, err := f32s("output", out[0])
	if err != nil {
		return nil, err
	}
	xs := make([][]float32, len(in))
	for i := range in {
		if xs[i], err = f32s(fmt.Sprintf("input %d", i), in[i]); err != nil {
			return nil, err
		}
		if l := len(xs[i]); (l == 0) != (len(y) == 0) || (l > 0 && len(y)%l != 0) {
			return nil, fmt.Errorf("input %d of %d elements does not broadcast to %d", i, l, len(y))
		}
	}
	factors := make([]float32, len(at.Steps))
	for i, s := range at.Steps {
		factors[i] = s.Factor
	}
	nSteps, nIn := len(at.Steps), len(in)
	return ops.StepFunc(func() error {
		be.elementwise(len(y), func(lo, hi int) {
			sp := be.borrow((nSteps + nIn) * chainBlock)
			defer be.giveBack(sp)
			res := make([][]float32, nSteps)
			ins := make([][]float32, nIn)
			for c := lo; c < hi; c += chainBlock {
				e := min(hi, c+chainBlock)
				m := e - c
				for i, x := range xs {
					if len(x) == len(y) {
						ins[i] = x[c:e]
						continue
					}
					buf := (*sp)[(nSteps+i)*chainBlock:][:m]
					cyclic(buf, x, c)
					ins[i] = buf
				}
				for k, s := range at.Steps {
					dst := (*sp)[k*chainBlock:][:m]
					if k == nSteps-1 {
						dst = y[c:e]
					}
					arg := func(j int) []float32 {
						if a := s.Args[j]; a >= 0 {
							return ins[a]
						}
						return res[-1-s.Args[j]]
					}
					switch s.Op {
					case "add":
						applyBinary(opAdd, dst, arg(0), arg(1))
					case "sub":
						applyBinary(opSub, dst, arg(0), arg(1))
					case "mul":
						applyBinary(opMul, dst, arg(0), arg(1))
					case "sigmoid":
						for i, v := range arg(0) {
							dst[i] = float32(sigmoid64(float64(v)))
						}
					case "silu":
						for i, v := range arg(0) {
							dst[i] = float32(silu64(float64(v)))
						}
					case "scale":
						f := factors[k]
						for i, v := range arg(0) {
							dst[i] = f * v
						}
					}
					res[k] = dst
				}
			}
		})
		return nil
	}), nil
}

// cyclic fills dst with src read cyclically from index start.
func cyclic(dst, src []float32, start int) {
	j := start % len(src)
	for i := 0; i < len(dst); {
		k := copy(dst[i:], src[j:])
		i += k
		j = 0
	}
}
