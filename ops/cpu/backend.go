// Package cpu is Reel's reference backend: every op as a kernel in pure Go,
// f32 arithmetic over f32, bf16 and f16 weights, parallel across rows and
// output features with goroutines, gonum BLAS for prompt-sized matmuls.
// Every other backend is tested against it.
package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Buffer is host memory for one value. Exactly one of the typed slices is set
// for f32 and i32 values; 16-bit floats live in Raw. Raw always aliases the
// same bytes.
type Buffer struct {
	dt  graph.DType
	n   int
	F32 []float32
	I32 []int32
	Raw []byte
	// readOnly marks weights loaded from a file mapping.
	readOnly bool
	// decoded holds a 16-bit weight's elements as f32, when Load made them.
	decoded []float32
}

// DType is the element type.
func (b *Buffer) DType() graph.DType { return b.dt }

// Len is the number of elements.
func (b *Buffer) Len() int { return b.n }

// Backend runs kernels on the host.
type Backend struct {
	threads int
	// halfWeights keeps 16-bit weights as stored; otherwise Load decodes them
	// to f32 once (exactly), which makes matmuls several times faster for
	// twice the memory.
	halfWeights bool
	// scratch holds *[]float32 work buffers that kernels borrow while a step
	// runs (decoded weight rows, attention scores), so that bound steps do not
	// each keep their own.
	scratch sync.Pool
}

// New makes a CPU backend using up to threads goroutines per kernel
// (0: GOMAXPROCS).
func New(threads int) *Backend {
	return NewWith(Options{Threads: threads})
}

// Options configure a CPU backend.
type Options struct {
	// Threads is the goroutines a kernel may use (0: GOMAXPROCS).
	Threads int
	// HalfWeights keeps bf16 and f16 weights in their 16 bits and decodes
	// rows as kernels read them. By default Load decodes them to f32 once:
	// exact, twice the memory, and matvecs several times faster.
	HalfWeights bool
}

// NewWith makes a CPU backend with options.
func NewWith(o Options) *Backend {
	if o.Threads <= 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	return &Backend{threads: o.Threads, halfWeights: o.HalfWeights}
}

// Name is "cpu".
func (be *Backend) Name() string { return "cpu" }

// Threads is the goroutines a kernel may use.
func (be *Backend) Threads() int { return be.threads }

// Kernel gives the kernel of an op.
func (be *Backend) Kernel(op string) (ops.Kernel, bool) {
	f, ok := kernels[op]
	if !ok {
		return nil, false
	}
	return ops.KernelFunc(func(n *graph.Node, in, out []ops.Buffer) (ops.Step, error) {
		ib, err := bufs(in)
		if err != nil {
			return nil, fmt.Errorf("input %w", err)
		}
		ob, err := bufs(out)
		if err != nil {
			return nil, fmt.Errorf("output %w", err)
		}
		if err := checkNodeBuffers(n, ib, ob); err != nil {
			return nil, err
		}
		return f(be, n, ib, ob)
	}), true
}

// kernelFunc binds one node on the CPU.
type kernelFunc func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error)

// checkNodeBuffers verifies that a node's buffers fit its values (count,
// dtype, length), so that kernels may index them by the node's shapes.
func checkNodeBuffers(n *graph.Node, in, out []*Buffer) error {
	if len(in) != len(n.Inputs) || len(out) != len(n.Outputs) {
		return fmt.Errorf("%d input and %d output buffers for a node of %d inputs and %d outputs", len(in), len(out), len(n.Inputs), len(n.Outputs))
	}
	for i, v := range n.Inputs {
		if err := ops.CheckBinding(v, in[i]); err != nil {
			return fmt.Errorf("input %d: %w", i, err)
		}
	}
	for i, v := range n.Outputs {
		if err := ops.CheckBinding(v, out[i]); err != nil {
			return fmt.Errorf("output %d: %w", i, err)
		}
	}
	return nil
}

// borrow lends a scratch slice of n float32 (contents undefined); give it
// back with giveBack when the step is done with it.
func (be *Backend) borrow(n int) *[]float32 {
	p, _ := be.scratch.Get().(*[]float32)
	if p == nil {
		p = new([]float32)
	}
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// giveBack returns a slice lent by borrow.
func (be *Backend) giveBack(p *[]float32) { be.scratch.Put(p) }

func bufs(bs []ops.Buffer) ([]*Buffer, error) {
	out := make([]*Buffer, len(bs))
	for i, b := range bs {
		c, ok := b.(*Buffer)
		if !ok || c == nil {
			return nil, fmt.Errorf("%d is a %T, not a cpu buffer", i, b)
		}
		out[i] = c
	}
	return out, nil
}

// wrap makes a buffer over raw bytes (which must stay alive and be aligned
// for the dtype, as arena memory and fresh allocations are).
func wrap(dt graph.DType, n int, raw []byte) *Buffer {
	b := &Buffer{dt: dt, n: n, Raw: raw}
	if n == 0 {
		return b
	}
	switch dt {
	case graph.F32:
		b.F32 = unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n)
	case graph.I32:
		b.I32 = unsafe.Slice((*int32)(unsafe.Pointer(&raw[0])), n)
	}
	return b
}

// simdAlign is the alignment of arenas and copied weights: gonum's SIMD
// dot product handles the elements of its second vector before a 16-byte
// boundary apart, so where that vector lies changes how the sum is
// rounded. The kernels pass activations there (see dot), which lie in
// arenas at offsets the plan fixes: aligned arenas make every run round
// the same way.
const simdAlign = 16

// alignedBytes allocates n bytes aligned to simdAlign (the backing is
// []uint64, 8-aligned, with room to start at the next boundary).
func alignedBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+simdAlign)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 8*len(w))
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (simdAlign - 1))
	return b[off : off+n : off+n]
}

func byteLen(dt graph.DType, n int) (int, error) {
	if dt.Size() == 0 {
		return 0, fmt.Errorf("cpu: invalid dtype %s", dt)
	}
	if n < 0 {
		return 0, fmt.Errorf("cpu: negative length %d", n)
	}
	return n * dt.Size(), nil
}

// Alloc makes a zeroed buffer.
func (be *Backend) Alloc(dt graph.DType, n int) (ops.Buffer, error) {
	nb, err := byteLen(dt, n)
	if err != nil {
		return nil, err
	}
	return wrap(dt, n, alignedBytes(nb)), nil
}

// Arena makes one block of bytes for a plan's temporaries.
func (be *Backend) Arena(bytes int) (ops.Buffer, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("cpu: negative arena size %d", bytes)
	}
	return &Buffer{dt: graph.I32, n: 0, Raw: alignedBytes(bytes)}, nil
}

// View is n elements of dt at byte offset off inside an arena.
func (be *Backend) View(arena ops.Buffer, off int, dt graph.DType, n int) (ops.Buffer, error) {
	a, ok := arena.(*Buffer)
	if !ok {
		return nil, fmt.Errorf("cpu: arena is a %T", arena)
	}
	nb, err := byteLen(dt, n)
	if err != nil {
		return nil, err
	}
	if off < 0 || off%dt.Size() != 0 || off+nb > len(a.Raw) {
		return nil, fmt.Errorf("cpu: view [%d, %d) of an arena of %d bytes", off, off+nb, len(a.Raw))
	}
	return wrap(dt, n, a.Raw[off:off+nb:off+nb]), nil
}

// Load wraps weight bytes, without a copy when they are aligned for dt.
func (be *Backend) Load(dt graph.DType, n int, data []byte) (ops.Buffer, error) {
	nb, err := byteLen(dt, n)
	if err != nil {
		return nil, err
	}
	if len(data) != nb {
		return nil, fmt.Errorf("cpu: load %d %s elements from %d bytes", n, dt, len(data))
	}
	if nb > 0 && uintptr(unsafe.Pointer(&data[0]))%uintptr(dt.Size()) != 0 {
		c := alignedBytes(nb)
		copy(c, data)
		data = c
	}
	b := wrap(dt, n, data)
	b.readOnly = true
	if !be.halfWeights && (dt == graph.BF16 || dt == graph.F16) {
		b.decoded = make([]float32, n)
		dt.DecodeFloats(b.decoded, data)
	}
	return b, nil
}

// Write copies element bytes into dst.
func (be *Backend) Write(dst ops.Buffer, data []byte) error {
	d, ok := dst.(*Buffer)
	if !ok {
		return fmt.Errorf("cpu: write to a %T", dst)
	}
	if d.readOnly {
		return fmt.Errorf("cpu: write to a read-only weight buffer")
	}
	if len(data) > len(d.Raw) {
		return fmt.Errorf("cpu: write %d bytes into a buffer of %d", len(data), len(d.Raw))
	}
	copy(d.Raw, data)
	return nil
}

// Read copies bytes out of src.
func (be *Backend) Read(src ops.Buffer, dst []byte) error {
	s, ok := src.(*Buffer)
	if !ok {
		return fmt.Errorf("cpu: read from a %T", src)
	}
	if len(dst) > len(s.Raw) {
		return fmt.Errorf("cpu: read %d bytes from a buffer of %d", len(dst), len(s.Raw))
	}
	copy(dst, s.Raw)
	return nil
}

// Copy copies n elements from src to dst.
func (be *Backend) Copy(dst, src ops.Buffer, n int) error {
	d, ok1 := dst.(*Buffer)
	s, ok2 := src.(*Buffer)
	if !ok1 || !ok2 {
		return fmt.Errorf("cpu: copy between %T and %T", dst, src)
	}
	if d.dt != s.dt || n > d.n || n > s.n || n < 0 {
		return fmt.Errorf("cpu: copy %d elements from %s[%d] to %s[%d]", n, s.dt, s.n, d.dt, d.n)
	}
	copy(d.Raw[:n*d.dt.Size()], s.Raw[:n*s.dt.Size()])
	return nil
}

// Sync returns at once: CPU steps finish before Run returns.
func (be *Backend) Sync() error { return nil }

// Free drops a buffer (the garbage collector reclaims it).
func (be *Backend) Free(ops.Buffer) error { return nil }

// Close releases nothing: host memory belongs to the garbage collector.
func (be *Backend) Close() error { return nil }

// F32 views a buffer's f32 elements; tests and the executor's callers use it.
func F32(b ops.Buffer) []float32 {
	if c, ok := b.(*Buffer); ok {
		return c.F32
	}
	return nil
}

var _ ops.Backend = (*Backend)(nil)
