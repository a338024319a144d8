package jinja

import (
	"fmt"
	"html"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// absent marks an argument a call left out.
type absentT struct{}

var absent Value = absentT{}

// bind matches positional and keyword arguments to parameter names; the
// ones left out are absent.
func bind(fname string, args []Value, kwargs *Dict, names ...string) ([]Value, error) {
	if len(args) > len(names) {
		return nil, fmt.Errorf("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	out := make([]Value, len(names))
	for i := range out {
		out[i] = absent
	}
	copy(out, args)
	if kwargs != nil {
		for i, k := range kwargs.keys {
			j := slices.Index(names, toStr(k))
			if j < 0 {
				return nil, fmt.Errorf("%s() got an unexpected keyword argument '%s'", fname, toStr(k))
			}
			if j < len(args) {
				return nil, fmt.Errorf("%s() got multiple values for argument '%s'", fname, toStr(k))
			}
			out[j] = kwargs.vals[i]
		}
	}
	return out, nil
}

// or returns v, or def when v is absent.
func or(v, def Value) Value {
	if v == absent {
		return def
	}
	return v
}

func asInt(v Value, what string) (int64, error) {
	i, _, isFloat, ok := number(v)
	if !ok || isFloat {
		return 0, fmt.Errorf("%s must be an integer, not %s", what, typeName(v))
	}
	return i, nil
}

func asString(v Value, what string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %s", what, typeName(v))
	}
	return s, nil
}

func fn(name string, call func(r *renderer, args []Value, kwargs *Dict) (Value, error)) *Func {
	return &Func{name: name, call: call}
}

// globals are the names every template sees: Jinja's and the two that
// transformers adds (raise_exception, strftime_now).
func (r *renderer) globals() map[string]Value {
	return map[string]Value{
		"range": fn("range", func(_ *renderer, args []Value, _ *Dict) (Value, error) {
			var start, stop, step int64 = 0, 0, 1
			var err error
			ints := make([]int64, len(args))
			for i, a := range args {
				if ints[i], err = asInt(a, "range() argument"); err != nil {
					return nil, err
				}
			}
			switch len(args) {
			case 1:
				stop = ints[0]
			case 2:
				start, stop = ints[0], ints[1]
			case 3:
				start, stop, step = ints[0], ints[1], ints[2]
			default:
				return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(args))
			}
			if step == 0 {
				return nil, fmt.Errorf("range() arg 3 must not be zero")
			}
			n := int64(0)
			if step > 0 && stop > start {
				n = (stop - start + step - 1) / step
			} else if step < 0 && stop < start {
				n = (start - stop - step - 1) / -step
			}
			if n > maxRange {
				return nil, fmt.Errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
			}
			out := make(List, n)
			for i := range out {
				out[i] = start + int64(i)*step
			}
			return out, nil
		}),
		"dict": fn("dict", func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
			d := NewDict()
			if len(args) > 1 {
				return nil, fmt.Errorf("dict expected at most 1 argument, got %d", len(args))
			}
			if len(args) == 1 {
				if err := dictUpdate(d, args[0]); err != nil {
					return nil, err
				}
			}
			for i, k := range kwargs.keys {
				d.Set(k, kwargs.vals[i])
			}
			return d, nil
		}),
		"namespace": fn("namespace", func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
			d := NewDict()
			for _, a := range args {
				if err := dictUpdate(d, a); err != nil {
					return nil, err
				}
			}
			for i, k := range kwargs.keys {
				d.Set(k, kwargs.vals[i])
			}
			return &Namespace{d}, nil
		}),
		"raise_exception": fn("raise_exception", func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("raise_exception", args, kwargs, "message")
			if err != nil {
				return nil, err
			}
			if a[0] == absent {
				return nil, fmt.Errorf("raise_exception() missing 1 required positional argument: 'message'")
			}
			return nil, &Error{Msg: toStr(a[0]), Raised: true}
		}),
		"strftime_now": fn("strftime_now", func(r *renderer, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("strftime_now", args, kwargs, "format")
			if err != nil {
				return nil, err
			}
			f, err := asString(a[0], "strftime_now's format")
			if err != nil {
				return nil, err
			}
			return strftime(r.opts.Now(), f), nil
		}),
		"lipsum": fn("lipsum", func(*renderer, []Value, *Dict) (Value, error) {
			return nil, fmt.Errorf("lipsum is not supported")
		}),
		"cycler": fn("cycler", func(_ *renderer, args []Value, _ *Dict) (Value, error) {
			return newCycler(args), nil
		}),
		"joiner": fn("joiner", func(_ *renderer, args []Value, kwargs *Dict) (Value, error) {
			a, err := bind("joiner", args, kwargs, "sep")
			if err != nil {
				return nil, err
			}
			sep, used := toStr(or(a[0], ", ")), false
			return fn("joiner", func(*renderer, []Value, *Dict) (Value, error) {
				if !used {
					used = true
					return "", nil
				}
				return sep, nil
			}), nil
		}),
	}
}

func newCycler(items []Value) Value {
	ns := NewDict()
	pos := 0
	ns.Set("next", fn("next", func(*renderer, []Value, *Dict) (Value, error) {
		if len(items) == 0 {
			return nil, fmt.Errorf("cycler has no items")
		}
		v := items[pos%len(items)]
		pos++
		return v, nil
	}))
	ns.Set("reset", fn("reset", func(*renderer, []Value, *Dict) (Value, error) {
		pos = 0
		return nil, nil
	}))
	return &Namespace{ns}
}

// dictUpdate adds a mapping's items, or a list of pairs, to d.
func dictUpdate(d *Dict, v Value) error {
	switch v := v.(type) {
	case *Dict:
		for i, k := range v.keys {
			d.Set(k, v.vals[i])
		}
		return nil
	case List, Tuple:
		items, _ := iterate(v)
		for _, it := range items {
			pair, err := iterate(it)
			if err != nil || len(pair) != 2 {
				return fmt.Errorf("dictionary update sequence element has length other than 2")
			}
			if err := d.Set(pair[0], pair[1]); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("'%s' object is not a mapping", typeName(v))
}

// applyFilter evaluates a filter's arguments and applies it to v.
func (r *renderer) applyFilter(f *filterExpr, v Value, sc *scope) (Value, error) {
	args, kwargs, err := r.evalArgs(f.args, f.kwargs, sc)
	if err != nil {
		return nil, err
	}
	return r.filter(f.name, v, args, kwargs)
}

func (r *renderer) filter(name string, v Value, args []Value, kwargs *Dict) (Value, error) {
	if err := r.step(); err != nil {
		return nil, err
	}
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("No filter named '%s'.", name)
	}
	if u, isU := v.(Undefined); isU && failsOnUndefined[name] {
		return nil, u.err()
	}
	return f(r, v, args, kwargs)
}

// failsOnUndefined are the filters that raise on an undefined value in
// Jinja; the others see it as empty.
var failsOnUndefined = map[string]bool{"abs": true, "round": true, "attr": true, "dictsort": true}

type filterFunc func(r *renderer, v Value, args []Value, kwargs *Dict) (Value, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"default":     filterDefault,
		"d":           filterDefault,
		"length":      filterLength,
		"count":       filterLength,
		"string":      func(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) { return toStr(v), nil },
		"safe":        func(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) { return toStr(v), nil },
		"escape":      filterEscape,
		"e":           filterEscape,
		"forceescape": filterEscape,
		"upper":       strFilter(func(s string) string { return pyUpper(s) }),
		"lower":       strFilter(func(s string) string { return pyLower(s) }),
		"capitalize":  strFilter(pyCapitalize),
		"title":       strFilter(jinjaTitle),
		"trim":        filterTrim,
		"replace":     filterReplace,
		"join":        filterJoin,
		"first":       filterFirst,
		"last":        filterLast,
		"list":        filterList,
		"reverse":     filterReverse,
		"sort":        filterSort,
		"unique":      filterUnique,
		"items":       filterItems,
		"dictsort":    filterDictsort,
		"map":         filterMap,
		"select":      selectFilter(false, false),
		"reject":      selectFilter(true, false),
		"selectattr":  selectFilter(false, true),
		"rejectattr":  selectFilter(true, true),
		"tojson":      filterToJSON,
		"int":         filterInt,
		"float":       filterFloat,
		"abs":         filterAbs,
		"round":       filterRound,
		"indent":      filterIndent,
		"wordcount":   filterWordcount,
		"center":      filterCenter,
		"sum":         filterSum,
		"min":         minMax(false),
		"max":         minMax(true),
		"attr":        filterAttr,
		"format":      filterFormat,
		"batch":       filterBatch,
		"pprint":      func(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) { return repr(v), nil },
		"truncate":    filterTruncate,
	}
}

func filterDefault(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("default", args, kwargs, "default_value", "boolean")
	if err != nil {
		return nil, err
	}
	_, undef := v.(Undefined)
	if undef || truth(or(a[1], false)) && !truth(v) {
		return or(a[0], ""), nil
	}
	return v, nil
}

func filterLength(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	n, err := length(v)
	return int64(n), err
}

func filterEscape(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	s := html.EscapeString(toStr(v)) // &amp; &lt; &gt; &#39; &#34;
	return s, nil
}

func strFilter(f func(string) string) filterFunc {
	return func(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) { return f(toStr(v)), nil }
}

func filterTrim(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("trim", args, kwargs, "chars")
	if err != nil {
		return nil, err
	}
	return pyStrip(toStr(v), or(a[0], nil), true, true)
}

func filterReplace(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("replace", args, kwargs, "old", "new", "count")
	if err != nil {
		return nil, err
	}
	n := int64(-1)
	if c := or(a[2], nil); c != nil {
		if n, err = asInt(c, "replace's count"); err != nil {
			return nil, err
		}
	}
	return strings.Replace(toStr(v), toStr(or(a[0], "")), toStr(or(a[1], "")), int(n)), nil
}

func filterJoin(r *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("join", args, kwargs, "d", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		if attr := or(a[1], nil); attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		parts[i] = toStr(it)
	}
	return strings.Join(parts, toStr(or(a[0], ""))), nil
}

func filterFirst(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{"No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{"No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterList(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	items, err := iterate(v)
	return List(slices.Clone(items)), err
}

func filterReverse(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		slices.Reverse(rs)
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := List(slices.Clone(items))
	slices.Reverse(out)
	return out, nil
}

// attrPath looks up a dotted attribute ("a.b", or an index "0") as Jinja's
// make_attrgetter does.
func attrPath(v Value, attr Value) (Value, error) {
	s, ok := attr.(string)
	if !ok {
		return getItem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var key Value = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// sortKey is the key filters sort and compare by: lowered strings unless
// case sensitive.
func sortKey(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func sortValues(items []Value, key func(Value) (Value, error), reverse bool) error {
	keys := make([]Value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var sortErr error
	slices.SortStableFunc(idx, func(a, b int) int {
		x, y := keys[a], keys[b]
		if reverse {
			x, y = y, x
		}
		lt, err := less(x, y)
		if err != nil && sortErr == nil {
			sortErr = err
		}
		if lt {
			return -1
		}
		if gt, _ := less(y, x); gt {
			return 1
		}
		return 0
	})
	if sortErr != nil {
		return sortErr
	}
	sorted := make([]Value, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func filterSort(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("sort", args, kwargs, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := List(slices.Clone(items))
	cs := truth(or(a[1], false))
	attr := or(a[2], nil)
	err = sortValues(out, func(x Value) (Value, error) {
		if attr != nil {
			var err error
			if x, err = attrPath(x, attr); err != nil {
				return nil, err
			}
		}
		return sortKey(x, cs), nil
	}, truth(or(a[0], false)))
	return out, err
}

func filterUnique(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("unique", args, kwargs, "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	seen := NewDict()
	out := List{}
	for _, it := range items {
		k := it
		if attr := or(a[1], nil); attr != nil {
			if k, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		k = sortKey(k, truth(or(a[0], false)))
		if _, ok := seen.Get(k); ok {
			continue
		}
		if err := seen.Set(k, true); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

func filterItems(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	switch d := v.(type) {
	case Undefined:
		return List{}, nil
	case *Dict:
		out := make(List, d.Len())
		for i, k := range d.keys {
			out[i] = Tuple{k, d.vals[i]}
		}
		return out, nil
	}
	return nil, fmt.Errorf("can only get item pairs from a mapping")
}

func filterDictsort(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("dictsort", args, kwargs, "case_sensitive", "by", "reverse")
	if err != nil {
		return nil, err
	}
	items, err := filterItems(nil, v, nil, nil)
	if err != nil {
		return nil, err
	}
	pos := 0
	switch or(a[1], "key") {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, fmt.Errorf("you can only sort by either \"key\" or \"value\"")
	}
	out := items.(List)
	cs := truth(or(a[0], false))
	err = sortValues(out, func(x Value) (Value, error) { return sortKey(x.(Tuple)[pos], cs), nil }, truth(or(a[2], false)))
	return out, err
}

func filterMap(r *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make(List, len(items))
	if attr, ok := kwargs.Get("attribute"); ok {
		def, hasDef := kwargs.Get("default")
		for i, it := range items {
			x, err := attrPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, undef := x.(Undefined); undef && hasDef {
				x = def
			}
			out[i] = x
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("map requires a filter argument")
	}
	name, err := asString(args[0], "map's filter")
	if err != nil {
		return nil, err
	}
	for i, it := range items {
		if out[i], err = r.filter(name, it, args[1:], kwargs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(r *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr Value
		if byAttr {
			if len(args) == 0 {
				return nil, fmt.Errorf("missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		out := List{}
		for _, it := range items {
			x := it
			if byAttr {
				if x, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			var ok bool
			if len(args) == 0 {
				ok = truth(x)
			} else {
				name, err := asString(args[0], "the test's name")
				if err != nil {
					return nil, err
				}
				if ok, err = r.test(name, x, args[1:], kwargs); err != nil {
					return nil, err
				}
			}
			if ok != reject {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys), no HTML
// escaping.
func filterToJSON(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("tojson", args, kwargs, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return nil, err
	}
	o := jsonOptions{ensureASCII: truth(or(a[0], false)), sortKeys: truth(or(a[3], false))}
	switch ind := or(a[1], nil).(type) {
	case nil:
	case string:
		o.indent = &ind
	default:
		n, err := asInt(ind, "tojson's indent")
		if err != nil {
			return nil, err
		}
		s := strings.Repeat(" ", int(max(0, min(n, 1000))))
		o.indent = &s
	}
	o.itemSep, o.keySep = ", ", ": "
	if o.indent != nil {
		o.itemSep = ","
	}
	if seps := or(a[2], nil); seps != nil {
		pair, err := iterate(seps)
		if err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("tojson's separators must be a pair of strings")
		}
		o.itemSep, o.keySep = toStr(pair[0]), toStr(pair[1])
	}
	var b strings.Builder
	if err := dumpJSON(&b, v, o, 0); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func filterInt(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("int", args, kwargs, "default", "base")
	if err != nil {
		return nil, err
	}
	def := or(a[0], int64(0))
	base := int64(10)
	if b := or(a[1], nil); b != nil {
		if base, err = asInt(b, "int's base"); err != nil {
			return nil, err
		}
	}
	switch x := v.(type) {
	case bool, int64:
		i, _, _, _ := number(x)
		return i, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.TrimFunc(x, isSpace)
		s = strings.ReplaceAll(s, "_", "")
		if i, err := strconv.ParseInt(s, int(base), 64); err == nil {
			return i, nil
		}
		if base == 10 {
			if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return int64(f), nil
			}
		}
	}
	return def, nil
}

func filterFloat(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("float", args, kwargs, "default")
	if err != nil {
		return nil, err
	}
	if _, f, _, ok := number(v); ok {
		return f, nil
	}
	if s, ok := v.(string); ok {
		s = strings.TrimFunc(s, isSpace)
		switch strings.ToLower(s) {
		case "inf", "+inf", "infinity", "+infinity":
			return math.Inf(1), nil
		case "-inf", "-infinity":
			return math.Inf(-1), nil
		case "nan", "+nan", "-nan":
			return math.NaN(), nil
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil {
			return f, nil
		}
	}
	return or(a[0], 0.0), nil
}

func filterAbs(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	i, f, isFloat, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if isFloat {
		return math.Abs(f), nil
	}
	return abs64(i), nil
}

func filterRound(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("round", args, kwargs, "precision", "method")
	if err != nil {
		return nil, err
	}
	prec, err := asInt(or(a[0], int64(0)), "round's precision")
	if err != nil {
		return nil, err
	}
	_, f, _, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("round of a %s", typeName(v))
	}
	p := math.Pow(10, float64(prec))
	switch m := or(a[1], "common"); m {
	case "common":
		return math.RoundToEven(f*p) / p, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	default:
		return nil, fmt.Errorf("method must be common, ceil or floor")
	}
}

func filterIndent(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("indent", args, kwargs, "width", "first", "blank")
	if err != nil {
		return nil, err
	}
	var ind string
	switch w := or(a[0], int64(4)).(type) {
	case string:
		ind = w
	default:
		n, err := asInt(w, "indent's width")
		if err != nil {
			return nil, err
		}
		ind = strings.Repeat(" ", int(max(0, min(n, 1000))))
	}
	lines := pySplitlines(toStr(v) + "\n")
	var out string
	if truth(or(a[2], false)) {
		out = strings.Join(lines, "\n"+ind)
	} else {
		out = lines[0]
		for _, l := range lines[1:] {
			out += "\n"
			if l != "" {
				out += ind
			}
			out += l
		}
	}
	if truth(or(a[1], false)) {
		out = ind + out
	}
	return out, nil
}

var wordRe = regexp.MustCompile(`[\p{L}\p{N}_]+`)

func filterWordcount(_ *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	return int64(len(wordRe.FindAllStringIndex(toStr(v), -1))), nil
}

func filterCenter(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("center", args, kwargs, "width")
	if err != nil {
		return nil, err
	}
	w, err := asInt(or(a[0], int64(80)), "center's width")
	if err != nil {
		return nil, err
	}
	return pyCenter(toStr(v), w, " "), nil
}

func filterSum(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("sum", args, kwargs, "attribute", "start")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	total := or(a[1], int64(0))
	for _, it := range items {
		if attr := or(a[0], nil); attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		if total, err = binary("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func minMax(isMax bool) filterFunc {
	return func(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
		a, err := bind("min", args, kwargs, "case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{"No aggregated item, sequence was empty."}, nil
		}
		key := func(x Value) (Value, error) {
			if attr := or(a[1], nil); attr != nil {
				var err error
				if x, err = attrPath(x, attr); err != nil {
					return nil, err
				}
			}
			return sortKey(x, truth(or(a[0], false))), nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			var better bool
			if isMax {
				better, err = less(bk, k)
			} else {
				better, err = less(k, bk)
			}
			if err != nil {
				return nil, err
			}
			if better {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func filterAttr(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("attr", args, kwargs, "name")
	if err != nil {
		return nil, err
	}
	name, err := asString(a[0], "attr's name")
	if err != nil {
		return nil, err
	}
	return getAttr(v, name)
}

func filterFormat(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	if kwargs.Len() > 0 {
		return printf(toStr(v), kwargs)
	}
	return printf(toStr(v), Tuple(args))
}

func filterBatch(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("batch", args, kwargs, "linecount", "fill_with")
	if err != nil {
		return nil, err
	}
	n, err := asInt(or(a[0], nil), "batch's linecount")
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("batch's linecount must be a positive integer")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := List{}
	for i := 0; i < len(items); i += int(n) {
		row := List(slices.Clone(items[i:min(len(items), i+int(n))]))
		if fill := or(a[1], nil); fill != nil {
			for int64(len(row)) < n {
				row = append(row, fill)
			}
		}
		out = append(out, row)
	}
	return out, nil
}

func filterTruncate(_ *renderer, v Value, args []Value, kwargs *Dict) (Value, error) {
	a, err := bind("truncate", args, kwargs, "length", "killwords", "end", "leeway")
	if err != nil {
		return nil, err
	}
	s := []rune(toStr(v))
	n, err := asInt(or(a[0], int64(255)), "truncate's length")
	if err != nil {
		return nil, err
	}
	end := toStr(or(a[2], "..."))
	leeway, err := asInt(or(a[3], int64(5)), "truncate's leeway")
	if err != nil {
		return nil, err
	}
	if int64(len(s)) <= n+leeway {
		return string(s), nil
	}
	cut := max(0, n-int64(runeLen(end)))
	if truth(or(a[1], false)) {
		return string(s[:cut]) + end, nil
	}
	head := string(s[:cut])
	if i := strings.LastIndexByte(head, ' '); i >= 0 {
		head = head[:i]
	}
	return head + end, nil
}

// test applies the test name to v.
func (r *renderer) test(name string, v Value, args []Value, kwargs *Dict) (bool, error) {
	if err := r.step(); err != nil {
		return false, err
	}
	arg := func() (Value, error) {
		if len(args) == 0 {
			if kwargs != nil && kwargs.Len() > 0 {
				return kwargs.vals[0], nil
			}
			return nil, fmt.Errorf("test '%s' needs an argument", name)
		}
		return args[0], nil
	}
	_, undef := v.(Undefined)
	switch name {
	case "defined":
		return !undef, nil
	case "undefined":
		return undef, nil
	case "none":
		return v == nil, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		return v == true, nil
	case "false":
		return v == false, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "number":
		_, _, _, ok := number(v)
		return ok, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case string, List, Tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.(type) {
		case string, List, Tuple, *Dict:
			return true, nil
		}
		return false, nil
	case "callable":
		switch v.(type) {
		case *Func, Undefined:
			return true, nil
		}
		return false, nil
	case "escaped":
		return false, nil
	case "lower", "upper":
		s, ok := v.(string)
		if !ok {
			return false, nil
		}
		if name == "lower" {
			return pyLower(s) == s, nil
		}
		return pyUpper(s) == s, nil
	case "odd", "even", "divisibleby":
		i, err := asInt(v, "the tested value")
		if err != nil {
			return false, err
		}
		switch name {
		case "odd":
			return i%2 != 0, nil
		case "even":
			return i%2 == 0, nil
		}
		a, err := arg()
		if err != nil {
			return false, err
		}
		d, err := asInt(a, "divisibleby's argument")
		if err != nil || d == 0 {
			return false, fmt.Errorf("divisibleby needs a nonzero integer")
		}
		return i%d == 0, nil
	case "sameas":
		a, err := arg()
		if err != nil {
			return false, err
		}
		switch v.(type) {
		case nil, bool:
			return v == a, nil
		}
		return equal(v, a) && typeName(v) == typeName(a), nil
	case "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in":
		a, err := arg()
		if err != nil {
			return false, err
		}
		op := map[string]string{"eq": "==", "equalto": "==", "ne": "!=", "lt": "<", "lessthan": "<",
			"le": "<=", "gt": ">", "greaterthan": ">", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		return compare(op, v, a)
	case "filter":
		s, ok := v.(string)
		_, known := filters[s]
		return ok && known, nil
	case "test":
		s, ok := v.(string)
		return ok && knownTests[s], nil
	}
	return false, fmt.Errorf("no test named '%s'", name)
}

var knownTests = map[string]bool{
	"defined": true, "undefined": true, "none": true, "boolean": true, "true": true, "false": true,
	"integer": true, "float": true, "number": true, "string": true, "mapping": true, "iterable": true,
	"sequence": true, "callable": true, "escaped": true, "lower": true, "upper": true, "odd": true,
	"even": true, "divisibleby": true, "sameas": true, "eq": true, "equalto": true, "==": true,
	"ne": true, "!=": true, "lt": true, "lessthan": true, "<": true, "le": true, "<=": true, "gt": true,
	"greaterthan": true, ">": true, "ge": true, ">=": true, "in": true, "filter": true, "test": true,
}

// jinjaTitle is Jinja's title filter: each word, split at runs of spaces,
// dashes and opening brackets, gets its first letter upper-cased and the
// rest lower-cased.
func jinjaTitle(s string) string {
	var b strings.Builder
	word := true
	for _, r := range s {
		if isSpace(r) || strings.ContainsRune("-({[<", r) {
			word = true
			b.WriteRune(r)
			continue
		}
		if word {
			b.WriteString(pyUpper(string(r)))
			word = false
		} else {
			b.WriteString(pyLower(string(r)))
		}
	}
	return b.String()
}

func pyUpper(s string) string {
	return strings.Map(unicode.ToUpper, strings.ReplaceAll(s, "ß", "SS"))
}

func pyLower(s string) string { return strings.ToLower(s) }
