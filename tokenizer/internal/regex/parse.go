// Package regex is a backtracking regular-expression engine for the split
// patterns of tokenizer.json files.
//
// Hugging Face tokenizers runs these patterns with Oniguruma, so they use
// what Go's regexp lacks: lookahead such as `\s+(?!\S)`, lookbehind, atomic
// groups and possessive quantifiers. This engine parses Oniguruma's syntax
// for the subset real tokenizers use and matches with Oniguruma's
// semantics: leftmost match, alternatives tried in order, greedy quantifiers
// backtracking one character at a time, and \s, \d, \w, \b on Unicode
// (White_Space; Decimal_Number; Alphabetic, marks, decimal numbers,
// connector punctuation and the join controls). Invalid UTF-8 in the text
// is read one byte at a time as U+FFFD.
//
// Every search has a step budget proportional to the text's length, so no
// pattern makes a search run without bound: past it FindAll returns
// ErrBudget.
package regex

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// nodeKind is the kind of a parsed node.
type nodeKind uint8

const (
	nEmpty   nodeKind = iota
	nLiteral          // one rune (a set of runes under case folding)
	nClass            // a character class, dot included
	nConcat
	nAlt
	nRepeat
	nLook   // lookahead, lookbehind or atomic group
	nAssert // ^ $ \A \z \Z \b \B
)

// lookKind says what a nLook node asserts.
type lookKind uint8

const (
	lookAhead lookKind = iota
	lookBehind
	lookAtomic
)

// assertKind is a zero-width assertion.
type assertKind uint8

const (
	assertLineStart assertKind = iota
	assertLineEnd
	assertTextStart
	assertTextEnd
	assertTextEndNewline // \Z: the end, or before a final newline
	assertWordBoundary
	assertNotWordBoundary
)

// node is one node of a parsed pattern.
type node struct {
	kind  nodeKind
	runes []rune // nLiteral: the rune and, under case folding, its fold orbit
	class *class // nClass
	subs  []*node

	min, max   int // nRepeat; max -1 is unbounded
	lazy       bool
	possessive bool

	look lookKind // nLook
	neg  bool     // nLook: a negative lookaround

	assert assertKind
}

// parser reads a pattern.
type parser struct {
	src   string
	pos   int
	depth int  // of groups, bounded by maxNesting
	fold  bool // (?i)
	dotNL bool // (?m) in Oniguruma: dot matches a newline
}

// errorf reports a syntax error at the parser's position.
func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("regex %q: at offset %d: %s", p.src, p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) eof() bool { return p.pos >= len(p.src) }

func (p *parser) peek() rune {
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return r
}

func (p *parser) next() rune {
	r, w := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += w
	return r
}

func (p *parser) consume(s string) bool {
	if strings.HasPrefix(p.src[p.pos:], s) {
		p.pos += len(s)
		return true
	}
	return false
}

// parse parses the whole pattern.
func parse(pattern string) (*node, error) {
	if !utf8.ValidString(pattern) {
		return nil, fmt.Errorf("regex %q: not valid UTF-8", pattern)
	}
	p := &parser{src: pattern}
	n, err := p.parseAlt()
	if err != nil {
		return nil, err
	}
	if !p.eof() {
		return nil, p.errorf("unmatched )")
	}
	return n, nil
}

// parseAlt parses alternatives up to a ')' or the end. Flags set inside by
// (?i) end with the group.
func (p *parser) parseAlt() (*node, error) {
	fold, dotNL := p.fold, p.dotNL
	defer func() { p.fold, p.dotNL = fold, dotNL }()
	var alts []*node
	for {
		c, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, c)
		if p.eof() || p.peek() != '|' {
			break
		}
		p.next()
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &node{kind: nAlt, subs: alts}, nil
}

// parseConcat parses a sequence of quantified atoms.
func (p *parser) parseConcat() (*node, error) {
	var items []*node
	for !p.eof() {
		c := p.peek()
		if c == '|' || c == ')' {
			break
		}
		atom, err := p.parseAtom()
		if err != nil {
			return nil, err
		}
		if atom == nil { // a flag group such as (?i)
			continue
		}
		atom, err = p.parseQuantifiers(atom)
		if err != nil {
			return nil, err
		}
		items = append(items, atom)
	}
	switch len(items) {
	case 0:
		return &node{kind: nEmpty}, nil
	case 1:
		return items[0], nil
	}
	return &node{kind: nConcat, subs: items}, nil
}

// parseQuantifiers applies any quantifiers that follow an atom.
func (p *parser) parseQuantifiers(atom *node) (*node, error) {
	for !p.eof() {
		var min, max int
		start := p.pos
		interval := false
		switch p.peek() {
		case '*':
			p.next()
			min, max = 0, -1
		case '+':
			p.next()
			min, max = 1, -1
		case '?':
			p.next()
			min, max = 0, 1
		case '{':
			lo, hi, ok := p.parseInterval()
			if !ok {
				return atom, nil // a literal '{', read as an atom next
			}
			min, max = lo, hi
			interval = true
		default:
			return atom, nil
		}
		if atom.kind == nAssert || atom.kind == nLook && atom.look != lookAtomic {
			p.pos = start
			return nil, p.errorf("quantifier after an assertion")
		}
		rep := &node{kind: nRepeat, subs: []*node{atom}, min: min, max: max}
		if !p.eof() {
			switch p.peek() {
			case '?':
				p.next()
				rep.lazy = true
			case '+':
				// Oniguruma: possessive after ?, * and +; after an
				// interval a '+' is another quantifier.
				if !interval {
					p.next()
					rep.possessive = true
				}
			}
		}
		atom = rep
	}
	return atom, nil
}

// parseInterval reads {n}, {n,}, {,m} or {n,m}; ok is false when the text
// at the position is not an interval (then '{' is a literal).
func (p *parser) parseInterval() (lo, hi int, ok bool) {
	rest := p.src[p.pos:]
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return 0, 0, false
	}
	body := rest[1:end]
	num := func(s string) (int, bool) {
		if s == "" || len(s) > 6 {
			return 0, false
		}
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
		}
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	if i := strings.IndexByte(body, ','); i >= 0 {
		a, b := body[:i], body[i+1:]
		switch {
		case a == "" && b == "":
			return 0, 0, false
		case a == "":
			lo = 0
		default:
			if lo, ok = num(a); !ok {
				return 0, 0, false
			}
		}
		if b == "" {
			hi = -1
		} else if hi, ok = num(b); !ok || hi < lo {
			return 0, 0, false
		}
	} else {
		if lo, ok = num(body); !ok {
			return 0, 0, false
		}
		hi = lo
	}
	p.pos += end + 1
	return lo, hi, true
}

// parseAtom parses one atom: a group, a class, an escape or a literal. It
// returns nil for a group that only sets flags.
func (p *parser) parseAtom() (*node, error) {
	start := p.pos
	c := p.next()
	switch c {
	case '(':
		return p.parseGroup()
	case '[':
		cls, err := p.parseClass()
		if err != nil {
			return nil, err
		}
		return &node{kind: nClass, class: cls}, nil
	case '.':
		cls := newClass()
		if p.dotNL {
			cls.negate = true // the complement of nothing
		} else {
			cls.addRune('\n')
			cls.negate = true
		}
		return &node{kind: nClass, class: cls}, nil
	case '^':
		return &node{kind: nAssert, assert: assertLineStart}, nil
	case '$':
		return &node{kind: nAssert, assert: assertLineEnd}, nil
	case '\\':
		return p.parseEscape()
	case '*', '+', '?':
		p.pos = start
		return nil, p.errorf("quantifier without an atom")
	}
	return p.literal(c), nil
}

// literal is a node matching rune c, with its case-fold orbit under (?i).
func (p *parser) literal(c rune) *node {
	runes := []rune{c}
	if p.fold {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			runes = append(runes, f)
		}
	}
	return &node{kind: nLiteral, runes: runes}
}

// maxNesting bounds the nesting of groups and classes.
const maxNesting = 1000

// parseGroup parses what follows a '('.
func (p *parser) parseGroup() (*node, error) {
	open := p.pos - 1
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, p.errorf("groups nested deeper than %d", maxNesting)
	}
	var look *node
	if p.consume("?") {
		switch {
		case p.consume(":"):
		case p.consume("="):
			look = &node{kind: nLook, look: lookAhead}
		case p.consume("!"):
			look = &node{kind: nLook, look: lookAhead, neg: true}
		case p.consume("<="):
			look = &node{kind: nLook, look: lookBehind}
		case p.consume("<!"):
			look = &node{kind: nLook, look: lookBehind, neg: true}
		case p.consume(">"):
			look = &node{kind: nLook, look: lookAtomic}
		case p.consume("P<"), p.consume("<"):
			if err := p.skipName('>'); err != nil {
				return nil, err
			}
		case p.consume("'"):
			if err := p.skipName('\''); err != nil {
				return nil, err
			}
		case p.consume("#"):
			end := strings.IndexByte(p.src[p.pos:], ')')
			if end < 0 {
				return nil, p.errorf("unterminated comment")
			}
			p.pos += end + 1
			return nil, nil
		default:
			// Flags: (?imsx-imsx) or (?imsx-imsx:...).
			on := true
			fold, dotNL := p.fold, p.dotNL
			for {
				if p.eof() {
					return nil, p.errorf("unterminated group flags")
				}
				c := p.next()
				switch c {
				case '-':
					on = false
				case 'i':
					fold = on
				case 'm', 's':
					dotNL = on
				case ')':
					p.fold, p.dotNL = fold, dotNL
					return nil, nil
				case ':':
					saveFold, saveDot := p.fold, p.dotNL
					p.fold, p.dotNL = fold, dotNL
					sub, err := p.parseAlt()
					p.fold, p.dotNL = saveFold, saveDot
					if err != nil {
						return nil, err
					}
					if !p.consume(")") {
						p.pos = open
						return nil, p.errorf("missing )")
					}
					return sub, nil
				default:
					return nil, p.errorf("unsupported group flag %q", c)
				}
			}
		}
	}
	sub, err := p.parseAlt()
	if err != nil {
		return nil, err
	}
	if !p.consume(")") {
		p.pos = open
		return nil, p.errorf("missing )")
	}
	if look != nil {
		look.subs = []*node{sub}
		if look.look == lookBehind {
			if _, ok := fixedWidth(sub); !ok {
				p.pos = open
				return nil, p.errorf("unsupported: lookbehind of variable length")
			}
		}
		return look, nil
	}
	return sub, nil
}

// skipName skips a group name up to its closing delimiter.
func (p *parser) skipName(end byte) error {
	i := strings.IndexByte(p.src[p.pos:], end)
	if i <= 0 {
		return p.errorf("bad group name")
	}
	p.pos += i + 1
	return nil
}

// parseEscape parses what follows a '\' outside a class.
func (p *parser) parseEscape() (*node, error) {
	if p.eof() {
		return nil, p.errorf("trailing backslash")
	}
	c := p.peek()
	switch c {
	case 'A':
		p.next()
		return &node{kind: nAssert, assert: assertTextStart}, nil
	case 'z':
		p.next()
		return &node{kind: nAssert, assert: assertTextEnd}, nil
	case 'Z':
		p.next()
		return &node{kind: nAssert, assert: assertTextEndNewline}, nil
	case 'b':
		p.next()
		return &node{kind: nAssert, assert: assertWordBoundary}, nil
	case 'B':
		p.next()
		return &node{kind: nAssert, assert: assertNotWordBoundary}, nil
	}
	cls, r, err := p.parseClassEscape()
	if err != nil {
		return nil, err
	}
	if cls != nil {
		return &node{kind: nClass, class: cls}, nil
	}
	return p.literal(r), nil
}

// parseClassEscape parses an escape valid both inside and outside a class:
// it returns either a class (\s, \p{L}, ...) or a single rune.
func (p *parser) parseClassEscape() (*class, rune, error) {
	start := p.pos - 1
	c := p.next()
	switch c {
	case 's', 'S', 'd', 'D', 'w', 'W', 'h', 'H':
		cls := newClass()
		switch c {
		case 's', 'S':
			cls.addPred(isSpace)
		case 'd', 'D':
			cls.addTable(unicode.Nd)
		case 'w', 'W':
			cls.addPred(IsWord)
		case 'h', 'H':
			cls.addRange('0', '9')
			cls.addRange('a', 'f')
			cls.addRange('A', 'F')
		}
		cls.negate = unicode.IsUpper(c)
		return cls, 0, nil
	case 'p', 'P':
		neg := c == 'P'
		var name string
		if p.consume("{") {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return nil, 0, p.errorf("unterminated \\%c{", c)
			}
			name = p.src[p.pos : p.pos+end]
			p.pos += end + 1
		} else {
			if p.eof() {
				return nil, 0, p.errorf("bad \\%c", c)
			}
			name = string(p.next())
		}
		if strings.HasPrefix(name, "^") {
			neg = !neg
			name = name[1:]
		}
		cls, err := propertyClass(name)
		if err != nil {
			p.pos = start
			return nil, 0, p.errorf("%v", err)
		}
		if neg {
			outer := newClass()
			outer.addClass(cls)
			outer.negate = true
			cls = outer
		}
		return cls, 0, nil
	case 't':
		return nil, '\t', nil
	case 'n':
		return nil, '\n', nil
	case 'r':
		return nil, '\r', nil
	case 'f':
		return nil, '\f', nil
	case 'v':
		return nil, '\v', nil
	case 'a':
		return nil, '\a', nil
	case 'e':
		return nil, 0x1b, nil
	case '0':
		return nil, 0, nil
	case 'x':
		if p.consume("{") {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return nil, 0, p.errorf("unterminated \\x{")
			}
			v, err := strconv.ParseUint(p.src[p.pos:p.pos+end], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return nil, 0, p.errorf("bad \\x{...}")
			}
			p.pos += end + 1
			return nil, rune(v), nil
		}
		return nil, p.hexDigits(2), nil
	case 'u':
		if len(p.src)-p.pos < 4 {
			return nil, 0, p.errorf("bad \\u")
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+4], 16, 32)
		if err != nil {
			return nil, 0, p.errorf("bad \\u")
		}
		p.pos += 4
		return nil, rune(v), nil
	}
	if c < utf8.RuneSelf && (unicode.IsLetter(c) || unicode.IsDigit(c)) {
		p.pos = start
		return nil, 0, p.errorf("unsupported escape \\%c", c)
	}
	return nil, c, nil // an escaped punctuation or symbol stands for itself
}

// hexDigits reads up to n hex digits (none is the rune 0, as Oniguruma).
func (p *parser) hexDigits(n int) rune {
	var v rune
	for i := 0; i < n && !p.eof(); i++ {
		d := p.src[p.pos]
		var x byte
		switch {
		case d >= '0' && d <= '9':
			x = d - '0'
		case d >= 'a' && d <= 'f':
			x = d - 'a' + 10
		case d >= 'A' && d <= 'F':
			x = d - 'A' + 10
		default:
			return v
		}
		v = v*16 + rune(x)
		p.pos++
	}
	return v
}

// parseClass parses a bracket class after its '['. Nested classes are
// unions; && intersections are not supported.
func (p *parser) parseClass() (*class, error) {
	open := p.pos - 1
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, p.errorf("classes nested deeper than %d", maxNesting)
	}
	cls := newClass()
	if p.consume("^") {
		cls.negate = true
	}
	first := true
	for {
		if p.eof() {
			p.pos = open
			return nil, p.errorf("missing ]")
		}
		if p.peek() == ']' && !first {
			p.next()
			break
		}
		first = false
		if p.consume("&&") {
			return nil, p.errorf("unsupported: class intersection &&")
		}
		if p.consume("[:") {
			return nil, p.errorf("unsupported: POSIX bracket class")
		}
		if p.consume("[") {
			sub, err := p.parseClass()
			if err != nil {
				return nil, err
			}
			cls.addClass(sub)
			continue
		}
		lo, sub, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if sub != nil {
			cls.addClass(sub)
			continue
		}
		// A range lo-hi, unless '-' is last.
		if strings.HasPrefix(p.src[p.pos:], "-") && !strings.HasPrefix(p.src[p.pos:], "-]") {
			p.next()
			hi, sub, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if sub != nil {
				return nil, p.errorf("bad class range")
			}
			if hi < lo {
				return nil, p.errorf("class range %q-%q out of order", lo, hi)
			}
			p.addFoldRange(cls, lo, hi)
			continue
		}
		p.addFoldRange(cls, lo, lo)
	}
	return cls, nil
}

// classAtom reads one rune or escape inside a class.
func (p *parser) classAtom() (rune, *class, error) {
	c := p.next()
	if c != '\\' {
		return c, nil, nil
	}
	if p.eof() {
		return 0, nil, p.errorf("trailing backslash")
	}
	if p.peek() == 'b' { // backspace inside a class
		p.next()
		return '\b', nil, nil
	}
	cls, r, err := p.parseClassEscape()
	return r, cls, err
}

// addFoldRange adds lo-hi to cls and, under (?i), the fold orbits of its
// runes (for ranges of up to 512 runes; property classes are not folded).
func (p *parser) addFoldRange(cls *class, lo, hi rune) {
	cls.addRange(lo, hi)
	if !p.fold || hi-lo > 512 {
		return
	}
	for c := lo; c <= hi; c++ {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			cls.addRange(f, f)
		}
	}
}

// fixedWidth is the number of runes every match of n has, if fixed.
func fixedWidth(n *node) (int, bool) {
	switch n.kind {
	case nEmpty, nAssert, nLook:
		if n.kind == nLook && n.look == lookAtomic {
			return fixedWidth(n.subs[0])
		}
		return 0, true
	case nLiteral, nClass:
		return 1, true
	case nConcat:
		total := 0
		for _, s := range n.subs {
			w, ok := fixedWidth(s)
			if !ok {
				return 0, false
			}
			total += w
		}
		return total, true
	case nAlt:
		w0, ok := fixedWidth(n.subs[0])
		if !ok {
			return 0, false
		}
		for _, s := range n.subs[1:] {
			if w, ok := fixedWidth(s); !ok || w != w0 {
				return 0, false
			}
		}
		return w0, true
	case nRepeat:
		if n.min != n.max {
			return 0, false
		}
		w, ok := fixedWidth(n.subs[0])
		return w * n.min, ok
	}
	return 0, false
}
