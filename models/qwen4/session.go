package qwen4

import (
	"fmt"
	"log/slog"
	"slices"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/sample"
)

// DefaultChunk is the rows of a prompt chunk.
const DefaultChunk = lm.DefaultChunk

// DefaultCapacity is the first row capacity of a QSA layer's slots.
const DefaultCapacity = 256

// Options configure a Session.
type Options struct {
	// Backend runs the plans; nil means a CPU backend on every core.
	Backend ops.Backend
	// Chunk is the most rows one plan runs (a prompt's chunk); 0: DefaultChunk.
	Chunk int
	// Capacity is the first row capacity of the QSA slots (doubled as the
	// sequence grows); 0: DefaultCapacity.
	Capacity int
	// NoMTP leaves the MTP head off even when the model has one (a
	// forward then skips filling its cache).
	NoMTP bool
	// Logger receives debug lines (slot growth, plans); nil: discard.
	Logger *slog.Logger
	// Planner sets the planner's passes; nil: planner.DefaultOptions().
	Planner *planner.Options
	// ReuseLogits makes the logits a Forward of at most Chunk ids returns
	// live in memory the session reuses: valid until its next Forward or
	// Verify. A decode loop that samples and moves on saves a fresh slice a
	// token (the released vocabulary's logits are 1 MB).
	ReuseLogits bool
}

// qsaSlots are one QSA layer's position-indexed states.
type qsaSlots struct {
	k, v, kraw, blocks ops.Buffer
}

// Session runs forwards of one sequence, keeping the QSA caches, the GDN
// recurrent states and conv rings and the PLE histories between calls. It is
// not safe for concurrent use.
type Session struct {
	m    *Model
	c    Config
	opts Options
	core *lm.Core
	be   ops.Backend  // core's backend
	log  *slog.Logger // core's logger

	// fixed are the states of fixed size (GDN, PLE), by state name; they
	// run forward only.
	fixed map[string]ops.Buffer
	// slots are the QSA layers' (and the MTP head's) states, by layer tag.
	slots    map[string]*qsaSlots
	capacity int
	pos      int
	// broken is the error of a run that may have left the recurrent states
	// half-advanced; Reset or a Rollback to a snapshot clears it.
	broken error
	snap   *snapshot
	// window is Verify's own copy of the states before a speculation
	// window (the user's snapshot stays as it was).
	window *snapshot

	mtp bool
	// hidden is the main model's final hyper-state at position pos−1 (when
	// the MTP head is on and known).
	hidden []float32
	// mtpPos is the positions the head's cache holds.
	mtpPos int
	// reuse says the running Forward may read its logits into the core's
	// reused memory (ReuseLogits).
	reuse bool
	// tapes are the tape states of speculation windows, by window rows;
	// inWindow says the running Forward is a window's, which tapes (on a
	// recurrent model) and keeps its rows' final hyper-states in
	// windowHidden.
	tapes        map[int]map[string]ops.Buffer
	inWindow     bool
	windowHidden []float32
}

// snapshot is a copy of the fixed states at a position.
type snapshot struct {
	pos    int
	bufs   map[string]ops.Buffer
	hidden []float32
}

// NewSession prepares a session on the model's weights.
func NewSession(m *Model, opts Options) (*Session, error) {
	if m == nil {
		return nil, fmt.Errorf("qwen4: new session on a nil model")
	}
	var err error
	if opts.Chunk, err = lm.ChunkRows(opts.Chunk); err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if opts.Capacity == 0 {
		opts.Capacity = DefaultCapacity
	}
	if opts.Capacity < 1 {
		return nil, fmt.Errorf("qwen4: slot capacity of %d rows", opts.Capacity)
	}
	core, err := lm.Open(m, lm.Options{Backend: opts.Backend, Logger: opts.Logger, Planner: opts.Planner})
	if err != nil {
		return nil, err
	}
	s := &Session{m: m, c: m.Config, opts: opts, core: core, be: core.Backend(), log: core.Logger(),
		fixed: map[string]ops.Buffer{}, slots: map[string]*qsaSlots{}, mtp: m.HasMTP && !opts.NoMTP}
	for _, f := range s.fixedStates() {
		b, err := s.be.Alloc(f.dt, f.n)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("qwen4: state %s: %w", f.name, err)
		}
		s.fixed[f.name] = b
	}
	return s, nil
}

// fixedState is a state of fixed size.
type fixedState struct {
	name string
	dt   graph.DType
	n    int
}

func (s *Session) fixedStates() []fixedState {
	c := &s.c
	var out []fixedState
	for li, kind := range c.Layers {
		tag := layerTag(li)
		if c.HasPLE(li) {
			out = append(out,
				fixedState{StateName("ple", tag, "hist"), graph.I32, c.NGram - 1},
				fixedState{StateName("ple", tag, "conv"), graph.F32, (c.PLEConvKernel - 1) * c.NGram * c.Streams * c.Hidden})
		}
		if kind == GDN {
			out = append(out,
				fixedState{StateName("gdn", tag, "conv"), graph.F32, (c.ConvKernel - 1) * c.ConvDim()},
				fixedState{StateName("gdn", tag, "state"), graph.F32, c.ValueHeads * c.KeyDim * c.ValueDim})
		}
	}
	return out
}

// Stats are the plan cache's counters.
func (s *Session) Stats() capture.Stats { return s.core.Stats() }

// CaptureKey is the capture cache's key of a graph key: the key itself.
func CaptureKey(k Key) capture.Key { return k }

// Planned gives the plan the session built for a key, for dumps.
func (s *Session) Planned(k Key) (*planner.Planned, planner.Report, bool) {
	return s.core.Planned(CaptureKey(k))
}

// Config is the config the session runs.
func (s *Session) Config() Config { return s.c }

// Pos is the number of positions in the cache: the next call's pos0.
func (s *Session) Pos() int { return s.pos }

// Backend is the backend the session runs on.
func (s *Session) Backend() ops.Backend { return s.be }

// MTP reports whether the session runs the MTP head (the model has one and
// Options.NoMTP is off).
func (s *Session) MTP() bool { return s.mtp }

// Close frees the session's buffers.
func (s *Session) Close() error {
	var extra []ops.Buffer
	for _, sl := range s.slots {
		extra = append(extra, sl.k, sl.v, sl.kraw, sl.blocks)
	}
	for _, b := range s.fixed {
		extra = append(extra, b)
	}
	for _, t := range s.tapes {
		for _, b := range t {
			extra = append(extra, b)
		}
	}
	s.tapes = nil
	for _, sn := range []*snapshot{s.snap, s.window} {
		if sn != nil {
			for _, b := range sn.bufs {
				extra = append(extra, b)
			}
		}
	}
	s.slots, s.fixed, s.snap, s.window = nil, nil, nil, nil
	return s.core.Close(extra...)
}

// Reset empties the cache: the next call starts at position 0 (every
// state restarts from zero there) and any snapshot is dropped.
func (s *Session) Reset() {
	s.pos = 0
	s.broken = nil
	s.drop(&s.snap)
	s.hidden = nil
	s.mtpPos = 0
}

// Snapshot keeps a copy of the recurrent states (GDN states and conv rings,
// PLE histories) at Pos(), so that a later Rollback to this position can
// return here; one snapshot is kept, a new one replaces it.
func (s *Session) Snapshot() error {
	if s.core.Closed() {
		return fmt.Errorf("qwen4: the session is closed")
	}
	if s.broken != nil {
		return fmt.Errorf("qwen4: snapshot: %w", s.brokenErr())
	}
	if err := s.keep(&s.snap); err != nil {
		return fmt.Errorf("qwen4: snapshot: %w", err)
	}
	return nil
}

// keep copies the fixed states, the position and the hyper-state into *at,
// allocating its buffers on first use; on an error *at is freed and nil.
func (s *Session) keep(at **snapshot) error {
	if *at == nil {
		*at = &snapshot{bufs: map[string]ops.Buffer{}}
	}
	sn := *at
	fail := func(err error) error {
		s.drop(at)
		return err
	}
	for _, f := range s.fixedStates() {
		dst := sn.bufs[f.name]
		if dst == nil {
			b, err := s.be.Alloc(f.dt, f.n)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", f.name, err))
			}
			sn.bufs[f.name], dst = b, b
		}
		if err := s.be.Copy(dst, s.fixed[f.name], f.n); err != nil {
			return fail(fmt.Errorf("%s: %w", f.name, err))
		}
	}
	sn.pos = s.pos
	sn.hidden = slices.Clone(s.hidden)
	return nil
}

// drop frees the buffers of *at and sets it nil.
func (s *Session) drop(at **snapshot) {
	if *at == nil {
		return
	}
	for _, b := range (*at).bufs {
		s.be.Free(b)
	}
	*at = nil
}

// restore copies sn's fixed states back and returns the session to sn's
// position and hyper-state (the head's cache keeps the positions before it).
func (s *Session) restore(sn *snapshot) error {
	for _, f := range s.fixedStates() {
		if err := s.be.Copy(s.fixed[f.name], sn.bufs[f.name], f.n); err != nil {
			s.broken = fmt.Errorf("restoring %s failed: %w", f.name, err)
			return s.broken
		}
	}
	s.pos, s.broken = sn.pos, nil
	s.hidden = slices.Clone(sn.hidden)
	s.mtpPos = min(s.mtpPos, sn.pos)
	return nil
}

// Rollback forgets the positions from n on, so the next call starts at n.
// The QSA caches are indexed by position and go back anywhere; the GDN
// states, conv rings and PLE histories only run forward, so a model with
// them goes back only to the position of its Snapshot. Any other rollback is
// an error that changes nothing.
func (s *Session) Rollback(n int) error {
	if s.core.Closed() {
		return fmt.Errorf("qwen4: the session is closed")
	}
	if n < 0 || n > s.pos {
		return fmt.Errorf("qwen4: rollback to %d: the cache holds positions 0 to %d", n, s.pos)
	}
	if n == s.pos && s.broken == nil {
		return nil
	}
	if !s.c.Recurrent() {
		// the head's first pair after n needs the hyper-state of n−1, which is gone
		s.pos, s.broken, s.hidden = n, nil, nil
		s.mtpPos = min(s.mtpPos, n)
		return nil
	}
	if s.snap == nil || s.snap.pos != n {
		at := "no snapshot was taken"
		if s.snap != nil {
			at = fmt.Sprintf("the snapshot is at position %d", s.snap.pos)
		}
		return fmt.Errorf("qwen4: rollback to %d: the GDN recurrent states, conv rings and PLE histories cannot go back by position and %s (take a Snapshot at %d first)", n, at, n)
	}
	if err := s.restore(s.snap); err != nil {
		return fmt.Errorf("qwen4: rollback to %d: %w", n, err)
	}
	return nil
}

// Forward runs ids at positions pos0, pos0+1, ... and returns the wanted
// logits as a [rows, vocab] f32 tensor (nil for WantNone). pos0 must equal
// Pos(). A call that fails its checks changes nothing; a run that fails may
// leave the recurrent states half-advanced, and later calls say so until a
// Reset or a Rollback to a snapshot.
func (s *Session) Forward(ids []int, pos0 int, want Want) (*tensor.Dense, error) {
	if err := s.check(ids, pos0, want); err != nil {
		return nil, err
	}
	// One chunk's logits are the Forward's; with more, RunChunks appends
	// them, so each must be memory of its own.
	s.reuse = s.opts.ReuseLogits && len(ids) <= s.opts.Chunk
	d, err := lm.RunChunks(ids, pos0, s.opts.Chunk, s.c.Vocab, want, s.chunk)
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	return d, nil
}

func (s *Session) check(ids []int, pos0 int, want Want) error {
	if s.core.Closed() {
		return fmt.Errorf("qwen4: the session is closed")
	}
	if s.broken != nil {
		return fmt.Errorf("qwen4: %w", s.brokenErr())
	}
	if err := lm.CheckTokens(ids, pos0, s.pos, s.c.Vocab); err != nil {
		return fmt.Errorf("qwen4: %w", err)
	}
	if err := want.Check(); err != nil {
		return fmt.Errorf("qwen4: %w", err)
	}
	return nil
}

// brokenErr says why the session refuses to run.
func (s *Session) brokenErr() error {
	return fmt.Errorf("an earlier forward failed (%w): the recurrent states may be half-advanced; Reset or roll back to a snapshot", s.broken)
}

// chunk runs one plan of the forward over ids at pos (and the MTP head over
// the pairs it completes).
func (s *Session) chunk(ids []int, pos int, want Want) ([]float32, error) {
	rows := len(ids)
	k := Key{Stage: Forward, Want: want, Rows: rows, Hidden: s.mtp, Tape: s.inWindow && s.c.Recurrent()}
	outs, err := s.run(k, ids, nil, pos)
	if err != nil {
		return nil, err
	}
	s.pos = pos + rows
	var logits []float32
	if want != WantNone {
		if logits, err = s.core.ReadLogits(outs[0], s.reuse); err != nil {
			return nil, err
		}
	}
	if !s.mtp {
		return logits, nil
	}
	hs, err := s.core.ReadF32(outs[len(outs)-1])
	if err != nil {
		s.hidden = nil
		return nil, err
	}
	if s.inWindow {
		s.windowHidden = hs
	}
	// the MTP head over the pairs (H_p, x_{p+1}) this chunk completes
	ch := s.c.Streams * s.c.Hidden
	first, pairs, next := pos-1, hs[:(rows-1)*ch], ids
	if s.hidden != nil && pos > 0 {
		pairs = append(slices.Clone(s.hidden), pairs...)
	} else {
		first, next = pos, ids[1:]
	}
	if len(next) > 0 {
		if _, err := s.run(Key{Stage: Draft, Want: WantNone, Rows: len(next)}, next, pairs, first); err != nil {
			s.hidden = nil
			return nil, fmt.Errorf("mtp (the forward itself ran: the cache holds %d positions): %w", s.pos, err)
		}
		s.mtpPos = first + len(next)
	}
	s.hidden = slices.Clone(hs[(rows-1)*ch:])
	return logits, nil
}

// Draft drafts n tokens greedily with the MTP head after a forward: next is
// the token at Pos() (picked from the last logits); draft j pairs the
// hyper-state of position Pos()−1+j (the main model's for the first, the
// head's own after) with the token at Pos()+j (next, then the drafts) and
// predicts the token at Pos()+j+1. The drafts write the head's cache at
// those positions; the next Forward rewrites them with the accepted tokens.
func (s *Session) Draft(next, n int) ([]int, error) {
	if s.core.Closed() {
		return nil, fmt.Errorf("qwen4: the session is closed")
	}
	if !s.mtp {
		return nil, fmt.Errorf("qwen4: draft: the session has no MTP head (the checkpoint carries no mtp.* tensors, or Options.NoMTP)")
	}
	if s.broken != nil {
		return nil, fmt.Errorf("qwen4: draft: %w", s.brokenErr())
	}
	if s.hidden == nil || s.pos == 0 {
		return nil, fmt.Errorf("qwen4: draft: no hyper-state of position %d (run a forward first)", s.pos-1)
	}
	if next < 0 || next >= s.c.Vocab {
		return nil, fmt.Errorf("qwen4: draft: token id %d is outside the vocabulary of %d", next, s.c.Vocab)
	}
	h, tok := s.hidden, next
	var out []int
	for j := 0; j < n; j++ {
		logits, hs, err := s.DraftRows(h, []int{tok}, s.pos-1+j, WantLast)
		if err != nil {
			return out, err
		}
		tok = sample.Argmax(logits.Data().([]float32))
		out = append(out, tok)
		h = hs.Data().([]float32)
	}
	return out, nil
}

// Verify runs a speculation window: next (the token at Pos()) and drafts
// (guesses of the tokens after it, from Draft) in one forward of
// 1+len(drafts) rows. Draft i is accepted when it is the greedy choice
// (argmax) of the row before it, up to the first refusal, so greedy
// decoding with windows gives the tokens plain greedy decoding gives. The
// session then stands after next and the accepted drafts: when a draft was
// refused, the window's later rows are taken back: the recurrent states
// come back from a copy Verify keeps of its own (not the user's snapshot)
// and are advanced over the accepted rows from what the window's forward
// taped (the Settle stage: the conv and scan recurrences only, no
// projections, attention or experts). It
// returns how many drafts it accepted and the logits of the last accepted
// row, whose argmax is the token after the window.
func (s *Session) Verify(next int, drafts []int) (accepted int, logits []float32, err error) {
	return s.VerifyFunc(next, drafts, func(row []float32, d int) bool { return sample.Argmax(row) == d })
}

// VerifyFunc is Verify with the acceptance of each draft up to accept,
// given the logits of the row before it (sample.Sampler.Accept makes
// speculative sampling: drafts accepted with their probability). When a
// draft was refused (accepted < len(drafts)), the token after the window
// is to be drawn from the returned logits without drafts[accepted]
// (sample.Sampler.NextExcept), which keeps the sampler's distribution.
func (s *Session) VerifyFunc(next int, drafts []int, accept func(logits []float32, draft int) bool) (accepted int, logits []float32, err error) {
	ids := append([]int{next}, drafts...)
	p0 := s.pos
	if err := s.check(ids, p0, WantAll); err != nil {
		return 0, nil, err
	}
	if len(ids) > s.opts.Chunk {
		return 0, nil, fmt.Errorf("qwen4: verify: a window of %d rows is more than a chunk of %d", len(ids), s.opts.Chunk)
	}
	if err := s.keep(&s.window); err != nil {
		return 0, nil, fmt.Errorf("qwen4: verify: %w", err)
	}
	s.inWindow, s.windowHidden = true, nil
	out, err := s.Forward(ids, p0, WantAll)
	s.inWindow = false
	if err != nil {
		return 0, nil, fmt.Errorf("qwen4: verify: %w", err)
	}
	v := s.c.Vocab
	rows := out.Data().([]float32)
	for accepted < len(drafts) && accept(rows[accepted*v:(accepted+1)*v], drafts[accepted]) {
		accepted++
	}
	logits = slices.Clone(rows[accepted*v : (accepted+1)*v])
	if accepted == len(drafts) {
		return accepted, logits, nil
	}
	if err := s.settle(p0, ids[:accepted+1], len(ids)); err != nil {
		return 0, nil, fmt.Errorf("qwen4: verify: taking back the refused rows: %w", err)
	}
	return accepted, logits, nil
}

// settle makes the session stand after the first rows of the window of
// wrows rows that began at p0 (ids are those rows' tokens): the recurrent
// states come back from the window's copy and run forward over those rows
// from the tape (the Settle stage); the QSA caches, indexed by position,
// keep what the window wrote; the MTP head keeps its cache up to the last
// pair of accepted tokens and the hyper-state of the last accepted row.
func (s *Session) settle(p0 int, ids []int, wrows int) error {
	if err := s.restore(s.window); err != nil {
		return err
	}
	if s.c.Recurrent() {
		if _, err := s.run(Key{Stage: Settle, Want: WantNone, Rows: len(ids), TapeRows: wrows}, ids, nil, p0); err != nil {
			return err
		}
	}
	s.pos = p0 + len(ids)
	if s.mtp {
		ch := s.c.Streams * s.c.Hidden
		a := len(ids) - 1
		if len(s.windowHidden) < (a+1)*ch {
			s.hidden = nil // not kept: a Draft asks for a forward first
			return nil
		}
		s.hidden = slices.Clone(s.windowHidden[a*ch : (a+1)*ch])
		s.mtpPos = p0 + a
	}
	return nil
}

// DraftRows runs the MTP head over rows: row t pairs hidden[t] (a final
// hyper-state [C·H] at position pos0+t) with ids[t] (the token at pos0+t+1).
// It returns the wanted logits [rows or 1, vocab] (nil for WantNone) and the
// head's own final hyper-states [rows, C·H] (the next draft's hidden). It
// writes the head's cache at those positions (pos0 may not pass the
// positions the cache holds: a forward fills it up to Pos()−1) and leaves
// the main model's state alone.
func (s *Session) DraftRows(hidden []float32, ids []int, pos0 int, want Want) (logits, hs *tensor.Dense, err error) {
	if !s.mtp {
		return nil, nil, fmt.Errorf("qwen4: draft: the session has no MTP head")
	}
	ch := s.c.Streams * s.c.Hidden
	if len(ids) == 0 || len(hidden) != len(ids)*ch {
		return nil, nil, fmt.Errorf("qwen4: draft: %d hidden values for %d rows of %d", len(hidden), len(ids), ch)
	}
	for i, id := range ids {
		if id < 0 || id >= s.c.Vocab {
			return nil, nil, fmt.Errorf("qwen4: draft: row %d: id %d is outside the vocabulary of %d", i, id, s.c.Vocab)
		}
	}
	if pos0 < 0 || pos0 > s.mtpPos {
		return nil, nil, fmt.Errorf("qwen4: draft at position %d: the head's cache holds positions 0 to %d", pos0, s.mtpPos)
	}
	if err := want.Check(); err != nil {
		return nil, nil, fmt.Errorf("qwen4: %w", err)
	}
	outs, err := s.run(Key{Stage: Draft, Want: want, Rows: len(ids)}, ids, hidden, pos0)
	if err != nil {
		return nil, nil, fmt.Errorf("qwen4: draft: %w", err)
	}
	s.mtpPos = pos0 + len(ids)
	if want != WantNone {
		lg, err := s.core.ReadF32(outs[0])
		if err != nil {
			return nil, nil, err
		}
		logits = tensor.New(tensor.WithShape(len(lg)/s.c.Vocab, s.c.Vocab), tensor.WithBacking(lg))
	}
	hv, err := s.core.ReadF32(outs[len(outs)-1])
	if err != nil {
		return nil, nil, err
	}
	return logits, tensor.New(tensor.WithShape(len(ids), ch), tensor.WithBacking(hv)), nil
}

// tape gives the tape states of windows of r rows, allocated on first use:
// each GDN layer's qkv, a and b rows, each PLE layer's conv input rows.
func (s *Session) tape(r int) (map[string]ops.Buffer, error) {
	if t, ok := s.tapes[r]; ok {
		return t, nil
	}
	c := &s.c
	t := map[string]ops.Buffer{}
	add := func(name string, w int) error {
		b, err := s.be.Alloc(graph.F32, r*w)
		if err != nil {
			return fmt.Errorf("tape %s of %d rows: %w", name, r, err)
		}
		t[name] = b
		return nil
	}
	for li, kind := range c.Layers {
		var err error
		if c.HasPLE(li) {
			err = add(TapeName(li, "ple"), c.Streams*c.Hidden)
		}
		if kind == GDN && err == nil {
			if err = add(TapeName(li, "qkv"), c.ConvDim()); err == nil {
				if err = add(TapeName(li, "a"), c.ValueHeads); err == nil {
					err = add(TapeName(li, "b"), c.ValueHeads)
				}
			}
		}
		if err != nil {
			for _, b := range t {
				s.be.Free(b)
			}
			return nil, err
		}
	}
	if s.tapes == nil {
		s.tapes = map[int]map[string]ops.Buffer{}
	}
	s.tapes[r] = t
	return t, nil
}

// run writes the inputs and the call record and runs key's plan.
func (s *Session) run(k Key, ids []int, hidden []float32, pos int) ([]ops.Buffer, error) {
	rows := len(ids)
	if err := s.ensureSlots(pos + rows); err != nil {
		return nil, err
	}
	idb, err := s.core.WriteIDs(InputIDs, ids)
	if err != nil {
		return nil, err
	}
	bind := s.core.Bind(len(s.fixed) + 4*len(s.slots) + 2)
	for n, b := range s.fixed {
		bind[n] = b
	}
	for tag, sl := range s.slots {
		bind[StateName("qsa", tag, "k")] = sl.k
		bind[StateName("qsa", tag, "v")] = sl.v
		bind[StateName("qsa", tag, "kraw")] = sl.kraw
		bind[StateName("qsa", tag, "blocks")] = sl.blocks
	}
	bind[InputIDs] = idb
	if r := k.tapeRows(); r > 0 {
		t, err := s.tape(r)
		if err != nil {
			return nil, err
		}
		for n, b := range t {
			bind[n] = b
		}
	}
	if hidden != nil {
		hb, err := s.core.WriteF32(InputHidden, hidden)
		if err != nil {
			return nil, err
		}
		bind[InputHidden] = hb
	}
	if err := s.core.WriteCall(pos, rows); err != nil {
		return nil, err
	}
	ck := CaptureKey(k)
	_, _, planned := s.core.Planned(ck)
	outs, err := s.core.Run(ck, func() (*graph.Graph, error) { return Build(&s.c, k, s.m) }, bind)
	if err != nil {
		// a failure after planning may have run part of the plan
		if _, _, now := s.core.Planned(ck); (planned || now) && s.c.Recurrent() && (k.Stage == Forward || k.Stage == Settle) {
			s.broken = err
		}
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	return outs, nil
}

// ensureSlots makes the QSA slots of every layer (and the MTP head) hold
// positions below end: the capacity doubles from Options.Capacity, so the
// plans' signatures change a handful of times.
func (s *Session) ensureSlots(end int) error {
	c := &s.c
	want := max(s.capacity, s.opts.Capacity)
	for want < end {
		want *= 2
	}
	if want == s.capacity && len(s.slots) > 0 {
		return nil
	}
	var tags []string
	for li, kind := range c.Layers {
		if kind == QSA {
			tags = append(tags, layerTag(li))
		}
	}
	if s.mtp {
		tags = append(tags, layerTag(-1))
	}
	kw, id := c.KVHeads*c.HeadDim, c.IndexDim
	grown := map[string]*qsaSlots{}
	undo := func() {
		for _, g := range grown {
			for _, b := range []ops.Buffer{g.k, g.v, g.kraw, g.blocks} {
				if b != nil {
					s.be.Free(b)
				}
			}
		}
	}
	for _, tag := range tags {
		g := &qsaSlots{}
		grown[tag] = g
		old := s.slots[tag]
		for _, p := range []struct {
			dst      *ops.Buffer
			n, keep  int
			previous ops.Buffer
		}{
			{&g.k, want * kw, s.capacity * kw, pick(old, 0)},
			{&g.v, want * kw, s.capacity * kw, pick(old, 1)},
			{&g.kraw, want * id, s.capacity * id, pick(old, 2)},
			{&g.blocks, (want/c.Block + 1) * id, (s.capacity/c.Block + 1) * id, pick(old, 3)},
		} {
			b, err := s.be.Alloc(graph.F32, p.n)
			if err != nil {
				undo()
				return fmt.Errorf("qsa slots of layer %s (%d rows): %w", tag, want, err)
			}
			*p.dst = b
			if p.previous != nil {
				if err := s.be.Copy(b, p.previous, p.keep); err != nil {
					undo()
					return fmt.Errorf("growing the qsa slots of layer %s: %w", tag, err)
				}
			}
		}
	}
	for tag, g := range grown {
		if old := s.slots[tag]; old != nil {
			for _, b := range []ops.Buffer{old.k, old.v, old.kraw, old.blocks} {
				s.be.Free(b)
			}
		}
		s.slots[tag] = g
	}
	if s.capacity > 0 {
		s.log.Debug("qwen4: qsa slots grown", "rows", want)
	}
	s.capacity = want
	return nil
}

func pick(sl *qsaSlots, i int) ops.Buffer {
	if sl == nil {
		return nil
	}
	return []ops.Buffer{sl.k, sl.v, sl.kraw, sl.blocks}[i]
}
