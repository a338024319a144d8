package lm_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

// deferredDecl are declarations of every kind Synthesize makes: bf16
// matrices and a stack of them, an f32 matrix, a conv kernel, a vector.
var deferredDecl = []lm.Declared{
	{Name: "w", DType: graph.BF16, Shape: []int{70, 96}},
	{Name: "experts", DType: graph.BF16, Shape: []int{3, 40, 65}},
	{Name: "f", DType: graph.F32, Shape: []int{9, 33}},
	{Name: "conv", DType: graph.F32, Shape: []int{5, 1, 4}},
	{Name: "norm", DType: graph.F32, Shape: []int{7}},
}

// plain is a backend without LoadRandom: the host makes its synthetic
// weights.
type plain struct{ ops.Backend }

// uploaded uploads ts to be and reads every buffer back, by name.
func uploaded(t *testing.T, be ops.Backend, ts lm.Tensors) map[string][]byte {
	t.Helper()
	bufs, err := ts.Upload(be, nil)
	require.NoError(t, err)
	out := map[string][]byte{}
	for n, b := range bufs {
		raw := make([]byte, b.Len()*b.DType().Size())
		require.NoError(t, be.Read(b, raw))
		out[n] = raw
		require.NoError(t, be.Free(b))
	}
	return out
}

// TestSynthesizeDeferred: deferred weights are Synthesize's of the same
// seed: the vectors made now, the matrices described (no bytes) and made
// at upload, by a RandomLoader or on the host for another backend, byte
// for byte; their Bytes count what they will be.
func TestSynthesizeDeferred(t *testing.T) {
	vec := func(d lm.Declared, j int, u float64) float32 { return float32(u) + float32(j) }
	host, err := lm.Synthesize(deferredDecl, 4, vec, nil)
	require.NoError(t, err)
	dev, err := lm.SynthesizeDeferred(deferredDecl, 4, vec)
	require.NoError(t, err)
	require.Equal(t, host.Bytes(nil), dev.Bytes(nil))
	for _, d := range deferredDecl {
		h, v := host[d.Name], dev[d.Name]
		require.Equal(t, h.DType, v.DType, d.Name)
		require.Equal(t, h.Shape, v.Shape, d.Name)
		if len(d.Shape) == 1 {
			require.Equal(t, h.Data, v.Data, d.Name)
			continue
		}
		require.Nil(t, v.Data, d.Name)
		require.NotNil(t, v.Random, d.Name)
		require.False(t, v.Bare(), d.Name)
	}
	want := uploaded(t, cpu.New(1), host)
	for _, be := range []ops.Backend{cpu.New(0), plain{cpu.New(0)}} {
		got := uploaded(t, be, dev)
		for n := range want {
			require.True(t, bytes.Equal(want[n], got[n]), "%s on %T", n, be)
		}
	}
	_, err = lm.SynthesizeDeferred([]lm.Declared{{Name: "h", DType: graph.F16, Shape: []int{2, 2}}}, 1, nil)
	require.ErrorContains(t, err, "want f32 or bf16")
}

// TestQuantizeDeferred: QuantizeTensors of deferred weights describes the
// codes and scales it makes of Synthesize's, in every format: the same
// dtypes and shapes, and, made at upload, the same bytes.
func TestQuantizeDeferred(t *testing.T) {
	for _, method := range []string{lm.QuantFP8, lm.QuantQ8, lm.QuantQ4} {
		t.Run(method, func(t *testing.T) {
			q, err := lm.DefaultQuant(method)
			require.NoError(t, err)
			host, err := lm.Synthesize(deferredDecl, 8, nil, nil)
			require.NoError(t, err)
			dev, err := lm.SynthesizeDeferred(deferredDecl, 8, nil)
			require.NoError(t, err)
			var qdecl []lm.Declared // the bf16 matrices declared as codes
			for _, d := range deferredDecl {
				if d.DType == graph.BF16 {
					d.DType = q.DType()
					d.Shape = slices.Clone(d.Shape)
					d.Shape[len(d.Shape)-1] = ops.QuantCols(q.DType(), d.Shape[len(d.Shape)-1])
				}
				qdecl = append(qdecl, d)
			}
			hq, err := lm.QuantizeTensors(host, qdecl, q, nil)
			require.NoError(t, err)
			dq, err := lm.QuantizeTensors(dev, qdecl, q, nil)
			require.NoError(t, err)
			require.Len(t, dq, len(hq))
			require.Equal(t, hq.Bytes(nil), dq.Bytes(nil))
			for n, h := range hq {
				require.Equal(t, h.DType, dq[n].DType, n)
				require.Equal(t, h.Shape, dq[n].Shape, n)
			}
			require.NotNil(t, dq[q.ScaleName("experts")].Random)
			want, got := uploaded(t, cpu.New(0), hq), uploaded(t, cpu.New(0), dq)
			for n := range want {
				require.True(t, bytes.Equal(want[n], got[n]), n)
			}
		})
	}
}

// small is a backend with little free memory.
type small struct {
	ops.Backend
	loads int
}

func (s *small) MemInfo() (free, total uint64, err error) { return 1000, 1 << 20, nil }

func (s *small) Load(dt graph.DType, n int, data []byte) (ops.Buffer, error) {
	s.loads++
	return s.Backend.Load(dt, n, data)
}

// TestUploadRefusesWhatDoesNotFit: weights of more bytes than the backend
// has free are refused before anything is made, with both numbers.
func TestUploadRefusesWhatDoesNotFit(t *testing.T) {
	dev, err := lm.SynthesizeDeferred(deferredDecl, 1, nil)
	require.NoError(t, err)
	be := &small{Backend: cpu.New(1)}
	_, err = dev.Upload(be, nil)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "GiB are free") && strings.Contains(err.Error(), "need"), err.Error())
	require.Zero(t, be.loads)
	fits := lm.Tensors{"norm": lm.F32Tensor([]float32{1, 2, 3}, 3)}
	bufs, err := fits.Upload(be, nil)
	require.NoError(t, err)
	require.Len(t, bufs, 1)
}
