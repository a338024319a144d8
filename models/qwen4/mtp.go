package qwen4

import (
	"cmp"
	"fmt"
	"slices"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/sample"
)

// feedHead runs the MTP head over the pairs (H_p, x_{p+1}) a forward chunk
// of ids at pos completes, hs being the chunk's final hyper-states and prev
// the one before it (nil: unknown), and keeps the chunk's last.
func (s *Session) feedHead(prev []float32, ids []int, pos int, hs []float32) error {
	ch := s.c.Streams * s.c.Hidden
	rows := len(ids)
	first, pairs, next := pos-1, hs[:(rows-1)*ch], ids
	if prev != nil && pos > 0 {
		pairs = append(slices.Clone(prev), pairs...)
	} else {
		first, next = pos, ids[1:]
	}
	if len(next) > 0 {
		k := Key{Stage: Draft, Want: lm.WantNone, Rows: s.PlanRows(len(next))} // a bucket's plan, the hidden rows padded
		if _, err := s.Run(k, first, len(next), lm.Inputs{IDs: next, F32: map[string][]float32{InputHidden: pairs}}); err != nil {
			return fmt.Errorf("mtp (the forward itself ran: the cache holds %d positions): %w", s.Pos(), err)
		}
	}
	s.SetHost(hostHidden, slices.Clone(hs[(rows-1)*ch:]))
	return nil
}

// Draft drafts n tokens greedily with the MTP head after a forward: next is
// the token at Pos() (picked from the last logits); draft j pairs the
// hyper-state of position Pos()−1+j (the main model's for the first, the
// head's own after) with the token at Pos()+j (next, then the drafts) and
// predicts the token at Pos()+j+1. The drafts write the head's cache at
// those positions; the next Forward rewrites them with the accepted tokens.
func (s *Session) Draft(next, n int) ([]int, error) {
	if err := s.Check([]int{next}, s.Pos(), lm.WantLast); err != nil { // open, not broken, next a token
		return nil, fmt.Errorf("qwen4: draft: %w", err)
	}
	if !s.mtp {
		return nil, fmt.Errorf("qwen4: draft: the session has no MTP head (the checkpoint carries no mtp.* tensors, or Options.NoMTP)")
	}
	if s.hidden() == nil || s.Pos() == 0 {
		return nil, fmt.Errorf("qwen4: draft: no hyper-state of position %d (run a forward first)", s.Pos()-1)
	}
	h, tok := s.hidden(), next
	var out []int
	for j := 0; j < n; j++ {
		logits, hs, err := s.DraftRows(h, []int{tok}, s.Pos()-1+j, lm.WantLast)
		if err != nil {
			return out, err
		}
		tok = sample.Argmax(logits.Data().([]float32))
		out = append(out, tok)
		h = hs.Data().([]float32)
	}
	return out, nil
}

// DraftRows runs the MTP head over rows: row t pairs hidden[t] (a final
// hyper-state [C·H] at position pos0+t) with ids[t] (the token at pos0+t+1).
// It returns the wanted logits [rows or 1, vocab] (nil for lm.WantNone) and the
// head's own final hyper-states [rows, C·H] (the next draft's hidden). It
// writes the head's cache at those positions (pos0 may not pass the
// positions the cache holds, lm.ErrUnwritten: a forward fills it up to
// Pos()−1) and leaves the main model's state alone.
func (s *Session) DraftRows(hidden []float32, ids []int, pos0 int, want lm.Want) (logits, hs *tensor.Dense, err error) {
	if !s.mtp {
		return nil, nil, fmt.Errorf("qwen4: draft: the session has no MTP head")
	}
	ch := s.c.Streams * s.c.Hidden
	if len(hidden) != len(ids)*ch {
		return nil, nil, fmt.Errorf("qwen4: draft: %d hidden values for %d rows of %d", len(hidden), len(ids), ch)
	}
	if pos0 < 0 {
		return nil, nil, fmt.Errorf("qwen4: draft at position %d", pos0)
	}
	if err := cmp.Or(lm.CheckTokens(ids, pos0, pos0, s.c.Vocab), want.Check()); err != nil {
		return nil, nil, fmt.Errorf("qwen4: draft: %w", err)
	}
	k := Key{Stage: Draft, Want: want, Rows: len(ids)}
	lg, outs, err := s.RunLogits(k, pos0, len(ids), want, lm.Inputs{IDs: ids, F32: map[string][]float32{InputHidden: hidden}})
	if err != nil {
		return nil, nil, fmt.Errorf("qwen4: draft: %w", err)
	}
	if lg != nil {
		logits = tensor.New(tensor.WithShape(len(lg)/s.c.Vocab, s.c.Vocab), tensor.WithBacking(lg))
	}
	hv, err := s.Core().ReadF32(outs[len(outs)-1])
	if err != nil {
		return nil, nil, err
	}
	return logits, tensor.New(tensor.WithShape(len(ids), ch), tensor.WithBacking(hv)), nil
}
