package tokenizer

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// streamAll feeds ids one at a time and returns each call's text and the
// flushed rest.
func streamAll(t *testing.T, s *Stream, ids []int) ([]string, string) {
	t.Helper()
	var chunks []string
	for _, id := range ids {
		c, err := s.Next(id)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	rest, err := s.Flush()
	if err != nil {
		t.Fatal(err)
	}
	return chunks, rest
}

// Streaming the golden ids gives Decode's text, and after each id exactly
// the text that is complete: Decode of the ids so far without the U+FFFD
// a partial character at the end decodes to. Emoji, CJK and accented
// letters split across byte-level tokens are in the goldens.
func TestStreamGolden(t *testing.T) {
	for _, name := range realTokenizers {
		tok := loadReal(t, name)
		g := readGolden(t, name)
		for _, c := range g.Cases {
			full := decode(t, tok, c.IDs, false)
			s := tok.NewStream(false)
			var got strings.Builder
			for k, id := range c.IDs {
				chunk, err := s.Next(id)
				if err != nil {
					t.Fatal(err)
				}
				got.WriteString(chunk)
				if !strings.Contains(full, "\uFFFD") && strings.Contains(chunk, "\uFFFD") {
					t.Errorf("%s %q: chunk %d is %q", name, c.Text, k, chunk)
				}
				want := strings.TrimRight(decode(t, tok, c.IDs[:k+1], false), "\uFFFD")
				if got.String() != want {
					t.Errorf("%s %q: after id %d the stream gave %q, want %q", name, c.Text, k, got.String(), want)
				}
			}
			rest, err := s.Flush()
			if err != nil {
				t.Fatal(err)
			}
			if got.String()+rest != full {
				t.Errorf("%s %q: stream %q + %q, want %q", name, c.Text, got.String(), rest, full)
			}
		}
	}
}

// A byte-fallback character comes out once its last byte arrives; the
// leading space Strip and Metaspace take off the first token is kept on
// later ones.
func TestStreamSentencePiece(t *testing.T) {
	tok := llama2(t, bosTemplate)
	chunks, rest := streamAll(t, tok.NewStream(false), []int{idWS, 3 + 0xC3, 3 + 0xA9, idHello, 3 + 0xE2})
	want := []string{"h", "", "é", " hello", ""}
	if !cmp.Equal(chunks, want) || rest != "\uFFFD" {
		t.Errorf("chunks %q, rest %q; want %q, %q", chunks, rest, want, "\uFFFD")
	}
	// Skipping special tokens.
	chunks, rest = streamAll(t, tok.NewStream(true), []int{1, idHello, idWorld, 2})
	if want := []string{"", "hello", " world", ""}; !cmp.Equal(chunks, want) || rest != "" {
		t.Errorf("chunks %q, rest %q; want %q", chunks, rest, want)
	}
}

// A bad id is an error that leaves the stream as it was.
func TestStreamBadID(t *testing.T) {
	tok := llama2(t, bosTemplate)
	s := tok.NewStream(false)
	if _, err := s.Next(idHello); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int{-1, tok.VocabSize(), 1 << 40} {
		if _, err := s.Next(bad); err == nil {
			t.Errorf("Next(%d) succeeded", bad)
		}
	}
	if c, err := s.Next(idWorld); err != nil || c != " world" {
		t.Errorf("after the errors Next = %q, %v; want %q", c, err, " world")
	}
}
