package sample

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// StopOptions say when generation ends.
type StopOptions struct {
	// EOS are the end-of-sequence ids: generating one stops, and its text
	// is not shown.
	EOS []int
	// Strings are stop strings: when the text generated contains one, the
	// text before it is shown and generation stops; the stop string and
	// anything after it are not shown. A stop string may span tokens.
	Strings []string
	// MaxTokens stops after that many tokens (the EOS or the token that
	// completes a stop string counts); 0 is no limit.
	MaxTokens int
}

// Validate checks the options: ids and the limit not negative, no empty
// stop string.
func (o StopOptions) Validate() error {
	var errs []error
	for i, id := range o.EOS {
		if id < 0 {
			errs = append(errs, fmt.Errorf("sample: EOS id %d (#%d) is negative", id, i))
		}
	}
	for i, s := range o.Strings {
		if s == "" {
			errs = append(errs, fmt.Errorf("sample: stop string #%d is empty", i))
		}
	}
	if o.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("sample: max tokens %d is negative", o.MaxTokens))
	}
	return errors.Join(errs...)
}

// Reason says why generation stopped.
type Reason int

// The reasons a Stopper stops.
const (
	NotStopped    Reason = iota // still going
	StopEOS                     // an end-of-sequence id
	StopString                  // a stop string
	StopMaxTokens               // the token limit
)

// String names the reason.
func (r Reason) String() string {
	switch r {
	case NotStopped:
		return "not stopped"
	case StopEOS:
		return "eos"
	case StopString:
		return "stop string"
	case StopMaxTokens:
		return "max tokens"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// A Stopper is fed each generated token with its text and says when to
// stop and which text to show. Text that might be the start of a stop
// string is held back until the tokens after it show that it is not (or
// that it is: then it is never shown), so what it returns can be printed
// as it comes. The text is handled as bytes: a stop string is found even
// where a token's text ends inside a UTF-8 character.
type Stopper struct {
	opts   StopOptions
	eos    map[int]bool
	held   string // text that may begin a stop string
	n      int    // tokens pushed
	reason Reason
	match  string // the stop string found
}

// NewStopper makes a stopper after checking its options.
func NewStopper(o StopOptions) (*Stopper, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Stopper{opts: o, eos: map[int]bool{}}
	s.opts.Strings = slices.Clone(o.Strings)
	for _, id := range o.EOS {
		s.eos[id] = true
	}
	return s, nil
}

// Push takes the next generated token and its text. It returns the text
// to show now and whether generation stops here. Once stopped, it returns
// "" and true.
func (s *Stopper) Push(id int, text string) (show string, stop bool) {
	if s.reason != NotStopped {
		return "", true
	}
	s.n++
	if s.eos[id] {
		return s.finish(StopEOS), true
	}
	buf := s.held + text
	s.held = ""
	if at, str := s.find(buf); at >= 0 {
		s.match = str
		s.reason = StopString
		return buf[:at], true
	}
	if s.opts.MaxTokens > 0 && s.n >= s.opts.MaxTokens {
		s.held = buf
		return s.finish(StopMaxTokens), true
	}
	keep := s.partial(buf)
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// Flush ends generation for a reason of the caller's (a cancelled run):
// it returns the text held back, which no stop string followed.
func (s *Stopper) Flush() string {
	h := s.held
	s.held = ""
	return h
}

// Reason says why generation stopped (NotStopped while it goes on).
func (s *Stopper) Reason() Reason { return s.reason }

// Match is the stop string that stopped generation ("" for other reasons).
func (s *Stopper) Match() string { return s.match }

// Tokens is the number of tokens pushed.
func (s *Stopper) Tokens() int { return s.n }

// finish stops for reason r, returning the text held back: it began no
// stop string after all.
func (s *Stopper) finish(r Reason) string {
	s.reason = r
	return s.Flush()
}

// find returns where the first stop string in buf begins, and which it is
// (the first listed, of those that begin there), or −1.
func (s *Stopper) find(buf string) (at int, str string) {
	at = -1
	for _, stop := range s.opts.Strings {
		if i := strings.Index(buf, stop); i >= 0 && (at < 0 || i < at) {
			at, str = i, stop
		}
	}
	return at, str
}

// partial is the length of the longest end of buf that is the beginning
// of a stop string (one not yet complete).
func (s *Stopper) partial(buf string) int {
	longest := 0
	for _, stop := range s.opts.Strings {
		for n := min(len(buf), len(stop)-1); n > longest; n-- {
			if strings.HasSuffix(buf, stop[:n]) {
				longest = n
				break
			}
		}
	}
	return longest
}
