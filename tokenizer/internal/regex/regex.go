package regex

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// ErrBudget is returned when a search takes more steps than its budget
// (catastrophic backtracking) or nests too deep.
var ErrBudget = errors.New("regex: search exceeded its step budget")

// Regexp is a compiled pattern. It is safe for concurrent use.
type Regexp struct {
	src   string
	prog  *inst
	first *class // every non-empty match starts with a rune of first; nil: unknown
	loops int    // the number of generic repetition counters
}

// opcode is an instruction of the compiled program.
type opcode uint8

const (
	opMatch    opcode = iota // the whole pattern matched
	opSubEnd                 // the end of a lookaround or atomic group's body
	opRune                   // one rune
	opRunes                  // one of a few runes (a case-fold orbit)
	opClass                  // one rune of a class
	opAlt                    // try each of alts in order
	opStar                   // a repetition of one rune of cls
	opRepEnter               // a generic repetition: reset its counter
	opRepLoop                // a generic repetition: iterate or leave
	opLook                   // lookahead, lookbehind or atomic group
	opAssert                 // a zero-width assertion
)

// inst is one instruction. Programs are graphs of instructions: each links
// to the next, and a body links back to its loop.
type inst struct {
	op    opcode
	next  *inst
	r     rune
	runes []rune
	cls   *class
	alts  []*inst
	// altFirst[k] holds the runes alts[k] can start with; nil where it
	// can match the empty string (or the set is unknown).
	altFirst []*class
	sub      *inst

	min, max   int // opStar, opRepLoop; max -1 is unbounded
	lazy       bool
	possessive bool
	id         int // opRepEnter, opRepLoop: the counter

	look   lookKind
	neg    bool
	width  int // lookbehind: its width in runes
	assert assertKind
}

// takes reports whether r is a rune the one-rune instruction in (opRune,
// opRunes or opClass) matches.
func (in *inst) takes(r rune) bool {
	switch in.op {
	case opRune:
		return r == in.r
	case opRunes:
		return slices.Contains(in.runes, r)
	}
	return in.cls.has(r)
}

// Compile parses an Oniguruma pattern.
func Compile(pattern string) (*Regexp, error) {
	n, err := parse(pattern)
	if err != nil {
		return nil, err
	}
	re := &Regexp{src: pattern}
	re.prog = re.compile(n, &inst{op: opMatch})
	if f, nullable := firstSet(n); !nullable && f != nil {
		f.build()
		re.first = f
	}
	return re, nil
}

// Literal compiles a pattern matching s literally.
func Literal(s string) *Regexp {
	re := &Regexp{src: s}
	next := &inst{op: opMatch}
	rs := []rune(s)
	for i := len(rs) - 1; i >= 0; i-- {
		next = &inst{op: opRune, r: rs[i], next: next}
	}
	re.prog = next
	if len(rs) > 0 {
		f := newClass()
		f.addRune(rs[0])
		f.build()
		re.first = f
	}
	return re
}

// String is the pattern's source.
func (re *Regexp) String() string { return re.src }

// compile compiles n followed by next.
func (re *Regexp) compile(n *node, next *inst) *inst {
	switch n.kind {
	case nEmpty:
		return next
	case nLiteral:
		if len(n.runes) == 1 {
			return &inst{op: opRune, r: n.runes[0], next: next}
		}
		return &inst{op: opRunes, runes: n.runes, next: next}
	case nClass:
		n.class.build()
		return &inst{op: opClass, cls: n.class, next: next}
	case nConcat:
		for i := len(n.subs) - 1; i >= 0; i-- {
			next = re.compile(n.subs[i], next)
		}
		return next
	case nAlt:
		in := &inst{op: opAlt, next: next}
		for _, s := range n.subs {
			in.alts = append(in.alts, re.compile(s, next))
			f, nullable := firstSet(s)
			if nullable {
				f = nil
			}
			if f != nil {
				f.build()
			}
			in.altFirst = append(in.altFirst, f)
		}
		return in
	case nRepeat:
		return re.compileRepeat(n, next)
	case nLook:
		in := &inst{op: opLook, look: n.look, neg: n.neg, next: next}
		in.sub = re.compile(n.subs[0], &inst{op: opSubEnd})
		if n.look == lookBehind {
			in.width, _ = fixedWidth(n.subs[0])
		}
		return in
	case nAssert:
		return &inst{op: opAssert, assert: n.assert, next: next}
	}
	panic(fmt.Sprintf("regex: unknown node kind %d", n.kind))
}

// compileRepeat compiles a quantifier: one rune (opStar) or any body.
func (re *Regexp) compileRepeat(n *node, next *inst) *inst {
	sub := n.subs[0]
	if n.max == 0 {
		return next
	}
	if n.min == 1 && n.max == 1 {
		return re.compile(sub, next)
	}
	if cls := singleRune(sub); cls != nil {
		cls.build()
		return &inst{op: opStar, cls: cls, min: n.min, max: n.max, lazy: n.lazy, possessive: n.possessive, next: next}
	}
	if n.possessive {
		// A possessive quantifier is an atomic group around a greedy one.
		greedy := *n
		greedy.possessive = false
		in := &inst{op: opLook, look: lookAtomic, next: next}
		in.sub = re.compileRepeat(&greedy, &inst{op: opSubEnd})
		return in
	}
	id := re.loops
	re.loops++
	loop := &inst{op: opRepLoop, id: id, min: n.min, max: n.max, lazy: n.lazy, next: next}
	loop.sub = re.compile(sub, loop)
	return &inst{op: opRepEnter, id: id, next: loop}
}

// singleRune is the class of a node that always matches exactly one rune.
func singleRune(n *node) *class {
	switch n.kind {
	case nClass:
		return n.class
	case nLiteral:
		c := newClass()
		for _, r := range n.runes {
			c.addRune(r)
		}
		return c
	}
	return nil
}

// firstSet is the set of runes a match of n can start with, and whether n
// can match the empty string. A nil set with nullable false means unknown.
func firstSet(n *node) (*class, bool) {
	switch n.kind {
	case nEmpty, nAssert:
		return newClass(), true
	case nLook:
		if n.look == lookAtomic {
			return firstSet(n.subs[0])
		}
		return newClass(), true
	case nLiteral, nClass:
		c := newClass()
		c.addClass(singleRune(n))
		return c, false
	case nConcat:
		out := newClass()
		for _, s := range n.subs {
			f, nullable := firstSet(s)
			if f == nil {
				return nil, false
			}
			out.addClass(f)
			if !nullable {
				return out, false
			}
		}
		return out, true
	case nAlt:
		out := newClass()
		any := false
		for _, s := range n.subs {
			f, nullable := firstSet(s)
			if f == nil {
				return nil, false
			}
			out.addClass(f)
			any = any || nullable
		}
		return out, any
	case nRepeat:
		f, nullable := firstSet(n.subs[0])
		return f, nullable || n.min == 0
	}
	return nil, false
}

// machine is the state of one search.
type machine struct {
	s         string
	end       int // where the pattern's match ended
	subEnd    int // where the last lookaround or atomic body ended
	subTarget int // a lookbehind body must end here; -1 for any
	cnt, last []int
	steps     int
	budget    int
	depth     int
	over      bool
}

// maxDepth bounds the recursion of one match attempt.
const maxDepth = 100000

// FindAll appends to dst the [start, end) byte offsets of the successive
// non-overlapping matches in s; see FindEach.
func (re *Regexp) FindAll(s string, dst [][2]int) ([][2]int, error) {
	err := re.FindEach(s, func(start, end int) error {
		dst = append(dst, [2]int{start, end})
		return nil
	})
	return dst, err
}

// FindEach calls fn with the [start, end) byte offsets of the successive
// non-overlapping matches in s, as Oniguruma's find_iter in Rust gives them:
// each search starts where the last match ended, and an empty match right
// after the previous match is skipped by moving on one character. It stops
// at the first error fn returns.
func (re *Regexp) FindEach(s string, fn func(start, end int) error) error {
	m := &machine{s: s, budget: 1_000_000 + 1000*len(s)}
	if re.loops > 0 {
		m.cnt = make([]int, re.loops)
		m.last = make([]int, re.loops)
	}
	lastEnd, lastMatch := 0, -1
	for lastEnd <= len(s) {
		start, end, ok := re.search(m, lastEnd)
		if m.over {
			return fmt.Errorf("%w: pattern %q on %d bytes", ErrBudget, re.src, len(s))
		}
		if !ok {
			break
		}
		if start == end && end == lastMatch {
			if lastEnd < len(s) {
				_, w := utf8.DecodeRuneInString(s[lastEnd:])
				lastEnd += w
			} else {
				lastEnd++
			}
			continue
		}
		lastEnd, lastMatch = end, end
		if err := fn(start, end); err != nil {
			return err
		}
	}
	return nil
}

// search finds the leftmost match starting at or after from.
func (re *Regexp) search(m *machine, from int) (start, end int, ok bool) {
	s := m.s
	for i := from; i <= len(s); {
		if re.first != nil {
			// Skip to a rune the match can start with.
			for i < len(s) {
				c := s[i]
				if c < utf8.RuneSelf {
					if re.first.ascii[c>>6]&(1<<(c&63)) != 0 {
						break
					}
					i++
					continue
				}
				r, w := utf8.DecodeRuneInString(s[i:])
				if re.first.has(r) {
					break
				}
				i += w
			}
			if i >= len(s) {
				return 0, 0, false
			}
		}
		m.subTarget = -1
		if m.run(re.prog, i) {
			return i, m.end, true
		}
		if m.over {
			return 0, 0, false
		}
		if i == len(s) {
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return 0, 0, false
}

// runeAt decodes the rune at i (i < len(s)); invalid bytes are U+FFFD of
// width 1.
func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run reports whether the program from pc matches at i, backtracking
// depth first; on success m.end (or m.subEnd) holds where it ended.
func (m *machine) run(pc *inst, i int) bool {
	m.depth++
	if m.depth > maxDepth {
		m.over = true
	}
	ok := m.exec(pc, i)
	m.depth--
	return ok
}

// exec is run's body.
func (m *machine) exec(pc *inst, i int) bool {
	s := m.s
	for {
		m.steps++
		if m.steps > m.budget {
			m.over = true
		}
		if m.over {
			return false
		}
		switch pc.op {
		case opMatch:
			m.end = i
			return true
		case opSubEnd:
			if m.subTarget >= 0 && i != m.subTarget {
				return false
			}
			m.subEnd = i
			return true
		case opRune, opRunes, opClass:
			if i >= len(s) {
				return false
			}
			r, w := runeAt(s, i)
			if !pc.takes(r) {
				return false
			}
			i += w
			pc = pc.next
		case opAlt:
			// Skip the alternatives that cannot start with the rune at i.
			r := rune(-1)
			if i < len(s) {
				r, _ = runeAt(s, i)
			}
			last := len(pc.alts) - 1
			for last >= 0 && !pc.altFirst[last].mayStart(r) {
				last--
			}
			if last < 0 {
				return false
			}
			for k, a := range pc.alts[:last] {
				if !pc.altFirst[k].mayStart(r) {
					continue
				}
				if m.run(a, i) {
					return true
				}
				if m.over {
					return false
				}
			}
			pc = pc.alts[last]
		case opStar:
			if pc.lazy {
				return m.lazyStar(pc, i)
			}
			// Take as many as allowed, then give back one at a time.
			start, j, n := i, i, 0
			for (pc.max < 0 || n < pc.max) && j < len(s) {
				r, w := runeAt(s, j)
				if !pc.cls.has(r) {
					break
				}
				j += w
				n++
			}
			if n < pc.min {
				return false
			}
			if pc.possessive {
				i = j
				pc = pc.next
				continue
			}
			for n > pc.min {
				if m.run(pc.next, j) {
					return true
				}
				if m.over {
					return false
				}
				m.steps++
				if c := s[j-1]; c < utf8.RuneSelf {
					j--
				} else {
					_, w := utf8.DecodeLastRuneInString(s[start:j])
					j -= w
				}
				n--
			}
			i = j
			pc = pc.next
		case opRepEnter:
			c, l := m.cnt[pc.id], m.last[pc.id]
			m.cnt[pc.id], m.last[pc.id] = 0, -1
			ok := m.run(pc.next, i)
			m.cnt[pc.id], m.last[pc.id] = c, l
			return ok
		case opRepLoop:
			return m.repLoop(pc, i)
		case opLook:
			target := m.subTarget
			var ok bool
			switch pc.look {
			case lookAhead, lookAtomic:
				m.subTarget = -1
				ok = m.run(pc.sub, i)
			case lookBehind:
				j := i
				for k := 0; k < pc.width && j > 0; k++ {
					_, w := utf8.DecodeLastRuneInString(s[:j])
					j -= w
				}
				if runeCount(s[j:i]) == pc.width {
					m.subTarget = i
					ok = m.run(pc.sub, j)
				}
			}
			m.subTarget = target
			if m.over {
				return false
			}
			if pc.look == lookAtomic {
				if !ok {
					return false
				}
				i = m.subEnd
			} else if ok == pc.neg {
				return false
			}
			pc = pc.next
		case opAssert:
			if !m.assert(pc.assert, i) {
				return false
			}
			pc = pc.next
		}
	}
}

// lazyStar matches a lazy repetition of one rune: as few as possible.
func (m *machine) lazyStar(pc *inst, i int) bool {
	s := m.s
	for n := 0; ; n++ {
		if n >= pc.min {
			if m.run(pc.next, i) {
				return true
			}
			if m.over {
				return false
			}
		}
		if pc.max >= 0 && n >= pc.max || i >= len(s) {
			return false
		}
		r, w := runeAt(s, i)
		if !pc.cls.has(r) {
			return false
		}
		i += w
		m.steps++
	}
}

// repLoop is one turn of a generic repetition at i: iterate again or
// leave, in the order its greediness says. An iteration that matched
// nothing ends the loop.
func (m *machine) repLoop(pc *inst, i int) bool {
	c, l := m.cnt[pc.id], m.last[pc.id]
	empty := l == i
	canLoop := (pc.max < 0 || c < pc.max) && !empty
	canLeave := c >= pc.min || empty
	iterate := func() bool {
		m.cnt[pc.id], m.last[pc.id] = c+1, i
		ok := m.run(pc.sub, i)
		m.cnt[pc.id], m.last[pc.id] = c, l
		return ok
	}
	if pc.lazy {
		if canLeave && m.run(pc.next, i) {
			return true
		}
		return canLoop && !m.over && iterate()
	}
	if canLoop && iterate() {
		return true
	}
	return canLeave && !m.over && m.run(pc.next, i)
}

// assert checks a zero-width assertion at i.
func (m *machine) assert(a assertKind, i int) bool {
	s := m.s
	switch a {
	case assertLineStart:
		return i == 0 || s[i-1] == '\n'
	case assertLineEnd:
		return i == len(s) || s[i] == '\n'
	case assertTextStart:
		return i == 0
	case assertTextEnd:
		return i == len(s)
	case assertTextEndNewline:
		return i == len(s) || i == len(s)-1 && s[i] == '\n'
	case assertWordBoundary, assertNotWordBoundary:
		before, after := false, false
		if i > 0 {
			r, _ := utf8.DecodeLastRuneInString(s[:i])
			before = IsWord(r)
		}
		if i < len(s) {
			r, _ := runeAt(s, i)
			after = IsWord(r)
		}
		return (before != after) == (a == assertWordBoundary)
	}
	return false
}

// runeCount counts the runes of s as the matcher steps over them.
func runeCount(s string) int { return utf8.RuneCountInString(s) }
