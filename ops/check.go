package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// familyDefs are the ops of the families Qwen4-Exp brought (gated residual
// streams, Gated DeltaNet, QSA sparse attention, PLE n-gram embeddings,
// MoE); they are registered beside the common ones.
//
// The data-dependent choices of the model (which experts a row takes, which
// key blocks a query reads) are ops with static shapes and dynamic contents:
// moe_route writes [rows, k] expert ids and weights that expert_matmul reads,
// qsa_select writes [rows, keep] block ids that qsa_attention reads. Per-run
// values (the position of row 0, the rows in use) come from the call record;
// every op that writes state computes only the rows in use, so a plan built
// for a bucket of rows serves a shorter call.
var familyDefs = []*Def{
	// gated residual (hyper-connection) streams
	OpHCExpand, OpHCMix, OpHCInject, OpReshape,
	// Gated DeltaNet
	OpSplit, OpCausalConv, OpGDNPrep, OpGDNGates, OpGDNScan, OpGatedRMSNorm,
	// QSA sparse attention
	OpQSABlockKeys, OpQSASelect, OpQSAAttention, OpGateMerge,
	// PLE n-gram features
	OpPLEHash, OpNGramEmbed, OpPLEGate,
	// MoE
	OpMoERoute, OpExpertMatMul, OpSiLUGLU, OpMoECombine,
}

// Activation names the pointwise function an op applies inside (an output
// gate, a convolution's activation).
type Activation string

// The activations ops accept.
const (
	// ActIdentity applies nothing.
	ActIdentity Activation = ""
	// ActSiLU is x · sigmoid(x).
	ActSiLU Activation = "silu"
	// ActSigmoid is 1 / (1 + exp(-x)).
	ActSigmoid Activation = "sigmoid"
)

// valid reports whether the activation is one kernels know.
func (a Activation) valid() bool {
	return a == ActIdentity || a == ActSiLU || a == ActSigmoid
}

// checkRows checks an activation [rows, width] in f32 (width < 0: any).
func checkRows(what string, v *graph.Value, width int) error {
	if v.DType != graph.F32 || len(v.Shape) != 2 || (width >= 0 && v.Shape[1] != width) {
		if width < 0 {
			return fmt.Errorf("%s %s must be f32 [rows, width]", what, v)
		}
		return fmt.Errorf("%s %s must be f32 [rows, %d]", what, v, width)
	}
	return nil
}

// sameRows checks that every value has as many rows as the first.
func sameRows(vs ...*graph.Value) error {
	for _, v := range vs[1:] {
		if v.Shape[0] != vs[0].Shape[0] {
			return fmt.Errorf("%s and %s have different row counts", vs[0], v)
		}
	}
	return nil
}

// checkVector checks a weight vector [n] of a weight type.
func checkVector(what string, v *graph.Value, n int) error {
	if err := wantWeightType(what, v); err != nil {
		return err
	}
	if len(v.Shape) != 1 || v.Shape[0] != n {
		return fmt.Errorf("%s %s must be [%d]", what, v, n)
	}
	return nil
}

// checkState checks a state value of a dtype whose shape after the first extent
// is rest; a fixed first extent must equal first unless first < 0 (any, Dyn
// included).
func checkState(what string, v *graph.Value, dt graph.DType, first int, rest ...int) error {
	want := append(graph.Shape{first}, rest...)
	ok := v.Kind == graph.State && v.DType == dt && len(v.Shape) == len(want)
	if ok && first >= 0 && v.Shape[0] != first {
		ok = false
	}
	for i := 1; ok && i < len(want); i++ {
		ok = v.Shape[i] == want[i]
	}
	if !ok {
		shape := graph.Shape(want).String()
		if first < 0 {
			shape = "[capacity" + shape[len("[?"):]
		}
		return fmt.Errorf("%s %s must be an %s state %s", what, v, dt, shape)
	}
	return nil
}

// checkPositive checks that named attribute values are positive.
func checkPositive(op string, kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if n, _ := kv[i+1].(int); n <= 0 {
			return fmt.Errorf("%s: %s %v must be positive", op, kv[i], kv[i+1])
		}
	}
	return nil
}
