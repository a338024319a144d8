package dory

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
)

// Rewind is how many rows a session can roll back: a sliding layer's ring
// keeps its window, a chunk, and this many rows more.
const Rewind = 448

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

// Options configure a Session: those of every session, and Dory's own.
type Options struct {
	lm.SessionOptions
	// Loops is the passes of the recurrent block a Forward runs; 0: the
	// checkpoint's n_recurrent_loops.
	Loops int
	// KV overrides the checkpoint's recurrent_kv_cache_mode when set.
	KV *KVMode
	// PromptLoops caps the loops of chunks whose logits nobody reads, on the
	// last_loop cache (their rows are all that stays of them); 0: no cap.
	PromptLoops int
	// Gate is the early-exit policy; it needs the last_loop cache.
	Gate Gate
}

// Session runs forwards of one sequence, keeping its KV cache between calls.
// It is not safe for concurrent use.
type Session struct {
	*lm.Session
	m     *Model
	c     Config
	opts  Options
	exits exitRate
	// GateTokens counts tokens the gate decided on; GateOne those that took one pass.
	GateTokens, GateOne int
}

// state keeps the loop's carry between stages, a sliding layer's slots as
// rings of window + chunk + Rewind rows, and a full layer's as slots.
func (c *Config) state(name string, chunk int) (lm.StateSpec, error) {
	if name == StateInput || name == StateLoop {
		return lm.StateSpec{Kind: lm.Scratch}, nil
	}
	var li, si int
	var kv string
	if _, err := fmt.Sscanf(strings.ReplaceAll(name, ".", " "), "kv %d %d %s", &li, &si, &kv); err != nil || li < 0 || li >= c.Layers() {
		return lm.StateSpec{}, fmt.Errorf("dory: no state %q", name)
	}
	if c.IsSliding(li) {
		return lm.StateSpec{Kind: lm.Ring, Rows: c.Window + chunk - 1 + Rewind, Rewind: Rewind}, nil
	}
	return lm.StateSpec{Kind: lm.Slot}, nil
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
	if opts.Gate.Kind != NoGate && c.KV != LastLoop {
		return nil, fmt.Errorf("dory: the early-exit gate needs the last_loop KV cache (a per_loop cache would miss the second loop's rows of tokens that exit)")
	}
	if opts.Gate.Kind == GateRecon && m.Router == nil {
		return nil, fmt.Errorf("dory: gate recon: the checkpoint carries no router (dory.router.* tensors)")
	}
	if opts.Loops == 0 {
		opts.Loops = c.Loops
	}
	if opts.Loops < 1 || opts.Loops > MaxLoops {
		return nil, fmt.Errorf("dory: %d loops: want 1 to %d", opts.Loops, MaxLoops)
	}
	chunk, err := lm.ChunkRows(opts.Chunk)
	if err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	opts.Chunk = chunk
	if opts.MaxPositions == 0 {
		opts.MaxPositions = c.MaxPositionEmbed
	}
	s := &Session{m: m, c: c, opts: opts, exits: newExitRate()}
	s.Session, err = lm.NewSession(m, lm.GraphFuncs[Key]{
		VocabSize: c.Vocab,
		KeyOf:     func(rows int, want lm.Want) Key { return Key{Stage: All, Loops: opts.Loops, Want: want, Rows: rows} },
		BuildOf:   func(k Key) (*graph.Graph, error) { return BuildStage(&s.c, k, m.Stored()) },
		StateOf:   func(name string) (lm.StateSpec, error) { return s.c.state(name, chunk) },
	}, opts.SessionOptions)
	if err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	return s, nil
}

// Config is the config the session runs (with its KV mode).
func (s *Session) Config() Config { return s.c }

// Forward runs ids at positions pos0, pos0+1, ... through the session's
// loops (Options.Loops) and returns the wanted logits as a [rows, vocab]
// f32 tensor (nil for lm.WantNone). pos0 must equal Pos(). On an error the
// cache is as before the call.
func (s *Session) Forward(ids []int, pos0 int, want lm.Want) (*tensor.Dense, error) {
	return s.ForwardLoops(ids, pos0, s.opts.Loops, want)
}

// ForwardLoops is Forward through loops passes of the recurrent block (a
// last_loop cache takes any loops from call to call; a per_loop cache needs
// the same loops for every call, since a loop's slots hold the positions
// of the calls that ran it).
func (s *Session) ForwardLoops(ids []int, pos0, loops int, want lm.Want) (*tensor.Dense, error) {
	if loops < 1 || loops > MaxLoops {
		return nil, fmt.Errorf("dory: %d loops: want 1 to %d", loops, MaxLoops)
	}
	d, err := s.ForwardWith(ids, pos0, want, func(ids []int, pos int, w lm.Want) ([]float32, error) {
		lc := loops
		if w == lm.WantNone && s.opts.PromptLoops > 0 && s.c.KV == LastLoop {
			lc = min(loops, s.opts.PromptLoops)
		}
		return s.chunk(ids, pos, lc, w)
	})
	if errors.Is(err, lm.ErrUnwritten) && s.c.KV == PerLoop {
		return nil, fmt.Errorf("dory: %w: a per_loop cache needs the same loops for every call (use last_loop to vary them)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("dory: %w", err)
	}
	return d, nil
}

// Report gives the loops and KV mode, and the gate's decisions.
func (s *Session) Report() []string {
	out := []string{fmt.Sprintf("loops        %d, kv %s", s.opts.Loops, s.c.KV)}
	if s.GateTokens > 0 {
		out = append(out, fmt.Sprintf("gate         %d of %d tokens took one pass", s.GateOne, s.GateTokens))
	}
	return out
}

// chunk runs up to Chunk rows: one plan, or the gate's stages for one row.
func (s *Session) chunk(ids []int, pos, loops int, want lm.Want) ([]float32, error) {
	if s.opts.Gate.Kind != NoGate && len(ids) == 1 && want != lm.WantNone && loops == 2 {
		return s.gated(ids, pos, want)
	}
	return s.stage(Key{Stage: All, Loops: loops, Want: want, Rows: s.PlanRows(len(ids))}, ids, pos)
}

// gated runs one token under the early-exit gate.
func (s *Session) gated(ids []int, pos int, want lm.Want) ([]float32, error) {
	key := func(st Stage, w lm.Want) Key { return Key{Stage: st, Loops: 2, Want: w, Rows: 1} }
	stage := func(st Stage, w lm.Want) ([]float32, error) { return s.stage(key(st, w), ids, pos) }
	s.GateTokens++
	switch s.opts.Gate.Kind {
	case GateConf:
		if !s.exits.probe() {
			if _, err := stage(First, lm.WantNone); err != nil {
				return nil, err
			}
			return stage(SecondFresh, want)
		}
		first, err := stage(FirstRead, want)
		if err != nil {
			return nil, err
		}
		one := topProb(first) >= s.opts.Gate.Threshold
		s.exits.note(one)
		if one {
			s.GateOne++
			return first, nil
		}
		return stage(SecondRead, want)
	default:
		if _, err := stage(First, lm.WantNone); err != nil {
			return nil, err
		}
		carry, _ := s.StateBuffer(StateLoop)
		state, err := s.Core().ReadF32(carry)
		if err != nil {
			return nil, err
		}
		one := s.m.Router.Score(state) >= s.m.Router.Bias
		s.Core().Logger().Debug("dory gate", "recon", one)
		if one {
			s.GateOne++
			return stage(Read, want)
		}
		return stage(SecondFresh, want)
	}
}

// stage runs one stage plan over ids (the plan's rows, or fewer: a
// bucket's plan) and reads its logits.
func (s *Session) stage(k Key, ids []int, pos int) ([]float32, error) {
	logits, _, err := s.RunLogits(k, pos, len(ids), k.Want, lm.Inputs{IDs: ids})
	return logits, err
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
