package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of the fused quantized products (ops/quant_fused.go). As with the
// planner's other fused ops, the CPU gains nothing from fusing them beyond
// fewer steps, so each runs the kernels of its parts (quant_matmul, swiglu,
// l2norm) in one step over scratch of its own: the arithmetic of the
// unfused plan, bit for bit.

// quantFusedKernels are the kernels of the fused quantized products.
var quantFusedKernels = map[string]kernelFunc{
	"quant_grouped_matmul": quantGroupedMatMulKernel,
	"quant_matmul_swiglu":  quantMatMulSwiGLUKernel,
	"quant_norm_matmul":    quantNormMatMulKernel,
	// quant_swiglu_norm_matmul is quant_matmul_swiglu into scratch, then
	// quant_norm_matmul of it.
	"quant_swiglu_norm_matmul": quantSwiGLUNormMatMulKernel,
}

// quantGroupedMatMulKernel is one quant_matmul a weight.
func quantGroupedMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	if len(in) < 3 || len(in)%2 != 1 || len(out) != (len(in)-1)/2 {
		return nil, fmt.Errorf("quant_grouped_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	var st steps
	for i := range out {
		v := n.Inputs
		mm, err := bindQuantMatMul(be, part(n, "quant_matmul", n.Attrs, []*graph.Value{v[0], v[1+2*i], v[2+2*i]}, n.Outputs[i:i+1]),
			[]*Buffer{in[0], in[1+2*i], in[2+2*i]}, out[i:i+1])
		if err != nil {
			return nil, fmt.Errorf("weight %d: %w", i, err)
		}
		st = append(st, mm)
	}
	return st, nil
}

// quantMatMulSwiGLUKernel is the gate and up products into scratch, then
// swiglu.
func quantMatMulSwiGLUKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	if len(in) != 7 || len(out) != 1 {
		return nil, fmt.Errorf("quant_matmul_swiglu: %d inputs and %d outputs", len(in), len(out))
	}
	spec := graph.Spec{DType: graph.F32, Shape: n.Outputs[0].Shape}
	gv, g := be.scratchOf("gate", spec)
	uv, u := be.scratchOf("up", spec)
	v := n.Inputs
	mm, err := quantGroupedMatMulKernel(be, part(n, "quant_grouped_matmul", n.Attrs, v[:5], []*graph.Value{gv, uv}), in[:5], []*Buffer{g, u})
	if err != nil {
		return nil, err
	}
	sw, err := swigluKernel(be, part(n, "swiglu", nil, []*graph.Value{gv, uv, v[5], v[6]}, n.Outputs), []*Buffer{g, u, in[5], in[6]}, out)
	if err != nil {
		return nil, err
	}
	return steps{mm, sw}, nil
}

// quantNormMatMulKernel is l2norm into scratch, then quant_matmul.
func quantNormMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.QuantNormAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 3 || len(out) != 1 {
		return nil, fmt.Errorf("quant_norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	xv, xb := be.scratchOf("normalized", graph.Spec{DType: graph.F32, Shape: n.Inputs[0].Shape})
	norm, err := normKernel(false)(be, part(n, "l2norm", ops.NormAttrs{Eps: at.Eps}, n.Inputs[:1], []*graph.Value{xv}), in[:1], []*Buffer{xb})
	if err != nil {
		return nil, err
	}
	mm, err := bindQuantMatMul(be, part(n, "quant_matmul", at.Blocks, []*graph.Value{xv, n.Inputs[1], n.Inputs[2]}, n.Outputs),
		[]*Buffer{xb, in[1], in[2]}, out)
	if err != nil {
		return nil, err
	}
	return steps{norm, mm}, nil
}

// quantSwiGLUNormMatMulKernel is quant_matmul_swiglu into scratch, then
// quant_norm_matmul of it.
func quantSwiGLUNormMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	if len(in) != 9 || len(out) != 1 {
		return nil, fmt.Errorf("quant_swiglu_norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	at, err := ops.NodeAttrs[ops.QuantNormAttrs](n)
	if err != nil {
		return nil, err
	}
	spec := graph.Spec{DType: graph.F32, Shape: graph.Shape{n.Inputs[0].Shape.Rows(), n.Inputs[1].Shape[0]}}
	av, a := be.scratchOf("activation", spec)
	sw, err := quantMatMulSwiGLUKernel(be, part(n, "quant_matmul_swiglu", at.Blocks, n.Inputs[:7], []*graph.Value{av}), in[:7], []*Buffer{a})
	if err != nil {
		return nil, err
	}
	down, err := quantNormMatMulKernel(be, part(n, "quant_norm_matmul", at, []*graph.Value{av, n.Inputs[7], n.Inputs[8]}, n.Outputs),
		[]*Buffer{a, in[7], in[8]}, out)
	if err != nil {
		return nil, fmt.Errorf("down: %w", err)
	}
	return steps{sw, down}, nil
}
