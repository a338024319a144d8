package lm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"unsafe"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// Uploader is a loaded model as a Core sees it: something that puts its
// weights on a backend and gives the buffers by graph weight name.
type Uploader interface {
	// Upload puts every weight on be, telling progress (when not nil)
	// the bytes done.
	Upload(be ops.Backend, progress Progress) (map[string]ops.Buffer, error)
}

// Options configure a Core; they are the fields every model's session
// options share.
type Options struct {
	// Backend runs the plans; nil means a CPU backend on every core, which
	// the Core owns and closes.
	Backend ops.Backend
	// Logger receives the engine's debug lines; nil: discard.
	Logger *slog.Logger
	// Planner sets the planner's passes; nil: planner.DefaultOptions().
	Planner *planner.Options
	// Progress is told the bytes of weights uploaded (gigabytes to a card,
	// or decoded from bf16 on the CPU, take seconds); nil: nothing.
	Progress Progress
}

// Core is the part of a session every architecture shares: the backend,
// the model's weights on it, the call record, the input buffers (one per
// input name and length, reused by every call of that length) and the
// capture engine. It is not safe for concurrent use.
type Core struct {
	be      ops.Backend
	own     bool
	log     *slog.Logger
	eng     *capture.Engine
	weights map[string]ops.Buffer
	call    ops.Buffer
	inputs  map[inputKey]ops.Buffer
	// logits is the memory ReadLogits reuses.
	logits []float32
}

// inputKey names an input buffer: the graph input's name and its elements.
type inputKey struct {
	name string
	n    int
}

// Open uploads m's weights to the backend o names (a new CPU one when nil),
// allocates the call record and starts the capture engine. On an error
// everything it made is released again.
func Open(m Uploader, o Options) (*Core, error) {
	if m == nil {
		return nil, fmt.Errorf("open a session on a nil model")
	}
	c := &Core{be: o.Backend, log: o.Logger, inputs: map[inputKey]ops.Buffer{}}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.be == nil {
		c.be, c.own = cpu.New(0), true
	}
	var err error
	if c.weights, err = m.Upload(c.be, o.Progress); err != nil {
		c.Close()
		return nil, err
	}
	if c.call, err = c.be.Alloc(graph.I32, ops.CallLen); err != nil {
		c.Close()
		return nil, err
	}
	po := planner.DefaultOptions()
	if o.Planner != nil {
		po = *o.Planner
	}
	c.eng = capture.NewEngine(c.be, po, c.log)
	return c, nil
}

// Backend is the backend the core runs on.
func (c *Core) Backend() ops.Backend { return c.be }

// Logger is the logger of the session's debug lines (never nil).
func (c *Core) Logger() *slog.Logger { return c.log }

// Closed says whether the core is closed (or was never opened).
func (c *Core) Closed() bool { return c == nil || c.eng == nil }

// Stats are the plan cache's counters: plans built, recordings made,
// updated and replayed (zero once closed).
func (c *Core) Stats() capture.Stats {
	if c.Closed() {
		return capture.Stats{}
	}
	return c.eng.Stats()
}

// Planned gives the plan the engine built for a key, for dumps; false
// before the key has run or once the core is closed.
func (c *Core) Planned(k capture.Key) (*planner.Planned, planner.Report, bool) {
	if c.Closed() {
		return nil, planner.Report{}, false
	}
	return c.eng.Planned(k)
}

// Profile times the launches of key's plan op by op (see
// capture.Engine.Profile).
func (c *Core) Profile(k capture.Key) ([]capture.OpTime, error) {
	if c.Closed() {
		return nil, fmt.Errorf("profile %s: the session is closed", k)
	}
	return c.eng.Profile(k)
}

// Ablate measures what each op of key's plan costs inside a replay, with
// opts' prologue in front of every recording it times (see
// capture.Engine.Ablate); the states the key binds are garbage afterwards.
func (c *Core) Ablate(k capture.Key, reps int, opts capture.AblateOptions) (capture.Ablation, error) {
	if c.Closed() {
		return capture.Ablation{}, fmt.Errorf("ablate %s: the session is closed", k)
	}
	return c.eng.Ablate(k, reps, opts)
}

// Weight is the uploaded buffer of the weight of name.
func (c *Core) Weight(name string) (ops.Buffer, bool) {
	b, ok := c.weights[name]
	return b, ok
}

// Bind starts the binding of a run: the call record, with room for extra
// more buffers (the model's states and inputs); Run binds the weights.
func (c *Core) Bind(extra int) capture.Binding {
	bind := make(capture.Binding, extra+1)
	bind[ops.CallName] = c.call
	return bind
}

// Run runs key's plan (built by build on the key's first run) on the
// buffers of bind and the weights; see capture.Engine.Run.
func (c *Core) Run(k capture.Key, build func() (*graph.Graph, error), bind capture.Binding) ([]ops.Buffer, error) {
	if c.Closed() {
		return nil, fmt.Errorf("run %s: the session is closed", k)
	}
	return c.eng.Run(k, build, bind, c.weights)
}

// WriteCall writes the call record of a run: the position of its first row
// and its rows (every other word zero).
func (c *Core) WriteCall(pos, rows int) error {
	if pos < 0 || pos > math.MaxInt32 || rows < 1 || rows > math.MaxInt32 {
		return fmt.Errorf("call record: position %d, %d rows: want a position from 0 and at least one row, in i32", pos, rows)
	}
	if c.call == nil {
		return fmt.Errorf("call record: the session is closed")
	}
	rec := make([]byte, 4*ops.CallLen)
	binary.LittleEndian.PutUint32(rec[4*ops.CallPos:], uint32(pos))
	binary.LittleEndian.PutUint32(rec[4*ops.CallRows:], uint32(rows))
	return c.be.Write(c.call, rec)
}

// Input gives the input buffer of name for n elements of dt: allocated on
// the first use of (name, n) and reused after, so a recorded plan finds the
// same buffer at every call of that size.
func (c *Core) Input(name string, dt graph.DType, n int) (ops.Buffer, error) {
	if n < 1 {
		return nil, fmt.Errorf("input %s of %d elements", name, n)
	}
	if c.inputs == nil {
		return nil, fmt.Errorf("input %s: the session is closed", name)
	}
	k := inputKey{name, n}
	if b, ok := c.inputs[k]; ok {
		if b.DType() != dt {
			return nil, fmt.Errorf("input %s: it holds %s, not %s", name, b.DType(), dt)
		}
		return b, nil
	}
	b, err := c.be.Alloc(dt, n)
	if err != nil {
		return nil, err
	}
	c.inputs[k] = b
	return b, nil
}

// WriteIDs writes token ids into the i32 input of name for len(ids) rows
// and returns that buffer.
func (c *Core) WriteIDs(name string, ids []int) (ops.Buffer, error) {
	raw := make([]byte, 4*len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("input %s: row %d: id %d is not a non-negative i32", name, i, id)
		}
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(id))
	}
	b, err := c.Input(name, graph.I32, len(ids))
	if err != nil {
		return nil, err
	}
	if err := c.be.Write(b, raw); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteF32 writes x into the f32 input of name for len(x) elements and
// returns that buffer.
func (c *Core) WriteF32(name string, x []float32) (ops.Buffer, error) {
	b, err := c.Input(name, graph.F32, len(x))
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	if err := c.be.Write(b, raw); err != nil {
		return nil, err
	}
	return b, nil
}

// ReadF32 reads an f32 buffer (a plan's output, a state) back to the host.
func (c *Core) ReadF32(b ops.Buffer) ([]float32, error) { return c.ReadF32Into(b, nil) }

// ReadF32Into is ReadF32 into dst's memory when it has room (a decode
// loop's logits, read every token: a fresh 512 KB slice a token costs its
// zeroing and page faults), else into a new slice.
func (c *Core) ReadF32Into(b ops.Buffer, dst []float32) ([]float32, error) {
	if b == nil {
		return nil, fmt.Errorf("read of a nil buffer")
	}
	return c.ReadF32N(b, b.Len(), dst)
}

// ReadF32N is ReadF32Into of the first n values of b (the rows in use of a
// plan built for a bucket of rows). When the read's error wraps
// ops.ErrNotFinite (a device's check of them found a NaN or an
// infinity), the values come with it, for the caller to name the one.
func (c *Core) ReadF32N(b ops.Buffer, n int, dst []float32) ([]float32, error) {
	if b == nil {
		return nil, fmt.Errorf("read of a nil buffer")
	}
	if b.DType() != graph.F32 {
		return nil, fmt.Errorf("read of a %s buffer as f32", b.DType())
	}
	if n < 0 || n > b.Len() {
		return nil, fmt.Errorf("read of %d values of a buffer of %d", n, b.Len())
	}
	out := dst[:0]
	if cap(dst) < n {
		out = make([]float32, n)
	}
	out = out[:n]
	if len(out) == 0 {
		return out, nil
	}
	if nativeLittleEndian {
		// The bytes are the floats: read straight into them (a decode
		// token's logits are 512 KB; converting cost more than the copy).
		err := c.be.Read(b, unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out)))
		if err != nil && !errors.Is(err, ops.ErrNotFinite) {
			return nil, err
		}
		return out, err
	}
	raw := make([]byte, 4*len(out))
	err := c.be.Read(b, raw)
	if err != nil && !errors.Is(err, ops.ErrNotFinite) {
		return nil, err
	}
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, err
}

// ReadLogits reads the first n values of a plan's logits: with reuse, into
// memory the core keeps and reads the next reusing call into too (a
// session's ReuseLogits: the logits are valid until then), else into a new
// slice.
func (c *Core) ReadLogits(b ops.Buffer, n int, reuse bool) ([]float32, error) {
	if !reuse {
		return c.ReadF32N(b, n, nil)
	}
	out, err := c.ReadF32N(b, n, c.logits)
	if out != nil {
		c.logits = out[:cap(out)]
	}
	return out, err
}

// nativeLittleEndian says whether the host stores a float32 as the
// little-endian bytes the backends read and write.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Close closes the engine first (its recordings name the buffers), then
// frees extra (the model's own buffers; nil ones are skipped), the inputs,
// the weights and the call record, and last closes the backend when the
// core made it. Closing twice does nothing more.
func (c *Core) Close(extra ...ops.Buffer) error {
	if c == nil {
		return nil
	}
	if c.eng != nil {
		c.eng.Close()
		c.eng = nil
	}
	free := func(b ops.Buffer) {
		if b != nil {
			c.be.Free(b)
		}
	}
	for _, b := range extra {
		free(b)
	}
	for _, b := range c.inputs {
		free(b)
	}
	for _, b := range c.weights {
		free(b)
	}
	free(c.call)
	c.inputs, c.weights, c.call = nil, nil, nil
	if c.own && c.be != nil {
		c.own = false
		return c.be.Close()
	}
	return nil
}
