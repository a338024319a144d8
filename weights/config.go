package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Config is a parsed config.json: a JSON object read through typed getters
// whose errors name the file and the field.
//
// Keys name top-level fields ("hidden_size"); a key with dots that is not
// itself a top-level field reaches into nested objects
// ("rope_parameters.rope_theta").
//
// Python's json module writes NaN, Infinity and -Infinity, which are not
// JSON. A Config accepts them in the file but reports them as errors naming
// the field when the field is read, for example
// `config.json: field "rope_theta" is NaN`.
//
// A Config may be read from several goroutines at once.
type Config struct {
	path      string
	root      map[string]json.RawMessage
	nonFinite map[string]string // field path -> "NaN", "Infinity" or "-Infinity"

	// objects caches the nested objects parsed by lookup, by dotted path,
	// so that reading many fields of a large nested object (text_config)
	// parses it once; nil for a value that is not an object.
	mu      sync.Mutex
	objects map[string]map[string]json.RawMessage
}

// ReadConfig reads and parses the config.json file at path: a regular file
// of at most MaxConfigLen bytes that, if it is a symbolic link, resolves
// inside its own folder (see ResolveIn).
func ReadConfig(path string) (*Config, error) {
	data, err := ReadFileIn(filepath.Dir(path), filepath.Base(path), MaxConfigLen)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data)
}

// ParseConfig parses the contents of a config.json file; path is used in
// error messages only.
func ParseConfig(path string, data []byte) (*Config, error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	clean, bad := replaceNonFinite(data)
	c := &Config{path: path, nonFinite: bad}
	if err := json.Unmarshal(clean, &c.root); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(clean[:min(int(se.Offset), len(clean))], []byte("\n"))
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%s: not a JSON object", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.root == nil {
		return nil, fmt.Errorf("%s: not a JSON object", path)
	}
	return c, nil
}

// replaceNonFinite replaces the bare literals NaN, Infinity and -Infinity
// outside strings with null, and returns where they were: a map from field
// path ("a.b[2]") to literal. It follows the nesting of objects and arrays
// just far enough to name fields; malformed input is left for the JSON
// parser to reject.
func replaceNonFinite(data []byte) ([]byte, map[string]string) {
	type frame struct {
		object  bool
		wantKey bool   // in an object, before the colon
		key     string // in an object, the current key
		index   int    // in an array, the current index
	}
	var stack []frame
	var bad map[string]string
	var out []byte // nil until the first replacement
	fieldPath := func() string {
		var b strings.Builder
		for i, f := range stack {
			if f.object {
				if i > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(data))
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				var key string
				if json.Unmarshal(data[i:j], &key) != nil {
					key = string(data[i:j])
				}
				stack[n-1].key = key
			}
			if out != nil {
				out = append(out, data[i:j]...)
			}
			i = j
			continue
		case c == '{' || c == '[':
			stack = append(stack, frame{object: c == '{', wantKey: c == '{'})
		case c == '}' || c == ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case c == ':':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = false
			}
		case c == ',':
			if n := len(stack); n > 0 {
				if stack[n-1].object {
					stack[n-1].wantKey = true
				} else {
					stack[n-1].index++
				}
			}
		case c == 'N' || c == 'I' || c == '-':
			if lit := nonFiniteLiteral(data[i:]); lit != "" {
				if bad == nil {
					bad = make(map[string]string)
				}
				if p := fieldPath(); bad[p] == "" {
					bad[p] = lit
				}
				if out == nil {
					out = append(make([]byte, 0, len(data)), data[:i]...)
				}
				out = append(out, "null"...)
				i += len(lit)
				continue
			}
		}
		if out != nil {
			out = append(out, c)
		}
		i++
	}
	if out == nil {
		return data, bad
	}
	return out, bad
}

// nonFiniteLiteral returns the literal NaN, Infinity or -Infinity that b
// starts with, or "".
func nonFiniteLiteral(b []byte) string {
	for _, lit := range [...]string{"NaN", "Infinity", "-Infinity"} {
		if bytes.HasPrefix(b, []byte(lit)) {
			return lit
		}
	}
	return ""
}

// Path returns the path of the file, as given to ReadConfig or ParseConfig.
func (c *Config) Path() string { return c.path }

// Keys returns the top-level field names, sorted.
func (c *Config) Keys() []string { return slices.Sorted(maps.Keys(c.root)) }

// lookup finds the raw value of a field.
func (c *Config) lookup(key string) (json.RawMessage, bool) {
	if v, ok := c.root[key]; ok {
		return v, true
	}
	parts := strings.Split(key, ".")
	if len(parts) < 2 {
		return nil, false
	}
	cur := c.root
	for i, p := range parts {
		v, ok := cur[p]
		if !ok {
			return nil, false
		}
		if i == len(parts)-1 {
			return v, true
		}
		if cur = c.object(strings.Join(parts[:i+1], "."), v); cur == nil {
			return nil, false
		}
	}
	return nil, false
}

// object returns the nested object at the dotted path, whose text is v,
// parsed once and cached; nil if v is not an object.
func (c *Config) object(path string, v json.RawMessage) map[string]json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if obj, ok := c.objects[path]; ok {
		return obj
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		obj = nil
	}
	if c.objects == nil {
		c.objects = make(map[string]map[string]json.RawMessage)
	}
	c.objects[path] = obj
	return obj
}

// checkFinite reports a NaN or infinity at the field key or inside it.
func (c *Config) checkFinite(key string) error {
	if len(c.nonFinite) == 0 {
		return nil
	}
	if lit, ok := c.nonFinite[key]; ok {
		return c.nonFiniteErr(key, lit)
	}
	for _, p := range slices.Sorted(maps.Keys(c.nonFinite)) {
		if strings.HasPrefix(p, key+".") || strings.HasPrefix(p, key+"[") {
			return c.nonFiniteErr(p, c.nonFinite[p])
		}
	}
	return nil
}

func (c *Config) nonFiniteErr(field, lit string) error {
	return fmt.Errorf("%s: field %q is %s", c.path, field, lit)
}

// value returns the raw value of a field after checking it for NaNs and
// infinities; present is false for a missing field and for null.
func (c *Config) value(key string) (raw json.RawMessage, present bool, err error) {
	v, ok := c.lookup(key)
	if !ok {
		return nil, false, nil
	}
	if err := c.checkFinite(key); err != nil {
		return nil, false, err
	}
	if string(v) == "null" {
		return nil, false, nil
	}
	return v, true, nil
}

// Has reports whether the field key is present, even if null.
func (c *Config) Has(key string) bool {
	_, ok := c.lookup(key)
	return ok
}

// IsNull reports whether the field key is present and null.
func (c *Config) IsNull(key string) bool {
	v, ok := c.lookup(key)
	_, nonFinite := c.nonFinite[key]
	return ok && string(v) == "null" && !nonFinite
}

// Raw returns the JSON text of the field key, or nil if it is missing. NaN
// and infinity literals in the file read as null here.
func (c *Config) Raw(key string) json.RawMessage {
	v, ok := c.lookup(key)
	if !ok {
		return nil
	}
	return slices.Clone(v)
}

// Decode unmarshals the whole config into v with encoding/json. A NaN or
// infinity anywhere in the file is an error naming its field.
func (c *Config) Decode(v any) error {
	if len(c.nonFinite) > 0 {
		p := slices.Sorted(maps.Keys(c.nonFinite))[0]
		return c.nonFiniteErr(p, c.nonFinite[p])
	}
	raw, err := json.Marshal(c.root)
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.path, err)
	}
	return nil
}

// Require returns an error naming every key that is missing or null.
func (c *Config) Require(keys ...string) error {
	var missing []string
	for _, k := range keys {
		if v, ok := c.lookup(k); !ok || string(v) == "null" && c.nonFinite[k] == "" {
			missing = append(missing, strconv.Quote(k))
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: missing field %s", c.path, missing[0])
	}
	return fmt.Errorf("%s: missing fields %s", c.path, strings.Join(missing, ", "))
}

// typeErr describes a value of the wrong JSON type.
func (c *Config) typeErr(field, want string, raw json.RawMessage) error {
	return fmt.Errorf("%s: field %q: want %s, have %s %s", c.path, field, want, jsonKind(raw), abbrev(raw))
}

func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// parseInt reads a JSON number that must be an integer fitting in an int.
// Integral values written as floats (2.0, 1e3) are accepted.
func (c *Config) parseInt(field string, raw json.RawMessage) (int, error) {
	if jsonKind(raw) != "number" {
		return 0, c.typeErr(field, "an integer", raw)
	}
	s := string(raw)
	if v, err := strconv.ParseInt(s, 10, strconv.IntSize); err == nil {
		return int(v), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("%s: field %q: %s is not a number", c.path, field, abbrev(raw))
	case f != math.Trunc(f):
		return 0, fmt.Errorf("%s: field %q: %s is not an integer", c.path, field, s)
	case err != nil || f < math.MinInt || f >= -math.MinInt:
		return 0, fmt.Errorf("%s: field %q: %s is out of range for an int", c.path, field, abbrev(raw))
	}
	return int(f), nil
}

// parseFloat reads a JSON number as a finite float64.
func (c *Config) parseFloat(field string, raw json.RawMessage) (float64, error) {
	if jsonKind(raw) != "number" {
		return 0, c.typeErr(field, "a number", raw)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s: field %q: %s is out of range for a float64", c.path, field, abbrev(raw))
		}
		return 0, fmt.Errorf("%s: field %q: %s is not a number", c.path, field, abbrev(raw))
	}
	return f, nil
}

// Int returns the integer field key, or def if it is missing or null. A
// number with a fraction (2.5) or beyond the range of int is an error;
// integral values written as floats (2.0) are accepted.
func (c *Config) Int(key string, def int) (int, error) {
	v, _, err := field(c, key, def, c.parseInt)
	return v, err
}

// field reads the field key with parse: def and false when it is missing
// or null (or unreadable: then with the error).
func field[T any](c *Config, key string, def T, parse func(string, json.RawMessage) (T, error)) (T, bool, error) {
	raw, ok, err := c.value(key)
	if err != nil || !ok {
		return def, false, err
	}
	v, err := parse(key, raw)
	if err != nil {
		return def, false, err
	}
	return v, true, nil
}

// IntIn returns the integer field key as Int does, or def if it is missing
// or null, and checks that the value is within [lo, hi]: an error names the
// file, the field, the value and the range. def itself is not checked.
func (c *Config) IntIn(key string, def, lo, hi int) (int, error) {
	v, ok, err := field(c, key, def, c.parseInt)
	if err != nil || !ok {
		return def, err
	}
	if v < lo || v > hi {
		return def, fmt.Errorf("%s: field %q = %d: want %d to %d", c.path, key, v, lo, hi)
	}
	return v, nil
}

// FloatIn returns the number field key as Float does, or def if it is
// missing or null, and checks that the value is within [lo, hi]: an error
// names the file, the field, the value and the range. def itself is not
// checked.
func (c *Config) FloatIn(key string, def, lo, hi float64) (float64, error) {
	v, ok, err := field(c, key, def, c.parseFloat)
	if err != nil || !ok {
		return def, err
	}
	if !(v >= lo && v <= hi) {
		return def, fmt.Errorf("%s: field %q = %v: want %v to %v", c.path, key, v, lo, hi)
	}
	return v, nil
}

// Float returns the number field key, or def if it is missing or null.
func (c *Config) Float(key string, def float64) (float64, error) {
	v, _, err := field(c, key, def, c.parseFloat)
	return v, err
}

// String returns the string field key, or def if it is missing or null.
func (c *Config) String(key string, def string) (string, error) {
	raw, ok, err := c.value(key)
	if err != nil || !ok {
		return def, err
	}
	var s string
	if jsonKind(raw) != "string" || json.Unmarshal(raw, &s) != nil {
		return def, c.typeErr(key, "a string", raw)
	}
	return s, nil
}

// Bool returns the boolean field key, or def if it is missing or null.
func (c *Config) Bool(key string, def bool) (bool, error) {
	raw, ok, err := c.value(key)
	if err != nil || !ok {
		return def, err
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return def, c.typeErr(key, "a boolean", raw)
}

// array splits the array field key into its elements; ok is false for a
// missing or null field.
func (c *Config) array(key, want string) (elems []json.RawMessage, ok bool, err error) {
	raw, ok, err := c.value(key)
	if err != nil || !ok {
		return nil, false, err
	}
	if jsonKind(raw) != "array" {
		return nil, false, c.typeErr(key, want, raw)
	}
	elems, err = splitArray(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%s: field %q: %w", c.path, key, err)
	}
	return elems, true, nil
}

// MaxArrayLen is the most elements Ints, Floats and Strings read from an
// array field: far more than a model has layers, and few enough that a
// hostile array cannot make a reader allocate without bound.
const MaxArrayLen = 1 << 16

// splitArray splits the text of a valid JSON array into its elements'
// texts (slices of raw, not copies), refusing more than MaxArrayLen.
func splitArray(raw json.RawMessage) ([]json.RawMessage, error) {
	var out []json.RawMessage
	depth, start := 0, -1
	for i := 0; i < len(raw); i++ {
		switch b := raw[i]; b {
		case '"':
			if start < 0 {
				start = i
			}
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			if depth > 1 && start < 0 {
				start = i
			}
		case ']', '}', ',':
			if b != ',' {
				depth--
			}
			if depth == 1 && b == ',' || depth == 0 {
				if start >= 0 {
					if len(out) == MaxArrayLen {
						return nil, fmt.Errorf("more than %d elements", MaxArrayLen)
					}
					out = append(out, bytes.TrimSpace(raw[start:i]))
				}
				start = -1
			}
		case ' ', '\t', '\n', '\r':
		default:
			if start < 0 && depth == 1 {
				start = i
			}
		}
	}
	return out, nil
}

// Ints returns the array of integers in the field key, or nil if it is
// missing or null. Each element is read as Int reads a field.
func (c *Config) Ints(key string) ([]int, error) {
	elems, ok, err := c.array(key, "an array of integers")
	if !ok {
		return nil, err
	}
	out := make([]int, len(elems))
	for i, e := range elems {
		if out[i], err = c.parseInt(fmt.Sprintf("%s[%d]", key, i), e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// IDs returns the token ids in the field key, written as one integer or as
// an array of integers (eos_token_id is written either way), each in
// [0, 2^31); nil if it is missing or null, and empty for an empty array.
// An error names the field, or the element.
func (c *Config) IDs(key string) ([]int, error) {
	raw, ok, err := c.value(key)
	if err != nil || !ok {
		return nil, err
	}
	var ids []int
	switch jsonKind(raw) {
	case "array":
		if ids, err = c.Ints(key); err != nil {
			return nil, err
		}
	case "number":
		id, err := c.parseInt(key, raw)
		if err != nil {
			return nil, err
		}
		ids = []int{id}
	default:
		return nil, c.typeErr(key, "an integer or an array of integers", raw)
	}
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			field := key
			if jsonKind(raw) == "array" {
				field = fmt.Sprintf("%s[%d]", key, i)
			}
			return nil, fmt.Errorf("%s: field %q: %d is outside [0, 2^31)", c.path, field, id)
		}
	}
	return ids, nil
}

// Floats returns the array of numbers in the field key, or nil if it is
// missing or null.
func (c *Config) Floats(key string) ([]float64, error) {
	elems, ok, err := c.array(key, "an array of numbers")
	if !ok {
		return nil, err
	}
	out := make([]float64, len(elems))
	for i, e := range elems {
		if out[i], err = c.parseFloat(fmt.Sprintf("%s[%d]", key, i), e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Strings returns the array of strings in the field key, or nil if it is
// missing or null.
func (c *Config) Strings(key string) ([]string, error) {
	elems, ok, err := c.array(key, "an array of strings")
	if !ok {
		return nil, err
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if jsonKind(e) != "string" || json.Unmarshal(e, &out[i]) != nil {
			return nil, c.typeErr(fmt.Sprintf("%s[%d]", key, i), "a string", e)
		}
	}
	return out, nil
}

// Getter reads several fields of a Config and collects their errors, so that
// a model loader can read every field it needs and report all problems at
// once:
//
//	g := cfg.Get()
//	hidden := g.Int("hidden_size", 0)
//	theta := g.Float("rope_theta", 10000)
//	if err := g.Err(); err != nil {
//		return err
//	}
//
// Each method returns what the Config method of the same name returns, or
// the default (the zero value for slices) when that fails.
type Getter struct {
	c    *Config
	errs []error
}

// Get returns a Getter for c.
func (c *Config) Get() *Getter { return &Getter{c: c} }

// Err returns every error met so far, joined, or nil.
func (g *Getter) Err() error { return errors.Join(g.errs...) }

func (g *Getter) note(err error) {
	if err != nil {
		g.errs = append(g.errs, err)
	}
}

// Int is Config.Int with the error kept for Err.
func (g *Getter) Int(key string, def int) int {
	v, err := g.c.Int(key, def)
	g.note(err)
	return v
}

// IntIn is Config.IntIn with the error kept for Err.
func (g *Getter) IntIn(key string, def, lo, hi int) int {
	v, err := g.c.IntIn(key, def, lo, hi)
	g.note(err)
	return v
}

// FloatIn is Config.FloatIn with the error kept for Err.
func (g *Getter) FloatIn(key string, def, lo, hi float64) float64 {
	v, err := g.c.FloatIn(key, def, lo, hi)
	g.note(err)
	return v
}

// Float is Config.Float with the error kept for Err.
func (g *Getter) Float(key string, def float64) float64 {
	v, err := g.c.Float(key, def)
	g.note(err)
	return v
}

// String is Config.String with the error kept for Err.
func (g *Getter) String(key string, def string) string {
	v, err := g.c.String(key, def)
	g.note(err)
	return v
}

// Bool is Config.Bool with the error kept for Err.
func (g *Getter) Bool(key string, def bool) bool {
	v, err := g.c.Bool(key, def)
	g.note(err)
	return v
}

// Ints is Config.Ints with the error kept for Err.
func (g *Getter) Ints(key string) []int {
	v, err := g.c.Ints(key)
	g.note(err)
	return v
}

// IDs is Config.IDs with the error kept for Err.
func (g *Getter) IDs(key string) []int {
	v, err := g.c.IDs(key)
	g.note(err)
	return v
}

// Floats is Config.Floats with the error kept for Err.
func (g *Getter) Floats(key string) []float64 {
	v, err := g.c.Floats(key)
	g.note(err)
	return v
}

// Strings is Config.Strings with the error kept for Err.
func (g *Getter) Strings(key string) []string {
	v, err := g.c.Strings(key)
	g.note(err)
	return v
}

// Require is Config.Require with the error kept for Err.
func (g *Getter) Require(keys ...string) {
	g.note(g.c.Require(keys...))
}

// Need notes an error in g when the field key is set (neither missing nor
// null) to anything but want: a setting a model supports one way only. The
// error names the file, the field and its value, and then says why ("Dory
// needs true", say). A value of the wrong type is Getter's error, as for
// any field.
func Need[T int | float64 | string | bool](g *Getter, key string, want T, why string) {
	var got any
	switch w := any(want).(type) {
	case int:
		got = g.Int(key, w)
	case float64:
		got = g.Float(key, w)
	case string:
		got = g.String(key, w)
	case bool:
		got = g.Bool(key, w)
	}
	if got == any(want) {
		return
	}
	shown := fmt.Sprint(got)
	if s, ok := got.(string); ok {
		shown = strconv.Quote(s)
	}
	g.note(fmt.Errorf("%s: %s = %s: %s", g.c.path, key, shown, why))
}
