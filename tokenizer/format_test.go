package tokenizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Tests of the format on small hand-written tokenizer.json files. Where
// the expected value comes from the tokenizers library's own unit tests,
// the test says which; the others are worked out by hand from the
// library's rules, step by step in the comments.

// build parses a tokenizer.json made of the given top-level fields (JSON
// text); the model defaults to an empty BPE.
func build(t *testing.T, fields map[string]string) *Tokenizer {
	t.Helper()
	if _, ok := fields["model"]; !ok {
		fields["model"] = `{"type": "BPE", "vocab": {}, "merges": []}`
	}
	var parts []string
	for k, v := range fields {
		parts = append(parts, fmt.Sprintf("%q: %s", k, v))
	}
	tok, err := Parse([]byte("{" + strings.Join(parts, ",\n") + "}"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// split is a piece of text out of the pre-tokenizers, or an added token
// (id >= 0) with the text it covers.
type split struct {
	text string
	id   int
}

// splits runs added-token extraction, normalization and the
// pre-tokenizers, without the model.
func splits(t *testing.T, tok *Tokenizer, text string) []split {
	t.Helper()
	var out []split
	var run func(i int, p piece) error
	run = func(i int, p piece) error {
		if i == len(tok.pre) {
			s := p.text
			if tok.lazyBytes {
				s = bytesTable.encode(s)
			}
			out = append(out, split{s, -1})
			return nil
		}
		return tok.pre[i].split(p, func(q piece) error { return run(i+1, q) })
	}
	err := tok.extract(text, func(p piece, id int) error {
		if id >= 0 {
			out = append(out, split{p.text, id})
			return nil
		}
		return run(0, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// texts lists the pieces' texts.
func texts(ss []split) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.text
	}
	return out
}

func encode(t *testing.T, tok *Tokenizer, text string, special bool) []int {
	t.Helper()
	ids, err := tok.Encode(text, special)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func decode(t *testing.T, tok *Tokenizer, ids []int, skip bool) string {
	t.Helper()
	s, err := tok.Decode(ids, skip)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The expected splits of the library's tests: split.rs basic (the
// Whitespace regex, inverted, under each behavior), normalizer.rs split
// ("The-final--countdown" on "-"), split.rs invert.
func TestSplitBehaviors(t *testing.T) {
	cases := []struct {
		pattern, behavior string
		invert            bool
		text              string
		want              []string
	}{
		{`{"Regex": "\\w+|[^\\w\\s]+"}`, "Removed", true, "How are you doing?", []string{"How", "are", "you", "doing", "?"}},
		{`{"Regex": "\\w+|[^\\w\\s]+"}`, "Isolated", true, "How are you doing?", []string{"How", " ", "are", " ", "you", " ", "doing", "?"}},
		{`{"Regex": "\\w+|[^\\w\\s]+"}`, "MergedWithPrevious", true, "How are you doing?", []string{"How ", "are ", "you ", "doing", "?"}},
		{`{"Regex": "\\w+|[^\\w\\s]+"}`, "MergedWithNext", true, "How are you doing?", []string{"How", " are", " you", " doing", "?"}},
		{`{"Regex": "\\w+|[^\\w\\s]+"}`, "Contiguous", true, "How are you doing?", []string{"How", " ", "are", " ", "you", " ", "doing?"}},
		{`{"String": "-"}`, "Removed", false, "The-final--countdown", []string{"The", "final", "countdown"}},
		{`{"String": "-"}`, "Isolated", false, "The-final--countdown", []string{"The", "-", "final", "-", "-", "countdown"}},
		{`{"String": "-"}`, "MergedWithPrevious", false, "The-final--countdown", []string{"The-", "final-", "-", "countdown"}},
		{`{"String": "-"}`, "MergedWithNext", false, "The-final--countdown", []string{"The", "-final", "-", "-countdown"}},
		{`{"String": "-"}`, "Contiguous", false, "The-final--countdown", []string{"The", "-", "final", "--", "countdown"}},
		// Splitting on " " equals splitting inverted on "Hello".
		{`{"String": " "}`, "Removed", false, "Hello Hello Hello", []string{"Hello", "Hello", "Hello"}},
		{`{"String": "Hello"}`, "Removed", true, "Hello Hello Hello", []string{"Hello", "Hello", "Hello"}},
		// A String pattern is literal: "." is not a regex here.
		{`{"String": "."}`, "Isolated", false, "a.b", []string{"a", ".", "b"}},
	}
	for _, c := range cases {
		tok := build(t, map[string]string{"pre_tokenizer": fmt.Sprintf(
			`{"type": "Split", "pattern": %s, "behavior": %q, "invert": %v}`, c.pattern, c.behavior, c.invert)})
		if got := texts(splits(t, tok, c.text)); !cmp.Equal(got, c.want) {
			t.Errorf("%s %s invert=%v on %q: got %q, want %q", c.pattern, c.behavior, c.invert, c.text, got, c.want)
		}
	}
}

// The library's tests of the other pre-tokenizers.
func TestPreTokenizers(t *testing.T) {
	cases := []struct {
		pre, text string
		want      []string
	}{
		// byte_level.rs add_prefix_space, with and without a leading space.
		{`{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`,
			"Hello my friend, how is your day going?",
			[]string{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}},
		{`{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`,
			" Hello my friend, how is your day going?",
			[]string{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}},
		// byte_level.rs handling_of_newlines and handling_of_multiple_whitespaces.
		{`{"type": "ByteLevel", "add_prefix_space": false}`, "Hello there\nHello there",
			[]string{"Hello", "Ġthere", "Ċ", "Hello", "Ġthere"}},
		{`{"type": "ByteLevel", "add_prefix_space": false}`, "Hello there       dear",
			[]string{"Hello", "Ġthere", "ĠĠĠĠĠĠ", "Ġdear"}},
		// metaspace.rs basic and multiple_spaces.
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`, "Hey friend!",
			[]string{"▁Hey", "▁friend!"}},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`, "Hey   friend!",
			[]string{"▁Hey", "▁", "▁", "▁friend!"}},
		// digits.rs numbers and individual_digits.
		{`{"type": "Digits", "individual_digits": false}`, "Hey 123 friend!", []string{"Hey ", "123", " friend!"}},
		{`{"type": "Digits", "individual_digits": true}`, "Hey 123 friend!", []string{"Hey ", "1", "2", "3", " friend!"}},
		// punctuation.rs punctuation_basic.
		{`{"type": "Punctuation"}`, "Hey friend!     How are you?!?",
			[]string{"Hey friend", "!", "     How are you", "?", "!", "?"}},
		// whitespace.rs basic and whitespace_split.
		{`{"type": "Whitespace"}`, "Hey man!", []string{"Hey", "man", "!"}},
		{`{"type": "Whitespace"}`, "Hey, man, Good?", []string{"Hey", ",", "man", ",", "Good", "?"}},
		{`{"type": "WhitespaceSplit"}`, "Hey, man, Good?", []string{"Hey,", "man,", "Good?"}},
		// bert.rs basic.
		{`{"type": "BertPreTokenizer"}`, "Hey friend!     How are you?!?",
			[]string{"Hey", "friend", "!", "How", "are", "you", "?", "!", "?"}},
		{`{"type": "CharDelimiterSplit", "delimiter": "x"}`, "axbxxc", []string{"a", "b", "c"}},
		// A Sequence applies each in turn (DeepSeek-V3's digits in threes).
		{`{"type": "Sequence", "pretokenizers": [
			{"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
			{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}`,
			"ab 1234567", []string{"abĠ", "123", "456", "7"}},
	}
	for _, c := range cases {
		tok := build(t, map[string]string{"pre_tokenizer": c.pre})
		if got := texts(splits(t, tok, c.text)); !cmp.Equal(got, c.want) {
			t.Errorf("%s on %q:\n got  %q\n want %q", c.pre, c.text, got, c.want)
		}
	}
}

// The library's added_vocabulary.rs tests. Its ModelMock has no
// vocabulary, so added ids start at 0, in the order of added_tokens;
// AddedToken::from(s, false) is normalized, from(s, true) special and not
// normalized.
func TestAddedTokens(t *testing.T) {
	tokens := func(list ...string) string { return "[" + strings.Join(list, ",") + "]" }
	tok := func(id int, content string, special, normalized, lstrip, rstrip, single bool) string {
		return fmt.Sprintf(`{"id": %d, "content": %q, "special": %v, "normalized": %v, "lstrip": %v, "rstrip": %v, "single_word": %v}`,
			id, content, special, normalized, lstrip, rstrip, single)
	}
	cases := []struct {
		name   string
		fields map[string]string
		text   string
		want   []split
	}{
		{"can_extract_added_tokens", map[string]string{
			"added_tokens": tokens(tok(0, "my", false, true, false, false, false), tok(1, "name", false, true, false, false, false),
				tok(2, "[CLS]", true, false, false, false, false), tok(3, "[SEP]", true, false, false, false, false)),
		}, "[CLS] My name is Anthony [SEP]",
			[]split{{"[CLS]", 2}, {" My ", -1}, {"name", 1}, {" is Anthony ", -1}, {"[SEP]", 3}}},
		// "my" strips the spaces on both sides and matches the lowercased
		// text; "ony" is single_word, so not inside "anthony".
		{"options_use_cases", map[string]string{
			"normalizer": `{"type": "Lowercase"}`,
			"added_tokens": tokens(tok(0, "my", false, true, true, true, false), tok(1, "name", false, true, false, false, false),
				tok(2, "ony", false, true, false, false, true),
				tok(3, "[CLS]", true, false, false, false, false), tok(4, "[SEP]", true, false, false, false, false)),
		}, "[CLS] My name is Anthony [SEP]",
			[]split{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}},
		{"single_word_is_correct", map[string]string{
			"normalizer":   `{"type": "Lowercase"}`,
			"added_tokens": tokens(tok(0, "<mask>", false, true, false, false, true)),
		}, "<mask> My name <mask> A<mask> <mask>ony <mask>",
			[]split{{"<mask>", 0}, {" my name ", -1}, {"<mask>", 0}, {" a<mask> <mask>ony ", -1}, {"<mask>", 0}}},
		// Punctuation and a dash are not word characters; a combining mark is.
		{"single_word_is_unicode_correct", map[string]string{
			"normalizer":   `{"type": "Lowercase"}`,
			"added_tokens": tokens(tok(0, "<mask>", false, true, false, false, true)),
		}, "<mask>, <mask>- ◌̰<mask>",
			[]split{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- ◌̰<mask>", -1}}},
		// \t and U+2000 are White_Space for lstrip and rstrip.
		{"lstrip_unicode_space", map[string]string{
			"normalizer":   `{"type": "Lowercase"}`,
			"added_tokens": tokens(tok(0, "<mask>", false, true, true, true, true)),
		}, "Hi <mask> there\t<mask>\t<mask>\u2000",
			[]split{{"hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}},
		// Leftmost-longest: "<a>b" wins over "<a>" where both start.
		{"longest", map[string]string{
			"added_tokens": tokens(tok(0, "<a>", true, false, false, false, false), tok(1, "<a>b", true, false, false, false, false)),
		}, "x<a>bc<a>",
			[]split{{"x", -1}, {"<a>b", 1}, {"c", -1}, {"<a>", 0}}},
	}
	for _, c := range cases {
		got := splits(t, build(t, c.fields), c.text)
		if !cmp.Equal(got, c.want, cmp.AllowUnexported(split{})) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
}

// The library's bpe/model.rs tests of the model alone (no pre-tokenizer).
func TestBPEModel(t *testing.T) {
	cases := []struct {
		name, model, text string
		want              []int
	}{
		{"unk_not_fused", `{"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "b": 2}, "merges": [], "unk_token": "<unk>"}`,
			"accb", []int{1, 0, 0, 2}},
		{"unk_get_fused", `{"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "b": 2}, "merges": [], "unk_token": "<unk>", "fuse_unk": true}`,
			"accb", []int{1, 0, 2}},
		// Without unk_token an unknown character is dropped.
		{"no_unk", `{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}`, "acb", []int{0, 1}},
		// tokenize_with_and_without_dropout, merges in both spellings.
		{"unrelated", `{"type": "BPE", "vocab": {"u": 0, "n": 1, "r": 2, "e": 3, "l": 4, "a": 5, "t": 6, "d": 7, "re": 8,
			"at": 9, "ed": 10, "un": 11, "ated": 12, "rel": 13, "related": 14, "unrelated": 15},
			"merges": ["r e", "a t", "e d", "u n", "at ed", "re l", "rel ated", "un related"]}`, "unrelated", []int{15}},
		{"unrelated_pairs", `{"type": "BPE", "vocab": {"u": 0, "n": 1, "r": 2, "e": 3, "l": 4, "a": 5, "t": 6, "d": 7, "re": 8,
			"at": 9, "ed": 10, "un": 11, "ated": 12, "rel": 13, "related": 14, "unrelated": 15},
			"merges": [["r", "e"], ["a", "t"], ["e", "d"], ["u", "n"], ["at", "ed"], ["re", "l"], ["rel", "ated"], ["un", "related"]]}`,
			"unrelated", []int{15}},
		// dropout 0 is no dropout.
		{"dropout_0", `{"type": "BPE", "dropout": 0.0, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}`, "ab", []int{2}},
		{"continuing_subword_prefix", `{"type": "BPE", "vocab": {"a": 0, "##b": 1, "##c": 2, "ab": 3, "abc": 4},
			"merges": ["a ##b", "ab ##c"], "unk_token": null, "continuing_subword_prefix": "##"}`, "abc", []int{4}},
		// end_of_word_suffix: the last character is looked up with it.
		{"end_of_word_suffix", `{"type": "BPE", "vocab": {"a": 0, "b</w>": 1, "ab</w>": 2, "b": 3},
			"merges": ["a b</w>"], "end_of_word_suffix": "</w>"}`, "ab", []int{2}},
		{"byte_fallback_unk", `{"type": "BPE", "vocab": {"<unk>": 0, "<0x61>": 1}, "merges": [], "unk_token": "<unk>", "byte_fallback": true}`,
			"c", []int{0}},
		{"byte_fallback", `{"type": "BPE", "vocab": {"<unk>": 0, "<0x61>": 1}, "merges": [], "unk_token": "<unk>", "byte_fallback": true}`,
			"a", []int{1}},
		// The library's merge_word adds byte tokens without first adding
		// a pending unk, which waits for the next known character or the
		// end: "ca" is <0x61> then <unk>.
		{"byte_fallback_after_unk", `{"type": "BPE", "vocab": {"<unk>": 0, "<0x61>": 1}, "merges": [], "unk_token": "<unk>", "byte_fallback": true}`,
			"ca", []int{1, 0}},
		{"byte_fallback_newline", `{"type": "BPE", "vocab": {"<unk>": 0, "<0x0A>": 1}, "merges": [], "unk_token": "<unk>", "byte_fallback": true}`,
			"\n", []int{1}},
		// ignore_merges: a word in the vocabulary is taken whole.
		{"ignore_merges", `{"type": "BPE", "vocab": {".:.:": 0, ".": 2, ":": 3, ".:": 7, ".:.": 9}, "merges": [". :"], "ignore_merges": true}`,
			".:.:", []int{0}},
		{"no_ignore_merges", `{"type": "BPE", "vocab": {".:.:": 0, ".": 2, ":": 3, ".:": 7, ".:.": 9}, "merges": [". :"]}`,
			".:.:", []int{7, 7}},
		// Equal ranks merge leftmost first: "aaa" is "aa a", not "a aa".
		{"leftmost", `{"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]}`, "aaa", []int{1, 0}},
	}
	for _, c := range cases {
		tok := build(t, map[string]string{"model": c.model})
		if got := encode(t, tok, c.text, false); !cmp.Equal(got, c.want) {
			t.Errorf("%s: Encode(%q) = %v, want %v", c.name, c.text, got, c.want)
		}
	}
}

// The library's decoder tests: strip.rs, byte_fallback.rs, metaspace.rs
// decode, byte_level.rs decoding; and Replace, Fuse, BPEDecoder.
func TestDecoders(t *testing.T) {
	cases := []struct {
		decoder string
		tokens  []string
		want    []string
	}{
		{`{"type": "Strip", "content": "H", "start": 1, "stop": 0}`, []string{"Hey", " friend!", "HHH"}, []string{"ey", " friend!", "HH"}},
		{`{"type": "Strip", "content": "y", "start": 0, "stop": 1}`, []string{"Hey", " friend!"}, []string{"He", " friend!"}},
		{`{"type": "ByteFallback"}`, []string{"Hey", "friend!"}, []string{"Hey", "friend!"}},
		{`{"type": "ByteFallback"}`, []string{"<0x61>"}, []string{"a"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>"}, []string{"�"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>"}, []string{"�", "�"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "<0xab>"}, []string{"叫"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "<0xab>", "a"}, []string{"叫", "a"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "a"}, []string{"�", "�", "a"}},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`, []string{"▁Hey", "▁friend!"}, []string{"Hey", " friend!"}},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true}`, []string{"▁Hey", "▁friend!"}, []string{" Hey", " friend!"}},
		{`{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`,
			[]string{"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"},
			[]string{"Hello my friend, how is your day going?"}},
		// Bytes of a character split across tokens; an ill-formed run is
		// one U+FFFD per maximal part (Rust's from_utf8_lossy).
		{`{"type": "ByteLevel"}`, []string{"ä¸", "Ń", "Ġ", "ä¸"}, []string{"中 \uFFFD"}},
		{`{"type": "ByteLevel"}`, []string{"ÿ", "þ", "a"}, []string{"\uFFFD\uFFFDa"}},
		// A token with runes outside the byte map is kept as it is.
		{`{"type": "ByteLevel"}`, []string{"<｜end▁of▁sentence｜>", "Ġx"}, []string{"<｜end▁of▁sentence｜> x"}},
		{`{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}`, []string{"▁a▁b", "c"}, []string{" a b", "c"}},
		{`{"type": "Fuse"}`, []string{"Hey", " friend!"}, []string{"Hey friend!"}},
		{`{"type": "BPEDecoder", "suffix": "</w>"}`, []string{"My</w>", "fri", "end</w>"}, []string{"My ", "fri", "end"}},
	}
	for _, c := range cases {
		d, err := parseDecoder("decoder", []byte(c.decoder))
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.decodeChain(c.tokens)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(got, c.want) {
			t.Errorf("%s on %q: got %q, want %q", c.decoder, c.tokens, got, c.want)
		}
	}
}

// llamaVocab is a SentencePiece-style vocabulary: <unk>, <s>, </s>, the
// 256 byte tokens (<0x00> is 3, so byte b is 3+b), then pieces.
func llamaVocab() string {
	var b strings.Builder
	b.WriteString(`{"<unk>": 0, "<s>": 1, "</s>": 2`)
	for i := 0; i < 256; i++ {
		fmt.Fprintf(&b, `, "<0x%02X>": %d`, i, 3+i)
	}
	for i, p := range []string{"▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "ll", "▁he", "llo", "▁hello", "▁w", "or", "▁wor", "ld", "▁world"} {
		fmt.Fprintf(&b, `, %q: %d`, p, 259+i)
	}
	b.WriteString("}")
	return b.String()
}

// Piece ids of llamaVocab.
const (
	idSpace = 259 // ▁
	idH     = 260
	idE     = 261
	idO     = 263
	idWS    = 267 // ▁h
	idLLO   = 270 // llo
	idHello = 271 // ▁hello
	idWorld = 276 // ▁world
)

// llamaMerges in rank order.
const llamaMerges = `["l l", "▁ h", "▁h e", "ll o", "▁he llo", "▁ w", "o r", "▁w or", "l d", "▁wor ld"]`

const llamaAdded = `[
	{"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
	{"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
	{"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]`

// llama2 is a Llama 2 style tokenizer.json: no pre-tokenizer, a normalizer
// that prepends ▁ and turns spaces into ▁, BPE with byte_fallback, BOS
// added by a template, and the decoder chain that undoes it all.
func llama2(t *testing.T, single string) *Tokenizer {
	return build(t, map[string]string{
		"added_tokens": llamaAdded,
		"normalizer": `{"type": "Sequence", "normalizers": [
			{"type": "Prepend", "prepend": "▁"},
			{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}`,
		"pre_tokenizer": "null",
		"model": `{"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
			"end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": ` + llamaVocab() + `, "merges": ` + llamaMerges + `}`,
		"post_processor": `{"type": "TemplateProcessing", "single": ` + single + `,
			"pair": [], "special_tokens": {
				"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
				"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}`,
		"decoder": `{"type": "Sequence", "decoders": [
			{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
			{"type": "ByteFallback"}, {"type": "Fuse"},
			{"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`,
	})
}

const bosTemplate = `[{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]`

func TestSentencePieceBPE(t *testing.T) {
	tok := llama2(t, bosTemplate)
	// "hello world" normalizes to "▁hello▁world", one word for the model:
	// ▁ h e l l o ▁ w o r l d. Merges by rank: l l (at "hello"; "l d" is
	// rank 8), ▁ h, ▁h e, ll o, ▁he llo, ▁ w, o r, ▁w or, l d, ▁wor ld.
	if got, want := encode(t, tok, "hello world", false), []int{idHello, idWorld}; !cmp.Equal(got, want) {
		t.Errorf("Encode(hello world) = %v, want %v", got, want)
	}
	// The template puts <s> (1) first.
	if got, want := encode(t, tok, "hello world", true), []int{1, idHello, idWorld}; !cmp.Equal(got, want) {
		t.Errorf("Encode(hello world, special) = %v, want %v", got, want)
	}
	// é has no piece: byte_fallback gives its UTF-8 bytes C3 A9, as
	// <0xC3> (3+0xC3) and <0xA9>; ▁ h merge.
	heIDs := []int{idWS, 3 + 0xC3, 3 + 0xA9}
	if got := encode(t, tok, "hé", false); !cmp.Equal(got, heIDs) {
		t.Errorf("Encode(hé) = %v, want %v", got, heIDs)
	}
	// <s> in the text is the added token; the normalizer runs on the
	// stretch after it, so it too gets a ▁.
	if got, want := encode(t, tok, "<s>hello", false), []int{1, idHello}; !cmp.Equal(got, want) {
		t.Errorf("Encode(<s>hello) = %v, want %v", got, want)
	}
	// Decoding: ▁ back to spaces, the bytes back to é, the leading space
	// stripped; <s> kept or skipped.
	for _, c := range []struct {
		ids  []int
		skip bool
		want string
	}{
		{[]int{1, idHello, idWorld}, false, "<s> hello world"},
		{[]int{1, idHello, idWorld}, true, "hello world"},
		{heIDs, false, "hé"},
		{[]int{idWS, 3 + 0xC3}, false, "h\uFFFD"}, // a lone lead byte
	} {
		if got := decode(t, tok, c.ids, c.skip); got != c.want {
			t.Errorf("Decode(%v, %v) = %q, want %q", c.ids, c.skip, got, c.want)
		}
	}
	// A template with BOS and EOS.
	both := llama2(t, `[{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
		{"SpecialToken": {"id": "</s>", "type_id": 0}}]`)
	if got, want := encode(t, both, "hello", true), []int{1, idHello, 2}; !cmp.Equal(got, want) {
		t.Errorf("Encode(hello, special) with BOS and EOS = %v, want %v", got, want)
	}
	if got, want := encode(t, both, "hello", false), []int{idHello}; !cmp.Equal(got, want) {
		t.Errorf("Encode(hello, no special) = %v, want %v", got, want)
	}
}

// The newer SentencePiece style: a Metaspace pre-tokenizer with
// prepend_scheme "first" prepends ▁ only where the text starts, so the
// stretch after an added token gets none (unlike Llama 2's normalizer).
func TestMetaspaceFirst(t *testing.T) {
	tok := build(t, map[string]string{
		"added_tokens":  llamaAdded,
		"pre_tokenizer": `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`,
		"model":         `{"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "vocab": ` + llamaVocab() + `, "merges": ` + llamaMerges + `}`,
		"decoder":       `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`,
	})
	if got, want := encode(t, tok, "hello world", false), []int{idHello, idWorld}; !cmp.Equal(got, want) {
		t.Errorf("Encode(hello world) = %v, want %v", got, want)
	}
	// "hello" after <s>: h e l l o, merged by l l then ll o only.
	want := []int{1, idH, idE, idLLO}
	if got := encode(t, tok, "<s>hello", false); !cmp.Equal(got, want) {
		t.Errorf("Encode(<s>hello) = %v, want %v", got, want)
	}
	if got := decode(t, tok, want, false); got != "<s>hello" {
		t.Errorf("Decode(%v) = %q", want, got)
	}
	// metaspace.rs non_legacy_meta_space: pieces with <s> split out.
	tok = build(t, map[string]string{
		"added_tokens":  `[{"id": 0, "content": "<s>", "special": true}]`,
		"pre_tokenizer": `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`,
	})
	got := texts(splits(t, tok, " Hey <s>how <s>are <s> you"))
	if w := []string{"▁Hey▁", "<s>", "how▁", "<s>", "are▁", "<s>", "▁you"}; !cmp.Equal(got, w) {
		t.Errorf("got %q, want %q", got, w)
	}
}

// Added tokens with lstrip and rstrip in a full encode: the spaces they
// take are not encoded.
func TestAddedTokensEncode(t *testing.T) {
	tok := build(t, map[string]string{
		"model": `{"type": "BPE", "vocab": {"a": 0, "b": 1, " ": 2}, "merges": []}`,
		"added_tokens": `[{"id": 3, "content": "<L>", "lstrip": true},
			{"id": 4, "content": "<R>", "rstrip": true},
			{"id": 5, "content": "<W>", "single_word": true, "special": true}]`,
	})
	for _, c := range []struct {
		text string
		want []int
	}{
		{"a <L> b", []int{0, 3, 2, 1}},    // " <L>" is the token; " b" remains
		{"a <R> b", []int{0, 2, 4, 1}},    // "<R> " is the token
		{"a <W> b", []int{0, 2, 5, 2, 1}}, // a word on its own
		// Inside a word it is not the token: its characters are not in
		// the vocabulary and there is no unk, so they are dropped.
		{"a<W>b", []int{0, 1}},
	} {
		if got := encode(t, tok, c.text, false); !cmp.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	if got := decode(t, tok, []int{0, 5, 1}, true); got != "a b" {
		t.Errorf("Decode skipping special = %q, want %q (no decoder: tokens joined by spaces)", got, "a b")
	}
}

// Normalizers on their own.
func TestNormalizers(t *testing.T) {
	cases := []struct {
		normalizer, in, want string
	}{
		{`{"type": "NFC"}`, "cafe\u0301", "café"},
		{`{"type": "NFD"}`, "café", "cafe\u0301"},
		{`{"type": "NFKC"}`, "ﬁ①", "fi1"},
		{`{"type": "NFKD"}`, "ﬁé", "fie\u0301"},
		// Rust's char::to_lowercase: İ is i with a dot above; no final sigma.
		{`{"type": "Lowercase"}`, "HÉLLO İ ΟΔΟΣ", "héllo i\u0307 οδοσ"},
		{`{"type": "Strip", "strip_left": true, "strip_right": false}`, " \ta b ", "a b "},
		{`{"type": "Strip", "strip_left": true, "strip_right": true}`, "\u3000a b\n", "a b"},
		{`{"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]}`, "café", "cafe"},
		{`{"type": "Prepend", "prepend": "▁"}`, "hi", "▁hi"},
		{`{"type": "Prepend", "prepend": "▁"}`, "", ""},
		{`{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}`, "a b  c", "a▁b▁▁c"},
		{`{"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}`, "a \t\nb", "a b"},
		{`{"type": "ByteLevel"}`, "a b\n", "aĠbĊ"},
		// Invalid UTF-8 survives Lowercase byte for byte.
		{`{"type": "Lowercase"}`, "A\xffB", "a\xffb"},
	}
	for _, c := range cases {
		n, err := parseNormalizer("normalizer", []byte(c.normalizer))
		if err != nil {
			t.Fatal(err)
		}
		got, err := n.normalize(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s(%q) = %q, want %q", c.normalizer, c.in, got, c.want)
		}
	}
}

// RobertaProcessing wraps the sequence in cls and sep.
func TestRobertaProcessing(t *testing.T) {
	tok := build(t, map[string]string{
		"model":          `{"type": "BPE", "vocab": {"<s>": 0, "</s>": 2, "a": 5}, "merges": []}`,
		"post_processor": `{"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": true, "add_prefix_space": false}`,
	})
	if got, want := encode(t, tok, "aa", true), []int{0, 5, 5, 2}; !cmp.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
