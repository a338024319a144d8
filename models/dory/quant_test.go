package dory

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

// TestQuantizeOnLoad: quantizing the trained dory-gotiny at load reads the
// projections of every sub-layer (q, k, v, g, o; gate, up, down) through
// quant_matmul in the format
// (the embedding, the head and the scale vectors stay as stored), shrinks
// the weights' bytes, and moves the logits by what the format's rounding
// costs: relative RMS differences measured 0.3 % (q8), 1.3 % (fp8)
// and 5.5 % (q4) of the bf16 model's logits.
func TestQuantizeOnLoad(t *testing.T) {
	dir := filepath.Join(testdata, "dory-gotiny")
	ref := loadModel(t, dir)
	var ids []int
	for _, b := range []byte("func main() {\n\tfmt.Println(") {
		ids = append(ids, int(b))
	}
	want, err := newSession(t, ref, Options{}).Forward(ids, 0, ref.Config.Loops, lm.WantAll)
	require.NoError(t, err)
	w := want.Data().([]float32)
	for _, c := range []struct {
		quant string
		dt    graph.DType
		max   float64
	}{{lm.QuantQ8, graph.I8, 0.01}, {lm.QuantFP8, graph.F8E4M3, 0.04}, {lm.QuantQ4, graph.U8, 0.12}} {
		m, err := LoadQuantized(dir, c.quant)
		require.NoError(t, err, c.quant)
		g, err := m.Graph("all", 1, lm.WantLast, models.Options{})
		require.NoError(t, err)
		quantized := map[string]bool{}
		for _, nd := range g.Nodes {
			switch nd.Op {
			case "quant_matmul":
				quantized[nd.Inputs[1].Name] = true
				require.Equal(t, c.dt, nd.Inputs[1].DType)
			case "matmul", "embed":
				name := nd.Inputs[1].Name
				if nd.Op == "embed" {
					name = nd.Inputs[0].Name
				}
				require.Contains(t, []string{"backbone.embeddings.weight", "lm_head.weight"}, name)
			}
		}
		mlps := strings.Count(m.Config.Pattern, "-")
		require.Len(t, quantized, 3*mlps+5*(len(m.Config.Pattern)-mlps), "projections read by quant_matmul")
		require.Less(t, m.tensors.Bytes(nil), ref.tensors.Bytes(nil), c.quant)
		got, err := newSession(t, m, Options{}).Forward(ids, 0, m.Config.Loops, lm.WantAll)
		require.NoError(t, err)
		var num, den float64
		for i, x := range got.Data().([]float32) {
			d := float64(x - w[i])
			num += d * d
			den += float64(w[i]) * float64(w[i])
		}
		rel := math.Sqrt(num / den)
		t.Logf("%s: relative RMS difference of the logits %.4f; weights %d bytes, bf16 %d", c.quant, rel, m.tensors.Bytes(nil), ref.tensors.Bytes(nil))
		require.Less(t, rel, c.max, c.quant)
		m.Close()
	}
	_, err = LoadQuantized(dir, "q3")
	require.ErrorContains(t, err, `quantization "q3": want fp8, q8 or q4`)
}
