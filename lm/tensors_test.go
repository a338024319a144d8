package lm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

func TestTensors(t *testing.T) {
	bf := make([]byte, 2*6)
	half.EncodeBF16(bf, []float32{1, 2, 3, 4, 5, 6})
	ts := Tensors{
		"w":     {DType: graph.BF16, Shape: []int{2, 3}, Data: bf},
		"scale": F32Tensor([]float32{0.5, -1}, 2),
	}
	require.Equal(t, graph.BF16, ts.DType("w"))
	require.Equal(t, graph.Invalid, ts.DType("nope"))
	require.Equal(t, 8, ts.Parameters())
	require.Equal(t, 12+8, ts.Bytes(nil))
	require.Equal(t, 12, ts.Bytes(func(x Tensor) bool { return len(x.Shape) == 2 }))

	be := cpu.New(1)
	bufs, err := ts.Upload(be, nil)
	require.NoError(t, err)
	require.Len(t, bufs, 2)
	require.Equal(t, []float32{0.5, -1}, cpu.F32(bufs["scale"]))
	require.Equal(t, 6, bufs["w"].Len())
}

// failingLoad is a CPU backend whose second Load fails and which counts frees.
type failingLoad struct {
	*cpu.Backend
	loads, frees int
}

func (f *failingLoad) Load(dt graph.DType, n int, data []byte) (ops.Buffer, error) {
	f.loads++
	if f.loads == 2 {
		return nil, errors.New("out of memory")
	}
	return f.Backend.Load(dt, n, data)
}

func (f *failingLoad) Free(b ops.Buffer) error {
	f.frees++
	return f.Backend.Free(b)
}

func TestTensorsUploadFreesOnError(t *testing.T) {
	ts := Tensors{"a": F32Tensor([]float32{1}, 1), "b": F32Tensor([]float32{2}, 1), "c": F32Tensor([]float32{3}, 1)}
	be := &failingLoad{Backend: cpu.New(1)}
	_, err := ts.Upload(be, nil)
	require.ErrorContains(t, err, "upload b: out of memory")
	require.Equal(t, 1, be.frees, "the buffer made before the failure is freed")
}

// TestTensorsWithoutData: a tensor of a model of shapes only counts its
// shape's elements and refuses to upload, saying so.
func TestTensorsWithoutData(t *testing.T) {
	ts := Tensors{"w": {DType: graph.BF16, Shape: []int{2, 3}}}
	require.Equal(t, 6, ts.Parameters())
	_, err := ts.Upload(cpu.New(1), nil)
	require.ErrorContains(t, err, "upload w: 0 bytes of data for bf16 [2 3] (a model of shapes only has no values)")
}

// TestLoaded: a model that embeds Loaded uploads and gives its weights,
// and closes without a checkpoint (weights made without one).
func TestLoaded(t *testing.T) {
	var m struct{ Loaded }
	m.Tensors = Tensors{"scale": F32Tensor([]float32{0.5, -1}, 2)}
	var _ Uploader = &m
	bufs, err := m.Upload(cpu.New(1), nil)
	require.NoError(t, err)
	require.Equal(t, []float32{0.5, -1}, cpu.F32(bufs["scale"]))
	require.Equal(t, m.Tensors, m.Weights())
	require.NoError(t, m.Close())
}
