// Package capture records a plan's launches once and replays them, keyed by
// what the plan is for and by the signature of what a recording bakes in.
//
// A key names one graph of a model: any comparable value with a String
// method (a model's own struct of stage, rows and whatever else its graphs
// depend on); it is built and planned once. Its recording holds the bound steps, which fix buffer
// addresses, slot capacities and shapes: that is the signature. A call with
// an equal signature replays; one whose buffers moved or whose slots grew
// (same plan, so same topology) updates the recording in place; anything
// else records anew. Values that change every token (position, rows, keys
// in a slot, ring heads) live in the call record, an input buffer the
// caller rewrites before each run, never in a launch argument, so one
// recording serves every position.
//
// A backend that can record natively (CUDA graphs) implements Recorder; any
// other records a plan as its list of bound steps, so the keying logic is
// tested on the CPU.
package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// Key names one graph; plans and recordings are kept per key. A model
// owns its keys: any comparable value (a struct of its stage, rows and
// whatever else its graphs depend on) whose String names it in dumps and
// logs. Two keys are the same graph when they are ==.
type Key interface {
	String() string
}

// checkKey says whether k can key a map: a non-comparable dynamic type (a
// struct holding a slice, say) would panic there.
func checkKey(k Key) error {
	if k == nil {
		return fmt.Errorf("capture: nil key")
	}
	if !reflect.TypeOf(k).Comparable() {
		return fmt.Errorf("capture: key %s of type %T is not comparable", k, k)
	}
	return nil
}

// Binding gives the buffer of every input, weight and state of a graph, by
// value name; names a graph does not use are ignored.
type Binding map[string]ops.Buffer

// Stats counts what an engine did: graphs planned, replays of a recording
// whose signature held (hits), in-place updates after buffers moved, fresh
// recordings, and recordings dropped to stay under the cap.
type Stats struct {
	Plans, Hits, Updates, Records, Evictions int
}

// String writes the counters as `reel run -v` and `reel bench` print them.
func (s Stats) String() string {
	return fmt.Sprintf("plans %d, records %d, updates %d, hits %d, evictions %d", s.Plans, s.Records, s.Updates, s.Hits, s.Evictions)
}

// Recorder is implemented by a backend that records steps into an
// executable of its own (a CUDA graph); see ops.Recorder.
type Recorder = ops.Recorder

// Recording is a recorded plan; see ops.Recording.
type Recording = ops.Recording

// stepList is the recording of a backend without a recorder of its own: the
// bound steps, run in order.
type stepList struct{ steps []ops.Step }

// Replay runs the steps in order.
func (s *stepList) Replay() error {
	for _, st := range s.steps {
		if err := st.Run(); err != nil {
			return err
		}
	}
	return nil
}

// Update takes the rebound steps.
func (s *stepList) Update(steps []ops.Step) error {
	s.steps = steps
	return nil
}

// Close drops the steps.
func (s *stepList) Close() error {
	s.steps = nil
	return nil
}

// stepRecorder records by keeping the steps.
type stepRecorder struct{}

// Record keeps a copy of the step list.
func (stepRecorder) RecordPlan(steps []ops.Step) (Recording, error) {
	return &stepList{steps: append([]ops.Step(nil), steps...)}, nil
}

// Engine runs stage graphs by key: it plans each key once, lowers and
// records its plan, and replays, updates or re-records as signatures say.
// An Engine is not safe for concurrent use.
type Engine struct {
	be       ops.Backend
	opts     planner.Options
	log      *slog.Logger
	rec      Recorder
	entries  map[Key]*entry
	stats    Stats
	clock    uint64
	maxRecs  int
	recorded int
}

// entry is what an engine keeps for one key.
type entry struct {
	key     Key
	planned *planner.Planned
	report  planner.Report
	leaves  []*graph.Value // the inputs, weights and states of the planned graph, by ID
	plan    *planner.Lowered
	rec     Recording
	sig     []sigItem
	next    []sigItem // the signature being checked, kept to spare an allocation a call
	used    uint64
}

// sigItem is one bound buffer as a recording sees it: its identity (its
// address when it has one, else id) and its length (a slot's capacity).
type sigItem struct {
	addr uintptr
	id   any
	len  int
}

// NewEngine makes an engine on be, planning with opts and logging plans,
// records and updates at debug level on log (nil: no logging). The backend
// records natively when it implements Recorder.
func NewEngine(be ops.Backend, opts planner.Options, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{be: be, opts: opts, log: log, rec: stepRecorder{}, entries: map[Key]*entry{}}
	if r, ok := be.(Recorder); ok {
		e.rec = r
	}
	return e
}

// SetMaxRecordings caps the recordings kept (0: no cap); past it the least
// recently run one is dropped (its plan stays) and recorded again when its
// key comes back.
func (e *Engine) SetMaxRecordings(n int) { e.maxRecs = n }

// Stats gives the counters so far.
func (e *Engine) Stats() Stats { return e.stats }

// Planned gives a key's plan and report, once the key has run.
func (e *Engine) Planned(key Key) (*planner.Planned, planner.Report, bool) {
	if checkKey(key) != nil {
		return nil, planner.Report{}, false
	}
	en := e.entries[key]
	if en == nil {
		return nil, planner.Report{}, false
	}
	return en.planned, en.report, true
}

// OpTime is the time the launches of one op took in a profile.
type OpTime struct {
	Op       string
	Launches int
	Time     time.Duration
}

// Profile runs key's recorded plan once step by step, waiting for the
// backend after each, and returns the time per op, slowest first. It is for
// finding slow kernels: each step pays a launch and a sync, so the sum is
// more than a replay takes. The key must have run before.
func (e *Engine) Profile(key Key) ([]OpTime, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	en := e.entries[key]
	if en == nil || en.plan == nil {
		return nil, fmt.Errorf("capture %s: no plan to profile (run the key first)", key)
	}
	if err := e.be.Sync(); err != nil {
		return nil, err
	}
	by := map[string]*OpTime{}
	for i, st := range en.plan.Steps() {
		op := en.planned.Schedule[i].Op
		t0 := time.Now()
		if err := st.Run(); err != nil {
			return nil, fmt.Errorf("capture %s: profile: %w", key, err)
		}
		if err := e.be.Sync(); err != nil {
			return nil, err
		}
		ot := by[op]
		if ot == nil {
			ot = &OpTime{Op: op}
			by[op] = ot
		}
		ot.Launches++
		ot.Time += time.Since(t0)
	}
	out := make([]OpTime, 0, len(by))
	for _, ot := range by {
		out = append(out, *ot)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Time > out[j].Time || (out[i].Time == out[j].Time && out[i].Op < out[j].Op)
	})
	return out, nil
}

// ErrNotRecorded is in the error of Ablate for a key without a recording
// (it has not run, or its recording was dropped): nothing was replayed.
var ErrNotRecorded = errors.New("no recording (run the key first)")

// OpCost is what the launches of one op cost inside a replay of its plan:
// the time a replay saves without them.
type OpCost struct {
	Op       string
	Launches int
	// Saved is a replay's time less that of a replay without the op's
	// launches. Noise can make it negative for an op that costs little.
	Saved time.Duration
	// Err is why the replays without the op failed (Saved is then 0):
	// a later op checks what it reads and refused what the op's absence
	// left there (an expert id from a router that did not run, say).
	Err error
}

// Ablation is what Engine.Ablate measured: a replay of the whole plan
// and each op's cost in it, the costliest first (those that could not be
// measured last).
type Ablation struct {
	// Replay is a replay's time, the prologue's steps included.
	Replay time.Duration
	Ops    []OpCost
}

// AblateOptions are what Engine.Ablate runs besides the plan; the zero
// value runs nothing more.
type AblateOptions struct {
	// Prologue are steps recorded in front of the plan's in every
	// recording Ablate times, the whole plan's and each ablated one, so
	// they run before each of its replays and their cost cancels in the
	// differences: lm.Session.AblateForward copies the recurrent states
	// back there, so that what an op's absence did to them does not reach
	// the replays of the ops measured after it. Like the plan's, they must
	// only enqueue work on a backend that records (CUDA: stream-ordered
	// copies and launches, nothing that waits or allocates); they are run
	// or recorded, never changed.
	Prologue []ops.Step
}

// Ablate measures what each op of key's plan costs where it runs: inside a
// replay, overlapped with its neighbours as they overlap on the device
// (programmatic dependent launch, say), not timed alone as Profile does.
// It replays the whole plan reps times between two syncs, then, op by
// op, records the plan without that op's launches and replays that reps
// times; an op's cost is the difference (an op whose absence makes a
// replay fail gets the error instead). Every recording it times starts
// with opts.Prologue; with one, the whole plan is a fresh recording of the
// prologue and the plan's steps, else it is the key's own recording. The
// replays without an op compute nothing meaningful: they read what its
// outputs last held, or what later steps left in reused arena space, and
// write the states the plan writes, so the states the key binds are
// garbage afterwards (lm.Session.AblateForward marks its session broken).
// The key must have run before; its own recording is left as it was.
func (e *Engine) Ablate(key Key, reps int, opts AblateOptions) (Ablation, error) {
	if err := checkKey(key); err != nil {
		return Ablation{}, err
	}
	en := e.entries[key]
	if en == nil || en.plan == nil || en.rec == nil {
		return Ablation{}, fmt.Errorf("capture %s: ablate: %w", key, ErrNotRecorded)
	}
	if reps < 1 {
		return Ablation{}, fmt.Errorf("capture %s: ablate with %d replays: want at least 1", key, reps)
	}
	// timed is one replay's time: a warm replay, then reps between syncs.
	timed := func(r Recording) (time.Duration, error) {
		if err := r.Replay(); err != nil {
			return 0, err
		}
		if err := e.be.Sync(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		for range reps {
			if err := r.Replay(); err != nil {
				return 0, err
			}
		}
		if err := e.be.Sync(); err != nil {
			return 0, err
		}
		return time.Since(t0) / time.Duration(reps), nil
	}
	steps := en.plan.Steps()
	pro := opts.Prologue
	// record records the prologue and the steps of the plan that keep
	// says to keep.
	record := func(keep func(op string) bool) (Recording, error) {
		all := make([]ops.Step, 0, len(pro)+len(steps))
		all = append(all, pro...)
		for i, st := range steps {
			if keep(en.planned.Schedule[i].Op) {
				all = append(all, st)
			}
		}
		return e.rec.RecordPlan(all)
	}
	whole := en.rec
	if len(pro) > 0 {
		var err error
		if whole, err = record(func(string) bool { return true }); err != nil {
			return Ablation{}, fmt.Errorf("capture %s: ablate: record with the prologue: %w", key, err)
		}
	}
	full, err := timed(whole)
	if whole != en.rec {
		if cerr := whole.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}
	if err != nil {
		return Ablation{}, fmt.Errorf("capture %s: ablate: %w", key, err)
	}
	var names []string
	launches := map[string]int{}
	for i := range steps {
		op := en.planned.Schedule[i].Op
		if launches[op] == 0 {
			names = append(names, op)
		}
		launches[op]++
	}
	out := Ablation{Replay: full, Ops: make([]OpCost, 0, len(names))}
	for _, op := range names {
		rec, err := record(func(o string) bool { return o != op })
		if err != nil {
			return Ablation{}, fmt.Errorf("capture %s: ablate %s: record: %w", key, op, err)
		}
		d, rerr := timed(rec)
		if err := rec.Close(); err != nil {
			return Ablation{}, fmt.Errorf("capture %s: ablate %s: %w", key, op, err)
		}
		c := OpCost{Op: op, Launches: launches[op], Saved: full - d, Err: rerr}
		if rerr != nil {
			// What the backend reported is read and cleared; the
			// replays that remain start from the failure's leftovers
			// (in the temporaries, and in any state the prologue does
			// not restore) as any ablated replay does from another's.
			c.Saved = 0
			if err := e.be.Sync(); err != nil {
				c.Err = fmt.Errorf("%w; then %v", rerr, err)
			}
		}
		out.Ops = append(out.Ops, c)
	}
	sort.SliceStable(out.Ops, func(i, j int) bool {
		a, b := out.Ops[i], out.Ops[j]
		if (a.Err == nil) != (b.Err == nil) {
			return a.Err == nil
		}
		return a.Saved > b.Saved
	})
	return out, nil
}

// Run runs the plan of key. On the key's first use it calls build, plans
// the graph and keeps the plan. The buffers are bound by name: from bind,
// else from the first of more that has the name (a session's weights, say,
// which need no copying into every call's binding). The signature of the
// binding (each bound buffer's identity and length) then picks: equal to
// the recording's, replay; else, with a recording, update it to the new
// buffers; else lower and record. It returns the buffers of the graph's
// outputs, valid until the key runs again (on a device, once the backend
// has synced). A plan instrumented by the planner's Options.Trace is handed
// to its Observe after each run.
func (e *Engine) Run(key Key, build func() (*graph.Graph, error), bind Binding, more ...Binding) ([]ops.Buffer, error) {
	en, err := e.entry(key, build)
	if err != nil {
		return nil, err
	}
	// The signature first, without allocating: a replay (the common case)
	// needs nothing more.
	if cap(en.next) < len(en.leaves) {
		en.next = make([]sigItem, len(en.leaves))
	}
	sig := en.next[:len(en.leaves)]
	lookup := func(name string) ops.Buffer {
		if b, ok := bind[name]; ok {
			return b
		}
		for _, m := range more {
			if b, ok := m[name]; ok {
				return b
			}
		}
		return nil
	}
	for i, v := range en.leaves {
		b := lookup(v.Name)
		if b == nil {
			return nil, fmt.Errorf("capture %s: %s %s is not bound", key, v.Kind, v)
		}
		if err := ops.CheckBinding(v, b); err != nil {
			return nil, fmt.Errorf("capture %s: %w", key, err)
		}
		sig[i] = signature(b)
	}
	bufs := func() map[*graph.Value]ops.Buffer {
		m := make(map[*graph.Value]ops.Buffer, len(en.leaves))
		for _, v := range en.leaves {
			m[v] = lookup(v.Name)
		}
		return m
	}
	// keep stores sig as the entry's signature and gives the entry a
	// fresh slice for the next check.
	keep := func() {
		en.sig, en.next = sig, en.sig
	}
	e.clock++
	en.used = e.clock
	switch {
	case en.rec != nil && sameSig(en.sig, sig):
		e.stats.Hits++
	case en.rec != nil:
		if err := en.plan.Rebind(bufs()); err != nil {
			return nil, fmt.Errorf("capture %s: %w", key, err)
		}
		if err := en.rec.Update(en.plan.Steps()); err != nil {
			e.log.Debug("capture: update failed, recording anew", "key", key.String(), "err", err)
			en.rec.Close()
			en.rec = nil
			e.recorded--
			if err := e.record(en, nil); err != nil {
				return nil, err
			}
		} else {
			e.stats.Updates++
			e.log.Debug("capture: updated", "key", key.String())
		}
		keep()
	default:
		if err := e.record(en, bufs()); err != nil {
			return nil, err
		}
		keep()
	}
	if err := en.rec.Replay(); err != nil {
		return nil, fmt.Errorf("capture %s: %w", key, err)
	}
	if t := e.opts.Trace; t != nil && t.Observe != nil {
		if err := t.Observe(en.plan); err != nil {
			return nil, fmt.Errorf("capture %s: trace: %w", key, err)
		}
	}
	return en.plan.Outputs(), nil
}

// entry gives key's entry, planning its graph on the key's first use.
func (e *Engine) entry(key Key, build func() (*graph.Graph, error)) (*entry, error) {
	if e.entries == nil {
		return nil, fmt.Errorf("capture: engine is closed")
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if en := e.entries[key]; en != nil {
		return en, nil
	}
	return e.plan(key, build)
}

// Leaves gives the inputs, weights and states of key's planned graph (by
// value ID), planning it on the key's first use: what a run must bind.
// A session reads it to make the states a graph declares before binding.
func (e *Engine) Leaves(key Key, build func() (*graph.Graph, error)) ([]*graph.Value, error) {
	en, err := e.entry(key, build)
	if err != nil {
		return nil, err
	}
	return en.leaves, nil
}

// plan builds and plans key's graph.
func (e *Engine) plan(key Key, build func() (*graph.Graph, error)) (*entry, error) {
	if build == nil {
		return nil, fmt.Errorf("capture %s: no graph builder", key)
	}
	g, err := build()
	if err != nil {
		return nil, fmt.Errorf("capture %s: %w", key, err)
	}
	p, rep, err := planner.Plan(g, e.opts)
	if err != nil {
		return nil, fmt.Errorf("capture %s: %w", key, err)
	}
	en := &entry{key: key, planned: p, report: rep}
	for _, v := range p.Graph.Values {
		if v.Kind != graph.Temp {
			en.leaves = append(en.leaves, v)
		}
	}
	e.entries[key] = en
	e.stats.Plans++
	e.log.Debug("capture: planned", "key", key.String(), "nodes", rep.Nodes, "launches", rep.Launches,
		"arena", rep.ArenaBytes, "temps", rep.TempBytes, "fusions", rep.FusionString())
	return en, nil
}

// record lowers en's plan (or rebinds it with bufs when it is lowered
// already; bufs nil keeps its buffers) and records its steps.
func (e *Engine) record(en *entry, bufs map[*graph.Value]ops.Buffer) error {
	switch {
	case en.plan == nil:
		pl, err := planner.Lower(en.planned, e.be, bufs)
		if err != nil {
			return fmt.Errorf("capture %s: %w", en.key, err)
		}
		en.plan = pl
	case bufs != nil:
		if err := en.plan.Rebind(bufs); err != nil {
			return fmt.Errorf("capture %s: %w", en.key, err)
		}
	}
	rec, err := e.rec.RecordPlan(en.plan.Steps())
	if err != nil {
		return fmt.Errorf("capture %s: record: %w", en.key, err)
	}
	en.rec = rec
	e.stats.Records++
	e.recorded++
	e.log.Debug("capture: recorded", "key", en.key.String(), "steps", len(en.plan.Steps()))
	e.evict(en)
	return nil
}

// evict drops the least recently run recordings past the cap, never keep's.
func (e *Engine) evict(keep *entry) {
	for e.maxRecs > 0 && e.recorded > e.maxRecs {
		var old *entry
		for _, en := range e.sortedEntries() {
			if en != keep && en.rec != nil && (old == nil || en.used < old.used) {
				old = en
			}
		}
		if old == nil {
			return
		}
		old.rec.Close()
		old.rec, old.sig = nil, nil
		if old.plan != nil {
			old.plan.Close()
			old.plan = nil
		}
		e.recorded--
		e.stats.Evictions++
		e.log.Debug("capture: evicted", "key", old.key.String())
	}
}

// sortedEntries lists the entries in key order, so eviction is deterministic.
func (e *Engine) sortedEntries() []*entry {
	out := make([]*entry, 0, len(e.entries))
	for _, en := range e.entries {
		out = append(out, en)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.String() < out[j].key.String() })
	return out
}

// Close releases every recording and plan.
func (e *Engine) Close() error {
	var first error
	for _, en := range e.sortedEntries() {
		if en.rec != nil {
			if err := en.rec.Close(); err != nil && first == nil {
				first = err
			}
		}
		if en.plan != nil {
			if err := en.plan.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	e.entries = nil
	return first
}

// Addresser is implemented by buffers that can name their memory (a device
// pointer); the signature uses it when present.
type Addresser interface {
	Addr() uintptr
}

// signature is what a signature keeps of a buffer.
func signature(b ops.Buffer) sigItem {
	if a, ok := b.(Addresser); ok {
		return sigItem{addr: a.Addr(), len: b.Len()}
	}
	return sigItem{id: identity(b), len: b.Len()}
}

// identity is what a signature keeps of a buffer without an address: the
// pointer it is, else the value itself when comparable.
func identity(b ops.Buffer) any {
	v := reflect.ValueOf(b)
	switch v.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Slice:
		return v.Pointer()
	}
	if v.Type().Comparable() {
		return b
	}
	return fmt.Sprintf("%#v", b)
}

func sameSig(a, b []sigItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
