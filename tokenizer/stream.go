package tokenizer

import (
	"fmt"
	"strings"
)

// Stream decodes ids one at a time, for printing tokens as they are
// generated. Next returns the text that became complete: a partial UTF-8
// character at the end (a byte-fallback token, a multi-byte character
// split across byte-level tokens) is held back rather than shown as
// U+FFFD, and decoders that look at neighbouring tokens (Metaspace's
// leading space, Strip) see them.
//
// It works as the tokenizers library's DecodeStream: it decodes a short
// window of recent ids, whose first ones are context already returned, and
// returns what grew past it; it also returns the complete part of a token
// whose text ends in a partial character. A Stream is not safe for
// concurrent use.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	ids         []int  // the window
	prefix      string // the text of ids[:prefixIndex]: context, returned before
	prefixIndex int
	sent        string // the text after prefix returned so far
}

// NewStream starts a stream; with skipSpecial, special tokens give no text.
func (t *Tokenizer) NewStream(skipSpecial bool) *Stream {
	return &Stream{t: t, skipSpecial: skipSpecial}
}

// Next adds one id and returns the text it completes ("" when it
// completes none). An id the tokenizer does not have is an error that
// leaves the stream as it was.
func (s *Stream) Next(id int) (string, error) {
	if _, ok := s.t.decodeToken(id); !ok {
		return "", fmt.Errorf("tokenizer: stream: id %d is not in the vocabulary (%d ids)", id, s.t.vocabSize)
	}
	s.ids = append(s.ids, id)
	text, err := s.t.Decode(s.ids, s.skipSpecial)
	if err != nil {
		s.ids = s.ids[:len(s.ids)-1]
		return "", err
	}
	if !strings.HasPrefix(text, s.prefix) || !strings.HasPrefix(text[len(s.prefix):], s.sent) {
		s.ids = s.ids[:len(s.ids)-1]
		return "", fmt.Errorf("tokenizer: stream: the text of the window %q no longer starts with %q", text, s.prefix+s.sent)
	}
	avail := text[len(s.prefix):]
	complete := strings.TrimRight(avail, "\uFFFD")
	if len(complete) < len(s.sent) {
		complete = s.sent
	}
	out := complete[len(s.sent):]
	s.sent = complete
	if len(complete) == len(avail) {
		// Nothing held back: keep the ids from prefixIndex on as the
		// context of the next.
		newPrefixIndex := len(s.ids) - s.prefixIndex
		s.ids = append(s.ids[:0], s.ids[s.prefixIndex:]...)
		if s.prefix, err = s.t.Decode(s.ids, s.skipSpecial); err != nil {
			return "", err
		}
		s.prefixIndex, s.sent = newPrefixIndex, ""
	}
	return out, nil
}

// Flush returns the text still held back (an incomplete character comes
// out as U+FFFD, as Decode gives it) and starts the stream afresh.
func (s *Stream) Flush() (string, error) {
	text, err := s.t.Decode(s.ids, s.skipSpecial)
	if err != nil {
		return "", err
	}
	var out string
	if strings.HasPrefix(text, s.prefix+s.sent) {
		out = text[len(s.prefix)+len(s.sent):]
	}
	s.ids, s.prefix, s.prefixIndex, s.sent = s.ids[:0], "", 0, ""
	return out, nil
}
