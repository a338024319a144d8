package dory

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/modeltest"
)

// A Session is the session the commands drive: their forwards, plans and
// report, with no adapter.
var (
	_ models.Session  = (*Session)(nil)
	_ models.Planner  = (*Session)(nil)
	_ models.Reporter = (*Session)(nil)
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
	want, err := newSession(t, ref, Options{}).ForwardLoops(ids, 0, ref.Config.Loops, lm.WantAll)
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
		require.Less(t, m.Tensors.Bytes(nil), ref.Tensors.Bytes(nil), c.quant)
		got, err := newSession(t, m, Options{}).ForwardLoops(ids, 0, m.Config.Loops, lm.WantAll)
		require.NoError(t, err)
		rel := modeltest.RelRMS(got.Data().([]float32), w)
		t.Logf("%s: relative RMS difference of the logits %.4f; weights %d bytes, bf16 %d", c.quant, rel, m.Tensors.Bytes(nil), ref.Tensors.Bytes(nil))
		require.Less(t, rel, c.max, c.quant)
		m.Close()
	}
	_, err = LoadQuantized(dir, "q3")
	require.ErrorContains(t, err, `quantization "q3": want fp8, q8 or q4`)
}

// TestQuantizeModel: Quantize makes of a loaded float model the very
// weights LoadQuantized makes at load (so the same logits, bit for bit);
// of a synthetic model, one whose logits move by what the format costs
// (random weights: relative RMS measured 0.2 % q8, 1.3 % fp8, 3.3 % q4);
// of a model of shapes only, the format's graphs. The receiver is spent;
// a bad format, or another format than the one a model holds, is an
// error naming the flag.
func TestQuantizeModel(t *testing.T) {
	dir := filepath.Join(testdata, "dory-gotiny")
	ids := []int{'f', 'u', 'n', 'c', ' ', 'm', 'a', 'i', 'n', '('}
	for _, c := range []struct {
		quant string
		max   float64
	}{{lm.QuantQ8, 0.01}, {lm.QuantFP8, 0.04}, {lm.QuantQ4, 0.12}} {
		want, err := LoadQuantized(dir, c.quant)
		require.NoError(t, err)
		src := loadModel(t, dir)
		params := src.Parameters()
		q, err := src.Quantize(c.quant, nil)
		require.NoError(t, err)
		got := q.(*Model)
		require.Nil(t, src.Tensors, "the receiver is spent")
		require.Equal(t, want.Tensors, got.Tensors, c.quant)
		require.Equal(t, want.Config, got.Config)
		require.Equal(t, params, got.Parameters(), "a quantized matrix counts its elements")
		a, err := newSession(t, want, Options{}).ForwardLoops(ids, 0, 2, lm.WantAll)
		require.NoError(t, err)
		b, err := newSession(t, got, Options{}).ForwardLoops(ids, 0, 2, lm.WantAll)
		require.NoError(t, err)
		require.Equal(t, a.Data(), b.Data(), c.quant)
		same, err := got.Quantize(c.quant, nil)
		require.NoError(t, err)
		require.Same(t, got, same)
		other := map[string]string{lm.QuantQ8: lm.QuantQ4, lm.QuantFP8: lm.QuantQ8, lm.QuantQ4: lm.QuantFP8}[c.quant]
		_, err = got.Quantize(other, nil)
		require.ErrorContains(t, err, "--quant "+other+": the model is stored quantized in "+c.quant)
		want.Close()
		got.Close()

		syn, err := Synthetic(loadModel(t, dir).Config, graph.BF16, 7)
		require.NoError(t, err)
		ref, err := newSession(t, syn, Options{}).ForwardLoops(ids, 0, 2, lm.WantAll)
		require.NoError(t, err)
		var reports int
		sq, err := syn.Quantize(c.quant, func(done, total int64) { reports++ })
		require.NoError(t, err)
		require.Greater(t, reports, 2)
		out, err := newSession(t, sq.(*Model), Options{}).ForwardLoops(ids, 0, 2, lm.WantAll)
		require.NoError(t, err)
		rel := modeltest.RelRMS(out.Data().([]float32), ref.Data().([]float32))
		t.Logf("synthetic %s: relative RMS difference of the logits %.4f", c.quant, rel)
		require.Less(t, rel, c.max, c.quant)
		require.Greater(t, rel, 0.0, c.quant)
	}

	shape := &Model{Config: SmallBench()}
	qs, err := shape.Quantize(lm.QuantQ4, nil)
	require.NoError(t, err)
	g, err := qs.Graph("all", 1, lm.WantLast, models.Options{})
	require.NoError(t, err)
	n := 0
	for _, nd := range g.Nodes {
		if nd.Op == "quant_matmul" {
			n++
		}
	}
	require.Positive(t, n)
	require.Equal(t, shape.Parameters(), qs.Parameters())
	_, err = loadModel(t, dir).Quantize("q3", nil)
	require.ErrorContains(t, err, `dory: --quant: quantization "q3": want fp8, q8 or q4`)
}
