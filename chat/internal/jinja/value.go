package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Value is a template value. The dynamic types are those of Python that
// templates see:
//
//	nil       None
//	bool      bool
//	int64     int
//	float64   float
//	string    str
//	List      list
//	Tuple     tuple
//	*Dict     dict (insertion ordered)
//
// and, made by templates, namespaces, macros, loops, bound methods and the
// undefined value.
type Value = any

// List is a Python list.
type List []Value

// Tuple is a Python tuple.
type Tuple []Value

// Undefined is a missing variable, attribute or item: it prints as nothing,
// is false and iterates as empty, and most other uses are errors.
type Undefined struct {
	// hint is the message of the error a use of it raises.
	hint string
}

func undefinedName(name string) Undefined { return Undefined{fmt.Sprintf("'%s' is undefined", name)} }

func (u Undefined) err() error { return fmt.Errorf("%s", u.hint) }

// Dict is a Python dict: keys in insertion order.
type Dict struct {
	keys  []Value
	vals  []Value
	index map[any]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{index: map[any]int{}} }

// hashKey is the Go map key of a dict key: Python's equal numbers (1, 1.0,
// True) are one key.
func hashKey(k Value) (any, error) {
	switch k := k.(type) {
	case nil, string, int64:
		return k, nil
	case bool:
		if k {
			return int64(1), nil
		}
		return int64(0), nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int64(k), nil
		}
		return k, nil
	case Tuple:
		var b strings.Builder
		for _, x := range k {
			h, err := hashKey(x)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "%T:%v,", h, h)
		}
		return "tuple:" + b.String(), nil
	}
	return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
}

// Set sets the value of key k.
func (d *Dict) Set(k, v Value) error {
	h, err := hashKey(k)
	if err != nil {
		return err
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Get returns the value of key k.
func (d *Dict) Get(k Value) (Value, bool) {
	h, err := hashKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in order.
func (d *Dict) Keys() []Value { return d.keys }

// Namespace is what namespace() makes: attributes a template may set from
// inside loops.
type Namespace struct{ attrs *Dict }

// Func is a callable value: a global function, a bound method, a macro.
type Func struct {
	name string
	call func(r *renderer, args []Value, kwargs *Dict) (Value, error)
}

// FromGo converts a Go value to a template value: nil, bools, integers,
// floats and strings, slices, and maps with string keys (sorted by key,
// since Go maps have no order), json.Number, and json.RawMessage (decoded
// with its objects' key order kept). Values that are already template
// values pass through.
func FromGo(v any) (Value, error) {
	switch v := v.(type) {
	case nil, bool, int64, float64, string, List, Tuple, *Dict, *Namespace, *Func, Undefined:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case json.Number:
		return numberValue(string(v))
	case json.RawMessage:
		return DecodeJSON(v)
	case []any:
		out := make(List, len(v))
		for i, x := range v {
			c, err := FromGo(x)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		d := NewDict()
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			c, err := FromGo(v[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			d.Set(k, c)
		}
		return d, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rv.Uint() > math.MaxInt64 {
			return float64(rv.Uint()), nil
		}
		return int64(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return rv.Float(), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Slice, reflect.Array:
		out := make(List, rv.Len())
		for i := range out {
			c, err := FromGo(rv.Index(i).Interface())
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		m := map[string]any{}
		for it := rv.MapRange(); it.Next(); {
			m[it.Key().String()] = it.Value().Interface()
		}
		return FromGo(m)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return FromGo(rv.Elem().Interface())
	}
	return nil, fmt.Errorf("cannot use a Go %T in a template", v)
}

// numberValue is a JSON number as Python's json.loads reads it: an int
// unless it has a fraction or an exponent.
func numberValue(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("bad number %q", s)
	}
	return f, nil
}

// DecodeJSON decodes one JSON value into template values, keeping the key
// order of objects.
func DecodeJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("JSON: data after the value at offset %d", dec.InputOffset())
	}
	return v, nil
}

func decodeJSON(dec *json.Decoder, depth int) (Value, error) {
	if depth > 10000 {
		return nil, fmt.Errorf("JSON: nested too deep at offset %d", dec.InputOffset())
	}
	t, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("JSON at offset %d: %w", dec.InputOffset(), err)
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := List{}
			for dec.More() {
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
	case json.Number:
		return numberValue(string(t))
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("JSON: unexpected %v at offset %d", t, dec.InputOffset())
}

// typeName is Python's type name of v.
func typeName(v Value) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case List:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *Func:
		return "function"
	case Undefined:
		return "Undefined"
	case *loopInfo:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// objectRepr names v's type the way Jinja's undefined messages do.
func objectRepr(v Value) string {
	if v == nil {
		return "None"
	}
	return typeName(v) + " object"
}

// truth is Python's bool(v).
func truth(v Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case List:
		return len(v) > 0
	case Tuple:
		return len(v) > 0
	case *Dict:
		return v.Len() > 0
	case Undefined:
		return false
	}
	return true
}

// toStr is Python's str(v), with undefined as "".
func toStr(v Value) string {
	switch v := v.(type) {
	case string:
		return v
	case Undefined:
		return ""
	}
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

// repr is Python's repr(v).
func repr(v Value) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

// maxReprDepth bounds the nesting repr writes out; a namespace can hold
// itself.
const maxReprDepth = 100

func writeRepr(b *strings.Builder, v Value, depth int) {
	if depth > maxReprDepth || b.Len() > maxStrBytes {
		b.WriteString("...")
		return
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(formatFloat(v))
	case string:
		writeStrRepr(b, v)
	case List:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, x, depth+1)
		}
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, x, depth+1)
		}
		if len(v) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, v.vals[i], depth+1)
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs, depth+1)
		b.WriteByte('>')
	case *Func:
		fmt.Fprintf(b, "<function %s>", v.name)
	case Undefined:
		b.WriteString("Undefined")
	case *loopInfo:
		fmt.Fprintf(b, "<LoopContext %d/%d>", v.index+1, len(v.items))
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// writeStrRepr writes s quoted as Python's repr does.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// formatFloat is Python's repr of a float: the shortest digits that read
// back the same, in fixed notation for exponents from -4 to 15.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	if exp >= -4 && exp < 16 {
		if exp < 0 {
			return sign + "0." + strings.Repeat("0", -exp-1) + digits
		}
		if len(digits) <= exp+1 {
			return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
		}
		return sign + digits[:exp+1] + "." + digits[exp+1:]
	}
	m := digits[:1]
	if len(digits) > 1 {
		m += "." + digits[1:]
	}
	es := "+"
	if exp < 0 {
		es, exp = "-", -exp
	}
	return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
}

// number returns v as a number: int64 for ints and bools, float64 for
// floats; ok is false for other types.
func number(v Value) (i int64, f float64, isFloat, ok bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, 1, false, true
		}
		return 0, 0, false, true
	case int64:
		return v, float64(v), false, true
	case float64:
		return 0, v, true, true
	}
	return 0, 0, false, false
}

// equal is Python's a == b.
func equal(a, b Value) bool {
	if ai, af, aFloat, ok := number(a); ok {
		bi, bf, bFloat, ok := number(b)
		if !ok {
			return false
		}
		if aFloat || bFloat {
			return af == bf
		}
		return ai == bi
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case List:
		bl, ok := b.(List)
		return ok && slices.EqualFunc(a, bl, equal)
	case Tuple:
		bt, ok := b.(Tuple)
		return ok && slices.EqualFunc(a, bt, equal)
	case *Dict:
		bd, ok := b.(*Dict)
		if !ok || a.Len() != bd.Len() {
			return false
		}
		for i, k := range a.keys {
			bv, ok := bd.Get(k)
			if !ok || !equal(a.vals[i], bv) {
				return false
			}
		}
		return true
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	}
	return a == b
}

// less is Python's a < b; an error for types that do not order.
func less(a, b Value) (bool, error) {
	if ai, af, aFloat, ok := number(a); ok {
		if bi, bf, bFloat, ok := number(b); ok {
			if aFloat || bFloat {
				return af < bf, nil
			}
			return ai < bi, nil
		}
	}
	switch a := a.(type) {
	case string:
		if bs, ok := b.(string); ok {
			return a < bs, nil
		}
	case List:
		if bl, ok := b.(List); ok {
			return lessSeq(a, bl)
		}
	case Tuple:
		if bt, ok := b.(Tuple); ok {
			return lessSeq(a, bt)
		}
	}
	return false, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func lessSeq(a, b []Value) (bool, error) {
	for i := range min(len(a), len(b)) {
		if !equal(a[i], b[i]) {
			return less(a[i], b[i])
		}
	}
	return len(a) < len(b), nil
}

// runeLen is Python's len of a str: code points.
func runeLen(s string) int { return utf8.RuneCountInString(s) }

// length is Python's len(v).
func length(v Value) (int, error) {
	switch v := v.(type) {
	case string:
		return runeLen(v), nil
	case List:
		return len(v), nil
	case Tuple:
		return len(v), nil
	case *Dict:
		return v.Len(), nil
	case Undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// iterate returns the items a for loop over v visits.
func iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case List:
		return v, nil
	case Tuple:
		return v, nil
	case *Dict:
		return slices.Clone(v.keys), nil
	case string:
		out := make([]Value, 0, len(v))
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *Namespace:
		return nil, fmt.Errorf("'Namespace' object is not iterable")
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}
