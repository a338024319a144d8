package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/chat"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/qwen4"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/sample"
)

// turn is one turn of a chat as chatCmd's trace sees it.
type turn struct{ prompt, generated []int }

// chatRun runs reel chat with stdin and returns stdout, stderr, the turns
// and the error.
func chatRun(t *testing.T, stdin string, args ...string) (string, string, []turn, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	var turns []turn
	err := chatCmd(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(p, g []int) {
		turns = append(turns, turn{slices.Clone(p), slices.Clone(g)})
	})
	return out.String(), errOut.String(), turns, err
}

// qwen3Golden are the Qwen3 chat entries of chat/testdata's golden
// (transformers' apply_chat_template and its ids).
func qwen3Golden(t *testing.T) []struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
} {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(qwen3Chat, "chat_golden.json"))
	require.NoError(t, err)
	var g struct {
		Chat []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"chat"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	require.Len(t, g.Chat, 3)
	return g.Chat
}

// reply is the text of a reply's ids: all but an end-of-sequence id at the
// end, special tokens skipped.
func reply(t *testing.T, ids []int, eos int) string {
	t.Helper()
	if n := len(ids); n > 0 && ids[n-1] == eos {
		ids = ids[:n-1]
	}
	s, err := loadQwen3(t).Decode(ids, true)
	require.NoError(t, err)
	return s
}

// TestChatGolden: reel chat on a synthetic model with Qwen3's vocabulary,
// tokenizer and chat template feeds the model the golden ids of Qwen3's
// chat renderings, and streams replies that are the greedy tokens of a
// fresh session on those ids, as valid UTF-8 equal to their decoding.
func TestChatGolden(t *testing.T) {
	t.Parallel()
	dir := qwen3Model(t, nil)
	golden := qwen3Golden(t)
	eos := 151645 // <|im_end|>, the tokenizer config's eos_token
	// A message over two lines: the first ends in a backslash.
	stdin := "Hi there!\n/reset\n多语言 & émojis 😀\\\nline two\n"
	out, errOut, turns, err := chatRun(t, stdin, "--model", dir, "--temperature", "0", "--tokens", "7")
	require.NoError(t, err, errOut)
	require.Len(t, turns, 2)
	var want strings.Builder
	for i, g := range []int{0, 2} {
		require.Equal(t, golden[g].IDs, turns[i].prompt, "turn %d", i)
		ref := greedy(t, dir, golden[g].IDs, 7)
		if at := slices.Index(ref, eos); at >= 0 {
			ref = ref[:at+1]
		}
		require.Equal(t, ref, turns[i].generated, "turn %d", i)
		want.WriteString(reply(t, turns[i].generated, eos) + "\n")
	}
	require.True(t, utf8.ValidString(out), "%q", out)
	require.Equal(t, want.String(), out)
	require.Equal(t, 2, strings.Count(errOut, " tok/s; prompt "), errOut)
	require.Contains(t, errOut, "(the conversation is forgotten)")
}

// TestChatTurns: a conversation with a system message renders as the
// golden one does, and a second turn feeds only what the session does not
// hold, rolling back to the common prefix: its reply is that of a fresh
// session on the whole prompt.
func TestChatTurns(t *testing.T) {
	t.Parallel()
	dir := qwen3Model(t, nil)
	golden := qwen3Golden(t)[1]
	tok := loadQwen3(t)
	// Then /system alone removes the system message, and invalid UTF-8 in
	// a message goes through byte by byte.
	stdin := "/system You are terse.\n2+2?\n\nAnd 3+3?\n/reset\n/system\ncaf\xe9 \xff?\n"
	out, errOut, turns, err := chatRun(t, stdin, "--model", dir, "--temperature", "0", "--tokens", "5", "--extra", `{"enable_thinking": true}`)
	require.NoError(t, err, errOut)
	require.Len(t, turns, 3)
	require.True(t, utf8.ValidString(out), "%q", out)
	require.Equal(t, []int{151644, 872, 198}, turns[2].prompt[:3]) // no system turn
	bad, err := tok.Encode("caf\xe9 \xff?", false)
	require.NoError(t, err)
	require.Equal(t, bad, turns[2].prompt[3:3+len(bad)])
	// golden.IDs: the system turn, "2+2?", the assistant's "4" (id 19),
	// "And 3+3?", the generation prompt
	at := slices.Index(golden.IDs, 19)
	require.Equal(t, golden.IDs[:at], turns[0].prompt)
	replyText := reply(t, turns[0].generated, 151645)
	tmpl, err := chat.Load(qwen3Chat)
	require.NoError(t, err)
	text, err := tmpl.Render([]chat.Message{
		{Role: "system", Content: "You are terse."}, {Role: "user", Content: "2+2?"},
		{Role: "assistant", Content: replyText}, {Role: "user", Content: "And 3+3?"},
	}, chat.RenderOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	ids, err := tok.Encode(text, false)
	require.NoError(t, err)
	require.Equal(t, ids, turns[1].prompt)
	require.Equal(t, golden.IDs[:at], ids[:at])
	require.Equal(t, golden.IDs[at+1:], ids[len(ids)-len(golden.IDs)+at+1:])
	ref := greedy(t, dir, ids, len(turns[1].generated))
	require.Equal(t, ref, turns[1].generated)
	require.True(t, strings.HasPrefix(out, replyText+"\n"+reply(t, turns[1].generated, 151645)+"\n"), out)
	m := regexp.MustCompile(`prompt (\d+) tokens, (\d+) from the cache`).FindAllStringSubmatch(errOut, -1)
	require.Len(t, m, 3, errOut)
	require.Equal(t, "0", m[0][2])
	reused, _ := strconv.Atoi(m[1][2])
	require.GreaterOrEqual(t, reused, at, errOut)
}

// noRollback is a session that cannot roll back (as one with recurrent
// states and no snapshot).
type noRollback struct {
	models.Session
	refused int
}

func (s *noRollback) Rollback(n int) error {
	if n == s.Pos() {
		return nil
	}
	s.refused++
	return errors.New("no snapshot")
}

// TestChatStartsOver: when the session refuses to roll back (a new system
// message changes the prompt near its start), a turn starts it over and
// feeds the whole prompt, with the reply of a fresh session.
func TestChatStartsOver(t *testing.T) {
	t.Parallel()
	dir := qwen3Model(t, nil)
	tok := loadQwen3(t)
	tmpl, err := chat.Load(dir)
	require.NoError(t, err)
	m, err := models.Load(dir)
	require.NoError(t, err)
	defer m.Close()
	s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(2)}}})
	require.NoError(t, err)
	defer s.Close()
	ns := &noRollback{Session: s}
	smp, err := sample.NewSampler(sample.Options{})
	require.NoError(t, err)
	g, err := newGenerator(ns, smp, 0)
	require.NoError(t, err)
	c := &chatter{g: g, tio: textIO{tok: tok}, tmpl: tmpl, stop: sample.StopOptions{EOS: []int{151645}, MaxTokens: 4},
		chunk: 64, vocab: m.Vocab()}
	var turns []turn
	c.trace = func(p, gen []int) { turns = append(turns, turn{slices.Clone(p), slices.Clone(gen)}) }
	var out, errOut bytes.Buffer
	w := bufio.NewWriter(&out)
	for _, msg := range []string{"Hello", "Again"} {
		require.NoError(t, c.turn(context.Background(), msg, w, &errOut))
		require.Equal(t, len(c.held), ns.Pos())
		c.system = "Be brief." // the prompt changes near its start
	}
	require.Len(t, turns, 2)
	require.Equal(t, 1, ns.refused)
	require.Equal(t, 2, strings.Count(errOut.String(), ", 0 from the cache"), errOut.String())
	require.Equal(t, greedy(t, dir, turns[1].prompt, len(turns[1].generated)), turns[1].generated)
}

// TestChatErrors: chat needs a model with a tokenizer and a template, and
// a line of bounded length.
func TestChatErrors(t *testing.T) {
	t.Parallel()
	bare := synthetic(t, 64, nil)
	dir := qwen3Model(t, nil)
	for _, c := range []struct {
		stdin string
		args  []string
		usage bool
		want  string
	}{
		{"", nil, true, "--model is required"},
		{"", []string{"--model", dir, "--extra", "[1]"}, true, "--extra: want a JSON object"},
		{"", []string{"--model", bare}, false, "chat_template"},
		{"", []string{"--model", bare, "--tokenizer", qwen3Tokenizer}, false, "only 64"},
		{strings.Repeat("x", maxLine+1), []string{"--model", dir}, false, "a line longer than"},
	} {
		_, _, _, err := chatRun(t, c.stdin, c.args...)
		var ue *usageError
		require.Error(t, err, c.args)
		require.Contains(t, err.Error(), c.want, c.args)
		require.Equal(t, c.usage, errors.As(err, &ue), c.args)
	}
}

// TestGeneratorDrafts: with a draft head, greedy decoding with drafts
// gives the very tokens of plain greedy decoding, and sampling with drafts
// runs within the token limit.
func TestGeneratorDrafts(t *testing.T) {
	base, err := qwen4.Load("../../testdata/qwen4/qwen4-tiny-small-11")
	require.NoError(t, err)
	c := base.Config
	base.Close()
	c.MTPLayers = 1
	m, err := qwen4.Synthetic(c, graph.F32, 5)
	require.NoError(t, err)
	prompt := []int{3, 1, 4, 1, 5, 9, 2, 6}
	gen := func(o sample.Options, draft, max int) generated {
		s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(2)}, ReuseLogits: true}, Drafting: draft > 0})
		require.NoError(t, err)
		defer s.Close()
		smp, err := sample.NewSampler(o)
		require.NoError(t, err)
		g, err := newGenerator(s, smp, draft)
		require.NoError(t, err)
		logits, err := prefill(context.Background(), s, prompt, 64)
		require.NoError(t, err)
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		r, err := g.run(context.Background(), logits, sample.StopOptions{MaxTokens: max}, idDecoder{}, w)
		require.NoError(t, err)
		require.Equal(t, len(prompt)+len(r.fed), s.Pos())
		var want strings.Builder
		for _, id := range r.ids {
			want.WriteString(strconv.Itoa(id) + " ")
		}
		require.Equal(t, want.String(), out.String())
		return r
	}
	plain := gen(sample.Options{}, 0, 12)
	drafted := gen(sample.Options{}, 3, 12)
	require.Equal(t, plain.ids, drafted.ids)
	require.Positive(t, drafted.windows)
	t.Logf("greedy: %d of %d drafts accepted in %d windows", drafted.accepted, drafted.drafted, drafted.windows)
	sampled := gen(sample.Options{Temperature: 1, Seed: 3}, 3, 12)
	require.Len(t, sampled.ids, 12)
	require.Positive(t, sampled.windows)
}
