package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// Bad tokenizer.json files are errors naming what is wrong and where.
func TestParseErrors(t *testing.T) {
	const model = `"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}`
	cases := []struct {
		json string
		want []string // substrings of the error
	}{
		{`{"normalizer": {"type": "Bogus"}, ` + model + `}`, []string{"normalizer.type", `"Bogus"`, "unknown normalizer"}},
		{`{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Nope"}]}, ` + model + `}`,
			[]string{"normalizer.normalizers[1].type", `"Nope"`}},
		{`{"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}, ` + model + `}`, []string{"not supported", "Precompiled"}},
		{`{"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Whatever"}]}, ` + model + `}`,
			[]string{"pre_tokenizer.pretokenizers[1].type", `"Whatever"`, "unknown pre-tokenizer"}},
		{`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}, ` + model + `}`,
			[]string{"pre_tokenizer.pattern", "missing )"}},
		{`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"}, ` + model + `}`,
			[]string{"pre_tokenizer.behavior", `"Sideways"`}},
		{`{"pre_tokenizer": {"type": "Split", "pattern": {"Glob": "a"}}, ` + model + `}`, []string{"pre_tokenizer.pattern"}},
		{`{"pre_tokenizer": {"type": "Metaspace", "replacement": "ab"}, ` + model + `}`, []string{"pre_tokenizer.replacement", "one character"}},
		{`{"pre_tokenizer": {"type": "Metaspace", "add_prefix_space": false, "prepend_scheme": "always"}, ` + model + `}`,
			[]string{"pre_tokenizer", "contradicts"}},
		{`{"post_processor": {"type": "Mystery"}, ` + model + `}`, []string{"post_processor.type", `"Mystery"`}},
		{`{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "special_tokens": {}}, ` + model + `}`,
			[]string{"post_processor.single[0]", `"<s>"`}},
		{`{"decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Odd"}]}, ` + model + `}`,
			[]string{"decoder.decoders[1].type", `"Odd"`, "unknown decoder"}},
		{`{"decoder": {"type": "WordPiece"}, ` + model + `}`, []string{"decoder.type", "not supported"}},
		{`{"model": {"type": "Unigram", "vocab": []}}`, []string{"model.type", "not supported", "Unigram"}},
		{`{"model": {"type": "WordPiece", "vocab": {}}}`, []string{"model.type", "not supported", "WordPiece"}},
		{`{"model": {"type": "Martian"}}`, []string{"model.type", `"Martian"`}},
		{`{}`, []string{"model", "missing"}},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`, []string{"model.merges[0]", "not in the vocabulary"}},
		{`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}`, []string{"model.merges[0]", `"ab"`}},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]}}`, []string{"model.merges[0]", "two tokens"}},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}}`, []string{"model.merges[0]", "pair"}},
		{`{"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}}`, []string{"model.vocab", "negative"}},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}}`, []string{"model.unk_token", `"<unk>"`}},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}}`, []string{"model.dropout", "not supported"}},
		{`{"model": {"type": "BPE", "vocab": [1, 2], "merges": []}}`, []string{"model.vocab"}},
		{`{"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}}`, []string{"model.vocab", "sparse"}},
		{`{"added_tokens": [{"id": 7, "content": "<x>"}], ` + model + `}`, []string{"added_tokens[0]", `"<x>"`, "id 7", "gives it 2"}},
		{`{"version": "2.0", ` + model + `}`, []string{"version", `"2.0"`}},
		{`{"model": `, []string{"not a tokenizer.json"}},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.json))
		if err == nil {
			t.Errorf("Parse(%s) succeeded", c.json)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%s): error %q does not mention %q", c.json, err, w)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load of an empty folder: %v", err)
	}
	bad := filepath.Join(dir, "tokenizer.json.gz")
	if err := os.WriteFile(bad, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadFile of a bad .gz: %v", err)
	}
	good := filepath.Join(dir, "good")
	if err := os.Mkdir(good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(good, "tokenizer.json"), []byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(good, "tokenizer_config.json"), []byte(`{"bos_token": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err == nil || !strings.Contains(err.Error(), "bos_token") {
		t.Errorf("Load with a bad bos_token: %v", err)
	}
}

// The special tokens and flags of tokenizer_config.json, with
// special_tokens_map.json filling in what it lacks.
func TestConfig(t *testing.T) {
	qwen := loadReal(t, "qwen3").Config()
	if qwen.EOS != "<|im_end|>" || qwen.PAD != "<|endoftext|>" || qwen.BOS != "" || qwen.AddBOS || !strings.Contains(qwen.ChatTemplate, "<|im_start|>") {
		t.Errorf("qwen3 config: %+v", qwen)
	}
	ds := loadReal(t, "deepseek_v3").Config()
	if ds.BOS != "<｜begin▁of▁sentence｜>" || ds.EOS != "<｜end▁of▁sentence｜>" || !ds.AddBOS || ds.AddEOS {
		t.Errorf("deepseek_v3 config: %+v", ds)
	}
	dir := t.TempDir()
	files := map[string]string{
		"tokenizer.json":          `{"model": {"type": "BPE", "vocab": {"<s>": 0}, "merges": []}}`,
		"special_tokens_map.json": `{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": "<unk>"}`,
		"tokenizer_config.json":   `{"eos_token": "<|eot|>", "add_bos_token": true, "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{BOS: "<s>", EOS: "<|eot|>", UNK: "<unk>", AddBOS: true, ChatTemplate: "D"}
	if got := tok.Config(); got != want {
		t.Errorf("config %+v, want %+v", got, want)
	}
}

func TestVocab(t *testing.T) {
	tok := loadReal(t, "qwen3")
	// 151,643 vocabulary entries and 26 added tokens up to 151668.
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	if err := tok.CheckVocab(151936); err != nil { // Qwen3's padded embedding
		t.Errorf("CheckVocab(151936): %v", err)
	}
	err := tok.CheckVocab(151000)
	if err == nil || !strings.Contains(err.Error(), "151669") || !strings.Contains(err.Error(), "151000") {
		t.Errorf("CheckVocab(151000) = %v, want an error naming both sizes", err)
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("TokenID(<|im_end|>) = %d, %v", id, ok)
	}
	if s, ok := tok.Token(9707); !ok || s != "Hello" {
		t.Errorf("Token(9707) = %q, %v", s, ok)
	}
	if !tok.IsSpecial(151645) || tok.IsSpecial(151667) || tok.IsSpecial(9707) {
		t.Error("IsSpecial: <|im_end|> is special, <think> and Hello are not")
	}
	for _, bad := range []int{-1, 151669, 1 << 40} {
		if _, err := tok.Decode([]int{9707, bad}, false); err == nil || !strings.Contains(err.Error(), "position 1") {
			t.Errorf("Decode with id %d: %v", bad, err)
		}
	}
	// skipSpecial drops <|im_start|> and <|im_end|> but not <think>.
	got := decode(t, tok, []int{151644, 9707, 151667, 151645}, true)
	if got != "Hello<think>" {
		t.Errorf("Decode skipping special = %q", got)
	}
}

// Text that is not valid UTF-8 goes through byte by byte and decodes to
// what Rust's from_utf8_lossy makes of it.
func TestInvalidUTF8(t *testing.T) {
	for _, name := range realTokenizers {
		tok := loadReal(t, name)
		for _, s := range []string{"a\xffb", "\xe4\xb8", "x\xe4\xb8 y\xc0\xaf", "<|im_end|>\xfe"} {
			ids, err := tok.Encode(s, true)
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", name, s, err)
			}
			back := decode(t, tok, ids, false)
			if want := lossyString([]byte(s)); back != want {
				t.Errorf("%s: Decode(Encode(%q)) = %q, want %q", name, s, back, want)
			}
		}
	}
	// 0xFF alone is the byte-level token ÿ.
	tok := loadReal(t, "qwen3")
	id, ok := tok.TokenID("ÿ")
	if got := encode(t, tok, "\xff", false); !ok || len(got) != 1 || got[0] != id {
		t.Errorf("Encode(\\xff) = %v, want [%d]", got, id)
	}
}

func TestLossyString(t *testing.T) {
	cases := map[string]string{
		"abc":              "abc",
		"\xff":             "\uFFFD",
		"\xe4\xb8":         "\uFFFD",       // a truncated 3-byte sequence is one
		"\xe4\xb8a":        "\uFFFDa",      //
		"\xe0\x80":         "\uFFFD\uFFFD", // E0 80 is never well-formed
		"\xed\xa0\x80":     "\uFFFD\uFFFD\uFFFD",
		"\xf0\x9f\x98":     "\uFFFD",
		"\xf0\x9f\x98\x80": "😀",
		"\xc0\xaf":         "\uFFFD\uFFFD",
	}
	for in, want := range cases {
		if got := lossyString([]byte(in)); got != want {
			t.Errorf("lossyString(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzEncode: encoding any text neither fails nor panics, and decoding
// gives it back (DeepSeek-V3 has no normalizer; invalid UTF-8 comes back
// as from_utf8_lossy has it); a stream gives the same text.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"Hello, world!", "  x\n\n\ty", "中文😀", "<｜User｜>hi", "\xff\xfe", "a'S 123456"} {
		f.Add(s)
	}
	tok := loadReal(f, "deepseek_v3")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		back, err := tok.Decode(ids, false)
		if err != nil {
			t.Fatal(err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = lossyString([]byte(s))
		}
		if back != want {
			t.Fatalf("Decode(Encode(%q)) = %q", s, back)
		}
		st := tok.NewStream(false)
		var b strings.Builder
		for _, id := range ids {
			c, err := st.Next(id)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(c)
		}
		rest, err := st.Flush()
		if err != nil {
			t.Fatal(err)
		}
		if b.String()+rest != back {
			t.Fatalf("stream gave %q, Decode %q", b.String()+rest, back)
		}
	})
}
