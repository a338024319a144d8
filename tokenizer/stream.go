package tokenizer

import (
	"fmt"
	"strings"
)

// Stream decodes ids one at a time, for printing tokens as they are
// generated. Next returns the text that became complete: a partial UTF-8
// character (a byte-fallback token, a multi-byte character split across
// byte-level tokens) is held back rather than shown as U+FFFD, and
// decoders that look at neighbouring tokens (Metaspace's leading space)
// see them. It follows the tokenizers library's DecodeStream: it decodes a
// short window of recent ids and returns what grew past the previous
// text. A Stream is not safe for concurrent use.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	ids         []int  // the window
	prefix      string // the text of ids[:prefixIndex], already returned
	prefixIndex int
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
	if s.prefix == "" && len(s.ids) > 0 {
		p, err := s.t.Decode(s.ids, s.skipSpecial)
		if err != nil {
			return "", err
		}
		if !strings.HasSuffix(p, "\uFFFD") {
			s.prefix, s.prefixIndex = p, len(s.ids)
		}
	}
	s.ids = append(s.ids, id)
	text, err := s.t.Decode(s.ids, s.skipSpecial)
	if err != nil {
		return "", err
	}
	if len(text) <= len(s.prefix) || strings.HasSuffix(text, "\uFFFD") {
		return "", nil
	}
	if !strings.HasPrefix(text, s.prefix) {
		return "", fmt.Errorf("tokenizer: stream: the text of the window %q no longer starts with %q", text, s.prefix)
	}
	out := text[len(s.prefix):]
	newPrefixIndex := len(s.ids) - s.prefixIndex
	s.ids = append(s.ids[:0], s.ids[s.prefixIndex:]...)
	if s.prefix, err = s.t.Decode(s.ids, s.skipSpecial); err != nil {
		return "", err
	}
	s.prefixIndex = newPrefixIndex
	return out, nil
}

// Flush returns the text still held back (an incomplete character comes
// out as U+FFFD, as Decode gives it) and starts the stream afresh.
func (s *Stream) Flush() (string, error) {
	text, err := s.t.Decode(s.ids, s.skipSpecial)
	if err != nil {
		return "", err
	}
	s.ids, s.prefix, s.prefixIndex = s.ids[:0], "", 0
	if len(text) <= len(s.prefix) || !strings.HasPrefix(text, s.prefix) {
		return "", nil
	}
	return text[len(s.prefix):], nil
}
