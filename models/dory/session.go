package dory

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// Rewind is how many rows a session can roll back: a sliding layer's ring
// keeps its window, a chunk, and this many rows more.
const Rewind = 448

// DefaultChunk is the rows of a prompt chunk.
const DefaultChunk = lm.DefaultChunk

// GateKind says how a token may leave the loop early.
type GateKind int

// The early-exit gates.
const (
	// NoGate runs every loop for every token.
	NoGate GateKind = iota
	// GateConf reads out after the first pass and stops when the top
	// probability reaches the threshold.
	GateConf
	// GateRecon asks the checkpoint's router after the first pass.
	GateRecon
)

// Gate is an early-exit policy for one-row calls with two loops.
type Gate struct {
	Kind      GateKind
	Threshold float32
}

// ParseGate reads "none", "conf:THRESHOLD" or "recon".
func ParseGate(s string) (Gate, error) {
	switch {
	case s == "" || s == "none":
		return Gate{}, nil
	case s == "recon":
		return Gate{Kind: GateRecon}, nil
	case strings.HasPrefix(s, "conf:"):
		t, err := strconv.ParseFloat(strings.TrimPrefix(s, "conf:"), 32)
		if err != nil || math.IsNaN(t) {
			return Gate{}, fmt.Errorf("gate %q: the threshold must be a number", s)
		}
		return Gate{Kind: GateConf, Threshold: float32(t)}, nil
	}
	return Gate{}, fmt.Errorf("gate %q: want none, conf:THRESHOLD or recon", s)
}

// Options configure a Session.
type Options struct {
	// Backend runs the plans; nil means a CPU backend on every core.
	Backend ops.Backend
	// KV overrides the checkpoint's recurrent_kv_cache_mode when set.
	KV *KVMode
	// Chunk is the most rows one plan runs (a prompt's chunk); 0: DefaultChunk.
	Chunk int
	// PromptLoops caps the loops of chunks whose logits nobody reads, on the
	// last_loop cache (their rows are all that stays of them); 0: no cap.
	PromptLoops int
	// Gate is the early-exit policy; it needs the last_loop cache.
	Gate Gate
	// Capacity is the first row capacity of a full-attention slot; 0: 256.
	Capacity int
	// Logger receives debug lines (slot growth, gate decisions); nil: discard.
	Logger *slog.Logger
	// Planner sets the planner's passes; nil: planner.DefaultOptions()
	// (fusion on unless REEL_FUSE=0).
	Planner *planner.Options
	// ReuseLogits makes the logits a Forward of at most Chunk ids returns
	// live in memory the session reuses: valid until its next Forward. A
	// decode loop that samples and moves on saves a fresh slice a token
	// (131072 logits are 512 KB, and a new slice costs its zeroing and
	// page faults: about 0.1 ms a token on the H200's host).
	ReuseLogits bool
}

// slot is one KV slot's two buffers.
type slot struct {
	k, v ops.Buffer
	rows int // capacity in rows
	ring bool
}

// Session runs forwards of one sequence, keeping its KV cache between calls.
// It is not safe for concurrent use.
type Session struct {
	m    *Model
	c    Config
	opts Options
	core *lm.Core
	be   ops.Backend  // core's backend
	log  *slog.Logger // core's logger

	slots map[string]*slot
	carry [2]ops.Buffer
	// reuse says the running Forward may read its logits into the core's
	// reused memory (ReuseLogits).
	reuse bool
	// filled is, per per_loop recurrent slot index, the position up to which
	// it holds rows: a call may only use slots that reach its first row.
	filled []int
	pos    int
	exits  exitRate
	// GateTokens counts tokens the gate decided on; GateOne those that took one pass.
	GateTokens, GateOne int
}

// NewSession prepares a session on the model's weights.
func NewSession(m *Model, opts Options) (*Session, error) {
	if m == nil {
		return nil, fmt.Errorf("dory: new session on a nil model")
	}
	c := m.Config
	if opts.KV != nil {
		c.KV = *opts.KV
	}
	var err error
	if opts.Chunk, err = lm.ChunkRows(opts.Chunk); err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	if opts.Capacity == 0 {
		opts.Capacity = 256
	}
	if opts.Gate.Kind != NoGate && c.KV != LastLoop {
		return nil, fmt.Errorf("dory: the early-exit gate needs the last_loop KV cache (a per_loop cache would miss the second loop's rows of tokens that exit)")
	}
	if opts.Gate.Kind == GateRecon && m.Router == nil {
		return nil, fmt.Errorf("dory: gate recon: the checkpoint carries no router (dory.router.* tensors)")
	}
	core, err := lm.Open(m, lm.Options{Backend: opts.Backend, Logger: opts.Logger, Planner: opts.Planner})
	if err != nil {
		return nil, err
	}
	s := &Session{m: m, c: c, opts: opts, core: core, be: core.Backend(), log: core.Logger(), slots: map[string]*slot{}, exits: newExitRate()}
	for i := range s.carry {
		if s.carry[i], err = s.be.Alloc(graph.F32, c.Hidden); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Stats are the plan cache's counters: plans built, recordings made,
// updated and replayed.
func (s *Session) Stats() capture.Stats { return s.core.Stats() }

// CaptureKey is the capture cache's key of a stage key.
func CaptureKey(k Key) capture.Key { return k }

// Profile times the launches of key's plan op by op (see capture.Engine.Profile).
func (s *Session) Profile(k Key) ([]capture.OpTime, error) {
	return s.core.Profile(CaptureKey(k))
}

// Planned gives the plan the session built for a key, for dumps.
func (s *Session) Planned(k Key) (*planner.Planned, planner.Report, bool) {
	return s.core.Planned(CaptureKey(k))
}

// Config is the config the session runs (with its KV mode).
func (s *Session) Config() Config { return s.c }

// Pos is the number of positions in the cache: the next call's pos0.
func (s *Session) Pos() int { return s.pos }

// Backend is the backend the session runs on.
func (s *Session) Backend() ops.Backend { return s.be }

// Close frees the session's buffers.
func (s *Session) Close() error {
	extra := []ops.Buffer{s.carry[0], s.carry[1]}
	for _, sl := range s.slots {
		extra = append(extra, sl.k, sl.v)
	}
	s.slots, s.carry = nil, [2]ops.Buffer{}
	return s.core.Close(extra...)
}

// Reset empties the cache.
func (s *Session) Reset() {
	s.pos = 0
	s.filled = nil
}

// Rollback forgets the positions from n on, so the next call starts at n.
// A sliding layer's ring keeps Rewind rows behind its window; going back
// further is an error and changes nothing.
func (s *Session) Rollback(n int) error {
	if n < 0 || n > s.pos {
		return fmt.Errorf("dory: rollback to %d: the cache holds positions 0 to %d", n, s.pos)
	}
	if s.pos-n > Rewind && strings.ContainsRune(s.c.Pattern, 'S') {
		return fmt.Errorf("dory: rollback of %d rows: sliding layers keep only %d rows behind their window", s.pos-n, Rewind)
	}
	s.pos = n
	for i := range s.filled {
		s.filled[i] = min(s.filled[i], n)
	}
	return nil
}

// Forward runs ids at positions pos0, pos0+1, ... through loops passes of the
// recurrent block and returns the wanted logits as a [rows, vocab] f32 tensor
// (nil for WantNone). pos0 must equal Pos(). On an error the cache is as
// before the call.
func (s *Session) Forward(ids []int, pos0, loops int, want Want) (*tensor.Dense, error) {
	if err := s.check(ids, pos0, loops, want); err != nil {
		return nil, err
	}
	// One chunk's logits are the Forward's; with more, RunChunks appends
	// them, so each must be memory of its own.
	s.reuse = s.opts.ReuseLogits && len(ids) <= s.opts.Chunk
	d, err := lm.RunChunks(ids, pos0, s.opts.Chunk, s.c.Vocab, want, func(ids []int, pos int, w Want) ([]float32, error) {
		lc := loops
		if w == WantNone && s.opts.PromptLoops > 0 && s.c.KV == LastLoop {
			lc = min(loops, s.opts.PromptLoops)
		}
		return s.chunk(ids, pos, lc, w)
	})
	if err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	s.pos = pos0 + len(ids)
	return d, nil
}

func (s *Session) check(ids []int, pos0, loops int, want Want) error {
	if s.core.Closed() {
		return fmt.Errorf("dory: the session is closed")
	}
	if err := lm.CheckTokens(ids, pos0, s.pos, s.c.Vocab); err != nil {
		return fmt.Errorf("dory: %w", err)
	}
	if loops < 1 || loops > MaxLoops {
		return fmt.Errorf("dory: %d loops: want 1 to %d", loops, MaxLoops)
	}
	if err := want.Check(); err != nil {
		return fmt.Errorf("dory: %w", err)
	}
	if s.c.KV == PerLoop {
		for i := 0; i < loops; i++ {
			if f := s.filledAt(i); f != pos0 {
				return fmt.Errorf("dory: loop %d's per_loop cache holds positions up to %d, not %d: a per_loop cache needs the same loops for every call (use last_loop to vary them)", i, f, pos0)
			}
		}
	}
	return nil
}

func (s *Session) filledAt(i int) int {
	if i < len(s.filled) {
		return s.filled[i]
	}
	if s.pos == 0 {
		return 0
	}
	return -1
}

// chunk runs up to Chunk rows: one plan, or the gate's stages for one row.
func (s *Session) chunk(ids []int, pos, loops int, want Want) ([]float32, error) {
	rows := len(ids)
	if err := s.ensureSlots(pos+rows, loops); err != nil {
		return nil, err
	}
	if _, err := s.core.WriteIDs(InputIDs, ids); err != nil {
		return nil, err
	}
	if err := s.core.WriteCall(pos, rows); err != nil {
		return nil, err
	}
	var out []float32
	var err error
	if s.opts.Gate.Kind != NoGate && rows == 1 && want != WantNone && loops == 2 {
		out, err = s.gated(want)
	} else {
		out, err = s.stage(Key{Stage: All, Loops: loops, Want: want, Rows: rows})
	}
	if err != nil {
		return nil, err
	}
	if s.c.KV == PerLoop {
		for len(s.filled) < loops {
			s.filled = append(s.filled, 0)
		}
		for i := 0; i < loops; i++ {
			s.filled[i] = pos + rows
		}
	}
	return out, nil
}

// gated runs one token under the early-exit gate.
func (s *Session) gated(want Want) ([]float32, error) {
	key := func(st Stage, w Want) Key { return Key{Stage: st, Loops: 2, Want: w, Rows: 1} }
	s.GateTokens++
	switch s.opts.Gate.Kind {
	case GateConf:
		if !s.exits.probe() {
			if _, err := s.stage(key(First, WantNone)); err != nil {
				return nil, err
			}
			return s.stage(key(SecondFresh, want))
		}
		first, err := s.stage(key(FirstRead, want))
		if err != nil {
			return nil, err
		}
		one := topProb(first) >= s.opts.Gate.Threshold
		s.exits.note(one)
		if one {
			s.GateOne++
			return first, nil
		}
		return s.stage(key(SecondRead, want))
	default:
		if _, err := s.stage(key(First, WantNone)); err != nil {
			return nil, err
		}
		state, err := s.core.ReadF32(s.carry[1])
		if err != nil {
			return nil, err
		}
		one := s.m.Router.Score(state) >= s.m.Router.Bias
		s.log.Debug("dory gate", "recon", one)
		if one {
			s.GateOne++
			return s.stage(key(Read, want))
		}
		return s.stage(key(SecondFresh, want))
	}
}

// stage runs one stage plan and reads its logits.
func (s *Session) stage(k Key) ([]float32, error) {
	idb, err := s.core.Input(InputIDs, graph.I32, k.Rows)
	if err != nil {
		return nil, err
	}
	bind := s.core.Bind(2*len(s.slots) + 3)
	for n, sl := range s.slots {
		bind[n+".k"], bind[n+".v"] = sl.k, sl.v
	}
	bind[InputIDs] = idb
	bind[StateInput], bind[StateLoop] = s.carry[0], s.carry[1]
	outs, err := s.core.Run(CaptureKey(k), func() (*graph.Graph, error) {
		return BuildStage(&s.c, k, s.m.MatrixDType)
	}, bind)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", k, err)
	}
	if len(outs) == 0 {
		return nil, nil
	}
	return s.core.ReadLogits(outs[0], s.reuse)
}

// slotKey names a slot without its k/v suffix.
func slotKey(li, si int) string { return strings.TrimSuffix(SlotName(li, si, "k"), ".k") }

// ensureSlots makes every slot a call of `loops` loops writes, and grows the
// full-attention slots to hold position end-1: capacity doubles from
// Capacity, so the plans' signatures change a handful of times.
func (s *Session) ensureSlots(end, loops int) error {
	c := &s.c
	ring := c.Window + s.opts.Chunk - 1 + Rewind
	for li := range c.Layers() {
		if !c.IsAttention(li) {
			continue
		}
		n := 1
		if c.KV == PerLoop && c.Block(li) == 1 {
			n = loops
		}
		for si := 0; si < n; si++ {
			name := slotKey(li, si)
			sl := s.slots[name]
			want := ring
			if !c.IsSliding(li) {
				want = s.opts.Capacity
				if sl != nil {
					want = sl.rows
				}
				for want < end {
					want *= 2
				}
			}
			if sl != nil && sl.rows >= want {
				continue
			}
			grown, err := s.newSlot(want, c.IsSliding(li))
			if err != nil {
				return fmt.Errorf("layer %d slot %d: %w", li, si, err)
			}
			if sl != nil {
				w := c.KVHeads * c.HeadDim
				if err := s.be.Copy(grown.k, sl.k, sl.rows*w); err != nil {
					return err
				}
				if err := s.be.Copy(grown.v, sl.v, sl.rows*w); err != nil {
					return err
				}
				s.be.Free(sl.k)
				s.be.Free(sl.v)
				s.log.Debug("dory: slot grown", "layer", li, "slot", si, "rows", want)
			}
			s.slots[name] = grown
		}
	}
	return nil
}

func (s *Session) newSlot(rows int, ring bool) (*slot, error) {
	w := s.c.KVHeads * s.c.HeadDim
	k, err := s.be.Alloc(graph.F32, rows*w)
	if err != nil {
		return nil, err
	}
	v, err := s.be.Alloc(graph.F32, rows*w)
	if err != nil {
		s.be.Free(k)
		return nil, err
	}
	return &slot{k: k, v: v, rows: rows, ring: ring}, nil
}

// exitRate keeps the read-out after a first pass worth its cost: below a
// 35 % rate of early exits a token goes straight to its second pass, and one
// token in eight still reads out, to notice when the text turns easy.
type exitRate struct {
	rate   float32
	tokens uint32
}

func newExitRate() exitRate { return exitRate{rate: 1} }

func (e *exitRate) probe() bool {
	e.tokens++
	return e.rate >= 0.35 || e.tokens%8 == 0
}

func (e *exitRate) note(exited bool) {
	x := float32(0)
	if exited {
		x = 1
	}
	e.rate += 0.1 * (x - e.rate)
}

// topProb is the largest softmax probability of a row of logits.
func topProb(lg []float32) float32 {
	top := float32(math.Inf(-1))
	for _, x := range lg {
		top = max(top, x)
	}
	den := 0.0
	for _, x := range lg {
		if t := x - top; t > -20 {
			den += math.Exp(float64(t))
		}
	}
	return float32(1 / den)
}
