// Package chat renders a model's chat template: the Jinja2 template in a
// Hugging Face tokenizer folder that turns a conversation into the prompt
// text, exactly as transformers' apply_chat_template does.
//
// Load reads the template from tokenizer_config.json's chat_template (a
// string, or a list of named templates) or from chat_template.jinja beside
// it, which takes precedence, plus any additional_chat_templates/NAME.jinja.
// Render then gives the template what transformers gives it: messages,
// tools, documents, add_generation_prompt, the special tokens the config
// names (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
// mask_token, as strings), any extra variables such as enable_thinking, and
// the functions raise_exception and strftime_now.
//
// Templates run in an interpreter of the Jinja2 that chat templates use
// (package chat/internal/jinja), with transformers' environment:
// trim_blocks and lstrip_blocks on, an immutable sandbox, and tojson as
// json.dumps(ensure_ascii=False) with keys in the order given. Template
// errors, and the messages of raise_exception, come back as *Error with the
// template line.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/reel-runtime/reel/chat/internal/jinja"
)

// DefaultName is the name of the template used when none is asked for.
const DefaultName = "default"

// toolUseName is the template transformers picks, when there is one, for a
// conversation with tools.
const toolUseName = "tool_use"

// specialTokenNames are the special tokens transformers passes to a
// template (its special_tokens_map), in order.
func specialTokenNames() []string {
	return []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}
}

// Template is a tokenizer folder's chat template (or set of named
// templates), ready to render.
type Template struct {
	// Source is where the templates came from, for messages.
	Source string
	// SpecialTokens are the special tokens the template sees, by name
	// (bos_token, ...); tokens the configuration leaves out are absent.
	SpecialTokens map[string]string

	templates map[string]*jinja.Template
	sources   map[string]string
	name      string // the template asked for; "" picks as transformers does
}

// Load reads the chat template of the tokenizer folder dir.
func Load(dir string) (*Template, error) { return LoadNamed(dir, "") }

// LoadNamed reads the chat template called name of the tokenizer folder
// dir. With name "", Render picks as transformers does: "tool_use" when
// there are tools and the folder has such a template, otherwise "default".
func LoadNamed(dir, name string) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	var cfg map[string]json.RawMessage
	data, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("chat: %w", err)
	}
	sources := map[string]string{}
	if raw, ok := cfg["chat_template"]; ok {
		if err := configTemplates(raw, sources); err != nil {
			return nil, fmt.Errorf("chat: %s: chat_template: %w", cfgPath, err)
		}
	}
	// chat_template.jinja clobbers the config's templates, named ones
	// included, as in transformers.
	if src, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		sources = map[string]string{DefaultName: string(src)}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}
	extra, err := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	for _, path := range extra {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("chat: %w", err)
		}
		sources[strings.TrimSuffix(filepath.Base(path), ".jinja")] = string(src)
	}
	if len(sources) == 0 {
		return nil, fmt.Errorf("chat: %s has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja)", dir)
	}
	tokens, err := specialTokens(cfg)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
	}
	if err := addSpecialTokensMap(dir, tokens); err != nil {
		return nil, err
	}
	t, err := newTemplate(dir, sources, tokens, name)
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return t, nil
}

// New makes a template from Jinja source and the special tokens it sees
// (nil for none).
func New(source string, specialTokens map[string]string) (*Template, error) {
	t, err := newTemplate("template", map[string]string{DefaultName: source}, specialTokens, "")
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return t, nil
}

func newTemplate(where string, sources map[string]string, tokens map[string]string, name string) (*Template, error) {
	if name != "" {
		if _, ok := sources[name]; !ok {
			return nil, fmt.Errorf("%s has no chat template named %q (it has %s)", where, name, strings.Join(sortedKeys(sources), ", "))
		}
	} else if _, ok := sources[DefaultName]; !ok {
		if _, ok := sources[toolUseName]; !ok || len(sources) > 1 {
			return nil, fmt.Errorf("%s has no default chat template; name one of %s", where, strings.Join(sortedKeys(sources), ", "))
		}
	}
	t := &Template{Source: where, SpecialTokens: tokens, templates: map[string]*jinja.Template{}, sources: sources, name: name}
	for n, src := range sources {
		tmpl, err := jinja.Parse(src)
		if err != nil {
			return nil, templateError(where, n, err)
		}
		t.templates[n] = tmpl
	}
	return t, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Names lists the names of the folder's templates.
func (t *Template) Names() []string { return sortedKeys(t.templates) }

// configTemplates reads tokenizer_config.json's chat_template: a string,
// or a list of {"name": ..., "template": ...}.
func configTemplates(raw json.RawMessage, out map[string]string) error {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		out[DefaultName] = s
		return nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("want a string or a list of {\"name\", \"template\"}")
	}
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return fmt.Errorf("[%d]: want \"name\" and \"template\" strings", i)
		}
		out[*e.Name] = *e.Template
	}
	return nil
}

// specialTokens reads the named special tokens of a tokenizer config: a
// string or an AddedToken object {"content": ...}; null means unset.
func specialTokens(cfg map[string]json.RawMessage) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range specialTokenNames() {
		raw, ok := cfg[name]
		if !ok {
			continue
		}
		s, set, err := tokenContent(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if set {
			out[name] = s
		}
	}
	return out, nil
}

func tokenContent(raw json.RawMessage) (string, bool, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", false, err
	}
	switch v := v.(type) {
	case nil:
		return "", false, nil
	case string:
		return v, true, nil
	case map[string]any:
		if c, ok := v["content"].(string); ok {
			return c, true, nil
		}
	}
	return "", false, fmt.Errorf("want a string, null or an object with a \"content\" string")
}

// addSpecialTokensMap fills the tokens the config leaves out from an
// older folder's special_tokens_map.json, if there is one.
func addSpecialTokensMap(dir string, tokens map[string]string) error {
	path := filepath.Join(dir, "special_tokens_map.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("chat: %s: %w", path, err)
	}
	more, err := specialTokens(m)
	if err != nil {
		return fmt.Errorf("chat: %s: %w", path, err)
	}
	for k, v := range more {
		if _, ok := tokens[k]; !ok {
			tokens[k] = v
		}
	}
	return nil
}

// RenderOptions are the arguments of a render besides the messages.
type RenderOptions struct {
	// AddGenerationPrompt ends the prompt with the start of an assistant
	// turn (add_generation_prompt).
	AddGenerationPrompt bool
	// Tools are the tool schemas the template sees as tools: maps, or
	// json.RawMessage to keep key order. Nil passes None.
	Tools []any
	// Documents are the documents for retrieval templates; nil passes None.
	Documents []any
	// Extra are more variables (enable_thinking, ...), which override the
	// special tokens of the same name. Go maps inside are given sorted by
	// key; json.RawMessage values keep their order.
	Extra map[string]any
	// ContinueFinalMessage ends the prompt inside the last message, for
	// the model to continue it (transformers' continue_final_message): the
	// template renders as usual and the prompt is cut where that message's
	// content ends. It excludes AddGenerationPrompt.
	ContinueFinalMessage bool
	// Now is strftime_now's clock; nil means time.Now.
	Now func() time.Time
}

// continueTag is what transformers appends to the final message to find
// where it ends in the rendered prompt.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// Render renders the conversation msgs. A Template is safe to render from
// several goroutines at once.
func (t *Template) Render(msgs []Message, opts RenderOptions) (string, error) {
	name := t.name
	if name == "" {
		name = DefaultName
		if _, ok := t.templates[toolUseName]; ok && (opts.Tools != nil || t.templates[DefaultName] == nil) {
			name = toolUseName
		}
	}
	vars := map[string]jinja.Value{}
	for k, v := range t.SpecialTokens {
		vars[k] = v
	}
	for _, k := range sortedKeys(opts.Extra) {
		v, err := jinja.FromGo(opts.Extra[k])
		if err != nil {
			return "", fmt.Errorf("chat: render: %s: %w", k, err)
		}
		vars[k] = v
	}
	list := make(jinja.List, len(msgs))
	for i, m := range msgs {
		v, err := m.value()
		if err != nil {
			return "", fmt.Errorf("chat: render: messages[%d]: %w", i, err)
		}
		list[i] = v
	}
	vars["messages"] = list
	var final string
	if opts.ContinueFinalMessage {
		var err error
		if final, err = t.markFinal(name, list, opts); err != nil {
			return "", fmt.Errorf("chat: render: %w", err)
		}
	}
	for _, a := range []struct {
		name string
		v    []any
	}{{"tools", opts.Tools}, {"documents", opts.Documents}} {
		vars[a.name] = nil
		if a.v != nil {
			v, err := jinja.FromGo(a.v)
			if err != nil {
				return "", fmt.Errorf("chat: render: %s: %w", a.name, err)
			}
			vars[a.name] = v
		}
	}
	vars["add_generation_prompt"] = opts.AddGenerationPrompt
	out, err := t.templates[name].Render(vars, jinja.Options{Now: opts.Now})
	if err != nil {
		return "", templateError(t.Source, name, err)
	}
	if opts.ContinueFinalMessage {
		return cutAtFinal(out, final)
	}
	return out, nil
}

// markFinal appends continueTag to the final message's content (to its last
// text part, for a list of parts), as transformers does, and returns the
// content it continues.
func (t *Template) markFinal(name string, msgs jinja.List, opts RenderOptions) (string, error) {
	if opts.AddGenerationPrompt {
		return "", fmt.Errorf("continue_final_message and add_generation_prompt are not compatible")
	}
	if len(msgs) == 0 {
		return "", fmt.Errorf("continue_final_message is set but there are no messages")
	}
	if !strings.Contains(t.sources[name], "content") {
		return "", fmt.Errorf(`continue_final_message is set to "content" but this is not an accepted field in the chat_template`)
	}
	last := msgs[len(msgs)-1].(*jinja.Dict)
	content, _ := last.Get("content")
	switch c := content.(type) {
	case string:
		last.Set("content", c+continueTag)
		return c, nil
	case jinja.List:
		for i := len(c) - 1; i >= 0; i-- {
			if part, ok := c[i].(*jinja.Dict); ok {
				if text, ok := part.Get("text"); ok {
					s, ok := text.(string)
					if !ok {
						return "", fmt.Errorf("continue_final_message: the final message's last text part is not a string")
					}
					part.Set("text", s+continueTag)
					return s, nil
				}
			}
		}
		return "", fmt.Errorf("continue_final_message is set but we could not find any text to continue in the final message")
	case nil:
		return "", fmt.Errorf(`continue_final_message is set but the final message has no "content" to continue`)
	}
	return "", fmt.Errorf("continue_final_message: the final message's content is a %T", content)
}

// cutAtFinal cuts a prompt rendered with continueTag where the final
// message ends, as transformers does.
func cutAtFinal(out, final string) (string, error) {
	tag := strings.TrimSpace(continueTag)
	if !strings.Contains(out, strings.TrimSpace(final)) || !strings.Contains(out, tag) {
		return "", fmt.Errorf("chat: render: continue_final_message is set but the final message does not appear in the chat after applying the chat template")
	}
	at := strings.LastIndex(out, tag)
	if strings.HasPrefix(out[at:], continueTag) {
		return out[:at], nil
	}
	// The template trimmed the tag's trailing space: trim the message too.
	return strings.TrimRightFunc(out[:at], unicode.IsSpace), nil
}

// Error is an error of a chat template: a syntax error, a failure while
// rendering, or an error the template raised with raise_exception.
type Error struct {
	// Source and Name say which template: the folder, and the name of the
	// template in it ("default", ...).
	Source, Name string
	// Line is the template's line (1-based), 0 when not known.
	Line int
	// Msg says what went wrong; for a raised error it is the template's
	// message.
	Msg string
	// Raised marks an error the template raised with raise_exception.
	Raised bool
}

// Error says where the template failed (its source, name and line) and why.
func (e *Error) Error() string {
	where := e.Source
	if e.Name != DefaultName {
		where += " (" + e.Name + ")"
	}
	kind := "chat template"
	if e.Raised {
		kind = "chat template raised"
	}
	if e.Line > 0 {
		return fmt.Sprintf("chat: %s: %s line %d: %s", where, kind, e.Line, e.Msg)
	}
	return fmt.Sprintf("chat: %s: %s: %s", where, kind, e.Msg)
}

func templateError(source, name string, err error) error {
	var je *jinja.Error
	if errors.As(err, &je) {
		return &Error{Source: source, Name: name, Line: je.Line, Msg: je.Msg, Raised: je.Raised}
	}
	return &Error{Source: source, Name: name, Msg: err.Error()}
}
