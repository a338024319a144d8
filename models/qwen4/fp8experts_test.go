package qwen4

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/weights"
)

// expertFP8 is an FP8 format whose blocks the tiny checkpoints' experts
// fill whole in rows (moe_intermediate_size 32, hidden 64) but not in
// columns (64 and 32 over blocks of 24): every expert matrix has partial
// blocks at its right edge.
var expertFP8 = lm.Quant{Method: lm.QuantFP8, BlockRows: 16, BlockCols: 24}

// isExpert says a tensor is one expert's matrix (mlp.experts.{e}.*).
func isExpert(name string) bool { return strings.Contains(name, ".mlp.experts.") }

// stackExpertTensors moves the per-expert tensors of ts into each layer's
// stacks, as a checkpoint storing them stacked has them: for each suffix
// ("" for the matrices, "_scale_inv" for their FP8 scales), gate then up
// of every expert into ExpertsGateUp+suffix and down into
// ExpertsDown+suffix, in their dtype.
func stackExpertTensors(c Config, ts []weights.NamedTensor, suffixes ...string) []weights.NamedTensor {
	byName := map[string]weights.NamedTensor{}
	var out []weights.NamedTensor
	for _, x := range ts {
		byName[x.Name] = x
		if !isExpert(x.Name) {
			out = append(out, x)
		}
	}
	for li := range c.Layers {
		for _, sfx := range suffixes {
			for _, s := range []struct {
				stack string
				parts []string
			}{{ExpertsGateUp, []string{"gate_proj.weight", "up_proj.weight"}}, {ExpertsDown, []string{"down_proj.weight"}}} {
				st := weights.NamedTensor{Name: LayerPrefix(li) + s.stack + sfx, Shape: []int{c.Experts, 0, 0}}
				for e := range c.Experts {
					for _, part := range s.parts {
						x := byName[fmt.Sprintf("%smlp.experts.%d.%s%s", LayerPrefix(li), e, part, sfx)]
						if e == 0 {
							st.DType, st.Shape[1], st.Shape[2] = x.DType, st.Shape[1]+x.Shape[0], x.Shape[1]
						}
						st.Data = append(st.Data, x.Data...)
					}
				}
				out = append(out, st)
			}
		}
	}
	return out
}

// TestExpertsStoredFP8: a checkpoint storing its experts one by one in FP8
// as published (DeepSeek-V3's, Qwen3-MoE-FP8's layout: each expert's
// float8_e4m3fn codes with their own _scale_inv blocks) loads, its codes
// stacked into the codes quant_expert_matmul reads and its scales into one
// table per expert; its logits are those of the same codes and scales
// stored stacked, bit for bit, and of the float model of its dequantized
// weights (relative RMS difference under 1e-6). The same for q8's codes
// and f16 scales (widened to f32) in groups of 24.
func TestExpertsStoredFP8(t *testing.T) {
	src := filepath.Join(testdata, checkpoints[0]) // experts one by one, in f32
	ids := longest(readGolden(t, src))
	want := logits(t, loadModel(t, src), ids)
	for _, q := range []lm.Quant{expertFP8, {Method: lm.QuantQ8, BlockRows: 1, BlockCols: 24}} {
		dir := t.TempDir()
		modeltest.StoreQuantized(src, q, isExpert)(t, dir)
		m := loadModel(t, dir)
		c := m.Config
		gu, down := LayerPrefix(1)+ExpertsGateUp, LayerPrefix(1)+ExpertsDown
		require.Equal(t, q.DType(), m.Tensors[gu].DType, q)
		require.Equal(t, []int{c.Experts, 2 * c.ExpertFFN, c.Hidden}, m.Tensors[gu].Shape)
		rows := func(n int) int { return (n + q.BlockRows - 1) / q.BlockRows }
		require.Equal(t, []int{c.Experts, rows(2 * c.ExpertFFN), (c.Hidden + 23) / 24}, m.Tensors[q.ScaleName(gu)].Shape)
		require.Equal(t, []int{c.Experts, rows(c.Hidden), (c.ExpertFFN + 23) / 24}, m.Tensors[q.ScaleName(down)].Shape)
		require.Equal(t, graph.F32, m.Tensors[q.ScaleName(down)].DType)
		g, err := m.Graph("forward", 1, lm.WantLast, models.Options{})
		require.NoError(t, err)
		mats, experts, _ := quantizedProducts(t, g, q.DType())
		require.Len(t, experts, 2*len(c.Layers), "gate_up and down of every layer")
		require.Empty(t, mats, "only the experts are stored quantized")

		got := logits(t, m, ids)
		stacked := t.TempDir()
		modeltest.Rewrite(dir, func(ts []weights.NamedTensor) []weights.NamedTensor {
			return stackExpertTensors(c, ts, "", q.ScaleName(""))
		})(t, stacked)
		require.Equal(t, logits(t, loadModel(t, stacked), ids), got, "%s: stored stacked", q)
		deq := t.TempDir()
		modeltest.Dequantized(dir)(t, deq)
		rel := modeltest.RelRMS(got, logits(t, loadModel(t, deq), ids))
		t.Logf("%s: against the float model of the dequantized weights: relative RMS difference %.3g (against the unquantized model's %.3g)", q, rel, modeltest.RelRMS(got, want))
		require.Less(t, rel, 1e-6, q)
		require.Greater(t, modeltest.RelRMS(got, want), 0.0, "%s: quantized", q)
	}
}

// TestExpertsStoredFP8Errors: an FP8 checkpoint of experts stored one by
// one is refused, with an error naming the folder and the tensor (what it
// is, what it should be), for an expert's codes in another dtype (one
// expert in q8's layout), one expert in bf16, a scale table missing, in
// another dtype or misshaped, and the published 128-row blocks over gate
// and up projections of 32 rows each (their tables cannot be stacked into
// one of the stack's blocks).
func TestExpertsStoredFP8Errors(t *testing.T) {
	src := filepath.Join(testdata, checkpoints[0])
	fp8 := t.TempDir()
	modeltest.StoreQuantized(src, expertFP8, isExpert)(t, fp8)
	p := LayerPrefix(1) + "mlp.experts."
	edit := func(f func(x *weights.NamedTensor) bool) func([]weights.NamedTensor) []weights.NamedTensor {
		return func(ts []weights.NamedTensor) []weights.NamedTensor {
			var out []weights.NamedTensor
			for _, x := range ts {
				if f(&x) {
					out = append(out, x)
				}
			}
			return out
		}
	}
	for _, c := range []struct {
		name string
		edit func(x *weights.NamedTensor) bool // false: dropped
		want string
	}{
		{"codes in i8, scales as q8's", func(x *weights.NamedTensor) bool {
			switch x.Name {
			case p + "3.up_proj.weight":
				x.DType = graph.I8
			case p + "3.up_proj.weight_scale_inv":
				x.Name = p + "3.up_proj.weight_scale"
			}
			return true
		}, "layer 1: tensor " + p + "3.up_proj.weight: dtype i8, but expert 0 is f8_e4m3: experts are stacked in one dtype"},
		{"an expert in bf16", func(x *weights.NamedTensor) bool {
			if strings.HasPrefix(x.Name, p+"4.") && strings.HasSuffix(x.Name, ".weight") {
				x.DType, x.Data = graph.BF16, make([]byte, 2*len(x.Data))
			}
			return !strings.HasPrefix(x.Name, p+"4.") || !strings.HasSuffix(x.Name, "_scale_inv")
		}, "layer 1: tensor " + p + "4.gate_proj.weight: dtype bf16, but expert 0 is f8_e4m3: experts are stacked in one dtype"},
		{"scales missing", func(x *weights.NamedTensor) bool { return x.Name != p+"5.gate_proj.weight_scale_inv" },
			"layer 1: tensor " + p + "5.gate_proj.weight_scale_inv: missing from the checkpoint (the scales of " + p + "5.gate_proj.weight, stored fp8/16x24)"},
		{"scales in i32", func(x *weights.NamedTensor) bool {
			if x.Name == p+"2.down_proj.weight_scale_inv" {
				x.DType = graph.I32
			}
			return true
		}, "layer 1: tensor " + p + "2.down_proj.weight_scale_inv: dtype i32, want f32"},
		{"scales misshaped", func(x *weights.NamedTensor) bool {
			if x.Name == p+"1.down_proj.weight_scale_inv" {
				x.Shape = []int{x.Shape[1], x.Shape[0]}
			}
			return true
		}, "layer 1: tensor " + p + "1.down_proj.weight_scale_inv: shape [2 4], want [4 2] (blocks of 16x24 over " + p + "1.down_proj.weight's codes [64 32])"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			modeltest.Rewrite(fp8, edit(c.edit))(t, dir)
			_, err := Load(dir)
			require.ErrorContains(t, err, "qwen4 "+dir+": ")
			require.ErrorContains(t, err, c.want)
		})
	}

	published, err := lm.DefaultQuant(lm.QuantFP8)
	require.NoError(t, err)
	dir := t.TempDir()
	modeltest.StoreQuantized(src, published, isExpert)(t, dir)
	_, err = Load(dir)
	require.ErrorContains(t, err, "layer 0: tensor model.layers.0.mlp.experts.0.gate_proj.weight: 32 rows, not a multiple of the scale blocks' 128 (fp8/128x128): "+
		"its scales cannot be stacked with those of model.layers.0.mlp.experts.0.up_proj.weight into one table")
}
