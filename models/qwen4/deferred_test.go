package qwen4

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

// forwardLogits runs ids on a fresh CPU session of m and gives the logits.
func forwardLogits(t *testing.T, m *Model, ids []int) []float32 {
	t.Helper()
	s := newSession(t, m, Options{})
	out, err := s.Forward(ids, 0, lm.WantAll)
	require.NoError(t, err)
	return out.Data().([]float32)
}

// TestSyntheticDeferred: a synthetic model whose matrices are made at
// upload (by the CPU backend's LoadRandom) gives the logits of the one
// made on the host with the same seed, exactly, unquantized and quantized
// in each format (the codes described, not made, until the upload).
func TestSyntheticDeferred(t *testing.T) {
	c := loadModel(t, filepath.Join(testdata, checkpoints[1])).Config
	c.MTPLayers = 0
	ids := []int{1, 7, 2, 9, 4}
	for _, quant := range []string{"", lm.QuantFP8, lm.QuantQ8, lm.QuantQ4} {
		t.Run("quant="+quant, func(t *testing.T) {
			host, err := Synthetic(c, graph.BF16, 5)
			require.NoError(t, err)
			dev, err := SyntheticDeferred(c, graph.BF16, 5)
			require.NoError(t, err)
			var hm, dm models.Model = host, dev
			if quant != "" {
				hm, err = host.Quantize(quant, nil)
				require.NoError(t, err)
				dm, err = dev.Quantize(quant, nil)
				require.NoError(t, err)
			}
			h, d := hm.(*Model), dm.(*Model)
			require.Equal(t, h.Tensors.Bytes(nil), d.Tensors.Bytes(nil))
			made := 0
			for n, t0 := range d.Tensors {
				if t0.Random != nil {
					made++
					require.Nil(t, t0.Data, n)
				}
				require.Equal(t, h.Tensors[n].DType, t0.DType, n)
				require.Equal(t, h.Tensors[n].Shape, t0.Shape, n)
			}
			require.NotZero(t, made)
			require.Equal(t, forwardLogits(t, h, ids), forwardLogits(t, d, ids))
		})
	}
}

// TestReleasedShape: the released shape's weights, computed without
// making any: every layer's experts the released [512, 1280, 2560] and
// [512, 2560, 640], the n-gram table of ReleasedPLEBase rows a head, and
// the bytes of the FP8 and 4-bit models from the formats' definitions
// (lm.Quant): the routed experts' codes and scales as computed here, the
// rest within what the shape's doc says; the registered names make it.
func TestReleasedShape(t *testing.T) {
	c := ReleasedShape()
	require.NoError(t, c.Validate())
	require.Len(t, c.Layers, 48)
	require.Equal(t, []int{512, 10, 2560, 248320}, []int{c.Experts, c.TopK, c.Hidden, c.Vocab})
	layers := 49 // and the MTP head's
	experts := func(q string) (params, bytes int64) {
		m, err := Shapes(c, graph.BF16)
		require.NoError(t, err)
		mm, err := models.Quantize(m, q, nil)
		require.NoError(t, err)
		n := 0
		for name, t0 := range mm.(*Model).Tensors {
			require.True(t, t0.Bare(), name)
			if strings.Contains(name, "mlp.experts.") {
				n++
				bytes += int64(t0.Len() * t0.DType.Size())
			}
		}
		if q == "" {
			require.Equal(t, 2*layers, n)
		} else {
			require.Equal(t, 4*layers, n) // codes and scales
		}
		return int64(mm.Parameters()), bytes
	}
	const e, h, f = 512, 2560, 640
	params, bf16 := experts("")
	require.Equal(t, int64(layers*e*3*h*f*2), bf16)
	_, fp8 := experts(lm.QuantFP8)
	// codes a byte each; f32 scales of 128 x 128 blocks: gate_up [10, 20], down [20, 5]
	require.Equal(t, int64(layers*e*(3*h*f+4*(10*20+20*5))), fp8)
	_, q4 := experts(lm.QuantQ4)
	// codes two a byte; f16 scales of groups of 32: gate_up [1280, 80], down [2560, 20]
	require.Equal(t, int64(layers*e*(3*h*f/2+2*(1280*80+2560*20))), q4)

	m, err := Shapes(c, graph.BF16)
	require.NoError(t, err)
	_, rows := m.PLEShards(1)
	total := 0
	for _, r := range rows {
		total += r
	}
	require.GreaterOrEqual(t, total, 16*ReleasedPLEBase)
	require.Less(t, total, 16*(ReleasedPLEBase+2000))
	require.InDelta(t, 130.9e9, float64(params), 0.1e9) // the doc's "about 131 B"

	for q, most := range map[string]float64{lm.QuantFP8: 127, lm.QuantQ4: 75} {
		m, err := Shapes(c, graph.BF16)
		require.NoError(t, err)
		mm, err := models.Quantize(m, q, nil)
		require.NoError(t, err)
		all := 0
		for _, t0 := range mm.(*Model).Tensors {
			all += t0.Len() * t0.DType.Size()
		}
		require.Less(t, float64(all)/(1<<30), most, q) // GiB: with a 32k context, under the H200's 140
	}
	a, ok := models.Synthetic(ReleasedShapeName)
	require.True(t, ok)
	require.Nil(t, a.Synthetic[ReleasedShapeName]) // the host does not make it
	require.NotNil(t, a.Deferred[ReleasedShapeName])
	require.NotNil(t, a.Shapes[ReleasedShapeName])
}

// TestStateBytes: the states a session sizes for a longer sequence are the
// QSA layers' KV slots of the config's widths (keys and values, raw
// indexer keys, a block key per Block positions and one more, all f32) at
// the doubled capacity, beside the fixed states as they are.
func TestStateBytes(t *testing.T) {
	c := loadModel(t, filepath.Join(testdata, checkpoints[1])).Config
	c.MTPLayers = 0
	m, err := Synthetic(c, graph.F32, 2)
	require.NoError(t, err)
	s := newSession(t, m, Options{})
	_, err = s.Forward([]int{1, 2, 3}, 0, lm.WantLast)
	require.NoError(t, err)
	slots := func(n int) int64 {
		qsa := 0
		for _, k := range c.Layers {
			if k == QSA {
				qsa++
			}
		}
		return int64(4 * qsa * (n*(2*c.KVHeads*c.HeadDim+c.IndexDim) + (n/c.Block+1)*c.IndexDim))
	}
	now := s.StateBytesAt(3)
	require.Equal(t, lm.DefaultCapacity, now.Capacity)
	require.Equal(t, now.Now, now.At)
	require.Equal(t, now.At, now.Peak)
	require.Equal(t, slots(lm.DefaultCapacity), now.Slots)
	var made int64
	for _, st := range s.States() {
		made += int64(st.Len * st.DType.Size())
	}
	require.Equal(t, made, now.Now)
	at := s.StateBytesAt(1000)
	require.Equal(t, 1024, at.Capacity)
	require.Equal(t, slots(1024), at.Slots)
	require.Equal(t, now.Now-slots(256)+slots(1024), at.At)
	require.Equal(t, at.At+slots(512), at.Peak)
}
