package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chatGolden reads the chat entries the chat package keeps from the shared
// tokenizer goldens (transformers 5.17's apply_chat_template).
func chatGolden(t *testing.T, dir string) []struct {
	Messages            json.RawMessage `json:"messages"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Text                string          `json:"text"`
} {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "chat_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Chat []struct {
			Messages            json.RawMessage `json:"messages"`
			AddGenerationPrompt bool            `json:"add_generation_prompt"`
			Text                string          `json:"text"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Chat) == 0 {
		t.Fatal("no chat entries")
	}
	return g.Chat
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTemplateGoldens(t *testing.T) {
	for _, name := range []string{"qwen3", "deepseek_v3"} {
		dir := filepath.Join("..", "..", "chat", "testdata", name)
		for i, c := range chatGolden(t, dir) {
			if !c.AddGenerationPrompt {
				t.Fatalf("%s chat[%d]: the goldens are made with add_generation_prompt", name, i)
			}
			// Both forms of the messages file: an array, and {"messages": [...]}.
			for _, file := range []string{string(c.Messages), `{"messages": ` + string(c.Messages) + `}`} {
				path := writeTemp(t, "messages.json", file)
				code, out, errOut := reel("template", "--tokenizer", dir, "--messages", path, "--generation-prompt")
				if code != exitOK {
					t.Fatalf("%s chat[%d]: status %d: %s", name, i, code, errOut)
				}
				if out != c.Text {
					t.Errorf("%s chat[%d]:\n got %q\nwant %q", name, i, out, c.Text)
				}
			}
		}
	}
}

func TestTemplateOptions(t *testing.T) {
	dir := filepath.Join("..", "..", "chat", "testdata", "qwen3")
	// Worked out from qwen3's template: the tools block lists each tool with
	// tojson (keys in the file's order), then the turns; without
	// --generation-prompt no assistant header follows, and enable_thinking
	// does nothing then.
	path := writeTemp(t, "conv.json", `{"tools": [{"name": "f", "description": "d"}],
		"messages": [{"role": "user", "content": "hi"}]}`)
	code, out, errOut := reel("template", "--tokenizer", dir, "--messages", path, "--extra", `{"enable_thinking": false}`)
	if code != exitOK {
		t.Fatalf("status %d: %s", code, errOut)
	}
	want := "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		`{"name": "f", "description": "d"}` +
		"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nhi<|im_end|>\n"
	if out != want {
		t.Errorf("got %q\nwant %q", out, want)
	}
}

func TestTemplateContinue(t *testing.T) {
	dir := filepath.Join("..", "..", "chat", "testdata", "deepseek_v3")
	path := writeTemp(t, "conv.json", `[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]`)
	code, out, errOut := reel("template", "--tokenizer", dir, "--messages", path, "--continue")
	// transformers' continue_final_message cuts the prompt after "Hel"
	// (see chat's TestContinueFinalMessage).
	if want := "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>Hel"; code != exitOK || out != want {
		t.Errorf("status %d, got %q, want %q\n%s", code, out, want, errOut)
	}
}

func TestTemplateErrors(t *testing.T) {
	dir := filepath.Join("..", "..", "chat", "testdata", "qwen3")
	good := writeTemp(t, "good.json", `[{"role": "user", "content": "hi"}]`)
	bad := writeTemp(t, "bad.json", `[{"role": "user", "content": "hi"}`)
	raiser := t.TempDir()
	if err := os.WriteFile(filepath.Join(raiser, "chat_template.jinja"), []byte("{{ raise_exception('no system role') }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := reel("template", "-h"); code != exitOK || !strings.Contains(out, "usage: reel template") || !strings.Contains(out, "-generation-prompt") {
		t.Errorf("-h: status %d, stdout:\n%s", code, out)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"no tokenizer", []string{"--messages", good}, exitUsage, []string{"--tokenizer is required"}},
		{"no messages", []string{"--tokenizer", dir}, exitUsage, []string{"--messages is required"}},
		{"both endings", []string{"--tokenizer", dir, "--messages", good, "--generation-prompt", "--continue"}, exitUsage, []string{"exclude each other"}},
		{"bad extra", []string{"--tokenizer", dir, "--messages", good, "--extra", "[1]"}, exitUsage, []string{"--extra"}},
		{"missing file", []string{"--tokenizer", dir, "--messages", "/nonexistent/m.json"}, exitError, []string{"reel: template:", "/nonexistent/m.json"}},
		{"bad json", []string{"--tokenizer", dir, "--messages", bad}, exitError, []string{"reel: template:", "bad.json", "messages JSON"}},
		{"no template", []string{"--tokenizer", t.TempDir(), "--messages", good}, exitError, []string{"no chat template"}},
		{"raised", []string{"--tokenizer", raiser, "--messages", good}, exitError, []string{"raised", "line 1", "no system role"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := reel(append([]string{"template"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if tc.code != exitOK && out != "" {
				t.Errorf("stdout not empty on failure: %q", out)
			}
		})
	}
}
