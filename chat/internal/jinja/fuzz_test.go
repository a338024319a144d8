package jinja

import (
	"encoding/json"
	"os"
	"testing"
)

// FuzzTemplate parses and renders arbitrary templates: each must give
// output or an error, never a panic or a hang.
func FuzzTemplate(f *testing.F) {
	data, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []refCase
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add(c.Template)
	}
	msgs, err := DecodeJSON([]byte(`[{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
		{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}]`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src)
		if err != nil {
			return
		}
		vars := map[string]Value{"messages": msgs, "tools": nil, "add_generation_prompt": true, "bos_token": "<s>"}
		tmpl.Render(vars, Options{Now: fixedNow})
	})
}
