package lm

import (
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/weights"
)

// Tensor is a weight as a model keeps it until a session uploads it: its
// stored dtype, shape and little-endian bytes (a checkpoint's file mapping,
// or memory the model made at load: a stack, a folded scale), or, for a
// synthetic weight made where it is uploaded, no bytes and the Random
// that describes them.
type Tensor struct {
	DType graph.DType
	Shape []int
	Data  []byte
	// Random, when not nil, describes the weight's bytes, which Upload has
	// the backend make (ops.RandomLoader; on the host for another
	// backend): Data is nil, and DType and Shape are Random's.
	Random *ops.Random
}

// Bare says whether the tensor has neither bytes nor a Random to make
// them (a model of shapes only).
func (t Tensor) Bare() bool { return t.Data == nil && t.Random == nil && t.Len() > 0 }

// Size is the tensor's bytes once made: its data's, or its Random's.
func (t Tensor) Size() int {
	if t.Random != nil {
		return t.Len() * t.DType.Size()
	}
	return len(t.Data)
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
	t.DType.DecodeFloats(v, t.Data)
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
// when keep is nil); a weight made at upload counts the bytes it will
// have.
func (ts Tensors) Bytes(keep func(Tensor) bool) int {
	n := 0
	for _, t := range ts {
		if keep == nil || keep(t) {
			n += t.Size()
		}
	}
	return n
}

// Upload puts every weight on a backend, in name order, and returns the
// buffers by name, telling progress (when not nil) the bytes done after
// each weight. The CPU keeps a file mapping's bytes without a copy. A
// weight with a Random is made by the backend (ops.RandomLoader), or on
// the host and loaded. A backend that says its free memory
// (ops.MemoryReporter) is asked first: weights of more bytes than it has free
// are an error giving both, before anything is allocated. On an error the
// buffers made so far are freed.
func (ts Tensors) Upload(be ops.Backend, progress Progress) (map[string]ops.Buffer, error) {
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	slices.Sort(names)
	total, done := int64(ts.Bytes(nil)), int64(0)
	if err := checkFree(be, total); err != nil {
		return nil, err
	}
	progress.report(0, total)
	out := make(map[string]ops.Buffer, len(ts))
	for _, n := range names {
		t := ts[n]
		buf, err := upload(be, t)
		if err != nil {
			for _, b := range out {
				be.Free(b)
			}
			return nil, fmt.Errorf("upload %s: %w", n, err)
		}
		out[n] = buf
		done += int64(t.Size())
		progress.report(done, total)
	}
	return out, nil
}

// upload puts one weight on a backend: its bytes, or those its Random
// describes.
func upload(be ops.Backend, t Tensor) (ops.Buffer, error) {
	if r := t.Random; r != nil {
		if r.DType() != t.DType || !slices.Equal(r.MadeShape(), t.Shape) {
			return nil, fmt.Errorf("a random %s%v for a weight of %s%v", r.DType(), r.MadeShape(), t.DType, t.Shape)
		}
		if rl, ok := be.(ops.RandomLoader); ok {
			return rl.LoadRandom(*r)
		}
		data, err := cpu.Random(*r, 0)
		if err != nil {
			return nil, err
		}
		return be.Load(t.DType, t.Len(), data)
	}
	if len(t.Data) != t.Len()*t.DType.Size() {
		return nil, fmt.Errorf("%d bytes of data for %s %v (a model of shapes only has no values)", len(t.Data), t.DType, t.Shape)
	}
	return be.Load(t.DType, t.Len(), t.Data)
}

// checkFree refuses weights of need bytes that a backend reporting its
// memory has not free.
func checkFree(be ops.Backend, need int64) error {
	mr, ok := be.(ops.MemoryReporter)
	if !ok {
		return nil
	}
	free, total, err := mr.MemInfo()
	if err != nil {
		return fmt.Errorf("upload: free memory: %w", err)
	}
	if need > int64(free) {
		return fmt.Errorf("upload: the weights need %.2f GiB of %s memory and %.2f GiB are free (of %.2f GiB)",
			float64(need)/(1<<30), be.Name(), float64(free)/(1<<30), float64(total)/(1<<30))
	}
	return nil
}

// Loaded are a model's weights as it keeps them: by graph weight name,
// the checkpoint whose file mappings they may be (nil for weights made
// without one), and the format of the matrices stored quantized. A model
// embeds them for its Upload (an Uploader), its Weights, its Close, the
// Stored its graphs are built with and its Quantize.
type Loaded struct {
	Tensors    Tensors
	Checkpoint *weights.Checkpoint
	Quant      Quant
}

// Stored is how the weights are stored, for the graphs that read them:
// each one's dtype and the format of the quantized ones. Without weights
// (a model of shapes only, nil Tensors) the matrices are bf16, those a
// load would quantize in Quant's format declared so.
func (l *Loaded) Stored() Stored {
	if l.Tensors == nil {
		return Stored{Quant: l.Quant, QuantizeFloat: true}
	}
	return Stored{DType: l.Tensors.DType, Quant: l.Quant}
}

// Quantize is a model's Quantize (models.Quantizer): its weights with the
// matrices it holds in a float type quantized in the format of quant
// ("fp8", "q8", "q4"), as a load with LoadOptions.Quant makes them, the
// graphs declaring them as declare says of a Stored. ok is false when
// there is nothing to do (quant is "" or the weights' format); another
// format is an error naming the flag (QuantizeTo). l is spent when ok:
// the weights returned hold its checkpoint's mappings. Weights of shapes
// only give the shapes of the format's (nil Tensors stay nil).
func (l *Loaded) Quantize(quant string, declare func(Stored) ([]Declared, error), progress Progress) (out Loaded, ok bool, err error) {
	q, ok, err := QuantizeTo(l.Quant, quant, "model")
	if err != nil || !ok {
		return Loaded{}, false, err
	}
	out = Loaded{Checkpoint: l.Checkpoint, Quant: q}
	if l.Tensors != nil {
		decl, err := declare(Stored{DType: l.Tensors.DType, Quant: q, QuantizeFloat: true})
		if err != nil {
			return Loaded{}, false, err
		}
		if l.Tensors.shapesOnly() {
			out.Tensors = ShapesOf(decl)
		} else if out.Tensors, err = QuantizeTensors(l.Tensors, decl, q, progress); err != nil {
			return Loaded{}, false, err
		}
	}
	*l = Loaded{}
	return out, true, nil
}

// Parameters counts the weights' elements, a quantized matrix's rather
// than its codes' and scales': those of the declarations declare gives of
// the weights in bf16, when some are quantized.
func (l *Loaded) Parameters(declare func(Stored) ([]Declared, error)) int {
	if l.Quant.Method == "" {
		return l.Tensors.Parameters()
	}
	decl, err := declare(Stored{})
	if err != nil {
		return l.Tensors.Parameters()
	}
	return Parameters(decl)
}

// ShapesOf are weights of the declared dtypes and shapes without data: a
// model of shapes only, for building, planning and dumping its graphs
// (uploading them fails).
func ShapesOf(decl []Declared) Tensors {
	ts := Tensors{}
	for _, d := range decl {
		ts[d.Name] = Tensor{DType: d.DType, Shape: d.Shape}
	}
	return ts
}

// shapesOnly says whether ts are weights without values (ShapesOf).
func (ts Tensors) shapesOnly() bool {
	for _, t := range ts {
		if t.Bare() {
			return true
		}
	}
	return false
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
