package lm

import (
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// Tensor is a weight as a model keeps it until a session uploads it: its
// stored dtype, shape and little-endian bytes (a checkpoint's file mapping,
// or memory the model made at load: a stack, a folded scale).
type Tensor struct {
	DType graph.DType
	Shape []int
	Data  []byte
}

// Len is the number of elements, from the shape (a tensor of a model made
// of shapes only has no data).
func (t Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32 is the elements of a tensor stored in a float type (f32, bf16,
// f16) in f32; another dtype, or data of another length, is an error.
func (t Tensor) Float32() ([]float32, error) {
	if !t.DType.IsFloat() || len(t.Data) != t.Len()*t.DType.Size() {
		return nil, fmt.Errorf("%s%v with %d bytes: not a float tensor with its data", t.DType, t.Shape, len(t.Data))
	}
	v := make([]float32, t.Len())
	decodeFloat(t.DType, v, t.Data)
	return v, nil
}

// F32Tensor keeps f32 values as a Tensor of the given shape.
func F32Tensor(v []float32, shape ...int) Tensor {
	data := make([]byte, 4*len(v))
	half.EncodeF32(data, v)
	return Tensor{DType: graph.F32, Shape: shape, Data: data}
}

// Tensors are a model's weights by graph weight name.
type Tensors map[string]Tensor

// DType is a weight's stored dtype; graphs declare weights with it
// (graph.Invalid for a name the model does not have).
func (ts Tensors) DType(name string) graph.DType {
	if t, ok := ts[name]; ok {
		return t.DType
	}
	return graph.Invalid
}

// Parameters counts the elements of every weight.
func (ts Tensors) Parameters() int {
	n := 0
	for _, t := range ts {
		n += t.Len()
	}
	return n
}

// Bytes sums the stored bytes of the weights keep accepts (every weight
// when keep is nil).
func (ts Tensors) Bytes(keep func(Tensor) bool) int {
	n := 0
	for _, t := range ts {
		if keep == nil || keep(t) {
			n += len(t.Data)
		}
	}
	return n
}

// Upload puts every weight on a backend, in name order, and returns the
// buffers by name, telling progress (when not nil) the bytes done after
// each weight. The CPU keeps a file mapping's bytes without a copy. On an
// error the buffers made so far are freed.
func (ts Tensors) Upload(be ops.Backend, progress Progress) (map[string]ops.Buffer, error) {
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	slices.Sort(names)
	total, done := int64(ts.Bytes(nil)), int64(0)
	progress.report(0, total)
	out := make(map[string]ops.Buffer, len(ts))
	for _, n := range names {
		t := ts[n]
		var buf ops.Buffer
		err := fmt.Errorf("%d bytes of data for %s %v (a model of shapes only has no values)", len(t.Data), t.DType, t.Shape)
		if len(t.Data) == t.Len()*t.DType.Size() {
			buf, err = be.Load(t.DType, t.Len(), t.Data)
		}
		if err != nil {
			for _, b := range out {
				be.Free(b)
			}
			return nil, fmt.Errorf("upload %s: %w", n, err)
		}
		out[n] = buf
		done += int64(len(t.Data))
		progress.report(done, total)
	}
	return out, nil
}

// Loaded are a model's weights as it keeps them: by graph weight name, and
// the checkpoint whose file mappings they may be (nil for weights made
// without one). A model embeds them for its Upload (an Uploader), its
// Weights and its Close.
type Loaded struct {
	Tensors    Tensors
	Checkpoint *weights.Checkpoint
}

// Upload puts every weight on a backend (Tensors.Upload).
func (l *Loaded) Upload(be ops.Backend, progress Progress) (map[string]ops.Buffer, error) {
	return l.Tensors.Upload(be, progress)
}

// Weights are the weights by graph weight name, as loaded: not to be
// changed, and valid until Close.
func (l *Loaded) Weights() Tensors { return l.Tensors }

// Close releases the checkpoint's file mappings; the weights are unusable
// after.
func (l *Loaded) Close() error { return l.Checkpoint.Close() }
