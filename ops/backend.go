package ops

import (
	"errors"

	"github.com/reel-runtime/reel/graph"
)

// Buffer is a backend's memory for one value: a standalone allocation, a view
// into an arena, or a weight's bytes.
type Buffer interface {
	// DType is the element type the buffer holds.
	DType() graph.DType
	// Len is the number of elements; for a State value with a Dyn extent it
	// fixes that extent (the capacity).
	Len() int
}

// Step is one bound launch: a kernel with its buffers fixed. On the CPU it
// computes; on CUDA it enqueues on the backend's stream (and so can be
// recorded into a CUDA graph). Values that change per run (position, rows)
// are read from the call record input, never baked into a step.
type Step interface {
	Run() error
}

// StepFunc adapts a function to Step.
type StepFunc func() error

// Run calls f.
func (f StepFunc) Run() error { return f() }

// Kernel computes one op on one backend.
type Kernel interface {
	// Bind checks the node's buffers and returns the step that runs it. Bind
	// does the work that does not depend on the data (choosing a variant,
	// computing launch shapes) so that Run is cheap.
	Bind(n *graph.Node, in, out []Buffer) (Step, error)
}

// KernelFunc adapts a function to Kernel.
type KernelFunc func(n *graph.Node, in, out []Buffer) (Step, error)

// Bind calls f.
func (f KernelFunc) Bind(n *graph.Node, in, out []Buffer) (Step, error) { return f(n, in, out) }

// Backend is a place plans run: its kernels and its memory.
type Backend interface {
	// Name is the backend's short name ("cpu", "cuda").
	Name() string
	// Kernel gives the kernel for an op, or false when the backend has none.
	Kernel(op string) (Kernel, bool)
	// Alloc makes a zeroed buffer of n elements.
	Alloc(dt graph.DType, n int) (Buffer, error)
	// Arena makes one block of memory of the given bytes for a plan's temporaries.
	Arena(bytes int) (Buffer, error)
	// View is n elements of dtype dt at byte offset off inside an arena.
	View(arena Buffer, off int, dt graph.DType, n int) (Buffer, error)
	// Load makes a read-only buffer holding data, little-endian elements of dt
	// (a weight); the CPU may keep data itself, so the caller must not change it.
	Load(dt graph.DType, n int, data []byte) (Buffer, error)
	// Write copies little-endian element bytes into a buffer from its start.
	Write(dst Buffer, data []byte) error
	// Read copies a buffer's first len(dst) bytes out.
	Read(src Buffer, dst []byte) error
	// Copy copies the first n elements of src into dst (same dtype).
	Copy(dst, src Buffer, n int) error
	// Sync waits until every step enqueued so far has finished.
	Sync() error
	// Free releases a buffer from Alloc, Arena or Load; views need no Free.
	Free(b Buffer) error
	// Close releases everything the backend holds.
	Close() error
}

// The call record: an i32 input every graph that depends on the position
// reads, written before each run. Kernels read per-run values from it, so one
// bound (or recorded) plan serves every position.
const (
	// CallPos is the position of the run's first row.
	CallPos = iota
	// CallRows is the number of rows the run computes.
	CallRows
	// CallLen is the record's length in i32 words.
	CallLen = 8
)

// CallName is the input name of the call record.
const CallName = "call"

// Call declares the call record input on b.
func Call(b *graph.Builder) *graph.Value {
	return b.Input(CallName, graph.I32, CallLen)
}

// FiniteChecker is implemented by a backend that checks f32 values for
// NaNs and infinities where they are (a kernel on the card), so that a
// reader of logits does not scan them on the host while the device idles.
type FiniteChecker interface {
	// CheckFinite queues a check of the first n values of the f32 buffer b
	// after the work queued so far; the next Read returns an error wrapping
	// ErrNotFinite when one of them is a NaN or an infinity (which one is
	// the reader's to find in what it read).
	CheckFinite(b Buffer, n int) error
}

// ErrNotFinite is wrapped by the error of a Read after a FiniteChecker's
// check found a NaN or an infinity.
var ErrNotFinite = errors.New("a checked value is a NaN or an infinity")

// Recording is a plan's steps recorded by a backend into an executable of
// its own (a CUDA graph).
type Recording interface {
	// Replay runs the recorded steps (enqueues them, on a device).
	Replay() error
	// Update replaces the recording's steps by steps of the same plan bound
	// to other buffers (cuGraphExecUpdate); an error means record anew.
	Update(steps []Step) error
	// Close releases the recording.
	Close() error
}

// Recorder is implemented by a backend that records natively: RecordPlan
// captures the steps without running them.
type Recorder interface {
	RecordPlan(steps []Step) (Recording, error)
}

// MemoryReporter is a backend that says how much of its memory is free (a
// GPU: cuMemGetInfo), so that weights that cannot fit are refused before
// they are uploaded.
type MemoryReporter interface {
	MemInfo() (free, total uint64, err error)
}
