package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/tokenizer"
	"github.com/reel-runtime/reel/weights"
)

// qwen3Chat is the chat package's copy of Qwen3's tokenizer_config.json
// (the chat template) and the golden chat renderings and their ids.
var qwen3Chat = filepath.Join("..", "..", "chat", "testdata", "qwen3")

// qwen3 loads the tokenizer package's copy of Qwen3's tokenizer once (a
// third of a second) for every test; a Tokenizer is safe for concurrent use.
var qwen3 = sync.OnceValues(func() (*tokenizer.Tokenizer, error) { return tokenizer.Load(qwen3Tokenizer) })

// loadQwen3 is Qwen3's tokenizer.
func loadQwen3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := qwen3()
	require.NoError(t, err)
	return tok
}

// synthetic writes a checkpoint folder of a tiny dense Qwen3 of vocab rows
// with random weights, and returns the folder; files are more files to
// write beside (name to contents).
func synthetic(t testing.TB, vocab int, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"vocab_size":              vocab,
		"hidden_size":             32,
		"intermediate_size":       64,
		"num_hidden_layers":       2,
		"num_attention_heads":     2,
		"num_key_value_heads":     1,
		"head_dim":                16,
		"hidden_act":              "silu",
		"max_position_embeddings": 4096,
		"rms_norm_eps":            1e-6,
		"rope_parameters":         map[string]any{"rope_theta": 1e6, "rope_type": "default"},
		"tie_word_embeddings":     true,
	}
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	wc, err := weights.ParseConfig(path, raw)
	require.NoError(t, err)
	c, err := llama.ReadConfig(wc)
	require.NoError(t, err)
	g, err := llama.Build(&c, llama.Key{Rows: 1, Want: lm.WantAll}, lm.Stored{})
	require.NoError(t, err)
	decl, err := lm.Declarations(g)
	require.NoError(t, err)
	ts, err := lm.Synthesize(decl, 7, nil, nil)
	require.NoError(t, err)
	var nts []weights.NamedTensor
	for _, d := range decl {
		w := ts[d.Name]
		nts = append(nts, weights.NamedTensor{Name: d.Name, DType: w.DType, Shape: w.Shape, Data: w.Data})
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, "model.safetensors"), nts))
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	return dir
}

// withTokenizer adds Qwen3's tokenizer files (tokenizer.json.gz and
// tokenizer_config.json, with its chat template) to files.
func withTokenizer(t testing.TB, files map[string]string) map[string]string {
	t.Helper()
	all := map[string]string{}
	for _, name := range []string{"tokenizer.json.gz", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(qwen3Tokenizer, name))
		require.NoError(t, err)
		all[name] = string(data)
	}
	for k, v := range files {
		all[k] = v
	}
	return all
}

// qwen3Model writes a synthetic Qwen3 whose vocabulary is the tokenizer's
// (added tokens included), with Qwen3's tokenizer and chat template.
func qwen3Model(t testing.TB, files map[string]string) string {
	t.Helper()
	return synthetic(t, loadQwen3(t).VocabSize(), withTokenizer(t, files))
}

// greedy is the reference: n tokens of greedy decoding after prompt on a
// fresh session of the checkpoint in dir, each the argmax of a one-token
// forward.
func greedy(t testing.TB, dir string, prompt []int, n int) []int {
	t.Helper()
	m, err := llama.Load(dir)
	require.NoError(t, err)
	defer m.Close()
	s, err := m.Session(lm.SessionOptions{Options: lm.Options{Backend: cpu.New(2)}})
	require.NoError(t, err)
	defer s.Close()
	d, err := s.Forward(prompt, 0, lm.WantLast)
	require.NoError(t, err)
	var out []int
	for len(out) < n {
		best, row := 0, d.Data().([]float32)
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		out = append(out, best)
		if d, err = s.Forward([]int{best}, s.Pos(), lm.WantLast); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// decodeCount reads the number of decoded tokens off run's stderr.
func decodeCount(t testing.TB, stderr string) int {
	t.Helper()
	m := regexp.MustCompile(`decode:  (\d+) tokens`).FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// TestRunText: reel run on a model folder with a tokenizer encodes the
// prompt, prints it and the greedy tokens' text (the reference decoding of
// a fresh session), and with --tokenizer on a folder without one does the
// same.
func TestRunText(t *testing.T) {
	t.Parallel()
	tok := loadQwen3(t)
	dir := qwen3Model(t, nil)
	const prompt = "Hello, world!"
	ids, err := tok.Encode(prompt, true)
	require.NoError(t, err)
	want := greedy(t, dir, ids, 6)
	wantText, err := tok.Decode(want, true)
	require.NoError(t, err)

	code, out, errOut := reel("run", "--model", dir, "--prompt", prompt, "--tokens", "6", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, utf8.ValidString(out))
	require.Equal(t, prompt+wantText+"\n", out)
	require.Contains(t, errOut, "prefill: 4 tokens")
	require.Equal(t, 5, decodeCount(t, errOut))

	bare := synthetic(t, tok.VocabSize(), nil)
	code, out2, errOut := reel("run", "--model", bare, "--tokenizer", qwen3Tokenizer, "--prompt", prompt, "--tokens", "6", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, out, out2)
	// without a tokenizer, ids
	code, out2, errOut = reel("run", "--model", bare, "--prompt-ids", "9707,11", "--tokens", "2", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.Len(t, strings.Fields(out2), 4)
	// --prompt-ids with a tokenizer: text
	code, out2, errOut = reel("run", "--model", dir, "--prompt-ids", "9707,11,1879,0", "--tokens", "6", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, out, out2)
}

// TestRunSampledText: sampled tokens of a random model (bytes of partial
// characters among them) stream as valid UTF-8: the text printed is the
// decoding of all the tokens at the end.
func TestRunSampledText(t *testing.T) {
	t.Parallel()
	tok := loadQwen3(t)
	dir := qwen3Model(t, nil)
	const prompt = "多语言 😀"
	code, out, errOut := reel("-v", "run", "--model", dir, "--prompt", prompt, "--tokens", "100",
		"--temperature", "1.5", "--top-k", "0", "--seed", "3")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, utf8.ValidString(out), "%q", out)
	require.Equal(t, 99, decodeCount(t, errOut))
	ids := loggedIDs(t, errOut)
	require.Len(t, ids, 100)
	text, err := tok.Decode(ids, true)
	require.NoError(t, err)
	require.Equal(t, prompt+text+"\n", out)
}

// loggedIDs reads the generated ids off run's debug log.
func loggedIDs(t testing.TB, stderr string) []int {
	t.Helper()
	m := regexp.MustCompile(`msg=stopped .*ids="?\[([0-9 ]*)\]`).FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	var ids []int
	for _, f := range strings.Fields(m[1]) {
		id, err := strconv.Atoi(f)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// TestRunEOS: generation stops at an end-of-sequence id of
// generation_config.json (an id or a list) or of the tokenizer config's
// eos_token, whose text is not shown.
func TestRunEOS(t *testing.T) {
	t.Parallel()
	tok := loadQwen3(t)
	ids, err := tok.Encode("Once upon a time", true)
	require.NoError(t, err)
	probe := qwen3Model(t, nil)
	want := greedy(t, probe, ids, 8)
	text := func(ids []int) string {
		s, err := tok.Decode(ids, true)
		require.NoError(t, err)
		return s
	}
	eos := want[3]
	cut := 3
	for i, id := range want[:3] { // the first place the id comes
		if id == eos {
			cut = i
			break
		}
	}
	piece, ok := tok.Token(eos)
	require.True(t, ok)
	cfg, err := os.ReadFile(filepath.Join(qwen3Tokenizer, "tokenizer_config.json"))
	require.NoError(t, err)
	var tc map[string]any
	require.NoError(t, json.Unmarshal(cfg, &tc))
	tc["eos_token"] = piece
	tcRaw, err := json.Marshal(tc)
	require.NoError(t, err)

	for name, files := range map[string]map[string]string{
		"generation_config list": {"generation_config.json": `{"eos_token_id": [151643, ` + strconv.Itoa(eos) + `]}`},
		"tokenizer_config":       {"tokenizer_config.json": string(tcRaw)},
	} {
		t.Run(name, func(t *testing.T) {
			dir := synthetic(t, tok.VocabSize(), withTokenizer(t, files))
			code, out, errOut := reel("run", "--model", dir, "--prompt", "Once upon a time", "--tokens", "8", "--temperature", "0")
			require.Equal(t, exitOK, code, errOut)
			require.Equal(t, "Once upon a time"+text(want[:cut])+"\n", out)
			require.Equal(t, cut, decodeCount(t, errOut))
		})
	}
}

// TestRunStopStrings: a --stop string ends the text before it, across a
// token boundary; the first of several that comes wins.
func TestRunStopStrings(t *testing.T) {
	t.Parallel()
	tok := loadQwen3(t)
	dir := qwen3Model(t, nil)
	const prompt = "The quick brown fox"
	ids, err := tok.Encode(prompt, true)
	require.NoError(t, err)
	want := greedy(t, dir, ids, 12)
	// a boundary between two tokens of whole characters
	var pieces []string
	for _, id := range want {
		p, err := tok.Decode([]int{id}, true)
		require.NoError(t, err)
		pieces = append(pieces, p)
	}
	full, err := tok.Decode(want, true)
	require.NoError(t, err)
	stop := ""
	for i := 2; i+1 < len(pieces); i++ {
		a, b := pieces[i], pieces[i+1]
		if a != "" && b != "" && utf8.ValidString(a) && utf8.ValidString(b) && !strings.ContainsRune(a+b, utf8.RuneError) {
			_, la := utf8.DecodeLastRuneInString(a)
			_, lb := utf8.DecodeRuneInString(b)
			stop = a[len(a)-la:] + b[:lb]
			break
		}
	}
	if stop == "" {
		t.Skipf("no two whole-character tokens in %q", full)
	}
	at := strings.Index(full, stop)
	require.GreaterOrEqual(t, at, 0)
	code, out, errOut := reel("run", "--model", dir, "--prompt", prompt, "--tokens", "12", "--temperature", "0",
		"--stop", stop, "--stop", "never in the text")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, prompt+full[:at]+"\n", out, "stop %q in %q", stop, full)
}

// TestRunGenerationConfig: generation_config.json gives the sampler's
// settings and the token limit, and only the flags given override them.
func TestRunGenerationConfig(t *testing.T) {
	t.Parallel()
	dir := synthetic(t, 64, map[string]string{"generation_config.json": `{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "max_new_tokens": 3}`})
	run := func(args ...string) (string, string) {
		code, out, errOut := reel(append([]string{"-v", "run", "--model", dir, "--prompt-ids", "1,2"}, args...)...)
		require.Equal(t, exitOK, code, errOut)
		return out, errOut
	}
	_, errOut := run()
	require.Contains(t, errOut, "Temperature:0.6 TopK:20 TopP:0.95 MinP:0 RepetitionPenalty:1 PresencePenalty:0 FrequencyPenalty:0 Seed:1")
	require.Equal(t, 2, decodeCount(t, errOut))
	_, errOut = run("--temperature", "0", "--top-k", "40", "--min-p", "0.05", "--repetition-penalty", "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "0.25", "--seed", "9", "--tokens", "5")
	require.Contains(t, errOut, "Temperature:0 TopK:40 TopP:0.95 MinP:0.05 RepetitionPenalty:1.1 PresencePenalty:0.5 FrequencyPenalty:0.25 Seed:9")
	require.Equal(t, 4, decodeCount(t, errOut))

	// do_sample false is greedy; without a file, the command's defaults
	greedyDir := synthetic(t, 64, map[string]string{"generation_config.json": `{"do_sample": false, "temperature": 0.6}`})
	code, _, errOut := reel("-v", "run", "--model", greedyDir, "--prompt-ids", "1,2", "--tokens", "2")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "Temperature:0 TopK:40 TopP:1")
}

// TestRunBadInput: bad prompts, flags and files are errors before any
// output, naming what is wrong; none panics.
func TestRunBadInput(t *testing.T) {
	t.Parallel()
	tok := loadQwen3(t)
	dir := qwen3Model(t, nil)
	small := synthetic(t, 1000, withTokenizer(t, nil))
	badGen := qwen3Model(t, map[string]string{"generation_config.json": `{"temperature": -1}`})
	bare := synthetic(t, 64, nil)
	for _, c := range []struct {
		args  []string
		code  int
		wants []string
	}{
		{[]string{"--model", small}, exitError, []string{"151669", "1000"}},
		{[]string{"--model", dir, "--prompt", ""}, exitUsage, []string{"--prompt: the prompt is empty"}},
		{[]string{"--model", dir, "--prompt-ids", "1,999999"}, exitUsage, []string{"id 999999 is outside the vocabulary of 151669"}},
		{[]string{"--model", dir, "--prompt-ids", "1,,2"}, exitUsage, []string{"--prompt-ids"}},
		{[]string{"--model", bare, "--prompt", "hi"}, exitUsage, []string{"no tokenizer", "--prompt-ids"}},
		{[]string{"--model", bare, "--prompt-ids", "1", "--stop", "x"}, exitUsage, []string{"--stop needs text"}},
		{[]string{"--model", dir, "--stop", ""}, exitUsage, []string{"empty stop string"}},
		{[]string{"--model", dir, "--top-p", "0"}, exitUsage, []string{"top-p"}},
		{[]string{"--model", dir, "--temperature", "-1"}, exitUsage, []string{"temperature"}},
		{[]string{"--model", dir, "--tokens", "-1"}, exitUsage, []string{"--tokens -1"}},
		{[]string{"--model", badGen}, exitError, []string{"generation_config.json", "temperature"}},
		{[]string{"--model", dir, "--tokenizer", "/nonexistent/reel-tok"}, exitError, []string{"/nonexistent/reel-tok"}},
		{[]string{"--model", dir, "--draft", "2"}, exitUsage, []string{"no draft head"}},
	} {
		code, out, errOut := reel(append([]string{"run"}, c.args...)...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Empty(t, out, c.args)
		for _, w := range c.wants {
			require.Contains(t, errOut, w, c.args)
		}
	}

	// Invalid UTF-8 goes through byte by byte, as the tokenizer does.
	bad := "caf\xe9 \xff\xfe ok"
	ids, err := tok.Encode(bad, true)
	require.NoError(t, err)
	code, out, errOut := reel("run", "--model", dir, "--prompt", bad, "--tokens", "3", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "prefill: "+strconv.Itoa(len(ids))+" tokens")
	require.True(t, utf8.ValidString(out), "%q", out)
	require.True(t, strings.HasPrefix(out, "caf\uFFFD \uFFFD\uFFFD ok"), "%q", out)
}

// TestPaddedVocab: an id of a model's vocabulary padded past the
// tokenizer's has no text, and the stream goes on.
func TestPaddedVocab(t *testing.T) {
	tok := loadQwen3(t)
	dec := textIO{tok: tok}.stream()
	var out strings.Builder
	for _, id := range []int{9707, tok.VocabSize() + 5, 11, 1879, 0} {
		s, err := dec.Next(id)
		require.NoError(t, err)
		out.WriteString(s)
	}
	s, err := dec.Flush()
	require.NoError(t, err)
	require.Equal(t, "Hello, world!", out.String()+s)
}
