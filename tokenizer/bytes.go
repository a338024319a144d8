package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteLevel maps bytes to the printable runes GPT-2's byte-level BPE writes
// them as, and back. Bytes that are printable Latin-1 (! to ~, ¡ to ¬, ® to
// ÿ) stand for themselves; the other 68 take the runes from U+0100 up, in
// byte order.
type byteLevel struct {
	toRune [256]rune
	toByte map[rune]byte
	// toStr holds each byte's rune as a string, to build mapped strings.
	toStr [256]string
}

// newByteLevel builds the tables.
func newByteLevel() *byteLevel {
	bl := &byteLevel{toByte: make(map[rune]byte, 256)}
	printable := func(b int) bool {
		return b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = 256 + n
			n++
		}
		bl.toRune[b] = r
		bl.toByte[r] = byte(b)
		bl.toStr[b] = string(r)
	}
	return bl
}

// encode maps every byte of s to its rune.
func (bl *byteLevel) encode(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteString(bl.toStr[s[i]])
	}
	return b.String()
}

// decodeToken appends the bytes token stands for: its runes mapped back to
// bytes, or, when any rune is not a byte's (an added token such as
// "<|im_end|>" with non-Latin runes), the token's own UTF-8 bytes.
func (bl *byteLevel) decodeToken(dst []byte, token string) []byte {
	n := len(dst)
	for _, r := range token {
		b, ok := bl.toByte[r]
		if !ok {
			return append(dst[:n], token...)
		}
		dst = append(dst, b)
	}
	return dst
}

// lossyString converts b to a string as Rust's String::from_utf8_lossy:
// each maximal ill-formed subsequence becomes one U+FFFD.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out strings.Builder
	out.Grow(len(b) + 8)
	for len(b) > 0 {
		r, w := utf8.DecodeRune(b)
		if r != utf8.RuneError || w > 1 {
			out.Write(b[:w])
			b = b[w:]
			continue
		}
		n := invalidPrefix(b)
		out.WriteRune(utf8.RuneError)
		b = b[n:]
	}
	return out.String()
}

// invalidPrefix is the length of the maximal prefix of b that is the start
// of a well-formed UTF-8 sequence (at least 1), b starting with an
// ill-formed one.
func invalidPrefix(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the second byte's range
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
			break
		}
		n++
	}
	return n
}

// decodeRune decodes the rune at s[i:]; an invalid byte is U+FFFD of
// width 1.
func decodeRune(s string, i int) (rune, int) { return utf8.DecodeRuneInString(s[i:]) }
