package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// refCase is one case of testdata/cases.json: a template, its variables,
// and what Jinja2 3.1.6 renders in transformers' environment (want), or the
// message of the exception it raises (error). jinja2_reference.py beside
// the file wrote want and error; nothing here comes from this package.
type refCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars"`
	Want     *string         `json:"want"`
	Error    *string         `json:"error"`
}

// syntaxCases are error cases whose message is Jinja2's own wording of a
// syntax error; for them only the error and its line are checked.
var syntaxCases = map[string]int{"error_syntax": 2}

// fixedNow is the clock jinja2_reference.py gives strftime_now.
func fixedNow() time.Time { return time.Date(2024, 7, 26, 9, 5, 3, 0, time.Local) }

func TestJinja2Reference(t *testing.T) {
	data, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []refCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 50 {
		t.Fatalf("only %d cases in testdata/cases.json", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			vars := map[string]Value{}
			if len(c.Vars) > 0 {
				v, err := DecodeJSON(c.Vars)
				if err != nil {
					t.Fatal(err)
				}
				d := v.(*Dict)
				for i, k := range d.Keys() {
					vars[k.(string)] = d.vals[i]
				}
			}
			got, err := render(c.Template, vars)
			switch {
			case c.Want != nil:
				if err != nil {
					t.Fatalf("error %v, want %q", err, *c.Want)
				}
				if got != *c.Want {
					t.Errorf("template %q:\n got %q\nwant %q", c.Template, got, *c.Want)
				}
			case c.Error != nil:
				if err == nil {
					t.Fatalf("rendered %q, want the error %q", got, *c.Error)
				}
				var te *Error
				if !errors.As(err, &te) {
					t.Fatalf("error %v is not an *Error", err)
				}
				if line, ok := syntaxCases[c.Name]; ok {
					if te.Line != line {
						t.Errorf("error %v on line %d, want line %d", err, te.Line, line)
					}
					return
				}
				if !strings.Contains(err.Error(), *c.Error) {
					t.Errorf("error %q, want it to say %q", err, *c.Error)
				}
				if te.Line == 0 {
					t.Errorf("error %v has no line", err)
				}
			default:
				t.Fatal("case has neither want nor error")
			}
		})
	}
}

func render(src string, vars map[string]Value) (string, error) {
	tmpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	return tmpl.Render(vars, Options{Now: fixedNow})
}
