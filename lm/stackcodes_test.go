package lm_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/weights"
)

// TestLoadWeightsStackedCodes: experts a checkpoint stores one by one
// quantized (an FP8 checkpoint as published: each matrix's codes and its
// _scale_inv table) load as the stacks quant_expert_matmul reads, with
// LoadOptions.Format: Make stacks the codes (StackExperts), LoadWeights
// their scales, one table per expert. Each part fills whole blocks of rows
// (32 of 16) and the stacks are what quantizing the whole float stacks
// makes, partial blocks at the edges included (down's 40 rows and every
// matrix's columns: 40 and 32 over blocks of 24); a table stored in f16
// is widened to the declared f32. Without Format the stack's scales are
// named missing; with blocks the gate's rows do not fill, the gate is
// named.
func TestLoadWeightsStackedCodes(t *testing.T) {
	const e, ffn, hidden = 3, 32, 40
	q := lm.Quant{Method: lm.QuantFP8, BlockRows: 16, BlockCols: 24}
	gu, _ := gaussian(21, graph.F32, e*2*ffn, hidden, 0.05)
	gu.Shape = []int{e, 2 * ffn, hidden}
	dn, _ := gaussian(22, graph.F32, e*hidden, ffn, 0.05)
	dn.Shape = []int{e, hidden, ffn}
	var parts []weights.NamedTensor
	add := func(name string, rows, cols int, data []byte) {
		codes, scales, err := q.Quantize(lm.Tensor{DType: graph.F32, Shape: []int{rows, cols}, Data: data})
		require.NoError(t, err)
		parts = append(parts, weights.NamedTensor{Name: name, DType: codes.DType, Shape: codes.Shape, Data: codes.Data},
			weights.NamedTensor{Name: q.ScaleName(name), DType: scales.DType, Shape: scales.Shape, Data: scales.Data})
	}
	row := 4 * hidden
	for m := range e {
		add(fmt.Sprintf("experts.%d.gate", m), ffn, hidden, gu.Data[(2*m)*ffn*row:(2*m+1)*ffn*row])
		add(fmt.Sprintf("experts.%d.up", m), ffn, hidden, gu.Data[(2*m+1)*ffn*row:(2*m+2)*ffn*row])
		add(fmt.Sprintf("experts.%d.down", m), hidden, ffn, dn.Data[m*hidden*ffn*4:(m+1)*hidden*ffn*4])
	}
	guCodes, guScales, err := q.Quantize(gu)
	require.NoError(t, err)
	dnCodes, dnScales, err := q.Quantize(dn)
	require.NoError(t, err)

	// expert 1's down table stored in f16: widened, its values f16's
	var widened []float32
	for i := range parts {
		if parts[i].Name == "experts.1.down_scale_inv" {
			v, err := lm.Tensor{DType: graph.F32, Shape: parts[i].Shape, Data: parts[i].Data}.Float32()
			require.NoError(t, err)
			parts[i].DType, parts[i].Data = graph.F16, make([]byte, 2*len(v))
			half.EncodeF16(parts[i].Data, v)
			widened = make([]float32, len(v))
			half.DecodeF16(widened, parts[i].Data)
		}
	}
	table := 4 * len(widened)
	copy(dnScales.Data[table:2*table], lm.F32Tensor(widened).Data)

	dir := t.TempDir()
	require.NoError(t, weights.WriteFile(filepath.Join(dir, weights.SingleFile), parts))
	ck, err := weights.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	declare := func(q lm.Quant) []lm.Declared {
		st := lm.Stored{DType: func(n string) graph.DType {
			if n == "gate_up" || n == "down" {
				return graph.F8E4M3
			}
			return graph.F32
		}, Quant: q}
		b := graph.NewBuilder("t")
		pop := b.Push("layer 0")
		ids := b.Input("ids", graph.I32, 1, 2)
		b.Output(st.Experts(b, b.Input("x", graph.F32, 1, hidden), ids, "gate_up", e, 2*ffn, hidden))
		b.Output(st.Experts(b, b.Input("h", graph.F32, 1, ffn), ids, "down", e, hidden, ffn))
		pop()
		g, err := b.Graph()
		require.NoError(t, err)
		decl, err := lm.Declarations(g)
		require.NoError(t, err)
		return decl
	}
	stack := func(d lm.Declared, ck *weights.Checkpoint) (lm.Tensor, []string, bool, error) {
		names := map[string][]string{"gate_up": {"gate", "up"}, "down": {"down"}}[d.Name]
		if names == nil {
			return lm.Tensor{}, nil, false, nil
		}
		t, reads, err := lm.StackExperts(ck, d, func(m int) []string {
			var out []string
			for _, n := range names {
				out = append(out, fmt.Sprintf("experts.%d.%s", m, n))
			}
			return out
		})
		return t, reads, err == nil, err
	}

	ts, err := lm.LoadWeights(ck, declare(q), lm.LoadOptions{Make: stack, Format: q})
	require.NoError(t, err)
	require.Equal(t, lm.Tensors{"gate_up": guCodes, "gate_up_scale_inv": guScales, "down": dnCodes, "down_scale_inv": dnScales}, ts)

	_, err = lm.LoadWeights(ck, declare(q), lm.LoadOptions{Make: stack})
	require.EqualError(t, err, "layer 0: tensor gate_up_scale_inv: missing from the checkpoint")
	wide := lm.Quant{Method: lm.QuantFP8, BlockRows: 24, BlockCols: 24}
	_, err = lm.LoadWeights(ck, declare(wide), lm.LoadOptions{Make: stack, Format: wide})
	require.EqualError(t, err, "layer 0: tensor experts.0.gate: 32 rows, not a multiple of the scale blocks' 24 (fp8/24x24): "+
		"its scales cannot be stacked with those of experts.0.up into one table")
}
