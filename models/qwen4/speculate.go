package qwen4

import (
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/sample"
)

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
// projections, attention or experts). It returns how many drafts it
// accepted and the logits of the last accepted row, whose argmax is the
// token after the window.
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
	p0 := s.Pos()
	if err := s.Check(ids, p0, lm.WantAll); err != nil {
		return 0, nil, fmt.Errorf("qwen4: verify: %w", err)
	}
	if len(ids) > s.Chunk() {
		return 0, nil, fmt.Errorf("qwen4: verify: a window of %d rows is more than a chunk of %d", len(ids), s.Chunk())
	}
	if err := s.Save(&s.window); err != nil {
		return 0, nil, fmt.Errorf("qwen4: verify: %w", err)
	}
	s.inWindow, s.windowHidden = true, nil
	out, err := s.Forward(ids, p0, lm.WantAll)
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
	if err := s.Restore(&s.window); err != nil {
		return err
	}
	s.hidden, s.mtpPos = nil, min(s.mtpPos, p0)
	if s.c.Recurrent() {
		k := Key{Stage: Settle, Want: lm.WantNone, Rows: len(ids), TapeRows: wrows}
		if _, err := s.Run(k, p0, len(ids), lm.Inputs{IDs: ids}); err != nil {
			return err
		}
	}
	if err := s.Advance(len(ids)); err != nil {
		return err
	}
	ch, a := s.c.Streams*s.c.Hidden, len(ids)-1
	if s.mtp && len(s.windowHidden) >= (a+1)*ch {
		s.hidden = slices.Clone(s.windowHidden[a*ch : (a+1)*ch])
		s.mtpPos = p0 + a
	}
	return nil
}
