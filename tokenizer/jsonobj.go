package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// object is one JSON object of a tokenizer.json, with its path from the
// root ("pre_tokenizer.pretokenizers[0]") for error messages.
type object struct {
	path   string
	fields map[string]json.RawMessage
}

// parseObject reads raw as an object at path.
func parseObject(path string, raw json.RawMessage) (*object, error) {
	o := &object{path: path}
	if err := json.Unmarshal(raw, &o.fields); err != nil {
		return nil, fmt.Errorf("%s: want an object: %w", path, err)
	}
	if o.fields == nil {
		return nil, fmt.Errorf("%s: want an object, got null", path)
	}
	return o, nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// at is the path of field key.
func (o *object) at(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// has reports whether key is present and not null.
func (o *object) has(key string) bool { return !isNull(o.fields[key]) }

// decode unmarshals field key into v; a missing or null field leaves v
// as it is.
func (o *object) decode(key string, v any) error {
	raw := o.fields[key]
	if isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", o.at(key), err)
	}
	return nil
}

// typeName is the object's "type" field.
func (o *object) typeName() (string, error) {
	var t string
	if err := o.decode("type", &t); err != nil {
		return "", err
	}
	if t == "" {
		return "", fmt.Errorf("%s: no \"type\"", o.path)
	}
	return t, nil
}

// str reads a string field, def when absent.
func (o *object) str(key, def string) (string, error) {
	v := def
	err := o.decode(key, &v)
	return v, err
}

// boolean reads a bool field, def when absent.
func (o *object) boolean(key string, def bool) (bool, error) {
	v := def
	err := o.decode(key, &v)
	return v, err
}

// integer reads a non-negative integer field, def when absent.
func (o *object) integer(key string, def int) (int, error) {
	v := def
	if err := o.decode(key, &v); err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fmt.Errorf("%s: %d is negative", o.at(key), v)
	}
	return v, nil
}

// char reads a field holding a one-rune string.
func (o *object) char(key string, def rune) (rune, error) {
	s, err := o.str(key, string(def))
	if err != nil {
		return 0, err
	}
	rs := []rune(s)
	if len(rs) != 1 {
		return 0, fmt.Errorf("%s: want one character, got %q", o.at(key), s)
	}
	return rs[0], nil
}

// list reads an array field as its raw elements with their paths.
func (o *object) list(key string) ([]json.RawMessage, []string, error) {
	var items []json.RawMessage
	if err := o.decode(key, &items); err != nil {
		return nil, nil, err
	}
	paths := make([]string, len(items))
	for i := range items {
		paths[i] = o.at(key) + "[" + strconv.Itoa(i) + "]"
	}
	return items, paths, nil
}

// pattern reads a {"String": s} or {"Regex": r} field.
func (o *object) pattern(key string) (s string, isRegex bool, err error) {
	var p struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if !o.has(key) {
		return "", false, fmt.Errorf("%s: missing", o.at(key))
	}
	if err := o.decode(key, &p); err != nil {
		return "", false, err
	}
	switch {
	case p.String != nil:
		return *p.String, false, nil
	case p.Regex != nil:
		return *p.Regex, true, nil
	}
	return "", false, fmt.Errorf("%s: want {\"String\": ...} or {\"Regex\": ...}", o.at(key))
}

// sequence parses the list at key of a Sequence component with parse,
// dropping the components that parse to nil (a JSON null).
func sequence[T comparable](o *object, key string, parse func(path string, raw json.RawMessage) (T, error)) ([]T, error) {
	items, paths, err := o.list(key)
	if err != nil {
		return nil, err
	}
	var zero T
	var out []T
	for i, item := range items {
		c, err := parse(paths[i], item)
		if err != nil {
			return nil, err
		}
		if c != zero {
			out = append(out, c)
		}
	}
	return out, nil
}

// parseComponent reads a pipeline component's object and its "type"; a
// JSON null is no component (a nil object, no error).
func parseComponent(path string, raw json.RawMessage) (*object, string, error) {
	if isNull(raw) {
		return nil, "", nil
	}
	o, err := parseObject(path, raw)
	if err != nil {
		return nil, "", err
	}
	typ, err := o.typeName()
	if err != nil {
		return nil, "", err
	}
	return o, typ, nil
}
