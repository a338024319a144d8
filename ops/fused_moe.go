package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Fused MoE ops that only the planner makes (its rule expert_matmul_glu):
// a routed expert block's gate_up product with its activation, one launch
// where it was two. Each keeps a Decompose into primitives the fused plan
// is checked against.

// fusedMoEDefs are the fused MoE ops; they are registered beside the
// others.
var fusedMoEDefs = []*Def{OpExpertMatMulGLU}

// OpExpertMatMulGLU is expert_matmul with silu_glu over its output.
var OpExpertMatMulGLU = &Def{
	Op: "expert_matmul_glu",
	Doc: "expert_matmul_glu(x[T, in] or [T, k, in], w[E, 2F, in], ids i32[T, k]) = silu_glu(expert_matmul(x, w, ids)) [T, k, F]: " +
		"each unit's gate (rows 0 .. F−1 of its expert) and up (rows F .. 2F−1) products and the activation silu(gate) · up in one " +
		"pass, the products rounded to f32 before it as the unfused ops round them. An id outside [0, E) is an error at run time.",
	Arity: 3,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		sig, err := OpExpertMatMul.Rule(nil, in)
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err = OpSiLUGLU.Rule(nil, []*graph.Value{specValue(sig.Outputs[0])})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("w %s: %w", in[1], err)
		}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, _ any, in []*graph.Value) []*graph.Value {
		return []*graph.Value{SiLUGLU(b, ExpertMatMul(b, in[0], in[1], in[2]))}
	},
}
