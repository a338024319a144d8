package lm

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// Graphs is what an architecture gives a Session: the graph of each key,
// how to keep each state those graphs declare, and the key of a plain
// forward chunk. The session makes every state on the first run of a graph
// that declares it, binds it by name, grows slots, and rolls back or
// snapshots by the states' kinds, so a model's code is its graphs.
type Graphs interface {
	// Vocab is the length of a row of logits.
	Vocab() int
	// Key is the key of a forward chunk of rows whose logits are want: the
	// graph Forward runs. Its logits, when want is not WantNone, are the
	// graph's first output.
	Key(rows int, want Want) capture.Key
	// Build builds the graph of key.
	Build(key capture.Key) (*graph.Graph, error)
	// State says how to keep the state of name a graph declares.
	State(name string) (StateSpec, error)
}

// GraphFuncs are the Graphs of a model whose keys are of its type K, as
// functions: Build is BuildOf for a key of type K, and an error for any
// other.
type GraphFuncs[K capture.Key] struct {
	// VocabSize is the length of a row of logits.
	VocabSize int
	// KeyOf is the key of a forward chunk (Graphs.Key).
	KeyOf func(rows int, want Want) K
	// BuildOf builds the graph of a key.
	BuildOf func(K) (*graph.Graph, error)
	// StateOf says how to keep each state (Graphs.State).
	StateOf func(name string) (StateSpec, error)
}

// Vocab is VocabSize.
func (f GraphFuncs[K]) Vocab() int { return f.VocabSize }

// Key is KeyOf's key.
func (f GraphFuncs[K]) Key(rows int, want Want) capture.Key { return f.KeyOf(rows, want) }

// Build builds a key of type K with BuildOf.
func (f GraphFuncs[K]) Build(k capture.Key) (*graph.Graph, error) {
	key, ok := k.(K)
	if !ok {
		return nil, fmt.Errorf("a key of type %T, not %T", k, key)
	}
	return f.BuildOf(key)
}

// State is StateOf's spec.
func (f GraphFuncs[K]) State(name string) (StateSpec, error) { return f.StateOf(name) }

// InputIDs is the name of the i32 input of token ids, one per row, that
// Run writes from Inputs.IDs.
const InputIDs = "ids"

// DefaultCapacity is the first row capacity of a Slot state.
const DefaultCapacity = 256

// SessionOptions configure a Session.
type SessionOptions struct {
	// Options open the session's Core: backend, logger, planner.
	Options
	// Chunk is the most rows one plan runs (a prompt's chunk); 0: DefaultChunk.
	Chunk int
	// Buckets is the row buckets per doubling a forward chunk's plan is
	// built for (BucketRows: a chunk of n rows runs the plan of the
	// smallest bucket that holds it, so prompts of nearby lengths share
	// one plan and its recording); negative (BucketsOff): none, a plan per
	// length; 0: DefaultBuckets on a backend that records plans
	// (ops.Recorder: CUDA, where a plan costs its building and recording
	// and a padded row little), none on one that does not (the CPU, where
	// a plan costs little and a padded row its whole arithmetic).
	Buckets int
	// Capacity is the first row capacity of Slot states (doubled as the
	// sequence grows); 0: DefaultCapacity.
	Capacity int
	// ReuseLogits makes the logits a Forward of at most Chunk ids returns
	// live in memory the session reuses: valid until its next Forward. A
	// decode loop that samples and moves on saves a fresh slice a token.
	ReuseLogits bool
	// MaxPositions is the model's max_position_embeddings: the positions
	// it was trained for. A run that reaches past it still runs (the math
	// has no limit there), but the Core's logger warns once, since the
	// model's output there is unknown. 0: no limit known.
	MaxPositions int
}

// Session runs the graphs of one sequence and keeps its states between
// calls: a Core (the backend, the weights on it, the capture engine), the
// states the graphs declare, the position, and a snapshot. It is what
// every architecture's session shares; a model adds its own features (loops,
// drafts, speculation windows) on top, through Run and the position and
// snapshot methods.
//
// The states of a sequence are the session's alone, bound to the plans by
// name at every run: a server running many sequences would keep a Session's
// states per sequence over one Core and run plans keyed by batch rows, and
// a model split over devices would run its graphs' parts on a Core per
// device; neither changes what a model declares.
//
// A Session is not safe for concurrent use.
type Session struct {
	core  *Core
	own   bool // the session made the core and closes it
	g     Graphs
	vocab int
	opts  SessionOptions

	specs map[string]StateSpec
	fixed map[fixedKey]ops.Buffer // Scratch states by name and size
	// kept are each key's binding of its states, kept while no state is
	// made or grown (gen counts those events): a decode token binds no
	// state anew. last is the binding of the last run.
	kept     map[capture.Key]*keptBinding
	gen      uint64
	last     *keptBinding
	rec      map[string]ops.Buffer // Recurrent states by name
	slots    map[string]*slotState // Slot and Ring states by name
	capacity int                   // rows of every Slot state (positions)

	pos int
	// warnedPast says the warning of a run past MaxPositions was logged.
	warnedPast bool
	// broken is the error of a run that may have left the recurrent
	// states half-advanced; Reset or a restore clears it.
	broken error
	snap   *Snapshot
	reuse  bool
	// host are the values a model keeps on the host that belong to the
	// position (SetHost).
	host map[string][]float32
	// window is Speculate's own copy of the recurrent states before a
	// speculation window; windowed says the window's forward is running.
	window   Snapshot
	windowed bool
}

type fixedKey struct {
	name string
	n    int
}

// slotState is a Slot or Ring state's buffer.
type slotState struct {
	name  string
	spec  StateSpec
	buf   ops.Buffer
	width int // elements per row
	rows  int // rows allocated
	// held is the positions it holds, those below it: where the last run
	// that bound it ended, or less after a rollback.
	held int
}

// ErrUnwritten is the error, wrapped, of a run whose graph binds a Slot or
// Ring state that does not hold the positions before the run's first row
// (a KV slot made, or rolled back, after them): the run would read rows
// never written.
var ErrUnwritten = errors.New("the run would read rows never written")

// NewSession opens a Core on w's weights with opts and starts a session of
// g's graphs on it; closing the session closes the core.
func NewSession(w Uploader, g Graphs, opts SessionOptions) (*Session, error) {
	if g == nil {
		return nil, fmt.Errorf("new session without graphs")
	}
	if err := checkSessionOptions(g, &opts); err != nil {
		return nil, err
	}
	core, err := Open(w, opts.Options)
	if err != nil {
		return nil, err
	}
	s := newSession(core, g, opts)
	s.own = true
	return s, nil
}

// NewSessionOn starts a session of g's graphs on a core it shares with
// other sessions (each keeps its own states); closing it leaves the core
// open. opts.Options is ignored: the core has its backend already.
func NewSessionOn(core *Core, g Graphs, opts SessionOptions) (*Session, error) {
	if core.Closed() {
		return nil, fmt.Errorf("new session on a closed core")
	}
	if g == nil {
		return nil, fmt.Errorf("new session without graphs")
	}
	if err := checkSessionOptions(g, &opts); err != nil {
		return nil, err
	}
	return newSession(core, g, opts), nil
}

func checkSessionOptions(g Graphs, o *SessionOptions) error {
	var err error
	if o.Chunk, err = ChunkRows(o.Chunk); err != nil {
		return err
	}
	if err := checkBuckets(o.Buckets); err != nil {
		return err
	}
	if o.Capacity == 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Capacity < 1 {
		return fmt.Errorf("slot capacity of %d rows", o.Capacity)
	}
	if o.MaxPositions < 0 {
		return fmt.Errorf("max positions %d is negative", o.MaxPositions)
	}
	if v := g.Vocab(); v < 1 {
		return fmt.Errorf("a vocabulary of %d", v)
	}
	return nil
}

func newSession(core *Core, g Graphs, opts SessionOptions) *Session {
	if opts.Buckets == 0 {
		opts.Buckets = BucketsOff
		if _, ok := core.Backend().(ops.Recorder); ok {
			opts.Buckets = DefaultBuckets
		}
	}
	return &Session{core: core, g: g, vocab: g.Vocab(), opts: opts, specs: map[string]StateSpec{},
		fixed: map[fixedKey]ops.Buffer{}, kept: map[capture.Key]*keptBinding{}, rec: map[string]ops.Buffer{}, slots: map[string]*slotState{}}
}

// Core is the core the session runs on.
func (s *Session) Core() *Core { return s.core }

// Backend is the backend the session runs on.
func (s *Session) Backend() ops.Backend { return s.core.Backend() }

// Chunk is the most rows one plan runs.
func (s *Session) Chunk() int { return s.opts.Chunk }

// Vocab is the length of a row of logits.
func (s *Session) Vocab() int { return s.vocab }

// Pos is the number of positions the states hold: the next call's pos0.
func (s *Session) Pos() int { return s.pos }

// Stats are the plan cache's counters.
func (s *Session) Stats() capture.Stats { return s.core.Stats() }

// Planned gives the plan the session built for a key, for dumps.
func (s *Session) Planned(k capture.Key) (*planner.Planned, planner.Report, bool) {
	return s.core.Planned(k)
}

// ForwardPlan gives the plan a forward chunk of rows runs (Graphs.Key of
// its bucket's rows, PlanRows), once it has run.
func (s *Session) ForwardPlan(rows int, want Want) (*planner.Planned, planner.Report, bool) {
	return s.core.Planned(s.g.Key(s.PlanRows(rows), want))
}

// ForwardProfile times the launches of the plan a forward chunk of rows
// runs op by op.
func (s *Session) ForwardProfile(rows int, want Want) ([]capture.OpTime, error) {
	return s.core.Profile(s.g.Key(s.PlanRows(rows), want))
}

// Profile times the launches of key's plan op by op.
func (s *Session) Profile(k capture.Key) ([]capture.OpTime, error) { return s.core.Profile(k) }

// errAblated is why a session that ran an ablation refuses to run.
var errAblated = errors.New("an ablation profile replayed its plan without some of its ops, over the states")

// AblateForward measures what each op of the plan a forward chunk of rows
// runs costs inside a replay, reps replays each (capture.Engine.Ablate):
// for benchmarks, at their end; the plan must have run in this session.
// Every replay starts from the Recurrent states the plan binds as they
// stand now: they are copied aside first, and a prologue recorded in front
// of every replay copies them back (a backend Copy: on CUDA a
// stream-ordered device copy, a memcpy node of the recorded graph), so
// what one op's absence did to them (a state driven to NaN over the
// replays) does not reach the ops measured after it; the copies are freed
// at the end. Slot and Ring states need no copy: each replay rewrites the
// same rows. The replays still leave garbage in the temporaries, in those
// rows and in the states, so the session is broken afterwards (see Broken)
// until a Reset or a restore.
func (s *Session) AblateForward(rows int, want Want, reps int) (capture.Ablation, error) {
	if s.Closed() {
		return capture.Ablation{}, fmt.Errorf("ablate: the session is closed")
	}
	if s.broken != nil {
		return capture.Ablation{}, s.brokenErr()
	}
	if reps < 1 {
		return capture.Ablation{}, fmt.Errorf("ablate with %d replays: want at least 1", reps)
	}
	key := s.g.Key(s.PlanRows(rows), want)
	kb := s.kept[key]
	if kb == nil {
		return capture.Ablation{}, fmt.Errorf("ablate %s: %w", key, capture.ErrNotRecorded)
	}
	pro, free, err := s.restoreSteps(kb)
	if err != nil {
		return capture.Ablation{}, fmt.Errorf("ablate %s: %w", key, err)
	}
	a, err := s.core.Ablate(key, reps, capture.AblateOptions{Prologue: pro})
	if err == nil || !errors.Is(err, capture.ErrNotRecorded) {
		s.broken = errAblated
	}
	if ferr := free(); ferr != nil {
		err = errors.Join(err, fmt.Errorf("ablate %s: %w", key, ferr))
	}
	return a, err
}

// restoreSteps copies the Recurrent states kb binds into new buffers and
// gives the steps that copy them back, and a free that waits for the
// backend (the replays that read the copies) and frees them.
func (s *Session) restoreSteps(kb *keptBinding) (steps []ops.Step, free func() error, err error) {
	be := s.core.Backend()
	var saved []ops.Buffer
	free = func() error {
		errs := []error{be.Sync()}
		for _, b := range saved {
			errs = append(errs, be.Free(b))
		}
		saved = nil
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("freeing the copies of the recurrent states: %w", err)
		}
		return nil
	}
	for _, name := range sortedKeys(kb.bind) {
		if sp, ok := s.specs[name]; !ok || sp.Kind != Recurrent {
			continue
		}
		st := kb.bind[name]
		cp, err := be.Alloc(st.DType(), st.Len())
		if err == nil {
			saved = append(saved, cp)
			err = be.Copy(cp, st, st.Len())
		}
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("copying state %s aside: %w", name, err), free())
		}
		steps = append(steps, ops.StepFunc(func() error {
			if err := be.Copy(st, cp, st.Len()); err != nil {
				return fmt.Errorf("restoring state %s: %w", name, err)
			}
			return nil
		}))
	}
	return steps, free, nil
}

// Closed says whether the session is closed.
func (s *Session) Closed() bool { return s == nil || s.specs == nil || s.core.Closed() }

// Recurrent says whether the session holds a Recurrent state, so that it
// goes back only to a snapshot.
func (s *Session) Recurrent() bool { return len(s.rec) > 0 }

// Inputs are what one run reads besides the states and the weights.
type Inputs struct {
	// IDs are written to the i32 input InputIDs, one per row.
	IDs []int
	// F32 are written to f32 inputs by name.
	F32 map[string][]float32
}

// Run runs key's graph once over rows rows at positions pos, pos+1, ...:
// it makes the states the graph declares (growing the slots to hold
// pos+rows positions), writes the inputs (padded with zeros to the
// graph's inputs: a plan built for a bucket of more rows, PlanRows) and
// the call record (rows rows), binds everything by name and runs the
// plan. It returns the plan's outputs, valid until the key runs again. A
// graph that binds a Slot or Ring state not holding the positions before
// pos is refused (ErrUnwritten); after the run the state holds those below
// pos+rows. Run leaves Pos alone: Forward moves it, and a model that runs
// its own graphs moves it with Advance. A plan that fails after it may
// have started, in a graph that declares a Recurrent state, leaves the
// session broken (see Broken) until a Reset or a restore; a failed graph
// without one (a draft head's over its slots) leaves it running.
func (s *Session) Run(key capture.Key, pos, rows int, in Inputs) ([]ops.Buffer, error) {
	if s.Closed() {
		return nil, fmt.Errorf("run %s: the session is closed", key)
	}
	if s.broken != nil {
		return nil, s.brokenErr()
	}
	s.checkPositions(key, pos+rows)
	leaves, err := s.core.eng.Leaves(key, func() (*graph.Graph, error) { return s.g.Build(key) })
	if err != nil {
		return nil, err
	}
	if err := s.growSlots(pos + rows); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	kb := s.kept[key]
	if kb == nil || kb.gen != s.gen {
		kb = &keptBinding{bind: s.core.Bind(len(leaves)), inputs: map[string]int{}}
		if err = s.bindStates(leaves, kb); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		kb.gen = s.gen // after the states bindStates made
		s.kept[key] = kb
	}
	s.last = kb
	bind, rec := kb.bind, kb.rec
	for _, sl := range kb.slots {
		if sl.held < pos {
			return nil, fmt.Errorf("%s: state %s holds the positions below %d, not those below %d: %w", key, sl.name, sl.held, pos, ErrUnwritten)
		}
	}
	if in.IDs != nil {
		ids := in.IDs
		if n, ok := kb.inputs[InputIDs]; ok {
			if ids, err = padded(InputIDs, ids, n); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
		if bind[InputIDs], err = s.core.WriteIDs(InputIDs, ids); err != nil {
			return nil, err
		}
	}
	for name, x := range in.F32 {
		if n, ok := kb.inputs[name]; ok {
			if x, err = padded(name, x, n); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
		if bind[name], err = s.core.WriteF32(name, x); err != nil {
			return nil, err
		}
	}
	if err := s.core.WriteCall(pos, rows); err != nil {
		return nil, err
	}
	outs, err := s.core.Run(key, nil, bind)
	if err != nil {
		if rec {
			// the plan may have run part way: its recurrent states may be half-advanced
			s.broken = err
		}
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	for _, sl := range kb.slots {
		sl.held = pos + rows
	}
	return outs, nil
}

// RunLogits is Run of a graph whose first output is the logits of its
// rows, read with Logits, unless want is WantNone: the logits (nil for
// WantNone) and every output.
func (s *Session) RunLogits(key capture.Key, pos, rows int, want Want, in Inputs) ([]float32, []ops.Buffer, error) {
	outs, err := s.Run(key, pos, rows, in)
	if err != nil || want == WantNone {
		return nil, outs, err
	}
	logits, err := s.Logits(outs[0], pos, rows, want)
	return logits, outs, err
}

// keptBinding is a key's binding of the call record, its states and its
// inputs, made when the key first runs and again after a state is made or
// grown.
type keptBinding struct {
	bind   capture.Binding
	rec    bool           // a state of the graph is Recurrent
	slots  []*slotState   // its Slot and Ring states
	inputs map[string]int // the elements of each input of the graph, by name
	gen    uint64
}

// bindStates makes the states among leaves and binds them in kb, noting
// whether one is Recurrent, which are slots, and the inputs' sizes.
func (s *Session) bindStates(leaves []*graph.Value, kb *keptBinding) error {
	for _, v := range leaves {
		if v.Kind == graph.Input {
			kb.inputs[v.Name] = v.Shape.Elems()
		}
		if v.Kind != graph.State {
			continue
		}
		sp, ok := s.specs[v.Name]
		if !ok {
			var err error
			if sp, err = s.g.State(v.Name); err != nil {
				return fmt.Errorf("state %s: %w", v.Name, err)
			}
			if err := sp.check(v); err != nil {
				return err
			}
			s.specs[v.Name] = sp
		}
		b, err := s.state(v, sp)
		if err != nil {
			return fmt.Errorf("state %s: %w", v, err)
		}
		kb.bind[v.Name] = b
		kb.rec = kb.rec || sp.Kind == Recurrent
		if sl := s.slots[v.Name]; sl != nil {
			kb.slots = append(kb.slots, sl)
		}
	}
	return nil
}

// StateBuffer gives the buffer of the state of name as the last run bound
// it (a carry between stages a model reads on the host, say).
func (s *Session) StateBuffer(name string) (ops.Buffer, bool) {
	if s.Closed() {
		return nil, false
	}
	if sl := s.slots[name]; sl != nil {
		return sl.buf, true // a grown slot's new buffer
	}
	if s.last == nil {
		return nil, false
	}
	b, ok := s.last.bind[name]
	return b, ok
}

// StateInfo describes a state a session keeps.
type StateInfo struct {
	Name  string
	Kind  StateKind
	DType graph.DType
	// Len is its elements (a slot's at its present capacity).
	Len int
}

// States lists the states the session has made, by name (a Scratch state
// made in several sizes once per size).
func (s *Session) States() []StateInfo {
	if s.Closed() {
		return nil
	}
	var out []StateInfo
	for k, b := range s.fixed {
		out = append(out, StateInfo{k.name, Scratch, b.DType(), b.Len()})
	}
	for n, b := range s.rec {
		out = append(out, StateInfo{n, Recurrent, b.DType(), b.Len()})
	}
	for n, sl := range s.slots {
		out = append(out, StateInfo{n, sl.spec.Kind, sl.buf.DType(), sl.buf.Len()})
	}
	slices.SortFunc(out, func(a, b StateInfo) int {
		if a.Name != b.Name {
			return strings.Compare(a.Name, b.Name)
		}
		return a.Len - b.Len
	})
	return out
}

// state gives the buffer of the state v declares, made on first use.
func (s *Session) state(v *graph.Value, sp StateSpec) (ops.Buffer, error) {
	be := s.core.Backend()
	switch sp.Kind {
	case Scratch:
		k := fixedKey{v.Name, v.Shape.Elems()}
		if b := s.fixed[k]; b != nil {
			return b, nil
		}
		b, err := be.Alloc(v.DType, k.n)
		if err != nil {
			return nil, err
		}
		s.fixed[k] = b
		s.gen++
		return b, nil
	case Recurrent:
		if b := s.rec[v.Name]; b != nil {
			if b.Len() != v.Shape.Elems() || b.DType() != v.DType {
				return nil, fmt.Errorf("declared again as %s %v, made as %s of %d", v.DType, v.Shape, b.DType(), b.Len())
			}
			return b, nil
		}
		b, err := be.Alloc(v.DType, v.Shape.Elems())
		if err != nil {
			return nil, err
		}
		s.rec[v.Name] = b
		s.gen++
		return b, nil
	}
	width := v.Shape[1]
	if sl := s.slots[v.Name]; sl != nil {
		if sl.width != width || sl.buf.DType() != v.DType {
			return nil, fmt.Errorf("declared again as %s rows of %d, made as %s rows of %d", v.DType, width, sl.buf.DType(), sl.width)
		}
		return sl.buf, nil
	}
	rows := sp.rowsFor(s.capacity)
	b, err := be.Alloc(v.DType, rows*width)
	if err != nil {
		return nil, fmt.Errorf("%d rows of %d: %w", rows, width, err)
	}
	s.slots[v.Name] = &slotState{name: v.Name, spec: sp, buf: b, width: width, rows: rows}
	s.gen++
	return b, nil
}

// growSlots makes the session's slot capacity hold positions below end,
// doubling from the first capacity, and grows every Slot state made so
// far, and every Ring short of its rows, keeping their rows: the plans'
// signatures change a handful of times.
func (s *Session) growSlots(end int) error {
	want := max(s.capacity, s.opts.Capacity)
	for want < end {
		if want > math.MaxInt32/2 {
			return fmt.Errorf("a slot capacity past %d positions", want)
		}
		want *= 2
	}
	if want == s.capacity {
		return nil
	}
	be := s.core.Backend()
	grown := map[string]ops.Buffer{}
	undo := func() {
		for _, b := range grown {
			be.Free(b)
		}
	}
	for _, name := range sortedKeys(s.slots) {
		sl := s.slots[name]
		rows := sl.spec.rowsFor(want)
		if rows == sl.rows {
			continue // a ring at its size
		}
		b, err := be.Alloc(sl.buf.DType(), rows*sl.width)
		if err != nil {
			undo()
			return fmt.Errorf("growing %s to %d rows: %w", name, rows, err)
		}
		grown[name] = b
		if err := be.Copy(b, sl.buf, sl.buf.Len()); err != nil {
			undo()
			return fmt.Errorf("growing %s: %w", name, err)
		}
	}
	for name, b := range grown {
		sl := s.slots[name]
		be.Free(sl.buf)
		sl.buf, sl.rows = b, sl.spec.rowsFor(want)
	}
	if len(grown) > 0 {
		s.gen++ // the kept bindings name the old buffers
	}
	if s.capacity > 0 && len(grown) > 0 {
		s.core.Logger().Debug("slots grown", "positions", want, "states", len(grown))
	}
	s.capacity = want
	return nil
}

// checkPositions warns, once a session, when a run of key reaches end
// positions, past the model's MaxPositions.
func (s *Session) checkPositions(key capture.Key, end int) {
	if s.warnedPast || s.opts.MaxPositions <= 0 || end <= s.opts.MaxPositions {
		return
	}
	s.warnedPast = true
	s.core.Logger().Warn("the sequence is longer than the model's max_position_embeddings: its output from there on is untested",
		"positions", end, "max_position_embeddings", s.opts.MaxPositions, "graph", key)
}

// Forward runs ids at positions pos0, pos0+1, ... in chunks of at most
// Chunk rows (the graph of Graphs.Key for each, of the rows of the chunk's
// bucket: PlanRows) and returns the wanted logits as a [rows, vocab] f32
// tensor (nil for WantNone). pos0 must equal Pos(). A call that fails its
// checks changes nothing; logits that are not finite are an error naming
// the position. When a chunk fails, the session
// stands after the chunks that ran, or where it was on a model without
// recurrent states (whose later rows are simply overwritten).
func (s *Session) Forward(ids []int, pos0 int, want Want) (*tensor.Dense, error) {
	return s.ForwardWith(ids, pos0, want, func(ids []int, pos int, w Want) ([]float32, error) {
		outs, err := s.Run(s.g.Key(s.PlanRows(len(ids)), w), pos, len(ids), Inputs{IDs: ids})
		if err != nil {
			return nil, err
		}
		s.pos = pos + len(ids) // the states hold the chunk, whatever its logits
		if w == WantNone {
			return nil, nil
		}
		return s.Logits(outs[0], pos, len(ids), w)
	})
}

// ForwardWith is Forward with the run of each chunk up to chunk (a model
// whose chunks run more than one graph, or whose keys depend on more than
// rows and want): chunk gets a chunk's ids, the position of its first row
// and its want, and returns its logits (read with Logits). Forward moves
// the position after each chunk; a chunk that fails after its graph ran
// (logits that are not finite) moves it itself (Advance), so that the
// session stands after the rows its recurrent states took in.
func (s *Session) ForwardWith(ids []int, pos0 int, want Want, chunk func(ids []int, pos int, w Want) ([]float32, error)) (*tensor.Dense, error) {
	if err := s.Check(ids, pos0, want); err != nil {
		return nil, err
	}
	// One chunk's logits are the Forward's; with more, RunChunks appends
	// them, so each must be memory of its own.
	s.reuse = s.opts.ReuseLogits && len(ids) <= s.opts.Chunk
	d, err := RunChunks(ids, pos0, s.opts.Chunk, s.vocab, want, func(ids []int, pos int, w Want) ([]float32, error) {
		out, err := chunk(ids, pos, w)
		if err == nil {
			s.pos = pos + len(ids)
		}
		return out, err
	})
	s.reuse = false
	if err != nil {
		if len(s.rec) == 0 {
			s.pos = pos0
		}
		return nil, err
	}
	return d, nil
}

// Check checks a forward of ids at pos0 before it runs: an open session
// not broken by an earlier failure, at least one id, every id inside the
// vocabulary, pos0 == Pos(), a known want.
func (s *Session) Check(ids []int, pos0 int, want Want) error {
	if s.Closed() {
		return fmt.Errorf("the session is closed")
	}
	if s.broken != nil {
		return s.brokenErr()
	}
	if err := CheckTokens(ids, pos0, s.pos, s.vocab); err != nil {
		return err
	}
	return want.Check()
}

// Logits reads the logits a run of rows at pos left in b (the last row's
// for WantLast: a head that read out one row; every row's for WantAll: the
// first rows rows of a plan that may hold more, built for a bucket), into
// the session's reused memory during a Forward with ReuseLogits, and
// checks that they are finite: a NaN or an infinity is an error naming the
// position and the token id.
func (s *Session) Logits(b ops.Buffer, pos, rows int, w Want) ([]float32, error) {
	if b == nil {
		return nil, fmt.Errorf("logits: no buffer")
	}
	n := s.vocab
	if w == WantAll {
		n = rows * s.vocab
	}
	if b.Len() < n || (w == WantLast && b.Len() != n) || b.Len()%s.vocab != 0 {
		return nil, fmt.Errorf("logits of %d values for want %s of %d rows of %d", b.Len(), w, rows, s.vocab)
	}
	first := pos
	if w == WantLast {
		first = pos + rows - 1
	}
	// A backend that checks on its device does so before the read comes
	// back; the host scans only to name a value the device found.
	fc, onDevice := s.core.Backend().(ops.FiniteChecker)
	if onDevice {
		if err := fc.CheckFinite(b, n); err != nil {
			return nil, err
		}
	}
	out, err := s.core.ReadLogits(b, n, s.reuse)
	if onDevice && errors.Is(err, ops.ErrNotFinite) && len(out) == n {
		if cerr := CheckFinite(out, s.vocab, first); cerr != nil {
			return nil, cerr
		}
	}
	if err != nil {
		return nil, err
	}
	if !onDevice {
		if err := CheckFinite(out, s.vocab, first); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CheckFinite checks rows of vocab logits, the first at position pos0, for
// a NaN or an infinity (a model whose weights or config make its math
// overflow), with an error naming the position and the token id. It costs
// one branch-free pass over the exponents (a 131072-entry row in tens of
// microseconds, where math.IsNaN and math.IsInf took 0.4 ms: a tenth of a
// decode token on the H200).
func CheckFinite(logits []float32, vocab, pos0 int) error {
	// An all-ones exponent (NaN, ±Inf) is the only one that carries into
	// bit 31 when one more is added to it.
	const exp, one = 0x7f800000, 0x00800000
	var a0, a1, a2, a3 uint32
	x := logits
	for ; len(x) >= 4; x = x[4:] {
		a0 |= math.Float32bits(x[0])&exp + one
		a1 |= math.Float32bits(x[1])&exp + one
		a2 |= math.Float32bits(x[2])&exp + one
		a3 |= math.Float32bits(x[3])&exp + one
	}
	for _, v := range x {
		a0 |= math.Float32bits(v)&exp + one
	}
	if (a0|a1|a2|a3)&0x80000000 == 0 {
		return nil
	}
	for i, v := range logits {
		if math.Float32bits(v)&exp == exp {
			return fmt.Errorf("position %d: the logit of token %d is %v (the model's math overflowed)", pos0+i/max(vocab, 1), i%max(vocab, 1), v)
		}
	}
	return nil
}

// Advance moves the position n rows on: a model that runs its own graphs
// with Run says so when they extended the sequence.
func (s *Session) Advance(n int) error {
	if n < 0 || s.pos+n < s.pos {
		return fmt.Errorf("advance by %d rows", n)
	}
	s.pos += n
	return nil
}

// Reset empties the session: the next call starts at position 0 (where
// every recurrent state restarts from zero) and the snapshot is dropped.
func (s *Session) Reset() {
	s.pos, s.host = 0, nil
	s.forget(0)
	s.broken = nil
	s.FreeSnapshot(s.snap)
	s.snap = nil
}

// Rewind is how many positions the session can roll back without a
// snapshot: the least Rewind of its rings, or -1 for any number.
func (s *Session) Rewind() int {
	r := -1
	for _, sl := range s.slots {
		if sl.spec.Kind == Ring && (r < 0 || sl.spec.Rewind < r) {
			r = sl.spec.Rewind
		}
	}
	return r
}

// Rollback forgets the positions from n on, so the next call starts at n.
// Slots are indexed by position and go back anywhere; rings go back their
// Rewind rows; recurrent states only run forward, so a session that has
// them goes back only to the position of its Snapshot (restoring it). Any
// other rollback is an error that changes nothing.
func (s *Session) Rollback(n int) error {
	if s.Closed() {
		return fmt.Errorf("rollback: the session is closed")
	}
	if n < 0 || n > s.pos {
		return fmt.Errorf("rollback to %d: the cache holds positions 0 to %d", n, s.pos)
	}
	if n == s.pos && s.broken == nil {
		return nil
	}
	if r := s.Rewind(); r >= 0 && s.pos-n > r {
		return fmt.Errorf("rollback of %d rows: sliding layers keep only %d rows behind their window", s.pos-n, r)
	}
	if len(s.rec) == 0 {
		s.pos, s.broken, s.host = n, nil, nil
		s.forget(n)
		return nil
	}
	if s.snap == nil || s.snap.pos != n {
		at := "no snapshot was taken"
		if s.snap != nil {
			at = fmt.Sprintf("the snapshot is at position %d", s.snap.pos)
		}
		return fmt.Errorf("rollback to %d: the recurrent states cannot go back by position and %s (take a Snapshot at %d first)", n, at, n)
	}
	if err := s.Restore(s.snap); err != nil {
		return fmt.Errorf("rollback to %d: %w", n, err)
	}
	s.forget(n)
	return nil
}

// forget makes the slots hold no position from n on.
func (s *Session) forget(n int) { s.Forget(n, func(string) bool { return true }) }

// Snapshot keeps a copy of the recurrent states at Pos(), so that a later
// Rollback to this position can return here; one snapshot is kept, a new
// one replaces it. A snapshot refused before it copies anything (the
// session is broken) keeps the one taken before.
func (s *Session) Snapshot() error {
	if s.snap == nil {
		s.snap = &Snapshot{}
	}
	if err := s.Save(s.snap); err != nil {
		if s.snap.bufs == nil { // freed by the failed copy
			s.snap = nil
		}
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// SnapshotPos is the position of the session's snapshot, or -1.
func (s *Session) SnapshotPos() int {
	if s.snap == nil {
		return -1
	}
	return s.snap.pos
}

// A Snapshot is a copy of a session's recurrent states at a position. The
// zero value is empty; Save fills it (reusing its buffers), Restore brings
// it back, FreeSnapshot releases it. A model keeps snapshots of its own
// beside the session's (a speculation window's, say).
type Snapshot struct {
	pos  int
	bufs map[string]ops.Buffer
	host map[string][]float32
}

// Pos is the position the snapshot was taken at.
func (sn *Snapshot) Pos() int { return sn.pos }

// Host gives the value of name the model keeps on the host for the
// position (SetHost), nil when it has none.
func (s *Session) Host(name string) []float32 { return s.host[name] }

// SetHost keeps v as the value of name: one a model computes on the host
// that belongs to the position (the last row's hidden state a draft head
// starts from). Snapshots keep it with the recurrent states, and restoring
// one brings it back; a Reset, or a rollback not to a snapshot, drops it.
// v is the session's after the call (not to be changed); nil drops it.
func (s *Session) SetHost(name string, v []float32) {
	if s.host == nil {
		s.host = map[string][]float32{}
	}
	s.host[name] = v
}

// Save copies the recurrent states, the host values and the position into
// sn. On an error sn is freed and empty.
func (s *Session) Save(sn *Snapshot) error {
	if s.Closed() {
		return fmt.Errorf("the session is closed")
	}
	if s.broken != nil {
		return s.brokenErr()
	}
	be := s.core.Backend()
	if sn.bufs == nil {
		sn.bufs = map[string]ops.Buffer{}
	}
	for _, name := range sortedKeys(s.rec) {
		src := s.rec[name]
		dst := sn.bufs[name]
		if dst == nil {
			b, err := be.Alloc(src.DType(), src.Len())
			if err != nil {
				s.FreeSnapshot(sn)
				return fmt.Errorf("%s: %w", name, err)
			}
			sn.bufs[name], dst = b, b
		}
		if err := be.Copy(dst, src, src.Len()); err != nil {
			s.FreeSnapshot(sn)
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	sn.pos, sn.host = s.pos, maps.Clone(s.host)
	return nil
}

// Restore copies sn's recurrent states and host values back and returns
// the session to sn's position. A failed copy leaves the session broken until a Reset or
// a restore that succeeds.
func (s *Session) Restore(sn *Snapshot) error {
	if s.Closed() {
		return fmt.Errorf("the session is closed")
	}
	if sn == nil || (sn.bufs == nil && len(s.rec) > 0) {
		return fmt.Errorf("restore of an empty snapshot")
	}
	be := s.core.Backend()
	for _, name := range sortedKeys(s.rec) {
		src := sn.bufs[name]
		if src == nil {
			if sn.pos == 0 {
				continue // made after a snapshot at 0, where every recurrent state starts afresh
			}
			return fmt.Errorf("restore: state %s was made after the snapshot at %d", name, sn.pos)
		}
		if err := be.Copy(s.rec[name], src, src.Len()); err != nil {
			s.broken = fmt.Errorf("restoring %s failed: %w", name, err)
			return s.broken
		}
	}
	s.pos, s.broken, s.host = sn.pos, nil, maps.Clone(sn.host)
	return nil
}

// FreeSnapshot releases sn's buffers and empties it (nil does nothing).
func (s *Session) FreeSnapshot(sn *Snapshot) {
	if sn == nil {
		return
	}
	for _, b := range sn.bufs {
		s.core.Backend().Free(b)
	}
	sn.bufs, sn.pos, sn.host = nil, 0, nil
}

// Broken says why the session refuses to run (nil when it runs).
func (s *Session) Broken() error {
	if s.broken == nil {
		return nil
	}
	return s.brokenErr()
}

func (s *Session) brokenErr() error {
	return fmt.Errorf("an earlier forward failed (%w): the recurrent states may be half-advanced; Reset or roll back to a snapshot", s.broken)
}

// Close frees the session's states and snapshot, and closes its core when
// the session made it. Closing twice does nothing more.
func (s *Session) Close() error {
	if s == nil || s.specs == nil {
		return nil
	}
	var bufs []ops.Buffer
	for _, b := range s.fixed {
		bufs = append(bufs, b)
	}
	for _, b := range s.rec {
		bufs = append(bufs, b)
	}
	for _, sl := range s.slots {
		bufs = append(bufs, sl.buf)
	}
	for _, sn := range []*Snapshot{s.snap, &s.window} {
		if sn != nil {
			for _, b := range sn.bufs {
				bufs = append(bufs, b)
			}
		}
	}
	s.specs, s.fixed, s.rec, s.slots, s.snap, s.kept, s.last = nil, nil, nil, nil, nil, nil, nil
	s.window = Snapshot{}
	if s.own {
		return s.core.Close(bufs...)
	}
	var errs []error
	be := s.core.Backend()
	for _, b := range bufs {
		errs = append(errs, be.Free(b))
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
