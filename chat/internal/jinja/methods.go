package jinja

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// method returns obj's Python method name bound to obj, or nil. Methods
// that would change a list or dict are refused, as in Jinja's immutable
// sandbox.
func method(obj Value, name string) Value {
	switch o := obj.(type) {
	case string:
		if _, ok := strMethods[name]; ok {
			return &Func{name: "str." + name, call: func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
				return strMethods[name](o, args, kwargs)
			}}
		}
	case *Dict:
		switch name {
		case "items", "keys", "values", "get", "copy":
			return &Func{name: "dict." + name, call: func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
				return dictMethod(o, name, args, kwargs)
			}}
		case "update", "pop", "popitem", "setdefault", "clear":
			return unsafe(name, "dict")
		}
	case List, Tuple:
		items, _ := iterate(o)
		switch name {
		case "index", "count":
			return &Func{name: "list." + name, call: func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
				a, err := bind(name, args, kwargs, "value")
				if err != nil {
					return nil, err
				}
				n := 0
				for i, it := range items {
					if equal(it, a[0]) {
						if name == "index" {
							return int64(i), nil
						}
						n++
					}
				}
				if name == "index" {
					return nil, fmt.Errorf("%s is not in list", repr(a[0]))
				}
				return int64(n), nil
			}}
		case "copy":
			if l, ok := o.(List); ok {
				return &Func{name: "list.copy", call: func(*renderer, []Value, *Dict) (Value, error) { return slices.Clone(l), nil }}
			}
		case "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
			if _, ok := o.(List); ok {
				return unsafe(name, "list")
			}
		}
	}
	return nil
}

func unsafe(name, typ string) Value {
	return Undefined{fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typ)}
}

func dictMethod(d *Dict, name string, args []Value, kwargs *Dict) (Value, error) {
	switch name {
	case "items":
		return filterItems(nil, d, nil, nil)
	case "keys":
		return List(slices.Clone(d.keys)), nil
	case "values":
		return List(slices.Clone(d.vals)), nil
	case "copy":
		c := NewDict()
		dictUpdate(c, d)
		return c, nil
	}
	if len(args) < 1 || len(args) > 2 || kwargs.Len() > 0 {
		return nil, fmt.Errorf("get expected 1 or 2 arguments")
	}
	if v, ok := d.Get(args[0]); ok {
		return v, nil
	}
	if len(args) == 2 {
		return args[1], nil
	}
	return nil, nil
}

type strMethod func(s string, args []Value, kwargs *Dict) (Value, error)

var strMethods map[string]strMethod

func init() {
	simple := func(f func(string) Value) strMethod {
		return func(s string, args []Value, kwargs *Dict) (Value, error) {
			if len(args) > 0 || kwargs.Len() > 0 {
				return nil, fmt.Errorf("takes no arguments")
			}
			return f(s), nil
		}
	}
	strip := func(left, right bool) strMethod {
		return func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("strip", args, kwargs, "chars")
			if err != nil {
				return nil, err
			}
			return pyStrip(s, or(a[0], nil), left, right)
		}
	}
	isAll := func(pred func(rune) bool) strMethod {
		return simple(func(s string) Value {
			if s == "" {
				return false
			}
			for _, r := range s {
				if !pred(r) {
					return false
				}
			}
			return true
		})
	}
	strMethods = map[string]strMethod{
		"upper":      simple(func(s string) Value { return pyUpper(s) }),
		"lower":      simple(func(s string) Value { return pyLower(s) }),
		"casefold":   simple(func(s string) Value { return pyLower(s) }),
		"title":      simple(func(s string) Value { return pyTitle(s) }),
		"capitalize": simple(func(s string) Value { return pyCapitalize(s) }),
		"swapcase": simple(func(s string) Value {
			return strings.Map(func(r rune) rune {
				if unicode.IsUpper(r) {
					return unicode.ToLower(r)
				}
				return unicode.ToUpper(r)
			}, s)
		}),
		"strip":     strip(true, true),
		"lstrip":    strip(true, false),
		"rstrip":    strip(false, true),
		"isdigit":   isAll(unicode.IsDigit),
		"isdecimal": isAll(func(r rune) bool { return unicode.Is(unicode.Nd, r) }),
		"isnumeric": isAll(unicode.IsNumber),
		"isalpha":   isAll(unicode.IsLetter),
		"isalnum":   isAll(func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }),
		"isspace":   isAll(isSpace),
		"isupper": simple(func(s string) Value {
			return strings.IndexFunc(s, unicode.IsUpper) >= 0 && strings.IndexFunc(s, unicode.IsLower) < 0
		}),
		"islower": simple(func(s string) Value {
			return strings.IndexFunc(s, unicode.IsLower) >= 0 && strings.IndexFunc(s, unicode.IsUpper) < 0
		}),
		"startswith": affix(strings.HasPrefix),
		"endswith":   affix(strings.HasSuffix),
		"split":      splitMethod(false),
		"rsplit":     splitMethod(true),
		"splitlines": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("splitlines", args, kwargs, "keepends")
			if err != nil {
				return nil, err
			}
			if truth(or(a[0], false)) {
				return nil, fmt.Errorf("splitlines(keepends=True) is not supported")
			}
			out := List{}
			for _, l := range pySplitlines(s) {
				out = append(out, l)
			}
			return out, nil
		},
		"replace": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("replace", args, kwargs, "old", "new", "count")
			if err != nil {
				return nil, err
			}
			old, err := asString(a[0], "replace's old")
			if err != nil {
				return nil, err
			}
			nw, err := asString(a[1], "replace's new")
			if err != nil {
				return nil, err
			}
			n, err := asInt(or(a[2], int64(-1)), "replace's count")
			if err != nil {
				return nil, err
			}
			if int64(strings.Count(s, old))*int64(len(nw)) > maxStrBytes {
				return nil, fmt.Errorf("string longer than %d bytes", maxStrBytes)
			}
			return strings.Replace(s, old, nw, int(n)), nil
		},
		"find":   findMethod(false, false),
		"rfind":  findMethod(true, false),
		"index":  findMethod(false, true),
		"rindex": findMethod(true, true),
		"count": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("count", args, kwargs, "sub")
			if err != nil {
				return nil, err
			}
			sub, err := asString(a[0], "count's argument")
			if err != nil {
				return nil, err
			}
			return int64(strings.Count(s, sub)), nil
		},
		"join": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("join", args, kwargs, "iterable")
			if err != nil {
				return nil, err
			}
			items, err := iterate(a[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				if parts[i], err = asString(it, fmt.Sprintf("sequence item %d", i)); err != nil {
					return nil, err
				}
			}
			return strings.Join(parts, s), nil
		},
		"removeprefix": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("removeprefix", args, kwargs, "prefix")
			if err != nil {
				return nil, err
			}
			p, err := asString(a[0], "removeprefix's argument")
			return strings.TrimPrefix(s, p), err
		},
		"removesuffix": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("removesuffix", args, kwargs, "suffix")
			if err != nil {
				return nil, err
			}
			p, err := asString(a[0], "removesuffix's argument")
			return strings.TrimSuffix(s, p), err
		},
		"partition":  partition(false),
		"rpartition": partition(true),
		"center":     pad(0),
		"ljust":      pad(-1),
		"rjust":      pad(1),
		"zfill": func(s string, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("zfill", args, kwargs, "width")
			if err != nil {
				return nil, err
			}
			w, err := asInt(a[0], "zfill's width")
			if err != nil {
				return nil, err
			}
			n := w - int64(runeLen(s))
			if n <= 0 {
				return s, nil
			}
			sign := ""
			if s != "" && (s[0] == '+' || s[0] == '-') {
				sign, s = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", int(min(n, maxStrBytes))) + s, nil
		},
		"format": func(s string, args []Value, kwargs *Dict) (Value, error) {
			return strFormat(s, args, kwargs)
		},
	}
}

func affix(has func(s, p string) bool) strMethod {
	return func(s string, args []Value, kwargs *Dict) (Value, error) {
		a, err := bind("startswith", args, kwargs, "prefix", "start", "end")
		if err != nil {
			return nil, err
		}
		rs := []rune(s)
		idx, err := sliceIndices(len(rs), [3]*int64{intPtr(or(a[1], nil)), intPtr(or(a[2], nil)), nil})
		if err != nil {
			return nil, err
		}
		if len(idx) > 0 {
			s = string(rs[idx[0] : idx[len(idx)-1]+1])
		} else {
			s = ""
		}
		var cands []Value
		switch p := a[0].(type) {
		case string:
			cands = []Value{p}
		case Tuple:
			cands = p
		default:
			return nil, fmt.Errorf("startswith first arg must be str or a tuple of str, not %s", typeName(a[0]))
		}
		for _, c := range cands {
			cs, err := asString(c, "prefix")
			if err != nil {
				return nil, err
			}
			if has(s, cs) {
				return true, nil
			}
		}
		return false, nil
	}
}

func intPtr(v Value) *int64 {
	if i, _, isFloat, ok := number(v); ok && !isFloat {
		return &i
	}
	return nil
}

func splitMethod(right bool) strMethod {
	return func(s string, args []Value, kwargs *Dict) (Value, error) {
		a, err := bind("split", args, kwargs, "sep", "maxsplit")
		if err != nil {
			return nil, err
		}
		n, err := asInt(or(a[1], int64(-1)), "maxsplit")
		if err != nil {
			return nil, err
		}
		var parts []string
		switch sep := or(a[0], nil).(type) {
		case nil:
			parts = splitSpace(s, int(n), right)
		case string:
			if sep == "" {
				return nil, fmt.Errorf("empty separator")
			}
			if n < 0 {
				parts = strings.Split(s, sep)
			} else if !right {
				parts = strings.SplitN(s, sep, int(n)+1)
			} else {
				parts = rsplitN(s, sep, int(n))
			}
		default:
			return nil, fmt.Errorf("must be str or None, not %s", typeName(sep))
		}
		out := make(List, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	}
}

func rsplitN(s, sep string, n int) []string {
	var out []string
	for n > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
		n--
	}
	out = append(out, s)
	slices.Reverse(out)
	return out
}

// splitSpace is Python's split() without a separator: runs of whitespace,
// at most n splits (n < 0: no limit).
func splitSpace(s string, n int, right bool) []string {
	if n < 0 {
		return strings.FieldsFunc(s, isSpace)
	}
	var out []string
	if right {
		s = strings.TrimRightFunc(s, isSpace)
		for s != "" && n > 0 {
			i := strings.LastIndexFunc(s, isSpace)
			if i < 0 {
				break
			}
			_, size := utf8.DecodeRuneInString(s[i:])
			out = append(out, s[i+size:])
			s = strings.TrimRightFunc(s[:i], isSpace)
			n--
		}
		if s != "" {
			out = append(out, s)
		}
		slices.Reverse(out)
		return out
	}
	s = strings.TrimLeftFunc(s, isSpace)
	for s != "" && n > 0 {
		i := strings.IndexFunc(s, isSpace)
		if i < 0 {
			break
		}
		out = append(out, s[:i])
		s = strings.TrimLeftFunc(s[i:], isSpace)
		n--
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func findMethod(right, raise bool) strMethod {
	return func(s string, args []Value, kwargs *Dict) (Value, error) {
		a, err := bind("find", args, kwargs, "sub")
		if err != nil {
			return nil, err
		}
		sub, err := asString(a[0], "find's argument")
		if err != nil {
			return nil, err
		}
		i := strings.Index(s, sub)
		if right {
			i = strings.LastIndex(s, sub)
		}
		if i < 0 {
			if raise {
				return nil, fmt.Errorf("substring not found")
			}
			return int64(-1), nil
		}
		return int64(runeLen(s[:i])), nil
	}
}

func partition(right bool) strMethod {
	return func(s string, args []Value, kwargs *Dict) (Value, error) {
		a, err := bind("partition", args, kwargs, "sep")
		if err != nil {
			return nil, err
		}
		sep, err := asString(a[0], "partition's separator")
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		i := strings.Index(s, sep)
		if right {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if right {
				return Tuple{"", "", s}, nil
			}
			return Tuple{s, "", ""}, nil
		}
		return Tuple{s[:i], sep, s[i+len(sep):]}, nil
	}
}

func pad(align int) strMethod {
	return func(s string, args []Value, kwargs *Dict) (Value, error) {
		a, err := bind("center", args, kwargs, "width", "fillchar")
		if err != nil {
			return nil, err
		}
		w, err := asInt(a[0], "width")
		if err != nil {
			return nil, err
		}
		fill := toStr(or(a[1], " "))
		if runeLen(fill) != 1 {
			return nil, fmt.Errorf("the fill character must be exactly one character long")
		}
		n := w - int64(runeLen(s))
		if n <= 0 {
			return s, nil
		}
		n = min(n, maxStrBytes)
		switch align {
		case -1:
			return s + strings.Repeat(fill, int(n)), nil
		case 1:
			return strings.Repeat(fill, int(n)) + s, nil
		}
		return pyCenter(s, w, fill), nil
	}
}

// pyCenter is Python's str.center.
func pyCenter(s string, width int64, fill string) string {
	n := width - int64(runeLen(s))
	if n <= 0 {
		return s
	}
	n = min(n, maxStrBytes)
	left := n/2 + (n & width & 1)
	return strings.Repeat(fill, int(left)) + s + strings.Repeat(fill, int(n-left))
}

// pyStrip is Python's strip, lstrip and rstrip: whitespace, or the
// characters of chars.
func pyStrip(s string, chars Value, left, right bool) (Value, error) {
	cut := isSpace
	if chars != nil {
		cs, err := asString(chars, "strip's chars")
		if err != nil {
			return nil, err
		}
		cut = func(r rune) bool { return strings.ContainsRune(cs, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s, nil
}

// pySplitlines is Python's str.splitlines().
func pySplitlines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			i += size
			if r == '\r' && i < len(s) && s[i] == '\n' {
				i++
			}
			start = i
			continue
		}
		i += size
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyTitle is Python's str.title: a cased letter after an uncased character
// starts a word.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		switch {
		case isCased(r) && !prevCased:
			b.WriteRune(unicode.ToTitle(r))
		case isCased(r):
			b.WriteString(pyLower(string(r)))
		default:
			b.WriteRune(r)
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// pyCapitalize is Python's str.capitalize.
func pyCapitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + pyLower(s[size:])
}
