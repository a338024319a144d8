package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// jsonOptions are the arguments of Python's json.dumps that tojson passes.
type jsonOptions struct {
	ensureASCII     bool
	indent          *string // nil: one line
	itemSep, keySep string
	sortKeys        bool
}

// maxJSONDepth bounds nesting; Python's json.dumps stops at its recursion
// limit too.
const maxJSONDepth = 500

// dumpJSON writes v as Python's json.dumps does.
func dumpJSON(b *strings.Builder, v Value, o jsonOptions, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("tojson: nested too deep")
	}
	if b.Len() > maxStrBytes {
		return fmt.Errorf("tojson: output longer than %d bytes", maxStrBytes)
	}
	newline := func(level int) {
		if o.indent != nil {
			b.WriteByte('\n')
			for range level {
				b.WriteString(*o.indent)
			}
		}
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		switch {
		case math.IsNaN(v):
			b.WriteString("NaN")
		case math.IsInf(v, 1):
			b.WriteString("Infinity")
		case math.IsInf(v, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(formatFloat(v))
		}
	case string:
		writeJSONString(b, v, o.ensureASCII)
	case List, Tuple:
		items, _ := iterate(v)
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		newline(depth + 1)
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
				newline(depth + 1)
			}
			if err := dumpJSON(b, it, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case *Dict:
		if v.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, v.Len())
		order := make([]int, v.Len())
		for i, k := range v.keys {
			order[i] = i
			switch k := k.(type) {
			case string:
				keys[i] = k
			case nil:
				keys[i] = "null"
			case bool, int64:
				keys[i] = toStr(k)
				if _, ok := k.(bool); ok {
					keys[i] = strings.ToLower(keys[i])
				}
			case float64:
				var kb strings.Builder
				dumpJSON(&kb, k, o, depth+1)
				keys[i] = kb.String()
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
		}
		if o.sortKeys {
			slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
		}
		b.WriteByte('{')
		newline(depth + 1)
		for n, i := range order {
			if n > 0 {
				b.WriteString(o.itemSep)
				newline(depth + 1)
			}
			writeJSONString(b, keys[i], o.ensureASCII)
			b.WriteString(o.keySep)
			if err := dumpJSON(b, v.vals[i], o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// writeJSONString writes s as a JSON string with Python's escapes: control
// characters as \uXXXX (lower-case hex) except \b \f \n \r \t, and with
// ensureASCII every non-ASCII character too (UTF-16 surrogates past the
// BMP).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || ensureASCII && r == 0x7f:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7f:
				if r > 0xffff {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
