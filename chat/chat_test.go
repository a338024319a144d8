package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// golden is testdata/*/chat_golden.json: the chat entries of the shared
// tokenizer goldens (/work/shared/tokenizers/*/golden.json), rendered by
// transformers 5.17's apply_chat_template.
type golden struct {
	MadeWith string `json:"made_with"`
	Chat     []struct {
		Messages            json.RawMessage `json:"messages"`
		AddGenerationPrompt bool            `json:"add_generation_prompt"`
		Text                string          `json:"text"`
	} `json:"chat"`
}

func TestTransformersGoldens(t *testing.T) {
	for _, dir := range []string{"qwen3", "deepseek_v3"} {
		t.Run(dir, func(t *testing.T) {
			dir := filepath.Join("testdata", dir)
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, "chat_golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var g golden
			if err := json.Unmarshal(data, &g); err != nil {
				t.Fatal(err)
			}
			if len(g.Chat) == 0 {
				t.Fatal("no chat entries")
			}
			for i, c := range g.Chat {
				msgs, err := ParseMessages(c.Messages)
				if err != nil {
					t.Fatal(err)
				}
				got, err := tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: c.AddGenerationPrompt})
				if err != nil {
					t.Fatalf("chat[%d]: %v", i, err)
				}
				if got != c.Text {
					t.Errorf("chat[%d]:\n got %q\nwant %q", i, got, c.Text)
				}
			}
		})
	}
}

// TestSpecialTokens checks the special tokens a template sees: strings and
// {"content": ...} objects are passed as strings, null ones not at all.
func TestSpecialTokens(t *testing.T) {
	ds, err := Load("testdata/deepseek_v3")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>", "pad_token": "<｜end▁of▁sentence｜>"}
	if len(ds.SpecialTokens) != len(want) {
		t.Errorf("special tokens %q, want %q", ds.SpecialTokens, want)
	}
	for k, v := range want {
		if ds.SpecialTokens[k] != v {
			t.Errorf("%s = %q, want %q", k, ds.SpecialTokens[k], v)
		}
	}
	qw, err := Load("testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	// qwen3's config has "bos_token": null and "unk_token": null.
	if _, ok := qw.SpecialTokens["bos_token"]; ok {
		t.Errorf("qwen3 has a bos_token %q; its config says null", qw.SpecialTokens["bos_token"])
	}
	if qw.SpecialTokens["eos_token"] != "<|im_end|>" || qw.SpecialTokens["pad_token"] != "<|endoftext|>" {
		t.Errorf("qwen3 special tokens %q", qw.SpecialTokens)
	}
}

// writeFolder makes a tokenizer folder with the given files.
func writeFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustRender(t *testing.T, tmpl *Template, msgs []Message, opts RenderOptions) string {
	t.Helper()
	out, err := tmpl.Render(msgs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var hi = []Message{{Role: "user", Content: "hi"}}

func TestTemplateSources(t *testing.T) {
	// The template prints which template it is and the variables
	// transformers passes: bos_token from an AddedToken object, eos_token
	// as a string, unk_token null (so undefined), tools and documents None.
	vars := `|{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}`
	config := func(tmpl string) string {
		b, _ := json.Marshal(tmpl)
		return `{"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null, "chat_template": ` + string(b) + `}`
	}
	for _, tc := range []struct {
		name     string
		files    map[string]string
		template string // "" for the default
		tools    []any
		want     string
	}{
		{"config string", map[string]string{"tokenizer_config.json": config("config" + vars)}, "", nil, "config|<s>|</s>|False|None|None|True"},
		{"jinja file wins", map[string]string{
			"tokenizer_config.json": config("config"),
			"chat_template.jinja":   "file" + vars + "\n",
		}, "", nil, "file|<s>|</s>|False|None|None|True"},
		{"jinja file drops the config's named templates", map[string]string{
			"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "d"}, {"name": "tool_use", "template": "t"}]}`,
			"chat_template.jinja":   "file",
		}, "", []any{map[string]any{"name": "f"}}, "file"},
		{"jinja file only", map[string]string{"chat_template.jinja": "file{{ bos_token is defined }}"}, "", nil, "fileFalse"},
		{"named list: default", map[string]string{"tokenizer_config.json": `{"chat_template": [
			{"name": "default", "template": "default {{ tools }}"},
			{"name": "tool_use", "template": "tool_use {{ tools|length }}"},
			{"name": "rag", "template": "rag"}]}`}, "", nil, "default None"},
		{"named list: tools pick tool_use", map[string]string{"tokenizer_config.json": `{"chat_template": [
			{"name": "default", "template": "default"},
			{"name": "tool_use", "template": "tool_use {{ tools|length }}"}]}`}, "", []any{map[string]any{"name": "f"}}, "tool_use 1"},
		{"named list: by name", map[string]string{"tokenizer_config.json": `{"chat_template": [
			{"name": "default", "template": "default"},
			{"name": "rag", "template": "rag"}]}`}, "rag", nil, "rag"},
		{"additional_chat_templates", map[string]string{
			"chat_template.jinja":                   "default",
			"additional_chat_templates/extra.jinja": "extra",
		}, "extra", nil, "extra"},
		{"special_tokens_map.json fills gaps", map[string]string{
			"tokenizer_config.json":   `{"eos_token": "</s>", "chat_template": "{{ bos_token }}{{ eos_token }}"}`,
			"special_tokens_map.json": `{"bos_token": {"content": "<bos>"}, "eos_token": "<other>"}`,
		}, "", nil, "<bos></s>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFolder(t, tc.files)
			tmpl, err := LoadNamed(dir, tc.template)
			if err != nil {
				t.Fatal(err)
			}
			got := mustRender(t, tmpl, hi, RenderOptions{AddGenerationPrompt: true, Tools: tc.tools})
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		tmpl  string
		want  []string
	}{
		{"no template", map[string]string{"tokenizer_config.json": `{"eos_token": "</s>"}`}, "", []string{"no chat template"}},
		{"empty folder", map[string]string{}, "", []string{"no chat template"}},
		{"bad json", map[string]string{"tokenizer_config.json": `{"chat_template": `}, "", []string{"tokenizer_config.json"}},
		{"bad template type", map[string]string{"tokenizer_config.json": `{"chat_template": 3}`}, "", []string{"chat_template", "want a string or a list"}},
		{"bad list entry", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "x"}]}`}, "", []string{"chat_template", "[0]"}},
		{"no such name", map[string]string{"tokenizer_config.json": `{"chat_template": "x"}`}, "rag", []string{`no chat template named "rag"`, "default"}},
		{"no default", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "a", "template": "a"}, {"name": "b", "template": "b"}]}`}, "", []string{"no default chat template", "a, b"}},
		{"bad token", map[string]string{"tokenizer_config.json": `{"chat_template": "x", "bos_token": 5}`}, "", []string{"bos_token"}},
		{"syntax error", map[string]string{"chat_template.jinja": "line 1\n{% if x %}\nnever closed"}, "", []string{"line 3", "'if'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFolder(t, tc.files)
			_, err := LoadNamed(dir, tc.tmpl)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestRenderOptions checks what Render passes: enable_thinking only when
// given (qwen3's template then closes an empty think block), tools as a
// list, add_generation_prompt false, and a fixed strftime_now clock.
func TestRenderOptions(t *testing.T) {
	qw, err := Load("testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	// Worked out from qwen3's template: with enable_thinking false the
	// generation prompt gets "<think>\n\n</think>\n\n".
	got := mustRender(t, qw, hi, RenderOptions{AddGenerationPrompt: true, Extra: map[string]any{"enable_thinking": false}})
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; got != want {
		t.Errorf("enable_thinking=false: got %q, want %q", got, want)
	}
	got = mustRender(t, qw, hi, RenderOptions{})
	if want := "<|im_start|>user\nhi<|im_end|>\n"; got != want {
		t.Errorf("no generation prompt: got %q, want %q", got, want)
	}

	tmpl, err := New(`{{ strftime_now('%d %b %Y') }} {{ tools|tojson }} {{ documents[0].title }} {{ custom.b }} {{ bos_token }}`,
		map[string]string{"bos_token": "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	got = mustRender(t, tmpl, hi, RenderOptions{
		Tools:     []any{json.RawMessage(`{"z": 1, "a": {"é": [1.5, null]}}`)},
		Documents: []any{map[string]any{"title": "T", "text": "x"}},
		Extra:     map[string]any{"custom": map[string]any{"b": 2}, "bos_token": "<override>"},
		Now:       func() time.Time { return time.Date(2024, 7, 26, 9, 5, 3, 0, time.UTC) },
	})
	// tojson keeps the raw JSON's key order and writes é as it is.
	if want := `26 Jul 2024 [{"z": 1, "a": {"é": [1.5, null]}}] T 2 <override>`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestMessages checks how messages reach a template: fields other than
// role and content, None content, content parts, and key order from JSON.
func TestMessages(t *testing.T) {
	tmpl, err := New(`{% for m in messages %}{{ m|tojson }}|{{ m.content is none }}|{{ m.tool_calls is defined }}
{% endfor %}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ParseMessages([]byte(`{"messages": [
		{"content": "first content, then role", "role": "user"},
		{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]},
		{"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, Message{Role: "tool", Content: "42", Fields: map[string]any{"tool_call_id": "c1", "name": "f"}})
	got := mustRender(t, tmpl, msgs, RenderOptions{})
	want := `{"content": "first content, then role", "role": "user"}|False|False
{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]}|True|True
{"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}|False|False
{"role": "tool", "content": "42", "name": "f", "tool_call_id": "c1"}|False|False
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}

	// A message read from JSON writes back the same JSON.
	data, err := json.Marshal(msgs[1])
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":{"z":1,"a":2}}}]}`; string(data) != want {
		t.Errorf("MarshalJSON: %s, want %s", data, want)
	}
}

func TestParseMessagesErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"msgs": []}`, `"messages" array`},
		{`[1]`, "messages[0]"},
		{`[{"role": 5}]`, "messages[0]: role"},
		{`"x"`, "array of messages"},
		{`[{"role": "user"`, "messages JSON"},
	} {
		_, err := ParseMessages([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseMessages(%s): error %v, want one saying %q", tc.in, err, tc.want)
		}
	}
}

// TestRenderErrors checks that raise_exception comes back as a raised
// *Error with its message and line, and other failures name the line.
func TestRenderErrors(t *testing.T) {
	tmpl, err := New("{% for m in messages %}\n{% if m.role == 'system' %}\n{{ raise_exception('System role not supported') }}\n{% endif %}\n{% endfor %}\n{{ messages[0].content + 1 }}", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "system", Content: "x"}}, RenderOptions{})
	var te *Error
	if !errors.As(err, &te) || !te.Raised || te.Msg != "System role not supported" || te.Line != 3 {
		t.Errorf("raise_exception: got %#v (%v)", te, err)
	}
	_, err = tmpl.Render(hi, RenderOptions{})
	if !errors.As(err, &te) || te.Raised || te.Line != 6 || !strings.Contains(te.Msg, `can only concatenate str (not "int") to str`) {
		t.Errorf("type error: got %v", err)
	}
	_, err = tmpl.Render([]Message{{Role: "user", Content: make(chan int)}}, RenderOptions{})
	if err == nil || !strings.Contains(err.Error(), "messages[0]: content") {
		t.Errorf("bad content: got %v", err)
	}
}

// BenchmarkRender renders a 20-turn conversation with qwen3's template
// (its reverse scan for the last user query, think splitting and all).
func BenchmarkRender(b *testing.B) {
	tmpl, err := Load("testdata/qwen3")
	if err != nil {
		b.Fatal(err)
	}
	msgs := []Message{{Role: "system", Content: "You are a helpful assistant."}}
	for i := range 10 {
		msgs = append(msgs,
			Message{Role: "user", Content: strings.Repeat("question ", 20) + string(rune('a'+i))},
			Message{Role: "assistant", Content: "<think>\nlet me see\n</think>\n\n" + strings.Repeat("answer ", 40)})
	}
	out, err := tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConcurrentRender renders one template from several goroutines (run
// with -race to check that they share nothing mutable).
func TestConcurrentRender(t *testing.T) {
	tmpl, err := Load("testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	want := mustRender(t, tmpl, hi, RenderOptions{AddGenerationPrompt: true})
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			got, err := tmpl.Render(hi, RenderOptions{AddGenerationPrompt: true})
			if err == nil && got != want {
				err = errors.New("got " + got)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestContinueFinalMessage checks continue_final_message. The expected
// prompts come from transformers' algorithm (render_jinja_template: append
// "CONTINUE_FINAL_MESSAGE_TAG " to the final content, render, cut at the
// tag, rstrip when the template trimmed it) run with Jinja2 3.1.6.
func TestContinueFinalMessage(t *testing.T) {
	conv := []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "Hel"}}
	for _, tc := range []struct {
		name string
		tmpl func() (*Template, error)
		msgs []Message
		want string
	}{
		{"qwen3", func() (*Template, error) { return Load("testdata/qwen3") }, conv,
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHel"},
		{"deepseek_v3", func() (*Template, error) { return Load("testdata/deepseek_v3") }, conv,
			"<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>Hel"},
		{"trimmed", func() (*Template, error) {
			return New("{% for m in messages %}<{{ m.role }}>{{ m.content|trim }}</{{ m.role }}>{% endfor %}", nil)
		}, []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "Hel "}}, "<user>hi</user><assistant>Hel"},
		{"parts", func() (*Template, error) {
			return New("{% for m in messages %}<{{ m.role }}>{% for p in m.content %}{{ p.text }}|{% endfor %}</{{ m.role }}>{% endfor %}", nil)
		}, []Message{{Role: "assistant", Content: []any{
			map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "text", "text": "b"}, map[string]any{"type": "image"},
		}}}, "<assistant>a|b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := tc.tmpl()
			if err != nil {
				t.Fatal(err)
			}
			got := mustRender(t, tmpl, tc.msgs, RenderOptions{ContinueFinalMessage: true})
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}

	qw, err := Load("testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	dropper, err := New("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tmpl *Template
		msgs []Message
		opts RenderOptions
		want string
	}{
		{"with generation prompt", qw, conv, RenderOptions{ContinueFinalMessage: true, AddGenerationPrompt: true}, "not compatible"},
		{"no messages", qw, nil, RenderOptions{ContinueFinalMessage: true}, "no messages"},
		{"none content", qw, []Message{{Role: "assistant"}}, RenderOptions{ContinueFinalMessage: true}, `no "content"`},
		{"no text part", qw, []Message{{Role: "user", Content: []any{map[string]any{"type": "image"}}}}, RenderOptions{ContinueFinalMessage: true}, "any text"},
		{"message dropped", dropper, conv, RenderOptions{ContinueFinalMessage: true}, "does not appear"},
	} {
		_, err := tc.tmpl.Render(tc.msgs, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
