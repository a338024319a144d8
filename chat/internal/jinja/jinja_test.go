package jinja

import (
	"compress/gzip"
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

// looseErrors are error cases where Jinja2 fails for a reason of Python's
// (its recursion limit) and this package with its own limit; only the error
// is checked.
var looseErrors = map[string]bool{"error_recursion": true}

// errorLines are the lines of other error cases, as Jinja2's traceback
// gives them.
var errorLines = map[string]int{"error_undefined_attr": 2, "comment_and_raw_lines": 6, "raise_exception": 1}

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
				if looseErrors[c.Name] {
					return
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
				if line, ok := errorLines[c.Name]; ok && te.Line != line {
					t.Errorf("error %v on line %d, want line %d", err, te.Line, line)
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

// realWorld is testdata/realworld.json.gz: conversations, sets of options,
// and for each template in testdata/templates, conversation and options
// what Jinja2 3.1.6 renders in transformers' environment (or the message
// of the error it raises). jinja2_reference.py wrote the cases.
type realWorld struct {
	SpecialTokens map[string]string          `json:"special_tokens"`
	Conversations map[string]json.RawMessage `json:"conversations"`
	Options       map[string]json.RawMessage `json:"options"`
	Cases         []struct {
		Template     string  `json:"template"`
		Conversation string  `json:"conversation"`
		Options      string  `json:"options"`
		Want         *string `json:"want"`
		Error        *string `json:"error"`
	} `json:"cases"`
}

func TestRealWorldTemplates(t *testing.T) {
	f, err := os.Open("testdata/realworld.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var rw realWorld
	if err := json.NewDecoder(zr).Decode(&rw); err != nil {
		t.Fatal(err)
	}
	if len(rw.Cases) < 500 {
		t.Fatalf("only %d cases", len(rw.Cases))
	}
	templates := map[string]*Template{}
	rendered := 0
	for _, c := range rw.Cases {
		name := c.Template + "/" + c.Conversation + "/" + c.Options
		tmpl, ok := templates[c.Template]
		if !ok {
			src, err := os.ReadFile("testdata/templates/" + c.Template)
			if err != nil {
				t.Fatal(err)
			}
			if tmpl, err = Parse(string(src)); err != nil {
				t.Fatalf("%s: %v", c.Template, err)
			}
			templates[c.Template] = tmpl
		}
		// The variables as transformers passes them, then the options.
		vars := map[string]Value{"tools": nil, "documents": nil}
		for k, v := range rw.SpecialTokens {
			vars[k] = v
		}
		msgs, err := DecodeJSON(rw.Conversations[c.Conversation])
		if err != nil {
			t.Fatal(err)
		}
		vars["messages"] = msgs
		opts, err := DecodeJSON(rw.Options[c.Options])
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range opts.(*Dict).Keys() {
			vars[k.(string)] = opts.(*Dict).vals[i]
		}
		got, err := tmpl.Render(vars, Options{Now: fixedNow})
		switch {
		case c.Want != nil && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.Want != nil && got != *c.Want:
			t.Errorf("%s:\n got %q\nwant %q", name, got, *c.Want)
		case c.Error != nil && err == nil:
			t.Errorf("%s: rendered %q, want the error %q", name, got, *c.Error)
		case c.Error != nil && !strings.Contains(err.Error(), *c.Error):
			t.Errorf("%s: error %q, want it to say %q", name, err, *c.Error)
		case c.Want != nil:
			rendered++
		}
	}
	t.Logf("%d templates, %d renders equal to Jinja2's, %d errors as Jinja2's", len(templates), rendered, len(rw.Cases)-rendered)
}
