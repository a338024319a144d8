package lm

import (
	"fmt"
	"slices"

	"gorgonia.org/tensor"
)

// Speculate runs a speculation window at Pos(): ids are the token at
// Pos() and drafts of the tokens after it (a draft head's guesses),
// which forward (the model's Forward, whose chunks see Windowed) runs
// in one plan of len(ids) rows, every row's logits wanted. Draft i
// (ids[i+1]) is accepted when accept says so given the logits of the row
// before it, up to the first refusal. When a draft was refused, the
// window's later rows are taken back: the recurrent states come back
// from a copy Speculate keeps of its own (the session's snapshot stays
// as it was), settle advances them over the accepted rows (ids are those
// rows' tokens, of a window of rows rows at pos0) from what the window's
// forward kept of them (a tape), and the session stands after those rows;
// the slots keep what the window wrote, being indexed by position. It
// returns how many drafts it accepted and the logits of the last accepted
// row.
func (s *Session) Speculate(ids []int, forward func(ids []int, pos0 int, want Want) (*tensor.Dense, error),
	accept func(logits []float32, draft int) bool, settle func(pos0 int, ids []int, rows int) error) (accepted int, logits []float32, err error) {
	p0 := s.pos
	if err := s.Check(ids, p0, WantAll); err != nil {
		return 0, nil, err
	}
	if len(ids) > s.opts.Chunk {
		return 0, nil, fmt.Errorf("a window of %d rows is more than a chunk of %d", len(ids), s.opts.Chunk)
	}
	if err := s.Save(&s.window); err != nil {
		return 0, nil, err
	}
	s.windowed = true
	out, err := forward(ids, p0, WantAll)
	s.windowed = false
	if err != nil {
		return 0, nil, err
	}
	v, rows, drafts := s.vocab, out.Data().([]float32), ids[1:]
	for accepted < len(drafts) && accept(rows[accepted*v:(accepted+1)*v], drafts[accepted]) {
		accepted++
	}
	logits = slices.Clone(rows[accepted*v : (accepted+1)*v])
	if accepted == len(drafts) {
		return accepted, logits, nil
	}
	if err := s.takeBack(p0, ids[:accepted+1], len(ids), settle); err != nil {
		return 0, nil, fmt.Errorf("taking back the refused rows: %w", err)
	}
	return accepted, logits, nil
}

// takeBack makes the session stand after the first rows (ids) of the
// window of rows rows at pos0 that Speculate ran: the window's copy of the
// recurrent states restored, then settled over those rows.
func (s *Session) takeBack(pos0 int, ids []int, rows int, settle func(pos0 int, ids []int, rows int) error) error {
	if err := s.Restore(&s.window); err != nil {
		return err
	}
	if err := settle(pos0, ids, rows); err != nil {
		return err
	}
	return s.Advance(len(ids))
}

// Windowed says whether the forward running is a speculation window's
// (Speculate): one whose chunks keep what taking its refused rows back
// will need (a tape of the recurrent layers' inputs, say).
func (s *Session) Windowed() bool { return s.windowed }

// Forget makes the Slot and Ring states whose names match hold no
// position from n on, as a rollback to n makes every one: a run that
// would read their rows there is refused (ErrUnwritten). A model says so
// of a slot whose rows past n were written from tokens since refused (a
// draft head's cache after a speculation window).
func (s *Session) Forget(n int, match func(name string) bool) {
	for _, sl := range s.slots {
		if match(sl.name) {
			sl.held = min(sl.held, n)
		}
	}
}
