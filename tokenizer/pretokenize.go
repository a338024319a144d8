package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/reel-runtime/reel/tokenizer/internal/regex"
)

// piece is a stretch of normalized text on its way to the model.
type piece struct {
	text string
	// orig0 says the piece begins at the start of the original text
	// (Metaspace's prepend_scheme "first" only prepends there).
	orig0 bool
}

// preTokenizer splits a piece into smaller ones (and may rewrite them),
// calling emit for each in order.
type preTokenizer interface {
	split(p piece, emit func(piece) error) error
}

// behavior is what a split does with the delimiters it finds, as the
// tokenizers library's SplitDelimiterBehavior.
type behavior uint8

const (
	removed            behavior = iota // drop them
	isolated                           // keep each as a piece
	mergedWithPrevious                 // append each to the piece before
	mergedWithNext                     // prepend each to the piece after
	contiguous                         // keep runs of them as one piece
)

var behaviorNames = map[string]behavior{
	"Removed":            removed,
	"Isolated":           isolated,
	"MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext":     mergedWithNext,
	"Contiguous":         contiguous,
}

// parseBehavior reads a behavior field.
func parseBehavior(o *object, key string, def behavior) (behavior, error) {
	if !o.has(key) {
		return def, nil
	}
	name, err := o.str(key, "")
	if err != nil {
		return 0, err
	}
	b, ok := behaviorNames[name]
	if !ok {
		return 0, fmt.Errorf("%s: unknown split behavior %q", o.at(key), name)
	}
	return b, nil
}

// segmenter calls yield for the successive matches (match true) and the
// gaps between them (match false) that cover s.
type segmenter func(s string, yield func(start, end int, match bool) error) error

// regexSegments segments at the matches of re.
func regexSegments(re *regex.Regexp) segmenter {
	return func(s string, yield func(int, int, bool) error) error {
		prev := 0
		err := re.FindEach(s, func(start, end int) error {
			if prev != start {
				if err := yield(prev, start, false); err != nil {
					return err
				}
			}
			prev = end
			return yield(start, end, true)
		})
		if err != nil {
			return err
		}
		if prev != len(s) {
			return yield(prev, len(s), false)
		}
		return nil
	}
}

// runeSegments makes every rune for which pred holds a match of its own.
func runeSegments(pred func(rune) bool) segmenter {
	return func(s string, yield func(int, int, bool) error) error {
		last := 0
		for i, r := range s {
			if !pred(r) {
				continue
			}
			if last < i {
				if err := yield(last, i, false); err != nil {
					return err
				}
			}
			_, w := decodeRune(s, i)
			if err := yield(i, i+w, true); err != nil {
				return err
			}
			last = i + w
		}
		if last < len(s) {
			return yield(last, len(s), false)
		}
		return nil
	}
}

// splitter splits pieces at the segments of seg with a behavior.
type splitter struct {
	seg      segmenter
	invert   bool
	behavior behavior
}

// split emits the pieces of p; empty ones are dropped, as the tokenizers
// library drops them.
func (sp *splitter) split(p piece, emit func(piece) error) error {
	out := func(start, end int) error {
		if start >= end {
			return nil
		}
		return emit(piece{text: p.text[start:end], orig0: p.orig0 && start == 0})
	}
	// pending is a segment held back to merge with the next one.
	pendStart, pendEnd, pendMatch, pending := 0, 0, false, false
	err := sp.seg(p.text, func(start, end int, match bool) error {
		match = match != sp.invert
		switch sp.behavior {
		case removed:
			if match {
				return nil
			}
			return out(start, end)
		case isolated:
			return out(start, end)
		case mergedWithPrevious:
			if match && !pendMatch && pending {
				pendEnd, pendMatch = end, match
				return nil
			}
		case mergedWithNext:
			if pending && pendMatch && !match {
				pending = false
				return out(pendStart, end)
			}
		case contiguous:
			if pending && match == pendMatch {
				pendEnd = end
				return nil
			}
		}
		if pending {
			if err := out(pendStart, pendEnd); err != nil {
				return err
			}
		}
		pendStart, pendEnd, pendMatch, pending = start, end, match, true
		return nil
	})
	if err != nil {
		return err
	}
	if pending {
		return out(pendStart, pendEnd)
	}
	return nil
}

// byteLevelPre is the ByteLevel pre-tokenizer: an optional space before
// each piece, GPT-2's split, and every byte mapped to its rune. When lazy
// (it is the last pre-tokenizer) the mapping is left to the model, whose
// cache is then keyed by the unmapped text.
type byteLevelPre struct {
	addPrefixSpace bool
	regex          *splitter // nil without use_regex
	lazy           bool
}

// gpt2Pattern is the split the ByteLevel pre-tokenizer does with use_regex.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func (bl *byteLevelPre) split(p piece, emit func(piece) error) error {
	if bl.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	out := emit
	if !bl.lazy {
		out = func(q piece) error {
			q.text = bytesTable.encode(q.text)
			return emit(q)
		}
	}
	if bl.regex == nil {
		return out(p)
	}
	return bl.regex.split(p, out)
}

// prependScheme says where Metaspace adds its replacement rune.
type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspace replaces spaces with a rune (▁), prepends one and splits
// before each.
type metaspace struct {
	replacement string
	scheme      prependScheme
	splitter    *splitter // nil without split
}

func (m *metaspace) split(p piece, emit func(piece) error) error {
	p.text = strings.ReplaceAll(p.text, " ", m.replacement)
	if !strings.HasPrefix(p.text, m.replacement) &&
		(m.scheme == prependAlways || m.scheme == prependFirst && p.orig0) {
		p.text = m.replacement + p.text
	}
	if m.splitter == nil {
		return emit(p)
	}
	return m.splitter.split(p, emit)
}

// parseMetaspace reads a Metaspace pre-tokenizer or decoder's fields.
func parseMetaspace(o *object) (replacement rune, scheme prependScheme, split bool, err error) {
	if replacement, err = o.char("replacement", '▁'); err != nil {
		return
	}
	name, err := o.str("prepend_scheme", "always")
	if err != nil {
		return
	}
	switch name {
	case "always":
		scheme = prependAlways
	case "first":
		scheme = prependFirst
	case "never":
		scheme = prependNever
	default:
		err = fmt.Errorf("%s: unknown prepend_scheme %q", o.at("prepend_scheme"), name)
		return
	}
	// The legacy add_prefix_space: false means never (and contradicts
	// any other scheme).
	if o.has("add_prefix_space") {
		add, e := o.boolean("add_prefix_space", true)
		if e != nil {
			err = e
			return
		}
		if !add {
			if o.has("prepend_scheme") && scheme != prependNever {
				err = fmt.Errorf("%s: add_prefix_space false contradicts prepend_scheme %q", o.path, name)
				return
			}
			scheme = prependNever
		}
	}
	split, err = o.boolean("split", true)
	return
}

// isPunctuation is the tokenizers library's is_punc: ASCII punctuation
// (symbols such as $ + < = > ^ ` | ~ included) or Unicode P*.
func isPunctuation(r rune) bool {
	if r < 0x80 {
		return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
	}
	return unicode.IsPunct(r)
}

// parsePreTokenizer reads a "pre_tokenizer" object into steps applied in
// order (a Sequence is flattened).
func parsePreTokenizer(path string, raw json.RawMessage) ([]preTokenizer, error) {
	o, typ, err := parseComponent(path, raw)
	if o == nil || err != nil {
		return nil, err
	}
	one := func(p preTokenizer) ([]preTokenizer, error) { return []preTokenizer{p}, nil }
	switch typ {
	case "Sequence":
		items, paths, err := o.list("pretokenizers")
		if err != nil {
			return nil, err
		}
		var steps []preTokenizer
		for i, item := range items {
			s, err := parsePreTokenizer(paths[i], item)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s...)
		}
		return steps, nil
	case "Split":
		re, err := parsePattern(o, "pattern")
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(o, "behavior", isolated)
		if err != nil {
			return nil, err
		}
		invert, err := o.boolean("invert", false)
		if err != nil {
			return nil, err
		}
		return one(&splitter{seg: regexSegments(re), invert: invert, behavior: b})
	case "ByteLevel":
		add, err := o.boolean("add_prefix_space", true)
		if err != nil {
			return nil, err
		}
		useRegex, err := o.boolean("use_regex", true)
		if err != nil {
			return nil, err
		}
		bl := &byteLevelPre{addPrefixSpace: add}
		if useRegex {
			bl.regex = &splitter{seg: regexSegments(gpt2Regex), behavior: isolated}
		}
		return one(bl)
	case "Metaspace":
		r, scheme, split, err := parseMetaspace(o)
		if err != nil {
			return nil, err
		}
		m := &metaspace{replacement: string(r), scheme: scheme}
		if split {
			m.splitter = &splitter{seg: runeSegments(func(c rune) bool { return c == r }), behavior: mergedWithNext}
		}
		return one(m)
	case "Digits":
		individual, err := o.boolean("individual_digits", false)
		if err != nil {
			return nil, err
		}
		b := contiguous
		if individual {
			b = isolated
		}
		return one(&splitter{seg: runeSegments(unicode.IsNumber), behavior: b})
	case "Punctuation":
		b, err := parseBehavior(o, "behavior", isolated)
		if err != nil {
			return nil, err
		}
		return one(&splitter{seg: runeSegments(isPunctuation), behavior: b})
	case "Whitespace":
		return one(&splitter{seg: regexSegments(whitespaceRegex), invert: true, behavior: removed})
	case "WhitespaceSplit":
		return one(&splitter{seg: runeSegments(unicode.IsSpace), behavior: removed})
	case "BertPreTokenizer":
		return []preTokenizer{
			&splitter{seg: runeSegments(unicode.IsSpace), behavior: removed},
			&splitter{seg: runeSegments(isPunctuation), behavior: isolated},
		}, nil
	case "CharDelimiterSplit":
		d, err := o.char("delimiter", 0)
		if err != nil {
			return nil, err
		}
		return one(&splitter{seg: runeSegments(func(c rune) bool { return c == d }), behavior: removed})
	case "UnicodeScripts", "FixedLength":
		return nil, fmt.Errorf("%s: not supported: pre-tokenizer type %q", o.at("type"), typ)
	}
	return nil, fmt.Errorf("%s: unknown pre-tokenizer type %q", o.at("type"), typ)
}
