package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/reel-runtime/reel/chat"
)

func runTemplate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("template", "--tokenizer DIR --messages FILE.json [--generation-prompt | --continue] [--template NAME] [--extra JSON]", `
Template renders a conversation with a tokenizer folder's chat template
(tokenizer_config.json's chat_template, or chat_template.jinja beside it) as
transformers' apply_chat_template does, and prints the prompt exactly, with
no newline added. The messages file (- for stdin) is a JSON array of
messages, {"role": ..., "content": ...} with any other fields (tool_calls,
...), or an object with a "messages" array and, optionally, "tools".`, stderr)
	dir := fs.String("tokenizer", "", "tokenizer folder holding tokenizer_config.json or chat_template.jinja (required)")
	msgPath := fs.String("messages", "", "JSON file of the conversation, - for stdin (required)")
	gen := fs.Bool("generation-prompt", false, "end with the start of the assistant's turn (add_generation_prompt)")
	cont := fs.Bool("continue", false, "end inside the last message, for the model to continue it (continue_final_message)")
	name := fs.String("template", "", "the named template to use (default: as transformers picks)")
	extra := fs.String("extra", "", `JSON object of more template variables, e.g. '{"enable_thinking": false}'`)
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("--tokenizer is required")
	}
	if *msgPath == "" {
		return usagef("--messages is required")
	}
	if *gen && *cont {
		return usagef("--generation-prompt and --continue exclude each other")
	}
	opts := chat.RenderOptions{AddGenerationPrompt: *gen, ContinueFinalMessage: *cont}
	var err error
	if opts.Extra, err = parseExtra(*extra); err != nil {
		return err
	}
	tmpl, err := chat.LoadNamed(*dir, *name)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	var data []byte
	if *msgPath == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*msgPath)
	}
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	msgs, tools, err := readConversation(data)
	if err != nil {
		return fmt.Errorf("template: %s: %w", *msgPath, err)
	}
	opts.Tools = tools
	logger(ctx).Debug("rendering chat template", "tokenizer", *dir, "messages", len(msgs), "tools", len(tools))
	prompt, err := tmpl.Render(msgs, opts)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	_, err = io.WriteString(stdout, prompt)
	return err
}

// readConversation reads a messages file: an array of messages, or an
// object with "messages" and, optionally, "tools" (kept as raw JSON so the
// template sees their keys in order).
func readConversation(data []byte) ([]chat.Message, []any, error) {
	msgs, err := chat.ParseMessages(data)
	if err != nil {
		return nil, nil, err
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return msgs, nil, nil
	}
	var obj struct {
		Tools *[]json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, nil, fmt.Errorf("tools: want an array: %w", err)
	}
	if obj.Tools == nil {
		return msgs, nil, nil
	}
	tools := make([]any, len(*obj.Tools))
	for i, t := range *obj.Tools {
		tools[i] = t
	}
	return msgs, tools, nil
}
