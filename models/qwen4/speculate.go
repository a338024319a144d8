package qwen4

import (
	"fmt"
	"slices"
	"strings"

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
	s.windowHidden = nil
	accepted, logits, err = s.Speculate(append([]int{next}, drafts...), s.Forward, accept, s.settle)
	if err != nil {
		return 0, nil, fmt.Errorf("qwen4: verify: %w", err)
	}
	return accepted, logits, nil
}

// settle advances the recurrent states, back at the start p0 of a window
// of wrows rows, over its accepted rows (ids are their tokens) from the
// tape (the Settle stage); the QSA caches, indexed by position, keep what
// the window wrote; the MTP head keeps its cache up to the last pair of
// accepted tokens and the hyper-state of the last accepted row.
func (s *Session) settle(p0 int, ids []int, wrows int) error {
	ch, a := s.c.Streams*s.c.Hidden, len(ids)-1
	known := s.mtp && len(s.windowHidden) >= (a+1)*ch // the last accepted row's hyper-state
	keep := p0                                        // the head's cache holds the pairs before keep
	if known {
		keep = p0 + a
	}
	s.SetHost(hostHidden, nil)
	s.Forget(keep, func(name string) bool { return strings.HasPrefix(name, StateName("qsa", "mtp", "")) })
	if s.c.Recurrent() {
		k := Key{Stage: Settle, Want: lm.WantNone, Rows: len(ids), TapeRows: wrows}
		if _, err := s.Run(k, p0, len(ids), lm.Inputs{IDs: ids}); err != nil {
			return err
		}
	}
	if known {
		s.SetHost(hostHidden, slices.Clone(s.windowHidden[a*ch:(a+1)*ch]))
	}
	return nil
}
