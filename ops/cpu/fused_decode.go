package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of the fused decode ops (ops/fused_decode.go). As with the
// planner's other fused ops, the CPU gains nothing from fusing them beyond
// fewer steps, so each runs the kernels of its parts in one step, over
// scratch buffers of its own: the same arithmetic as the unfused plan, bit
// for bit.

// decodeKernels are the kernels of the fused decode ops.
var decodeKernels = map[string]kernelFunc{
	"qkv_prep":       qkvPrepKernel,
	"attention_gate": attentionGateKernel,
	"norm_matmul":    normMatMulKernel,
	// qkv_attention_gate: qkv_prep's queries into scratch, then
	// attention_gate of them.
	"qkv_attention_gate": qkvAttentionGateKernel,
}

// qkvAttentionGateKernel is qkv_prep into scratch queries, then
// attention_gate of them.
func qkvAttentionGateKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.QKVAttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 9 || len(out) != 1 || len(n.Inputs) != 9 {
		return nil, fmt.Errorf("qkv_attention_gate: %d inputs and %d outputs", len(in), len(out))
	}
	qv, q := be.scratchOf("queries", graph.Spec{DType: graph.F32, Shape: n.Inputs[0].Shape})
	prep, err := qkvPrepKernel(be, part(n, "qkv_prep", at.Prep, n.Inputs[:7], []*graph.Value{qv}), in[:7], []*Buffer{q})
	if err != nil {
		return nil, fmt.Errorf("qkv_prep: %w", err)
	}
	ain := []*graph.Value{qv, n.Inputs[4], n.Inputs[5], n.Inputs[3], n.Inputs[7], n.Inputs[8]}
	attn, err := attentionGateKernel(be, part(n, "attention_gate", at.Attention, ain, n.Outputs), []*Buffer{q, in[4], in[5], in[3], in[7], in[8]}, out)
	if err != nil {
		return nil, fmt.Errorf("attention_gate: %w", err)
	}
	return steps{prep, attn}, nil
}

// qkvPrepKernel is norm_rope of the queries, norm_rope_kv of the keys and
// kv_write of the values.
func qkvPrepKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.QKVPrepAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 6 && len(in) != 7 {
		return nil, fmt.Errorf("qkv_prep takes q, k, v, call, kslot, vslot and an optional scale, got %d inputs", len(in))
	}
	v := n.Inputs
	qIn, qBuf := []*graph.Value{v[0], v[3]}, []*Buffer{in[0], in[3]}
	if len(in) == 7 {
		qIn, qBuf = append(qIn, v[6]), append(qBuf, in[6])
	}
	q, err := bindRope(be, part(n, "norm_rope", at.NormRope, qIn, n.Outputs), qBuf, out, at.NormRope.Rope, true, at.NormRope.Eps)
	if err != nil {
		return nil, fmt.Errorf("q: %w", err)
	}
	kAttrs := ops.NormRopeKVAttrs{NormRope: at.NormRope, Slot: at.Slot}
	k, err := normRopeKVKernel(be, part(n, "norm_rope_kv", kAttrs, []*graph.Value{v[1], v[3], v[4]}, nil), []*Buffer{in[1], in[3], in[4]}, nil)
	if err != nil {
		return nil, fmt.Errorf("k: %w", err)
	}
	w, err := kvWriteKernel(be, part(n, "kv_write", at.Slot, []*graph.Value{v[2], v[5], v[3]}, nil), []*Buffer{in[2], in[5], in[3]}, nil)
	if err != nil {
		return nil, fmt.Errorf("v: %w", err)
	}
	return steps{q, k, w}, nil
}

// gateChain is y ⊙ sigmoid(g ⊙ s) over the inputs (y, g, s), as the
// primitives of attention_gate's decomposition compute it.
var gateChain = ops.ChainAttrs{Steps: []ops.ChainStep{
	{Op: "mul", Args: []int{1, 2}},
	{Op: "sigmoid", Args: []int{ops.StepArg(0)}},
	{Op: "mul", Args: []int{0, ops.StepArg(1)}},
}}

// attentionGateKernel is attention into scratch, then the gate.
func attentionGateKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.AttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 6 || len(out) != 1 {
		return nil, fmt.Errorf("attention_gate: %d inputs and %d outputs", len(in), len(out))
	}
	yv, yb := be.scratchOf("attention", graph.Spec{DType: graph.F32, Shape: n.Outputs[0].Shape})
	att, err := attentionKernel(be, part(n, "attention", at, n.Inputs[:4], []*graph.Value{yv}), in[:4], []*Buffer{yb})
	if err != nil {
		return nil, err
	}
	gate, err := chainKernel(be, part(n, "elementwise_chain", gateChain, []*graph.Value{yv, n.Inputs[4], n.Inputs[5]}, n.Outputs),
		[]*Buffer{yb, in[4], in[5]}, out)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	return steps{att, gate}, nil
}

// normMatMulKernel is l2norm into scratch, then the product.
func normMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.EpsAttrs](n)
	if err != nil {
		return nil, err
	}
	if len(in) != 2 || len(out) != 1 {
		return nil, fmt.Errorf("norm_matmul: %d inputs and %d outputs", len(in), len(out))
	}
	xv, xb := be.scratchOf("normalized", graph.Spec{DType: graph.F32, Shape: n.Inputs[0].Shape})
	norm, err := normKernel(false)(be, part(n, "l2norm", ops.NormAttrs{Eps: at.Eps}, n.Inputs[:1], []*graph.Value{xv}), in[:1], []*Buffer{xb})
	if err != nil {
		return nil, err
	}
	mm, err := bindMatMul(be, part(n, "matmul", nil, []*graph.Value{xv, n.Inputs[1]}, n.Outputs), []*Buffer{xb, in[1]}, out)
	if err != nil {
		return nil, err
	}
	return steps{norm, mm}, nil
}
