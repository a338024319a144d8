package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// printf is Python's str % args for the conversions templates use:
// %s %r %d %i %f %e %g %x %o %c %%, with flags, width and precision, and
// %(name)s with a dict.
func printf(format string, args Value) (Value, error) {
	var list []Value
	dict, isDict := args.(*Dict)
	if t, ok := args.(Tuple); ok {
		list = t
	} else if !isDict {
		list = []Value{args}
	}
	next := 0
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, fmt.Errorf("incomplete format")
		}
		var arg Value
		haveArg := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || !isDict {
				return nil, fmt.Errorf("format requires a mapping")
			}
			v, ok := dict.Get(format[i+1 : i+end])
			if !ok {
				return nil, fmt.Errorf("KeyError: %s", repr(format[i+1:i+end]))
			}
			arg, haveArg = v, true
			i += end + 1
		}
		spec := "%"
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			spec += string(format[i])
			i++
		}
		for i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '.') {
			spec += string(format[i])
			i++
		}
		if i >= len(format) {
			return nil, fmt.Errorf("incomplete format")
		}
		verb := format[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if isDict {
				arg = dict
			} else {
				if next >= len(list) {
					return nil, fmt.Errorf("not enough arguments for format string")
				}
				arg = list[next]
				next++
			}
		}
		switch verb {
		case 's', 'r', 'a':
			s := toStr(arg)
			if verb != 's' {
				s = repr(arg)
			}
			b.WriteString(fmt.Sprintf(spec+"s", s))
		case 'd', 'i', 'u':
			ival, f, isFloat, ok := number(arg)
			if !ok {
				return nil, fmt.Errorf("%%%c format: a real number is required, not %s", verb, typeName(arg))
			}
			if isFloat {
				ival = int64(f)
			}
			b.WriteString(fmt.Sprintf(spec+"d", ival))
		case 'f', 'F', 'e', 'E', 'g', 'G':
			_, f, _, ok := number(arg)
			if !ok {
				return nil, fmt.Errorf("must be real number, not %s", typeName(arg))
			}
			if !strings.Contains(spec, ".") && verb != 'g' && verb != 'G' {
				spec += ".6"
			}
			b.WriteString(fmt.Sprintf(spec+string(verb), f))
		case 'x', 'X', 'o':
			ival, err := asInt(arg, "%x format")
			if err != nil {
				return nil, err
			}
			b.WriteString(fmt.Sprintf(spec+string(verb), ival))
		case 'c':
			if s, ok := arg.(string); ok {
				b.WriteString(s)
			} else {
				ival, err := asInt(arg, "%c")
				if err != nil {
					return nil, err
				}
				b.WriteRune(rune(ival))
			}
		default:
			return nil, fmt.Errorf("unsupported format character '%c'", verb)
		}
	}
	if !isDict && next < len(list) {
		return nil, fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// strFormat is Python's str.format for plain fields: {}, {0}, {name},
// {name.attr}, {name[key]}, with !s or !r, and {{ }} for braces. Format
// specs are not supported.
func strFormat(s string, args []Value, kwargs *Dict) (Value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				i++
			}
			b.WriteByte('}')
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("single '{' encountered in format string")
		}
		field := s[i+1 : i+end]
		i += end
		conv := ""
		if j := strings.IndexByte(field, '!'); j >= 0 {
			field, conv = field[:j], field[j+1:]
		}
		if strings.Contains(field, ":") {
			return nil, fmt.Errorf("format specs in str.format are not supported")
		}
		name, rest := field, ""
		if j := strings.IndexAny(field, ".["); j >= 0 {
			name, rest = field[:j], field[j:]
		}
		var v Value
		switch n, err := strconv.Atoi(name); {
		case name == "":
			if auto >= len(args) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case err == nil:
			if n >= len(args) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", n)
			}
			v = args[n]
		default:
			var ok bool
			if v, ok = kwargs.Get(name); !ok {
				return nil, fmt.Errorf("KeyError: '%s'", name)
			}
		}
		for rest != "" {
			var err error
			if rest[0] == '.' {
				j := strings.IndexAny(rest[1:], ".[")
				if j < 0 {
					j = len(rest) - 1
				}
				v, err = getAttr(v, rest[1:1+j])
				rest = rest[1+j:]
			} else {
				j := strings.IndexByte(rest, ']')
				if j < 0 {
					return nil, fmt.Errorf("missing ']' in format string")
				}
				var key Value = rest[1:j]
				if n, err := strconv.ParseInt(rest[1:j], 10, 64); err == nil {
					key = n
				}
				v, err = getItem(v, key)
				rest = rest[j+1:]
			}
			if err != nil {
				return nil, err
			}
		}
		if conv == "r" {
			b.WriteString(repr(v))
		} else {
			b.WriteString(toStr(v))
		}
	}
	return b.String(), nil
}

// strftime formats t as Python's datetime.strftime does on Linux (glibc),
// for the common directives and glibc's "-" flag (no padding).
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		num := func(v, width int) {
			if noPad {
				b.WriteString(strconv.Itoa(v))
			} else {
				fmt.Fprintf(&b, "%0*d", width, v)
			}
		}
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'F':
			fmt.Fprintf(&b, "%d-%02d-%02d", t.Year(), t.Month(), t.Day())
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case 'D':
			fmt.Fprintf(&b, "%02d/%02d/%02d", t.Month(), t.Day(), t.Year()%100)
		case 'c':
			fmt.Fprintf(&b, "%s %s %2d %02d:%02d:%02d %d", t.Weekday().String()[:3], t.Month().String()[:3], t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year())
		case 'x':
			fmt.Fprintf(&b, "%02d/%02d/%02d", t.Month(), t.Day(), t.Year()%100)
		case 'X':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case 'Z', 'z':
			// datetime.now() is naive: no zone.
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
