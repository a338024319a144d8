package planner_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models/dory"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// tinyDory is a small Dory: every kind of sub-layer in every block, both
// rope profiles, a window shorter than the positions used.
func tinyDory(kv dory.KVMode) dory.Config {
	c := dory.Released()
	c.Vocab, c.Hidden, c.FFN, c.Heads, c.KVHeads, c.HeadDim = 50, 32, 48, 4, 2, 8
	c.Pattern = strings.Repeat("S-*-", 3)
	c.NIn, c.NRec, c.NOut = 4, 4, 4
	c.KV, c.Window = kv, 3
	c.Profiles = [2]dory.RopeProfile{{Theta: 1e4, Rotary: 8}, {Theta: 500, Rotary: 4}}
	c.LayerProfile = make([]int, len(c.Pattern))
	for i := range c.LayerProfile {
		c.LayerProfile[i] = 1 + i%2
	}
	return c
}

// doryKeys are the stage keys a session uses: every stage, one and two
// loops, the three wants, one row and a chunk.
func doryKeys() []dory.Key {
	var ks []dory.Key
	for _, loops := range []int{1, 2} {
		for _, w := range []lm.Want{lm.WantNone, lm.WantLast, lm.WantAll} {
			for _, rows := range []int{1, 3} {
				ks = append(ks, dory.Key{Stage: dory.All, Loops: loops, Want: w, Rows: rows})
			}
		}
		ks = append(ks, dory.Key{Stage: dory.First, Loops: loops, Want: lm.WantNone, Rows: 1})
		for _, s := range []dory.Stage{dory.FirstRead, dory.Read, dory.SecondRead, dory.SecondFresh} {
			ks = append(ks, dory.Key{Stage: s, Loops: loops, Want: lm.WantLast, Rows: 1})
		}
	}
	return ks
}

// TestFusedEqualsUnfusedDory plans every Dory stage fused and unfused and
// runs both on the CPU from equal weights, KV rows and carried states at
// position 6: logits and every state written agree within 1e-5, and the
// unfused plan equals the node-by-node run bit for bit.
func TestFusedEqualsUnfusedDory(t *testing.T) {
	be := cpu.New(2)
	for _, kv := range []dory.KVMode{dory.PerLoop, dory.LastLoop} {
		c := tinyDory(kv)
		m, err := dory.Synthetic(c, graph.BF16, 3)
		require.NoError(t, err)
		weights, err := m.Upload(be, nil)
		require.NoError(t, err)
		for _, k := range doryKeys() {
			t.Run(fmt.Sprintf("%s/%s", kv, k), func(t *testing.T) {
				g, err := dory.BuildStage(&c, k, m.Stored())
				require.NoError(t, err)
				e := newEnv(g, 8, 6, 16)
				for _, v := range g.OfKind(graph.State) {
					unitRows(e.f32[v.Name], v.Shape.Last())
				}
				for _, v := range g.OfKind(graph.Input) {
					if v.Name == lm.InputIDs {
						for i := range e.i32[v.Name] {
							e.i32[v.Name][i] = int32(7*i+3) % int32(c.Vocab)
						}
					}
				}
				run := func(opts *planner.Options) (result, planner.Report) {
					bound := e.bind(t, be, g)
					for n, w := range weights {
						bound[n] = w
					}
					if opts == nil {
						r, err := ops.NewRunner(be, g, byValue(g, bound))
						require.NoError(t, err)
						require.NoError(t, r.Run())
						outs := make([]ops.Buffer, len(g.Outputs))
						for i, v := range g.Outputs {
							outs[i] = r.Buffer(v)
						}
						return collect(g, bound, outs), planner.Report{}
					}
					p, rep, err := planner.Plan(g, *opts)
					require.NoError(t, err)
					pl, err := planner.Lower(p, be, byValue(g, bound))
					require.NoError(t, err)
					defer pl.Close()
					require.NoError(t, pl.Run())
					return collect(g, bound, pl.Outputs()), rep
				}
				ref, _ := run(nil)
				plain, _ := run(&unfused)
				requireSame(t, plain, ref, "unfused plan vs reference")
				got, rep := run(&fused)
				require.LessOrEqual(t, maxRelDiff(t, got, ref), 1e-5)
				require.Less(t, rep.Launches, rep.Nodes)
				require.LessOrEqual(t, rep.ArenaBytes, rep.TempBytes)
				if k.Stage == dory.All && k.Loops == 2 && k.Want == lm.WantLast && k.Rows == 1 {
					t.Logf("%s: %s", k, rep.FusionString())
				}
			})
		}
	}
}

// unitRows normalizes each row of w elements, as Dory's keys and hidden
// states are.
func unitRows(x []float32, w int) {
	for o := 0; o+w <= len(x); o += w {
		s := 0.0
		for _, v := range x[o : o+w] {
			s += float64(v) * float64(v)
		}
		s = 1 / math.Sqrt(s+1e-12)
		for i := o; i < o+w; i++ {
			x[i] = float32(float64(x[i]) * s)
		}
	}
}

// TestFusedEqualsUnfusedDoryQuant plans a quantized tiny Dory's decode and
// chunk stages fused and unfused, in each format, and runs both on the CPU:
// every quant_matmul is fused (q/k/v/g grouped, gate/up with the SwiGLU,
// the norms before o and down folded in; for prompt rows the whole MLP as
// quant_swiglu_norm_matmul and the slerp before q/k/v/g as
// quant_slerp_matmul), the logits and states agree within 1e-5, and the
// fused plan is the bf16 model's, node for node, each quantized op in the
// place of its 16-bit form.
func TestFusedEqualsUnfusedDoryQuant(t *testing.T) {
	be := cpu.New(2)
	c := tinyDory(dory.PerLoop)
	for _, q := range []string{"fp8", "q8", "q4"} {
		m0, err := dory.Synthetic(c, graph.BF16, 3)
		require.NoError(t, err)
		mq, err := m0.Quantize(q, nil)
		require.NoError(t, err)
		m := mq.(*dory.Model)
		weights, err := m.Upload(be, nil)
		require.NoError(t, err)
		for _, rows := range []int{1, 3, ops.AttentionChunkRows} {
			k := dory.Key{Stage: dory.All, Loops: 2, Want: lm.WantLast, Rows: rows}
			t.Run(fmt.Sprintf("%s/%s", q, k), func(t *testing.T) {
				g, err := dory.BuildStage(&c, k, m.Stored())
				require.NoError(t, err)
				e := newEnv(g, 8, 6, 32)
				for _, v := range g.OfKind(graph.State) {
					unitRows(e.f32[v.Name], v.Shape.Last())
				}
				run := func(opts planner.Options) (result, planner.Report) {
					bound := e.bind(t, be, g)
					for n, w := range weights {
						bound[n] = w
					}
					p, rep, err := planner.Plan(g, opts)
					require.NoError(t, err)
					pl, err := planner.Lower(p, be, byValue(g, bound))
					require.NoError(t, err)
					defer pl.Close()
					require.NoError(t, pl.Run())
					return collect(g, bound, pl.Outputs()), rep
				}
				ref, _ := run(unfused)
				got, rep := run(fused)
				require.LessOrEqual(t, maxRelDiff(t, got, ref), 1e-5)
				require.Positive(t, rep.Fusions[planner.RuleQuantGroupMatMul])
				require.Zero(t, rep.Fusions[planner.RuleGroupMatMul]+rep.Fusions[planner.RuleMatMulSwiGLU]+rep.Fusions[planner.RuleNormMatMul]+
					rep.Fusions[planner.RuleSwiGLUNormMatMul])
				if rows < ops.AttentionChunkRows {
					// Each sub-layer's first product is its own node or
					// holds the slerp before it; each has one normalized
					// product (o or down).
					require.Zero(t, rep.Fusions[planner.RuleQuantSwiGLUNormMatMul])
					require.Positive(t, rep.Fusions[planner.RuleSlerpMatMul])
					require.Equal(t, rep.Fusions[planner.RuleQuantNormMatMul],
						rep.Fusions[planner.RuleQuantGroupMatMul]+rep.Fusions[planner.RuleQuantMatMulSwiGLU]+rep.Fusions[planner.RuleSlerpMatMul])
				} else {
					mlps := rep.Fusions[planner.RuleQuantSwiGLUNormMatMul]
					require.Positive(t, mlps)
					require.Zero(t, rep.Fusions[planner.RuleQuantMatMulSwiGLU])
					require.Equal(t, mlps, rep.Fusions[planner.RuleQuantNormMatMul]) // o's
					// every q/k/v/g but the first block's reads a slerp's h
					require.Equal(t, mlps, rep.Fusions[planner.RuleQuantGroupMatMul]+rep.Fusions[planner.RuleSlerpMatMul])
					require.Positive(t, rep.Fusions[planner.RuleSlerpMatMul])
				}
				t.Logf("%s: %s", k, rep.FusionString())
				// The bf16 model's fused plan, node for node.
				g16, err := dory.BuildStage(&c, k, m0.Stored())
				require.NoError(t, err)
				p16, _, err := planner.Plan(g16, fused)
				require.NoError(t, err)
				pq, _, err := planner.Plan(g, fused)
				require.NoError(t, err)
				var want, ops16 []string
				for _, n := range p16.Graph.Nodes {
					want = append(want, n.Op)
				}
				for _, n := range pq.Graph.Nodes {
					// At decode rows a quantized product holds the slerp
					// before it; a bf16 one does not.
					switch {
					case rows < ops.AttentionChunkRows && n.Op == ops.OpQuantSlerpMatMul.Op:
						ops16 = append(ops16, ops.OpSlerp.Op, ops.OpGroupedMatMul.Op)
					case rows < ops.AttentionChunkRows && n.Op == ops.OpQuantSlerpMatMulSwiGLU.Op:
						ops16 = append(ops16, ops.OpSlerp.Op, ops.OpMatMulSwiGLU.Op)
					default:
						ops16 = append(ops16, strings.TrimPrefix(n.Op, "quant_"))
					}
				}
				require.Equal(t, want, ops16)
			})
		}
	}
}
