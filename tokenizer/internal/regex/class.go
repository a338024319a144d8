package regex

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// class is a set of runes: a bitmap for ASCII and, above it, sorted ranges,
// Unicode tables and predicates (a union), then an optional complement.
type class struct {
	ascii  [2]uint64 // after negation: the answer for runes below 0x80
	ranges []unicode.Range32
	tables []*unicode.RangeTable
	preds  []func(rune) bool
	subs   []*class // nested classes, in the union
	negate bool

	built bool
}

func newClass() *class { return &class{} }

func (c *class) addRune(r rune) { c.addRange(r, r) }

func (c *class) addRange(lo, hi rune) {
	c.ranges = append(c.ranges, unicode.Range32{Lo: uint32(lo), Hi: uint32(hi), Stride: 1})
}

func (c *class) addTable(t *unicode.RangeTable) { c.tables = append(c.tables, t) }

func (c *class) addPred(f func(rune) bool) { c.preds = append(c.preds, f) }

func (c *class) addClass(sub *class) { c.subs = append(c.subs, sub) }

// build fills the ASCII bitmap and sorts the ranges; it is called once
// when the pattern is compiled.
func (c *class) build() {
	if c.built {
		return
	}
	for _, s := range c.subs {
		s.build()
	}
	sort.Slice(c.ranges, func(i, j int) bool { return c.ranges[i].Lo < c.ranges[j].Lo })
	c.built = true
	for r := rune(0); r < 0x80; r++ {
		if c.slowHas(r) {
			c.ascii[r>>6] |= 1 << (r & 63)
		}
	}
}

// has reports whether r is in the class.
func (c *class) has(r rune) bool {
	if r < 0x80 && r >= 0 {
		return c.ascii[r>>6]&(1<<(r&63)) != 0
	}
	return c.slowHas(r)
}

// mayStart reports whether a match whose first-rune set is c can start
// with r (-1 at the end of the text); a nil c may start anywhere.
func (c *class) mayStart(r rune) bool {
	if c == nil {
		return true
	}
	return r >= 0 && c.has(r)
}

// slowHas answers without the bitmap.
func (c *class) slowHas(r rune) bool {
	return c.union(r) != c.negate
}

func (c *class) union(r rune) bool {
	u := uint32(r)
	i := sort.Search(len(c.ranges), func(i int) bool { return c.ranges[i].Hi >= u })
	for ; i < len(c.ranges) && c.ranges[i].Lo <= u; i++ {
		if u <= c.ranges[i].Hi {
			return true
		}
	}
	for _, t := range c.tables {
		if unicode.Is(t, r) {
			return true
		}
	}
	for _, f := range c.preds {
		if f(r) {
			return true
		}
	}
	for _, s := range c.subs {
		if s.has(r) {
			return true
		}
	}
	return false
}

// isSpace is Oniguruma's \s on Unicode: the White_Space property.
func isSpace(r rune) bool { return unicode.IsSpace(r) }

// IsWord is Oniguruma's (and Rust regex's) \w on Unicode: Alphabetic,
// marks, decimal numbers, connector punctuation and the join controls.
func IsWord(r rune) bool {
	if r < 0x80 {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200c || r == 0x200d
}

// categoryNames maps the long names of general categories to the short ones.
var categoryNames = map[string]string{
	"letter": "L", "casedletter": "LC", "uppercaseletter": "Lu", "lowercaseletter": "Ll",
	"titlecaseletter": "Lt", "modifierletter": "Lm", "otherletter": "Lo",
	"mark": "M", "combiningmark": "M", "nonspacingmark": "Mn", "spacingmark": "Mc", "enclosingmark": "Me",
	"number": "N", "decimalnumber": "Nd", "digit": "Nd", "letternumber": "Nl", "othernumber": "No",
	"punctuation": "P", "connectorpunctuation": "Pc", "dashpunctuation": "Pd",
	"openpunctuation": "Ps", "closepunctuation": "Pe", "initialpunctuation": "Pi",
	"finalpunctuation": "Pf", "otherpunctuation": "Po",
	"symbol": "S", "mathsymbol": "Sm", "currencysymbol": "Sc", "modifiersymbol": "Sk", "othersymbol": "So",
	"separator": "Z", "spaceseparator": "Zs", "lineseparator": "Zl", "paragraphseparator": "Zp",
	"other": "C", "control": "Cc", "format": "Cf", "privateuse": "Co", "surrogate": "Cs",
}

// looseName folds a property name as Unicode's loose matching does: case,
// spaces, hyphens and underscores do not count.
func looseName(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '-', '_':
			return -1
		}
		return unicode.ToLower(r)
	}, s)
}

// propertyClass is the class of \p{name}: a general category, a script or
// a binary property of Go's unicode tables, or one of Oniguruma's names
// (Alpha, Digit, Space, Word, Alnum, Upper, Lower, Punct, Any).
func propertyClass(name string) (*class, error) {
	cls := newClass()
	if t, ok := unicode.Categories[name]; ok {
		cls.addTable(t)
		return cls, nil
	}
	loose := looseName(name)
	switch loose {
	case "any":
		cls.negate = true // the complement of the empty set
		return cls, nil
	case "lc":
		cls.addTable(unicode.Lu)
		cls.addTable(unicode.Ll)
		cls.addTable(unicode.Lt)
		return cls, nil
	case "alpha", "alphabetic", "alnum":
		cls.addTable(unicode.L)
		cls.addTable(unicode.Nl)
		cls.addTable(unicode.Other_Alphabetic)
		if loose == "alnum" {
			cls.addTable(unicode.Nd)
		}
		return cls, nil
	case "space", "whitespace":
		cls.addPred(isSpace)
		return cls, nil
	case "word":
		cls.addPred(IsWord)
		return cls, nil
	case "upper", "uppercase":
		cls.addTable(unicode.Upper)
		cls.addTable(unicode.Other_Uppercase)
		return cls, nil
	case "lower", "lowercase":
		cls.addTable(unicode.Lower)
		cls.addTable(unicode.Other_Lowercase)
		return cls, nil
	case "punct":
		cls.addTable(unicode.P)
		return cls, nil
	}
	if short, ok := categoryNames[loose]; ok {
		if short == "LC" {
			return propertyClass("LC")
		}
		cls.addTable(unicode.Categories[short])
		return cls, nil
	}
	for _, m := range []map[string]*unicode.RangeTable{unicode.Categories, unicode.Scripts, unicode.Properties} {
		for k, t := range m {
			if looseName(k) == loose {
				cls.addTable(t)
				return cls, nil
			}
		}
	}
	return nil, fmt.Errorf("unknown Unicode property %q", name)
}
