package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenKind is the kind of a lexer token.
type tokenKind int

const (
	tokData       tokenKind = iota // text outside tags
	tokVarBegin                    // {{
	tokVarEnd                      // }}
	tokBlockBegin                  // {%
	tokBlockEnd                    // %}
	tokName                        // identifier or keyword
	tokString                      // string literal (value unescaped)
	tokInt                         // integer literal
	tokFloat                       // float literal
	tokOp                          // operator or punctuation
	tokEOF
)

// token is one lexer token and the template line it starts on.
type token struct {
	kind tokenKind
	val  string
	line int
}

func (t token) String() string {
	switch t.kind {
	case tokData:
		return "template data"
	case tokVarBegin:
		return "'{{'"
	case tokVarEnd:
		return "end of print statement"
	case tokBlockBegin:
		return "'{%'"
	case tokBlockEnd:
		return "end of statement block"
	case tokString:
		return strconv.Quote(t.val)
	case tokEOF:
		return "end of template"
	}
	return "'" + t.val + "'"
}

// operators are the operator tokens, longest first.
var operators = []string{
	"//", "**", "==", "!=", "<=", ">=",
	"+", "-", "*", "/", "%", "~", "[", "]", "(", ")", "{", "}",
	"<", ">", "=", ".", ":", "|", ",", ";",
}

// lexer splits a template into tokens the way Jinja2's lexer does with
// trim_blocks and lstrip_blocks on.
type lexer struct {
	src          string
	pos          int
	line         int
	toks         []token
	lineStarting bool // the last tag's end closed a line (for lstrip_blocks)
}

// isSpace reports whether r is whitespace as Python's str.isspace says.
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}

// rstripSpace is Python's s.rstrip().
func rstripSpace(s string) string { return strings.TrimRightFunc(s, isSpace) }

// normalizeSource applies Jinja2's newline handling: \r\n and \r become \n,
// and one trailing newline is dropped (keep_trailing_newline is off).
func normalizeSource(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	return strings.TrimSuffix(src, "\n")
}

func lex(src string) ([]token, error) {
	lx := &lexer{src: normalizeSource(src), line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tokEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) errorf(format string, args ...any) error {
	return &Error{Line: lx.line, Msg: fmt.Sprintf(format, args...)}
}

// emitData adds text as a data token and advances the line count.
func (lx *lexer) emitData(text string) {
	if text != "" {
		lx.toks = append(lx.toks, token{kind: tokData, val: text, line: lx.line})
		lx.line += strings.Count(text, "\n")
	}
}

// emitKept emits kept, what whitespace control left of text, and counts
// the lines of all of text.
func (lx *lexer) emitKept(text, kept string) {
	lx.emitData(kept)
	lx.line += strings.Count(text[len(kept):], "\n")
}

// advance moves the position past n bytes of source, counting lines.
func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

// nextTag finds the next "{{", "{%" or "{#" at or after pos.
func (lx *lexer) nextTag() int {
	for i := lx.pos; ; {
		j := strings.IndexByte(lx.src[i:], '{')
		if j < 0 || i+j+1 >= len(lx.src) {
			return -1
		}
		switch lx.src[i+j+1] {
		case '{', '%', '#':
			return i + j
		}
		i += j + 1
	}
}

// stripBefore applies the whitespace control of a tag to the text before
// it: "-" strips all whitespace, and lstrip_blocks strips the spaces and
// tabs between the line's start and a block or comment tag.
func (lx *lexer) stripBefore(text string, sign byte, kind byte) string {
	if sign == '-' {
		return rstripSpace(text)
	}
	if sign == '+' || kind == '{' {
		return text
	}
	lpos := strings.LastIndexByte(text, '\n') + 1
	if lpos > 0 || lx.lineStarting {
		rest := text[lpos:]
		if rest != "" && strings.TrimLeftFunc(rest, func(r rune) bool { return isSpace(r) && r != '\n' }) == "" {
			return text[:lpos]
		}
	}
	return text
}

// skipAfter consumes what a tag's end takes after it: all whitespace after
// "-", one newline after a block or comment end (trim_blocks), nothing
// after "+". It records whether the consumed text ended a line.
func (lx *lexer) skipAfter(sign byte, trim bool) {
	start := lx.pos
	switch {
	case sign == '-':
		rest := lx.src[lx.pos:]
		lx.advance(len(rest) - len(strings.TrimLeftFunc(rest, isSpace)))
	case sign == '+':
	case trim && strings.HasPrefix(lx.src[lx.pos:], "\n"):
		lx.advance(1)
	}
	if lx.pos > start {
		lx.lineStarting = lx.src[lx.pos-1] == '\n'
	}
}

func (lx *lexer) run() error {
	for lx.pos < len(lx.src) {
		at := lx.nextTag()
		if at < 0 {
			lx.emitData(lx.src[lx.pos:])
			lx.pos = len(lx.src)
			break
		}
		kind := lx.src[at+1]
		var sign byte
		if at+2 < len(lx.src) && (lx.src[at+2] == '-' || lx.src[at+2] == '+') {
			sign = lx.src[at+2]
		}
		text := lx.src[lx.pos:at]
		if kind == '%' {
			if ok, err := lx.raw(text, at, sign); ok || err != nil {
				if err != nil {
					return err
				}
				continue
			}
		}
		lx.emitKept(text, lx.stripBefore(text, sign, kind))
		lx.pos = at
		open := 2
		if sign != 0 {
			open = 3
		}
		switch kind {
		case '#':
			if err := lx.comment(open); err != nil {
				return err
			}
		case '{':
			lx.toks = append(lx.toks, token{kind: tokVarBegin, line: lx.line})
			lx.advance(open)
			if err := lx.inside("}}", tokVarEnd, false); err != nil {
				return err
			}
		case '%':
			lx.toks = append(lx.toks, token{kind: tokBlockBegin, line: lx.line})
			lx.advance(open)
			if err := lx.inside("%}", tokBlockEnd, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// comment skips a {# ... #} comment that starts at pos.
func (lx *lexer) comment(open int) error {
	body := lx.src[lx.pos+open:]
	end := strings.Index(body, "#}")
	if end < 0 {
		return lx.errorf("missing end of comment tag")
	}
	var sign byte
	if end > 0 && (body[end-1] == '-' || body[end-1] == '+') {
		sign = body[end-1]
	}
	lx.advance(open + end + 2)
	lx.lineStarting = false
	lx.skipAfter(sign, true)
	return nil
}

// matchTagWord matches "{%[-+]? word [-+]?%}" at the start of s, giving its
// length and the sign before its end.
func matchTagWord(s, word string) (n int, endSign byte, ok bool) {
	i := 2
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && isSpace(rune(s[i])) {
		i++
	}
	if !strings.HasPrefix(s[i:], word) {
		return 0, 0, false
	}
	i += len(word)
	if i < len(s) && (isNameByte(s[i]) || s[i] >= 0x80) {
		return 0, 0, false
	}
	for i < len(s) && isSpace(rune(s[i])) {
		i++
	}
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		endSign = s[i]
		i++
	}
	if !strings.HasPrefix(s[i:], "%}") {
		return 0, 0, false
	}
	return i + 2, endSign, true
}

// raw handles a {% raw %}...{% endraw %} block starting at at, if there is one.
func (lx *lexer) raw(text string, at int, sign byte) (bool, error) {
	n, endSign, ok := matchTagWord(lx.src[at:], "raw")
	if !ok {
		return false, nil
	}
	lx.emitKept(text, lx.stripBefore(text, sign, '%'))
	lx.pos = at
	lx.advance(n)
	lx.lineStarting = false
	if endSign == '-' {
		lx.skipAfter('-', false)
	}
	for i := lx.pos; ; {
		j := strings.Index(lx.src[i:], "{%")
		if j < 0 {
			return true, lx.errorf("missing end of raw directive")
		}
		m, esign, ok := matchTagWord(lx.src[i+j:], "endraw")
		if !ok {
			i += j + 2
			continue
		}
		body := lx.src[lx.pos : i+j]
		var bsign byte
		if i+j+2 < len(lx.src) {
			if c := lx.src[i+j+2]; c == '-' || c == '+' {
				bsign = c
			}
		}
		lx.emitKept(body, lx.stripBefore(body, bsign, '%'))
		lx.pos = i + j
		lx.advance(m)
		lx.lineStarting = false
		lx.skipAfter(esign, true)
		return true, nil
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// inside tokenizes the inside of a tag up to its end marker ("}}" or "%}").
func (lx *lexer) inside(end string, endKind tokenKind, trim bool) error {
	var balance []byte
	startLine := lx.line
	for {
		if lx.pos >= len(lx.src) {
			lx.line = startLine
			if endKind == tokVarEnd {
				return lx.errorf("unexpected end of template, expected end of print statement")
			}
			return lx.errorf("unexpected end of template, expected end of statement block")
		}
		rest := lx.src[lx.pos:]
		if len(balance) == 0 {
			sign := byte(0)
			if rest[0] == '-' || rest[0] == '+' {
				sign = rest[0]
			}
			if sign == '-' && strings.HasPrefix(rest[1:], end) || sign == '+' && endKind == tokBlockEnd && strings.HasPrefix(rest[1:], end) {
				lx.toks = append(lx.toks, token{kind: endKind, line: lx.line})
				lx.advance(1 + len(end))
				lx.lineStarting = false
				lx.skipAfter(sign, trim)
				return nil
			}
			if strings.HasPrefix(rest, end) {
				lx.toks = append(lx.toks, token{kind: endKind, line: lx.line})
				lx.advance(len(end))
				lx.lineStarting = false
				lx.skipAfter(0, trim)
				return nil
			}
		}
		c := rest[0]
		switch {
		case isSpace(rune(c)):
			lx.advance(1)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(rest)
			if isSpace(r) {
				lx.advance(size)
				continue
			}
			if unicode.IsLetter(r) {
				lx.name()
				continue
			}
			return lx.errorf("unexpected char %q", r)
		case c == '\'' || c == '"':
			if err := lx.str(); err != nil {
				return err
			}
		case c >= '0' && c <= '9':
			if err := lx.number(); err != nil {
				return err
			}
		case isNameByte(c):
			lx.name()
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				return lx.errorf("unexpected char %q", c)
			}
			switch op {
			case "(", "[", "{":
				balance = append(balance, op[0])
			case ")", "]", "}":
				want := map[string]byte{")": '(', "]": '[', "}": '{'}[op]
				if len(balance) == 0 {
					return lx.errorf("unexpected '%s'", op)
				}
				if balance[len(balance)-1] != want {
					return lx.errorf("unexpected '%s'", op)
				}
				balance = balance[:len(balance)-1]
			}
			lx.toks = append(lx.toks, token{kind: tokOp, val: op, line: lx.line})
			lx.advance(len(op))
		}
	}
}

func (lx *lexer) name() {
	rest := lx.src[lx.pos:]
	n := 0
	for n < len(rest) {
		r, size := utf8.DecodeRuneInString(rest[n:])
		if r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r) {
			n += size
			continue
		}
		break
	}
	lx.toks = append(lx.toks, token{kind: tokName, val: rest[:n], line: lx.line})
	lx.advance(n)
}

// number lexes an integer or float literal (Python syntax, with "_").
func (lx *lexer) number() error {
	rest := lx.src[lx.pos:]
	digits := func(i int) int {
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '_' && i+1 < len(rest) && rest[i+1] >= '0' && rest[i+1] <= '9' && i > 0 && rest[i-1] != '_') {
			i++
		}
		return i
	}
	if len(rest) > 1 && rest[0] == '0' && strings.ContainsRune("bBoOxX", rune(rest[1])) {
		i := 2
		for i < len(rest) && (isNameByte(rest[i])) {
			i++
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(rest[:i], "_", ""), 0, 64)
		if err != nil {
			return lx.errorf("bad integer literal %q", rest[:i])
		}
		lx.toks = append(lx.toks, token{kind: tokInt, val: strconv.FormatInt(v, 10), line: lx.line})
		lx.advance(i)
		return nil
	}
	i := digits(0)
	isFloat := false
	if i+1 < len(rest) && rest[i] == '.' && rest[i+1] >= '0' && rest[i+1] <= '9' {
		isFloat = true
		i = digits(i + 1)
	}
	if i < len(rest) && (rest[i] == 'e' || rest[i] == 'E') {
		j := i + 1
		if j < len(rest) && (rest[j] == '+' || rest[j] == '-') {
			j++
		}
		if j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			isFloat = true
			i = digits(j)
		}
	}
	lit := strings.ReplaceAll(rest[:i], "_", "")
	kind := tokInt
	if isFloat {
		kind = tokFloat
	}
	lx.toks = append(lx.toks, token{kind: kind, val: lit, line: lx.line})
	lx.advance(i)
	return nil
}

// str lexes a quoted string literal and unescapes it as Python does.
func (lx *lexer) str() error {
	rest := lx.src[lx.pos:]
	q := rest[0]
	i := 1
	for ; i < len(rest) && rest[i] != q; i++ {
		if rest[i] == '\\' {
			i++
		}
	}
	if i >= len(rest) {
		return lx.errorf("unterminated string")
	}
	val, err := unescape(rest[1:i])
	if err != nil {
		return lx.errorf("%v", err)
	}
	lx.toks = append(lx.toks, token{kind: tokString, val: val, line: lx.line})
	lx.advance(i + 1)
	return nil
}

// unescape decodes Python string escapes (\n, \t, \xNN, \uNNNN, ...).
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", fmt.Errorf("bad \\%c escape", e)
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(v))
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
