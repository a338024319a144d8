package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// The fused slerp ops (ops/fused_slerp.go) run the slerp into their first
// output, h, then the product's kernel on h: the arithmetic of the unfused
// plan, bit for bit.

// slerpKernels are the kernels of the fused slerp ops.
var slerpKernels = map[string]kernelFunc{
	"slerp_matmul":              slerpThen("grouped_matmul", bindMatMul),
	"slerp_matmul_swiglu":       slerpThen("matmul_swiglu", matmulSwiGLUKernel),
	"quant_slerp_matmul":        slerpThen("quant_grouped_matmul", quantGroupedMatMulKernel),
	"quant_slerp_matmul_swiglu": slerpThen("quant_matmul_swiglu", quantMatMulSwiGLUKernel),
}

// slerpThen is the kernel of a fused slerp op whose product part is op,
// bound by product.
func slerpThen(op string, product kernelFunc) kernelFunc {
	return func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
		if len(in) < 4 || len(out) < 2 || len(n.Inputs) != len(in) || len(n.Outputs) != len(out) {
			return nil, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
		}
		sa, pa, err := ops.SlerpParts(n.Op, n.Attrs)
		if err != nil {
			return nil, err
		}
		h := n.Outputs[0]
		sl, err := slerpKernel(be, part(n, "slerp", sa, n.Inputs[:3], n.Outputs[:1]), in[:3], out[:1])
		if err != nil {
			return nil, fmt.Errorf("slerp: %w", err)
		}
		pin := append([]*graph.Value{h}, n.Inputs[3:]...)
		pr, err := product(be, part(n, op, pa, pin, n.Outputs[1:]), append([]*Buffer{out[0]}, in[3:]...), out[1:])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		return steps{sl, pr}, nil
	}
}
