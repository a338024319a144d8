package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/reel-runtime/reel/tokenizer/internal/regex"
)

// normalizer rewrites the text of a piece before pre-tokenization.
type normalizer interface {
	normalize(s string) (string, error)
}

// parseNormalizer reads a "normalizer" object (nil for JSON null).
func parseNormalizer(path string, raw json.RawMessage) (normalizer, error) {
	o, typ, err := parseComponent(path, raw)
	if o == nil || err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := sequence(o, "normalizers", parseNormalizer)
		return normSequence(seq), err
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "Strip":
		left, err := o.boolean("strip_left", true)
		if err != nil {
			return nil, err
		}
		right, err := o.boolean("strip_right", true)
		if err != nil {
			return nil, err
		}
		return strip{left, right}, nil
	case "StripAccents":
		return stripAccents{}, nil
	case "Prepend":
		s, err := o.str("prepend", "")
		if err != nil {
			return nil, err
		}
		return prepend(s), nil
	case "Replace":
		return parseReplace(o)
	case "ByteLevel":
		return byteLevelNorm{}, nil
	case "Nmt":
		return nmt{}, nil
	case "Bert", "BertNormalizer", "Precompiled":
		return nil, fmt.Errorf("%s: not supported: normalizer type %q", o.at("type"), typ)
	}
	return nil, fmt.Errorf("%s: unknown normalizer type %q", o.at("type"), typ)
}

// parsePattern compiles a {"String": ...} or {"Regex": ...} field.
func parsePattern(o *object, key string) (*regex.Regexp, error) {
	s, isRegex, err := o.pattern(key)
	if err != nil {
		return nil, err
	}
	if !isRegex {
		return regex.Literal(s), nil
	}
	re, err := regex.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.at(key), err)
	}
	return re, nil
}

// normSequence applies normalizers in order.
type normSequence []normalizer

func (seq normSequence) normalize(s string) (string, error) {
	var err error
	for _, n := range seq {
		if s, err = n.normalize(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// unicodeNorm is one of the four Unicode normalization forms.
type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) (string, error) { return u.form.String(s), nil }

// lowercase maps each rune to its lowercase, as Rust's char::to_lowercase:
// the full mapping, so İ (U+0130) becomes "i̇", and no context (a final
// sigma stays σ).
type lowercase struct{}

func (lowercase) normalize(s string) (string, error) {
	return mapRunes(strings.ReplaceAll(s, "\u0130", "i\u0307"), unicode.ToLower), nil
}

// mapRunes is strings.Map, except that invalid UTF-8 bytes are kept as
// they are rather than turned into U+FFFD.
func mapRunes(s string, f func(rune) rune) string {
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			if changed {
				b.WriteByte(s[i])
			}
			i += w
			continue
		}
		m := f(r)
		if m != r && !changed {
			changed = true
			b.Grow(len(s))
			b.WriteString(s[:i])
		}
		if changed && m >= 0 {
			b.WriteRune(m)
		}
		i += w
	}
	if !changed {
		return s
	}
	return b.String()
}

// strip removes leading and/or trailing White_Space.
type strip struct{ left, right bool }

func (st strip) normalize(s string) (string, error) {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// stripAccents removes nonspacing marks (usually after NFD or NFKD).
type stripAccents struct{}

func (stripAccents) normalize(s string) (string, error) {
	return mapRunes(s, func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}), nil
}

// prepend puts a string before any non-empty text.
type prepend string

func (p prepend) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return string(p) + s, nil
}

// replace replaces every match of a pattern with content.
type replace struct {
	re      *regex.Regexp
	content string
}

// parseReplace reads a Replace normalizer's or decoder's pattern and content.
func parseReplace(o *object) (replace, error) {
	re, err := parsePattern(o, "pattern")
	if err != nil {
		return replace{}, err
	}
	content, err := o.str("content", "")
	return replace{re, content}, err
}

func (r replace) normalize(s string) (string, error) {
	return replaceAll(r.re, s, r.content)
}

// replaceAll replaces each match of re in s with content.
func replaceAll(re *regex.Regexp, s, content string) (string, error) {
	var b strings.Builder
	last := 0
	err := re.FindEach(s, func(start, end int) error {
		b.WriteString(s[last:start])
		b.WriteString(content)
		last = end
		return nil
	})
	if err != nil {
		return "", err
	}
	if last == 0 && b.Len() == 0 {
		return s, nil
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// byteLevelNorm maps every byte to its byte-level rune, as the ByteLevel
// pre-tokenizer does, but as a normalizer.
type byteLevelNorm struct{}

func (byteLevelNorm) normalize(s string) (string, error) { return bytesTable.encode(s), nil }

// nmt drops control characters and maps other spaces to ' ', as
// SentencePiece's NMT normalization.
type nmt struct{}

func (nmt) normalize(s string) (string, error) {
	return mapRunes(s, func(r rune) rune {
		switch {
		case r >= 0x1 && r <= 0x8, r == 0xB, r >= 0xE && r <= 0x1F, r == 0x7F, r == 0x8F, r == 0x9F:
			return -1
		case r == 0x9, r == 0xA, r == 0xC, r == 0xD, r == 0x1680, r >= 0x200B && r <= 0x200F,
			r == 0x2028, r == 0x2029, r == 0x2581, r == 0xFEFF, r == 0xFFFD:
			return ' '
		}
		return r
	}), nil
}
