package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Fused ops of the gated residual streams (ops/hyperconn.go) that only the
// planner makes (its rules moe_inject_norm and hc_mix_matmul): the ends of
// a gated residual with their neighbours. Each keeps a Decompose into
// primitives the fused plan is checked against.

// fusedHCDefs are the fused stream ops; they are registered beside the
// others.
var fusedHCDefs = []*Def{OpMoEInjectNorm, OpHCMixMatMul}

// MoEInjectNormAttrs are the attributes of moe_inject_norm: the streams of
// its hc_inject and the runs and epsilon of its rmsnorm.
type MoEInjectNormAttrs struct {
	Streams int
	Norm    NormAttrs
}

// OpMoEInjectNorm is a mixture of experts' output added into the streams
// and the next gated residual's normed hyper-state, in one pass over the
// row: moe_combine, hc_inject and the rmsnorm of its result.
var OpMoEInjectNorm = &Def{
	Op: "moe_inject_norm",
	Doc: "moe_inject_norm(x[T, C·H], l[T, C], w, y[T, k, H], p[T, k][, s[T, H], sg[T, 1]]) = (x', rmsnorm(x', w)) with " +
		"x' = hc_inject(x, moe_combine(y, p[, s, sg]), l): a mixture of experts' output, its routed experts' products y under " +
		"their weights p (and the shared expert s under its gate), rounded to f32 as moe_combine rounds it, added into every " +
		"stream, then the next residual's norm of the new hyper-state (Norm: its runs and epsilon; w [Group] or [C·H]), x' " +
		"rounded to f32 before the norm reads it as the unfused ops round it. x' may take x's memory.",
	Arity: -1, InPlace: []int{0, -1},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[MoEInjectNormAttrs]("moe_inject_norm", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if len(in) != 5 && len(in) != 7 {
			return graph.Signature{}, fmt.Errorf("moe_inject_norm takes x, l, w, y, p and optionally s, sg; got %d inputs", len(in))
		}
		c, err := OpMoECombine.Rule(nil, in[3:])
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err := OpHCInject.Rule(StreamAttrs{Streams: at.Streams}, []*graph.Value{in[0], specValue(c.Outputs[0]), in[1]})
		if err != nil {
			return graph.Signature{}, err
		}
		n, err := OpRMSNorm.Rule(at.Norm, []*graph.Value{specValue(sig.Outputs[0]), in[2]})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("norm: %w", err)
		}
		return graph.Signature{Outputs: []graph.Spec{sig.Outputs[0], n.Outputs[0]}}, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[MoEInjectNormAttrs](b, "moe_inject_norm", a)
		if !ok || (len(in) != 5 && len(in) != 7) {
			return failed(2)
		}
		var s, sg *graph.Value
		if len(in) == 7 {
			s, sg = in[5], in[6]
		}
		x := HCInject(b, in[0], MoECombine(b, in[3], in[4], s, sg), in[1], at.Streams)
		return []*graph.Value{x, RMSNorm(b, x, in[2], at.Norm.Group, at.Norm.Eps)}
	},
}

// HCMixMatMulAttrs are the attributes of hc_mix_matmul: the streams of its
// hc_mix and the factor its down projection is scaled by before the SiLU.
type HCMixMatMulAttrs struct {
	Streams int
	Scale   float32
}

// OpHCMixMatMul is a gated residual's block input from its down projection:
// the activation, the up projection and hc_mix in one launch.
var OpHCMixMatMul = &Def{
	Op: "hc_mix_matmul",
	Doc: "hc_mix_matmul(xn[T, C·H], d[T, R], w[C·H, R]) = hc_mix(xn, matmul(silu(Scale·d), w)) [T, H]: a gated residual's block input " +
		"from the normed hyper-state xn and its down projection d = xn·W_downᵀ (Scale is 1/C), the up projection's row c·H + i of " +
		"stream c and column i summed into u_i with its gate sigmoid(·); the activation and the logits rounded to f32 as the " +
		"unfused ops round them.",
	Arity: 3,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[HCMixMatMulAttrs]("hc_mix_matmul", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if _, err := OpScale.Rule(ScaleAttrs{Factor: at.Scale}, in[1:2]); err != nil {
			return graph.Signature{}, fmt.Errorf("d: %w", err)
		}
		t, err := OpSiLU.Rule(nil, in[1:2])
		if err != nil {
			return graph.Signature{}, fmt.Errorf("d: %w", err)
		}
		g, err := OpMatMul.Rule(nil, []*graph.Value{specValue(t.Outputs[0]), in[2]})
		if err != nil {
			return graph.Signature{}, err
		}
		return OpHCMix.Rule(StreamAttrs{Streams: at.Streams}, []*graph.Value{in[0], specValue(g.Outputs[0])})
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[HCMixMatMulAttrs](b, "hc_mix_matmul", a)
		if !ok {
			return failed(1)
		}
		t := SiLU(b, Scale(b, in[1], at.Scale))
		return []*graph.Value{HCMix(b, in[0], MatMul(b, t, in[2]), at.Streams)}
	},
}
