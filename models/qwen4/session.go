package qwen4

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/lm"
)

// Options configure a Session: those of every session, and whether the
// MTP head runs.
type Options struct {
	lm.SessionOptions
	// NoMTP leaves the MTP head off even when the model has one (a
	// forward then skips filling its cache).
	NoMTP bool
}

// Session runs forwards of one sequence. Its lm.Session keeps the states
// the graphs declare between calls: the QSA caches (slots that grow with
// the sequence), the GDN recurrent states and conv rings and the PLE
// histories (recurrent: they go back only to a snapshot) and the
// speculation windows' tapes. Qwen4-Exp adds the MTP draft head (Draft,
// DraftRows), fed by every forward, and speculation windows (Verify). The
// lm.Session's methods that Session does not redefine (Pos, Stats,
// Planned, Profile, Backend, ...) are its own. It is not safe for
// concurrent use.
type Session struct {
	*lm.Session
	c   Config
	mtp bool
	// windowHidden are a speculation window's rows' final hyper-states,
	// which its forward keeps (it tapes too, on a recurrent model).
	windowHidden []float32
}

// NewSession prepares a session on the model's weights.
func NewSession(m *Model, opts Options) (*Session, error) {
	if m == nil {
		return nil, fmt.Errorf("qwen4: new session on a nil model")
	}
	mtp := m.HasMTP && !opts.NoMTP
	if opts.MaxPositions == 0 {
		opts.MaxPositions = m.Config.MaxPositions
	}
	ls, err := lm.NewSession(m, lm.GraphFuncs[Key]{
		VocabSize: m.Config.Vocab,
		// a forward gives the rows' final hyper-states when the MTP head runs
		KeyOf:   func(rows int, want lm.Want) Key { return Key{Stage: Forward, Want: want, Rows: rows, Hidden: mtp} },
		BuildOf: func(k Key) (*graph.Graph, error) { return Build(&m.Config, k, m) },
		StateOf: m.Config.stateSpec,
	}, opts.SessionOptions)
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	return &Session{Session: ls, c: m.Config, mtp: mtp}, nil
}

// hostHidden names the host value of the main model's final hyper-state
// at position Pos()−1 (when the MTP head is on and known), which the
// head's next pair reads: the lm.Session keeps it with snapshots.
const hostHidden = "hidden"

// hidden is the main model's final hyper-state at position Pos()−1, nil
// when unknown.
func (s *Session) hidden() []float32 { return s.Host(hostHidden) }

// CanDraft reports whether the session runs the MTP head, to draft with
// (the model has one and Options.NoMTP is off).
func (s *Session) CanDraft() bool { return s.mtp }

// Forward runs ids at positions pos0, pos0+1, ... and returns the wanted
// logits as a [rows, vocab] f32 tensor (nil for lm.WantNone). pos0 must equal
// Pos(). A call that fails its checks changes nothing; a run that fails may
// leave the recurrent states half-advanced, and later calls say so until a
// Reset or a Rollback to a snapshot.
func (s *Session) Forward(ids []int, pos0 int, want lm.Want) (*tensor.Dense, error) {
	d, err := s.ForwardWith(ids, pos0, want, s.chunk)
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	return d, nil
}

// chunk runs one plan of the forward over ids at pos (the plan of their
// bucket's rows, lm.Session.PlanRows; a speculation window's own) and the
// MTP head over the pairs it completes.
func (s *Session) chunk(ids []int, pos int, want lm.Want) ([]float32, error) {
	rows := len(ids)
	k := Key{Stage: Forward, Want: want, Rows: s.PlanRows(rows), Hidden: s.mtp, Tape: s.Windowed() && s.c.Recurrent()}
	outs, err := s.Run(k, pos, rows, lm.Inputs{IDs: ids})
	if err != nil {
		return nil, err
	}
	// the states hold the chunk whatever fails after
	prev := s.hidden()
	s.SetHost(hostHidden, nil)
	if err := s.Advance(rows); err != nil {
		return nil, err
	}
	var logits []float32
	if want != lm.WantNone {
		if logits, err = s.Logits(outs[0], pos, rows, want); err != nil {
			return nil, err
		}
	}
	if !s.mtp {
		return logits, nil
	}
	hs, err := s.Core().ReadF32N(outs[len(outs)-1], rows*s.c.Streams*s.c.Hidden, nil) // the rows in use
	if err != nil {
		return nil, err
	}
	if s.Windowed() {
		s.windowHidden = hs
	}
	if err := s.feedHead(prev, ids, pos, hs); err != nil {
		return nil, err
	}
	return logits, nil
}
