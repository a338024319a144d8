package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of the fused stream ops (ops/fused_hyperconn.go): each runs its
// parts' kernels, so a fused plan gives the unfused one's bits.

// hcMixMatMulKernel is scale and silu of d into scratch, the up product
// into scratch, then hc_mix.
func hcMixMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.HCMixMatMulAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 3 || len(out) != 1 {
		return nil, fmt.Errorf("hc_mix_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	tv, t := be.scratchOf("activation", graph.Spec{DType: graph.F32, Shape: n.Inputs[1].Shape})
	gv, g := be.scratchOf("logits", graph.Spec{DType: graph.F32, Shape: n.Inputs[0].Shape})
	sc, err := scaleKernel(be, part(n, "scale", ops.ScaleAttrs{Factor: at.Scale}, n.Inputs[1:2], []*graph.Value{tv}), in[1:2], []*Buffer{t})
	if err != nil {
		return nil, err
	}
	act, err := siluKernel(be, part(n, "silu", nil, []*graph.Value{tv}, []*graph.Value{tv}), []*Buffer{t}, []*Buffer{t})
	if err != nil {
		return nil, err
	}
	mm, err := bindMatMul(be, part(n, "matmul", nil, []*graph.Value{tv, n.Inputs[2]}, []*graph.Value{gv}), []*Buffer{t, in[2]}, []*Buffer{g})
	if err != nil {
		return nil, err
	}
	mix, err := hcMixKernel(be, part(n, "hc_mix", ops.StreamAttrs{Streams: at.Streams}, []*graph.Value{n.Inputs[0], gv}, n.Outputs), []*Buffer{in[0], g}, out)
	if err != nil {
		return nil, err
	}
	return steps{sc, act, mm, mix}, nil
}

// moeInjectNormKernel is moe_combine into scratch, hc_inject of it into
// output 0, then rmsnorm of that into output 1.
func moeInjectNormKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.MoEInjectNormAttrs](n)
	if err != nil {
		return nil, err
	}
	if (len(in) != 5 && len(in) != 7) || len(out) != 2 {
		return nil, fmt.Errorf("moe_inject_norm: %d inputs and %d outputs", len(in), len(out))
	}
	yv, y := be.scratchOf("moe_out", graph.Spec{DType: graph.F32, Shape: graph.Shape{n.Inputs[0].Shape[0], n.Inputs[3].Shape.Last()}})
	comb, err := moeCombineKernel(be, part(n, "moe_combine", nil, n.Inputs[3:], []*graph.Value{yv}), in[3:], []*Buffer{y})
	if err != nil {
		return nil, err
	}
	inj, err := hcInjectKernel(be, part(n, "hc_inject", ops.StreamAttrs{Streams: at.Streams}, []*graph.Value{n.Inputs[0], yv, n.Inputs[1]}, n.Outputs[:1]),
		[]*Buffer{in[0], y, in[1]}, out[:1])
	if err != nil {
		return nil, err
	}
	norm, err := normKernel(true)(be, part(n, "rmsnorm", at.Norm, []*graph.Value{n.Outputs[0], n.Inputs[2]}, n.Outputs[1:]),
		[]*Buffer{out[0], in[2]}, out[1:])
	if err != nil {
		return nil, err
	}
	return steps{comb, inj, norm}, nil
}
