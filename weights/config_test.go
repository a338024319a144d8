package weights

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sampleConfig = `{
  "hidden_size": 64,
  "float_int": 4.0,
  "exp_int": 1e3,
  "half": 2.5,
  "big": 1e30,
  "huge_int": 99999999999999999999,
  "too_big_float": 1e400,
  "neg": -7,
  "name": "dory",
  "flag": true,
  "nothing": null,
  "layers": [1, 2, 3],
  "mixed": [1, "two"],
  "floats": [0.5, 1, -2e-3],
  "types": ["a", "b"],
  "rope": {"theta": 10000.0, "inner": {"x": 3}},
  "dotted.key": 5,
  "escaped\"key": 6
}`

func parseSample(t *testing.T) *Config {
	t.Helper()
	cfg, err := ParseConfig("config.json", []byte(sampleConfig))
	require.NoError(t, err)
	return cfg
}

func TestConfigGetters(t *testing.T) {
	cfg := parseSample(t)
	assert.Equal(t, "config.json", cfg.Path())
	assert.Contains(t, cfg.Keys(), "hidden_size")
	assert.Len(t, cfg.Keys(), 18)

	ints := []struct {
		key  string
		def  int
		want int
		err  string
	}{
		{"hidden_size", 0, 64, ""},
		{"float_int", 0, 4, ""},
		{"exp_int", 0, 1000, ""},
		{"neg", 0, -7, ""},
		{"missing", 9, 9, ""},
		{"nothing", 9, 9, ""},
		{"rope.inner.x", 0, 3, ""},
		{"dotted.key", 0, 5, ""},
		{`escaped"key`, 0, 6, ""},
		{"half", 9, 9, `config.json: field "half": 2.5 is not an integer`},
		{"big", 9, 9, `field "big": 1e30 is out of range`},
		{"huge_int", 9, 9, `field "huge_int": 99999999999999999999 is out of range`},
		{"too_big_float", 9, 9, `field "too_big_float"`},
		{"name", 9, 9, `field "name": want an integer, have string "dory"`},
		{"layers", 9, 9, `want an integer, have array`},
	}
	for _, c := range ints {
		got, err := cfg.Int(c.key, c.def)
		assert.Equal(t, c.want, got, c.key)
		if c.err == "" {
			assert.NoError(t, err, c.key)
		} else {
			assert.ErrorContains(t, err, c.err, c.key)
		}
	}

	f, err := cfg.Float("half", 0)
	require.NoError(t, err)
	assert.Equal(t, 2.5, f)
	f, err = cfg.Float("rope.theta", 0)
	require.NoError(t, err)
	assert.Equal(t, 10000.0, f)
	f, err = cfg.Float("nothing", 1.5)
	require.NoError(t, err)
	assert.Equal(t, 1.5, f)
	_, err = cfg.Float("too_big_float", 0)
	assert.ErrorContains(t, err, `field "too_big_float": 1e400 is out of range`)
	_, err = cfg.Float("flag", 0)
	assert.ErrorContains(t, err, `field "flag": want a number, have boolean true`)

	s, err := cfg.String("name", "")
	require.NoError(t, err)
	assert.Equal(t, "dory", s)
	s, err = cfg.String("missing", "def")
	require.NoError(t, err)
	assert.Equal(t, "def", s)
	_, err = cfg.String("hidden_size", "")
	assert.ErrorContains(t, err, `field "hidden_size": want a string, have number 64`)

	b, err := cfg.Bool("flag", false)
	require.NoError(t, err)
	assert.True(t, b)
	_, err = cfg.Bool("name", false)
	assert.ErrorContains(t, err, `want a boolean`)

	l, err := cfg.Ints("layers")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, l)
	l, err = cfg.Ints("missing")
	assert.NoError(t, err)
	assert.Nil(t, l)
	_, err = cfg.Ints("mixed")
	assert.ErrorContains(t, err, `field "mixed[1]": want an integer, have string "two"`)
	_, err = cfg.Ints("floats")
	assert.ErrorContains(t, err, `field "floats[0]": 0.5 is not an integer`)
	_, err = cfg.Ints("hidden_size")
	assert.ErrorContains(t, err, `want an array of integers`)

	fl, err := cfg.Floats("floats")
	require.NoError(t, err)
	assert.Equal(t, []float64{0.5, 1, -2e-3}, fl)
	ss, err := cfg.Strings("types")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, ss)
	_, err = cfg.Strings("mixed")
	assert.ErrorContains(t, err, `field "mixed[0]": want a string`)

	assert.True(t, cfg.Has("nothing"))
	assert.True(t, cfg.IsNull("nothing"))
	assert.False(t, cfg.IsNull("name"))
	assert.False(t, cfg.IsNull("missing"))
	assert.False(t, cfg.Has("missing"))
	assert.True(t, cfg.Has("rope.inner"))
	assert.False(t, cfg.Has("rope.inner.y"))
	assert.False(t, cfg.Has("name.x"))
	assert.JSONEq(t, `{"x": 3}`, string(cfg.Raw("rope.inner")))
	assert.Nil(t, cfg.Raw("missing"))

	assert.NoError(t, cfg.Require("name", "rope.theta"))
	assert.EqualError(t, cfg.Require("name", "nothing", "missing"), `config.json: missing fields "nothing", "missing"`)

	var v struct {
		Hidden int    `json:"hidden_size"`
		Name   string `json:"name"`
	}
	require.NoError(t, cfg.Decode(&v))
	assert.Equal(t, 64, v.Hidden)
	assert.Equal(t, "dory", v.Name)
}

func TestGetterCollectsErrors(t *testing.T) {
	cfg := parseSample(t)
	g := cfg.Get()
	assert.Equal(t, 64, g.Int("hidden_size", 0))
	assert.Equal(t, 1, g.Int("half", 1))
	assert.Equal(t, "x", g.String("hidden_size", "x"))
	assert.False(t, g.Bool("name", false))
	assert.Nil(t, g.Ints("mixed"))
	assert.Nil(t, g.Floats("name"))
	assert.Nil(t, g.Strings("layers"))
	assert.Equal(t, 0.5, g.Float("name", 0.5))
	g.Require("absent")
	err := g.Err()
	require.Error(t, err)
	msg := err.Error()
	for _, w := range []string{`"half"`, `"hidden_size"`, `"name"`, `"mixed[1]"`, `"layers[0]"`, `missing field "absent"`} {
		assert.Contains(t, msg, w)
	}
	assert.NoError(t, cfg.Get().Err())
}

func TestConfigNonFinite(t *testing.T) {
	const text = `{
  "rope_theta": NaN,
  "eps": -Infinity,
  "scale": Infinity,
  "note": "NaN and Infinity inside strings are fine",
  "escaped": "quote \" NaN",
  "rope_scaling": {"factor": NaN, "type": "linear"},
  "list": [1, Infinity],
  "ok": 1.5
}`
	cfg, err := ParseConfig("config.json", []byte(text))
	require.NoError(t, err)
	for key, want := range map[string]string{
		"rope_theta":          `config.json: field "rope_theta" is NaN`,
		"eps":                 `config.json: field "eps" is -Infinity`,
		"scale":               `config.json: field "scale" is Infinity`,
		"rope_scaling.factor": `config.json: field "rope_scaling.factor" is NaN`,
		"rope_scaling":        `config.json: field "rope_scaling.factor" is NaN`,
		"list":                `config.json: field "list[1]" is Infinity`,
	} {
		_, err := cfg.Float(key, 0)
		assert.EqualError(t, err, want, key)
		_, err = cfg.Int(key, 0)
		assert.EqualError(t, err, want, key)
	}
	_, err = cfg.Floats("list")
	assert.EqualError(t, err, `config.json: field "list[1]" is Infinity`)
	s, err := cfg.String("note", "")
	require.NoError(t, err)
	assert.Equal(t, "NaN and Infinity inside strings are fine", s)
	s, err = cfg.String("escaped", "")
	require.NoError(t, err)
	assert.Equal(t, `quote " NaN`, s)
	s, err = cfg.String("rope_scaling.type", "")
	require.NoError(t, err)
	assert.Equal(t, "linear", s)
	f, err := cfg.Float("ok", 0)
	require.NoError(t, err)
	assert.Equal(t, 1.5, f)
	assert.True(t, cfg.Has("rope_theta"))
	assert.False(t, cfg.IsNull("rope_theta"))
	assert.NoError(t, cfg.Require("rope_theta"))

	g := cfg.Get()
	g.Float("rope_theta", 0)
	g.Float("eps", 0)
	assert.ErrorContains(t, g.Err(), `"rope_theta" is NaN`)
	assert.ErrorContains(t, g.Err(), `"eps" is -Infinity`)

	var v map[string]any
	assert.ErrorContains(t, cfg.Decode(&v), "is ")
}

func TestConfigBad(t *testing.T) {
	for _, c := range []struct {
		text string
		want string
	}{
		{``, "config.json"},
		{`[1, 2]`, "not a JSON object"},
		{`"x"`, "not a JSON object"},
		{`null`, "not a JSON object"},
		{"{\n\"a\": 1,\n\"b\": }", "config.json: line 3"},
		{`{"a": NaNa}`, "config.json"},
		{`{"a": Inf}`, "config.json"},
	} {
		_, err := ParseConfig("config.json", []byte(c.text))
		assert.ErrorContains(t, err, c.want, c.text)
	}
	_, err := ReadConfig(filepath.Join(t.TempDir(), "config.json"))
	assert.Error(t, err)
}

func TestReplaceNonFinite(t *testing.T) {
	for _, c := range []struct {
		in, out string
		bad     map[string]string
	}{
		{`{"a":1}`, `{"a":1}`, nil},
		{`{"a":NaN}`, `{"a":null}`, map[string]string{"a": "NaN"}},
		{`{"a":[1,{"b":-Infinity}]}`, `{"a":[1,{"b":null}]}`, map[string]string{"a[1].b": "-Infinity"}},
		{`{"a\u0041":Infinity}`, `{"a\u0041":null}`, map[string]string{"aA": "Infinity"}},
		{`{"s":"NaN","t":-1}`, `{"s":"NaN","t":-1}`, nil},
		{`{"s":"\\","n":NaN}`, `{"s":"\\","n":null}`, map[string]string{"n": "NaN"}},
		{`[NaN]`, `[null]`, map[string]string{"[0]": "NaN"}},
		{`}}]]NaN"`, `}}]]null"`, map[string]string{"": "NaN"}},
		{`{"unterminated`, `{"unterminated`, nil},
	} {
		out, bad := replaceNonFinite([]byte(c.in))
		assert.Equal(t, c.out, string(out), c.in)
		assert.Equal(t, c.bad, bad, c.in)
		if c.bad == nil {
			assert.True(t, json.Valid(out) == json.Valid([]byte(c.in)), c.in)
		}
	}
}

func TestParseIntLimits(t *testing.T) {
	if strconv.IntSize != 64 {
		t.Skip("needs a 64-bit int")
	}
	cfg, err := ParseConfig("c.json", []byte(`{"max": 9223372036854775807, "over": 9223372036854775808.0, "min": -9223372036854775808, "minf": -9223372036854775808.0}`))
	require.NoError(t, err)
	v, err := cfg.Int("max", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(math.MaxInt64), int64(v))
	_, err = cfg.Int("over", 0)
	assert.ErrorContains(t, err, "out of range")
	v, err = cfg.Int("min", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(math.MinInt64), int64(v))
	v, err = cfg.Int("minf", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(math.MinInt64), int64(v))
}

// TestNeed: a field set to anything but the one value a model supports is
// an error naming the file, the field and its value; missing, null or that
// value is none, and a value of the wrong type is Getter's own error.
func TestNeed(t *testing.T) {
	cfg, err := ParseConfig("config.json", []byte(`{"act": "gelu", "bias": false, "tp": 2, "nil": null, "f": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Get()
	Need(g, "bias", false, "unused")
	Need(g, "nil", true, "unused")
	Need(g, "missing", 1, "unused")
	if err := g.Err(); err != nil {
		t.Fatalf("fields set as needed: %v", err)
	}
	Need(g, "act", "silu", "the model needs silu")
	Need(g, "tp", 1, "only 1 is supported")
	Need(g, "f", 0.5, "unused")
	got := g.Err()
	for _, want := range []string{`config.json: act = "gelu": the model needs silu`, "config.json: tp = 2: only 1 is supported", `field "f": want a number`} {
		if got == nil || !strings.Contains(got.Error(), want) {
			t.Errorf("Err() = %v, want it to say %q", got, want)
		}
	}
	if got != nil && strings.Contains(got.Error(), "unused") {
		t.Errorf("Err() = %v: a wrong type is one error, not two", got)
	}
}

// TestIDs: token ids are one integer or an array of them, each in
// [0, 2^31); missing and null are nil, and the errors name the element.
func TestIDs(t *testing.T) {
	cfg, err := ParseConfig("c.json", []byte(`{"one": 7, "list": [1, 2], "empty": [], "nil": null, "neg": [1, -2], "big": 2147483648, "s": "2", "frac": [1.5]}`))
	require.NoError(t, err)
	for key, want := range map[string][]int{"one": {7}, "list": {1, 2}, "empty": {}, "nil": nil, "missing": nil} {
		ids, err := cfg.IDs(key)
		require.NoError(t, err, key)
		require.Equal(t, want, ids, key)
	}
	for key, want := range map[string]string{
		"neg":  `c.json: field "neg[1]": -2 is outside [0, 2^31)`,
		"big":  `c.json: field "big": 2147483648 is outside [0, 2^31)`,
		"s":    `c.json: field "s": want an integer or an array of integers, have string`,
		"frac": `c.json: field "frac[0]": 1.5 is not an integer`,
	} {
		_, err := cfg.IDs(key)
		require.ErrorContains(t, err, want, key)
	}
}
