package planner_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// qwen4Rules are the rules of Qwen4-Exp's decode step: they do not fire on
// the tiny Dory block, so TestEachRule leaves them to the tests here.
var qwen4Rules = []string{planner.RuleGDNPrep, planner.RuleExpertGLU, planner.RuleHCMixMatMul, planner.RuleMoEInjectNorm}

// gdnBlock builds a Gated DeltaNet step as models/qwen4 does: gdn_prep's
// chain over a convolved projection of rows rows (2 key heads of 4, 4
// value heads of 4), then gdn_scan; tweak may change the chain.
func gdnBlock(t *testing.T, rows int, tweak func(b *graph.Builder, q, k *graph.Value) (*graph.Value, *graph.Value)) *graph.Graph {
	t.Helper()
	return small(t, func(b *graph.Builder) {
		at := ops.GDNPrepAttrs{KeyHeads: 2, KeyDim: 4, ValueHeads: 4, ValueDim: 4, Eps: 1e-6}
		mix := b.Input("mix", graph.F32, rows, 2*8+16)
		q, k, v := ops.GDNPrep(b, mix, at)
		if tweak != nil {
			q, k = tweak(b, q, k)
		}
		g := b.Input("g", graph.F32, rows, 4)
		beta := b.Input("beta", graph.F32, rows, 4)
		s := b.State("S", graph.F32, 4, 4, 4)
		b.Output(ops.GDNScan(b, q, k, v, g, beta, s, ops.Call(b)))
	})
}

// TestGDNPrepRule: the chain becomes one gdn_prep with the value heads of
// the scan, whose results are the chain's within 1e-5, at one and three
// rows.
func TestGDNPrepRule(t *testing.T) {
	for _, rows := range []int{1, 3} {
		g := gdnBlock(t, rows, nil)
		e := newEnv(g, 3, 0, 8)
		for i := range e.f32["g"] {
			e.f32["g"][i] = -0.1 - 0.1*float32(i%3) // decays
		}
		ref := runReference(t, g, e)
		got, rep := runPlanned(t, g, planner.Options{Fuse: true}, e)
		require.Equal(t, map[string]int{planner.RuleGDNPrep: 1}, rep.Fusions)
		require.Equal(t, 4, rep.Absorbed[planner.RuleGDNPrep])
		require.LessOrEqual(t, maxRelDiff(t, got, ref), 1e-5)
		p, _, err := planner.Plan(g, fused)
		require.NoError(t, err)
		var prep *graph.Node
		for _, n := range p.Graph.Nodes {
			if n.Op == ops.OpGDNPrep.Op {
				prep = n
			}
		}
		require.NotNil(t, prep)
		require.Equal(t, ops.GDNPrepAttrs{KeyHeads: 2, KeyDim: 4, ValueHeads: 4, ValueDim: 4, Eps: 1e-6}, prep.Attrs)
	}
}

// TestGDNPrepRuleDeclines: chains that are not gdn_prep's stay as they are.
func TestGDNPrepRuleDeclines(t *testing.T) {
	for name, tweak := range map[string]func(b *graph.Builder, q, k *graph.Value) (*graph.Value, *graph.Value){
		// the normed queries read by another node than the scale
		"q norm read twice": func(b *graph.Builder, q, k *graph.Value) (*graph.Value, *graph.Value) {
			b.Output(q.Producer.Inputs[0])
			return q, k
		},
		// the keys normed over another group than the queries
		"k group": func(b *graph.Builder, q, k *graph.Value) (*graph.Value, *graph.Value) {
			return q, ops.L2Norm(b, k.Producer.Inputs[0], 8, 1e-6)
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := gdnBlock(t, 2, tweak)
			_, rep, err := planner.Plan(g, planner.Options{Fuse: true})
			require.NoError(t, err)
			require.Zero(t, rep.Fusions[planner.RuleGDNPrep])
		})
	}
	// a scale other than 1/sqrt(dk)
	g := small(t, func(b *graph.Builder) {
		mix := b.Input("mix", graph.F32, 2, 24)
		p := ops.Split(b, mix, 1, 8, 8, 8)
		b.Output(ops.Scale(b, ops.L2Norm(b, p[0], 4, 1e-6), 0.25))
		b.Output(ops.L2Norm(b, p[1], 4, 1e-6))
		b.Output(p[2])
	})
	_, rep, err := planner.Plan(g, planner.Options{Fuse: true})
	require.NoError(t, err)
	require.Zero(t, rep.Fusions[planner.RuleGDNPrep])
}

// TestExpertGLURule: a routed expert block's gate_up product and its
// activation become one expert_matmul_glu, its results the unfused ones bit
// for bit on the CPU (the fused kernel runs the parts' kernels), at one
// and three rows; an activation whose products are read elsewhere too
// stays as it is.
func TestExpertGLURule(t *testing.T) {
	block := func(rows int, leak bool) *graph.Graph {
		return small(t, func(b *graph.Builder) {
			x := b.Input("x", graph.F32, rows, 8)
			ids, w := ops.MoERoute(b, ops.MatMul(b, x, b.Weight("router", graph.F32, 4, 8)), 2, true)
			gu := ops.ExpertMatMul(b, x, b.Weight("gate_up", graph.F32, 4, 12, 8), ids)
			y := ops.ExpertMatMul(b, ops.SiLUGLU(b, gu), b.Weight("down", graph.F32, 4, 8, 6), ids)
			b.Output(ops.MoECombine(b, y, w, nil, nil))
			if leak {
				b.Output(gu)
			}
		})
	}
	for _, rows := range []int{1, 3} {
		g := block(rows, false)
		e := newEnv(g, 4, 0, 8)
		ref := runReference(t, g, e)
		got, rep := runPlanned(t, g, planner.Options{Fuse: true}, e)
		require.Equal(t, 1, rep.Fusions[planner.RuleExpertGLU])
		require.Equal(t, 2, rep.Absorbed[planner.RuleExpertGLU])
		requireSame(t, got, ref, "expert_matmul_glu vs the unfused ops")
	}
	_, rep, err := planner.Plan(block(2, true), planner.Options{Fuse: true})
	require.NoError(t, err)
	require.Zero(t, rep.Fusions[planner.RuleExpertGLU])
}

// residualBlock builds two gated residuals over 2 streams of 8 as
// models/qwen4 does (rmsnorm of the hyper-state, the down and inject
// products, scale and silu, the up product and hc_mix; the block; then
// hc_inject): the first around a matmul, the second around a mixture of
// experts (routed experts and a shared expert, moe_combine), and a last
// rmsnorm of the final hyper-state; leak makes the mixture of experts'
// output a graph output too, and shared leaves out the shared expert when
// false.
func residualBlock(t *testing.T, rows int, leak, shared bool) *graph.Graph {
	t.Helper()
	const c, h, r = 2, 8, 3
	return small(t, func(b *graph.Builder) {
		x := ops.HCExpand(b, b.Input("x", graph.F32, rows, h), c)
		in := func(pre string, x *graph.Value) (u, xn *graph.Value) {
			xn = ops.RMSNorm(b, x, b.Weight(pre+"norm", graph.F32, c*h), h, 1e-6)
			d := ops.SiLU(b, ops.Scale(b, ops.MatMul(b, xn, b.Weight(pre+"down", graph.F32, r, c*h)), 1/float32(c)))
			return ops.HCMix(b, xn, ops.MatMul(b, d, b.Weight(pre+"up", graph.F32, c*h, r)), c), xn
		}
		out := func(pre string, x, xn, y *graph.Value) *graph.Value {
			return ops.HCInject(b, x, y, ops.MatMul(b, xn, b.Weight(pre+"inject", graph.F32, c, c*h)), c)
		}
		u, xn := in("a.", x)
		x = out("a.", x, xn, ops.MatMul(b, u, b.Weight("a.proj", graph.F32, h, h)))
		u, xn = in("m.", x)
		ids, w := ops.MoERoute(b, ops.MatMul(b, u, b.Weight("m.router", graph.F32, 4, h)), 2, true)
		e := ops.ExpertMatMul(b, u, b.Weight("m.experts", graph.F32, 4, h, h), ids)
		var s, sg *graph.Value
		if shared {
			s, sg = ops.MatMul(b, u, b.Weight("m.shared", graph.F32, h, h)), ops.MatMul(b, u, b.Weight("m.gate", graph.F32, 1, h))
		}
		y := ops.MoECombine(b, e, w, s, sg)
		if leak {
			b.Output(y)
		}
		x = out("m.", x, xn, y)
		b.Output(ops.RMSNorm(b, x, b.Weight("final", graph.F32, h), h, 1e-6), x)
	})
}

// countOp is the number of op's nodes in g.
func countOp(g *graph.Graph, op string) int {
	n := 0
	for _, nd := range g.Nodes {
		if nd.Op == op {
			n++
		}
	}
	return n
}

// TestResidualRules: a gated residual's mix becomes hc_mix_matmul and the
// hc_inject after a mixture of experts, with the norm after it,
// moe_inject_norm (with and without a shared expert), the results the
// unfused ones bit for bit on the CPU (the fused kernels run their parts),
// at one and three rows; the hc_inject of the other block and its norm
// stay as they are (no rule fuses them); a skipped rule leaves its ops.
func TestResidualRules(t *testing.T) {
	for _, rows := range []int{1, 3} {
		for _, shared := range []bool{true, false} {
			g := residualBlock(t, rows, false, shared)
			e := newEnv(g, 5, 0, 8)
			ref := runReference(t, g, e)
			got, rep := runPlanned(t, g, planner.Options{Fuse: true}, e)
			require.Equal(t, 2, rep.Fusions[planner.RuleHCMixMatMul])
			require.Equal(t, 8, rep.Absorbed[planner.RuleHCMixMatMul])
			require.Equal(t, 1, rep.Fusions[planner.RuleMoEInjectNorm])
			require.Equal(t, 3, rep.Absorbed[planner.RuleMoEInjectNorm])
			requireSame(t, got, ref, "fused residuals vs the unfused ops")
			p, _, err := planner.Plan(g, planner.Options{Fuse: true})
			require.NoError(t, err)
			require.Equal(t, 1, countOp(p.Graph, ops.OpHCInject.Op)) // the matmul block's
			require.Equal(t, 1, countOp(p.Graph, ops.OpMoEInjectNorm.Op))
		}
	}
	g := residualBlock(t, 2, false, true)
	p, rep, err := planner.Plan(g, planner.Options{Fuse: true, Skip: []string{planner.RuleMoEInjectNorm}})
	require.NoError(t, err)
	require.Zero(t, rep.Fusions[planner.RuleMoEInjectNorm])
	require.Equal(t, 2, countOp(p.Graph, ops.OpHCInject.Op))
	require.Equal(t, 1, countOp(p.Graph, ops.OpMoECombine.Op))
}

// TestResidualRulesDecline: an hc_inject whose mixture of experts' output
// is read elsewhere stays as it is (the results still the unfused ones),
// and so does one that no rmsnorm reads.
func TestResidualRulesDecline(t *testing.T) {
	g := residualBlock(t, 2, true, true)
	e := newEnv(g, 5, 0, 8)
	ref := runReference(t, g, e)
	got, rep := runPlanned(t, g, planner.Options{Fuse: true}, e)
	require.Zero(t, rep.Fusions[planner.RuleMoEInjectNorm])
	require.Equal(t, 2, rep.Fusions[planner.RuleHCMixMatMul])
	requireSame(t, got, ref, "fused residuals vs the unfused ops")
	g = small(t, func(b *graph.Builder) {
		x := b.Input("x", graph.F32, 2, 16)
		ids, w := ops.MoERoute(b, b.Input("r", graph.F32, 2, 4), 2, true)
		y := ops.MoECombine(b, ops.ExpertMatMul(b, b.Input("u", graph.F32, 2, 8), b.Weight("experts", graph.F32, 4, 8, 8), ids), w, nil, nil)
		b.Output(ops.L2Norm(b, ops.HCInject(b, x, y, b.Input("l", graph.F32, 2, 2), 2), 8, 1e-6))
	})
	_, rep, err := planner.Plan(g, planner.Options{Fuse: true})
	require.NoError(t, err)
	require.Zero(t, rep.Fusions[planner.RuleMoEInjectNorm])
}
