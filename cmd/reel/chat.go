package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/reel-runtime/reel/chat"
	"github.com/reel-runtime/reel/sample"
)

func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return chatCmd(ctx, args, os.Stdin, stdout, stderr, nil)
}

// maxLine is the longest line chat reads.
const maxLine = 1 << 20

// chatCmd is reel chat reading its lines from stdin; trace, when not nil,
// sees each turn's prompt ids and generated ids.
func chatCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, trace func(prompt, generated []int)) error {
	mf := modelFlags{reuseLogits: true}
	var gf genFlags
	fs := newFlags("chat", "--model DIR [--tokenizer DIR] [--system TEXT] [--extra JSON] [--tokens N] [--temperature T] [--stop STRING] ...", `
Chat talks with a model in the terminal: each line read from stdin is a
user's message (a line ending in \ goes on with the next), answered with the
model's reply as it is generated, then its speed on stderr. The
conversation goes through the chat template of the model folder (or
--tokenizer's): tokenizer_config.json's chat_template or
chat_template.jinja. Each turn renders the whole conversation and feeds the
model only what its cache does not hold yet (the session rolls back to the
longest common prefix of ids, or starts over where it cannot roll back).

  /system TEXT  sets the system message (/system alone removes it)
  /reset        forgets the conversation
  Ctrl-D        quits

A reply ends at an end-of-sequence id (generation_config.json's
eos_token_id, the tokenizer config's eos_token), where its text holds a
--stop string, or after --tokens tokens; the sampler's settings not given as
flags come from generation_config.json, as for reel run.`, stderr)
	mf.register(fs, false)
	gf.register(fs, 1024)
	system := fs.String("system", "", "the system message")
	extra := fs.String("extra", "", `JSON object of more template variables, e.g. '{"enable_thinking": false}'`)
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if err := gf.parsed(fs, mf.chunkRows()); err != nil {
		return err
	}
	if mf.dir == "" {
		return usagef("--model is required")
	}
	if err := mf.check(); err != nil {
		return err
	}
	vars, err := parseExtra(*extra)
	if err != nil {
		return err
	}
	tmplDir := gf.tokenizer
	if tmplDir == "" {
		tmplDir = mf.dir
	} else if st, err := os.Stat(tmplDir); err == nil && !st.IsDir() {
		tmplDir = filepath.Dir(tmplDir)
	}
	tmpl, err := chat.Load(tmplDir)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	l, gen, smp, err := gf.open(ctx, &mf, false)
	if err != nil {
		return err
	}
	defer l.Close()
	tio, err := openTextIO(gf.tokenizer, mf.dir, l.model)
	if err != nil {
		return err
	}
	if tio.tok == nil {
		return fmt.Errorf("chat: %s has no tokenizer.json (give --tokenizer DIR)", mf.dir)
	}
	so, err := gf.stopping(gen, tio)
	if err != nil {
		return err
	}
	g, err := newGenerator(l.session, smp, gf.draft)
	if err != nil {
		return err
	}
	c := &chatter{
		g: g, tio: tio, tmpl: tmpl, extra: vars, stop: so, chunk: mf.chunkRows(), vocab: l.model.Vocab(),
		system: *system, trace: trace,
	}
	interactive := isTerminal(stdin)
	if interactive {
		fmt.Fprintf(stderr, "chatting with %s: /system TEXT, /reset, Ctrl-D to quit\n", mf.dir)
	}
	lines := bufio.NewScanner(stdin)
	lines.Buffer(make([]byte, 0, 4096), maxLine)
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var msg strings.Builder
	for {
		if interactive && msg.Len() == 0 {
			fmt.Fprint(stderr, "> ")
		}
		if !lines.Scan() {
			break
		}
		line := lines.Text()
		if more, ok := strings.CutSuffix(line, `\`); ok {
			msg.WriteString(more + "\n")
			continue
		}
		msg.WriteString(line)
		text := msg.String()
		msg.Reset()
		switch cmd, arg, _ := strings.Cut(text, " "); {
		case cmd == "/reset" && arg == "":
			c.reset()
			fmt.Fprintln(stderr, "(the conversation is forgotten)")
			continue
		case cmd == "/system":
			c.system = strings.TrimSpace(arg)
			continue
		case strings.TrimSpace(text) == "":
			continue
		}
		if err := c.turn(ctx, text, out, stderr); err != nil {
			return err
		}
	}
	if err := lines.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("chat: stdin: a line longer than %d bytes", maxLine)
		}
		return fmt.Errorf("chat: stdin: %w", err)
	}
	if interactive {
		fmt.Fprintln(stderr)
	}
	return ctx.Err()
}

// chatter holds a conversation and the session it runs on.
type chatter struct {
	g     *generator
	tio   textIO
	tmpl  *chat.Template
	extra map[string]any
	stop  sample.StopOptions
	chunk int
	vocab int

	system  string
	history []chat.Message
	// held are the ids the session holds (its Pos() of them).
	held  []int
	trace func(prompt, generated []int)
}

// reset forgets the conversation and empties the session.
func (c *chatter) reset() {
	c.history, c.held = nil, nil
	c.g.s.Reset()
}

// messages are the conversation with a new user message.
func (c *chatter) messages(user string) []chat.Message {
	var msgs []chat.Message
	if c.system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: c.system})
	}
	msgs = append(msgs, c.history...)
	return append(msgs, chat.Message{Role: "user", Content: user})
}

// turn answers a user's message: it renders the conversation, feeds the
// session what it does not hold yet, and streams the reply to out.
func (c *chatter) turn(ctx context.Context, user string, out *bufio.Writer, stderr io.Writer) error {
	msgs := c.messages(user)
	text, err := c.tmpl.Render(msgs, chat.RenderOptions{AddGenerationPrompt: true, Extra: c.extra})
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	ids, err := c.tio.encode(text, false)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if err := checkPrompt(ids, c.vocab); err != nil {
		return fmt.Errorf("chat: the prompt: %w", err)
	}
	s := c.g.s
	// Keep the longest common prefix the session holds, less one id at
	// least: the last one's logits are needed.
	keep := min(commonPrefix(c.held, ids), len(ids)-1)
	if keep < s.Pos() {
		if err := s.Rollback(keep); err != nil {
			logger(ctx).Debug("starting over", "cannot roll back", err)
			s.Reset()
			keep = 0
		}
	}
	c.held = c.held[:keep]
	t0 := time.Now()
	logits, err := prefill(ctx, s, ids[keep:], c.chunk)
	if err != nil {
		c.reset()
		return err
	}
	prefillTime := time.Since(t0)
	c.held = append(c.held, ids[keep:]...)
	c.g.smp.Reset()
	c.g.smp.Prompt(ids)
	r, err := c.g.run(ctx, logits, c.stop, c.tio.stream(), out)
	c.held = append(c.held, r.fed...)
	out.WriteByte('\n')
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if c.trace != nil {
		c.trace(ids, r.ids)
	}
	if err != nil {
		c.reset()
		return err
	}
	c.history = append(c.history, chat.Message{Role: "user", Content: user}, chat.Message{Role: "assistant", Content: r.text})
	total := prefillTime + r.decode
	fmt.Fprintf(stderr, "[%d tokens in %.2f s, %.1f tok/s; prompt %d tokens, %d from the cache, %.1f tok/s; %s]\n",
		len(r.ids), total.Seconds(), float64(len(r.ids))/total.Seconds(),
		len(ids), keep, float64(len(ids)-keep)/prefillTime.Seconds(), r.reason)
	return nil
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// parseExtra reads --extra: a JSON object of template variables, each kept
// as raw JSON so that objects keep their key order ("" gives none).
func parseExtra(s string) (map[string]any, error) {
	if s == "" {
		return nil, nil
	}
	var vars map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &vars); err != nil || vars == nil {
		return nil, usagef("--extra: want a JSON object")
	}
	extra := map[string]any{}
	for k, v := range vars {
		extra[k] = v
	}
	return extra, nil
}
