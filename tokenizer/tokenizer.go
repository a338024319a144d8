// Package tokenizer encodes text to token ids and decodes ids to text as
// Hugging Face's tokenizers library does, from a model folder's
// tokenizer.json.
//
// It implements the tokenizer.json format rather than particular files:
//
//   - the BPE model, byte-level (GPT-2, Llama 3, Qwen, DeepSeek) or
//     SentencePiece-style with ▁, byte_fallback and fuse_unk, merges
//     written "a b" or ["a", "b"], continuing_subword_prefix,
//     end_of_word_suffix and ignore_merges (Unigram, WordPiece and
//     WordLevel are refused with a "not supported" error);
//   - normalizers NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend,
//     Strip, StripAccents, Nmt, ByteLevel and Sequence;
//   - pre-tokenizers Split (a string or an Oniguruma regex, every
//     behavior, invert), ByteLevel, Metaspace, Digits, Punctuation,
//     Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit
//     and Sequence;
//   - post-processors TemplateProcessing, RobertaProcessing,
//     BertProcessing, ByteLevel and Sequence (single sequences);
//   - decoders ByteLevel, ByteFallback, Metaspace, Fuse, Strip, Replace,
//     BPEDecoder and Sequence;
//   - added tokens with their special, single_word, lstrip, rstrip and
//     normalized flags, split out of the text before the model runs.
//
// Encode(text, false) gives the ids of the library's
// encode(text, add_special_tokens=False), Encode(text, true) those with the
// post-processor's special tokens; Decode is decode(ids,
// skip_special_tokens). Split patterns run on a small backtracking engine
// with Oniguruma's semantics (lookahead such as \s+(?!\S), Unicode
// classes), and the model caches the ids of the words it has seen.
//
// Text that is not valid UTF-8 is encoded byte by byte where the
// tokenizer can (the ByteLevel mapping, byte_fallback); it never panics.
// A Stream decodes ids one at a time for generation: it returns text as
// soon as it is complete UTF-8 and holds back a partial character.
//
// The folder's tokenizer_config.json and special_tokens_map.json, where
// present, give the BOS, EOS, PAD and UNK strings, add_bos_token and
// add_eos_token, and the chat template (see Config).
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/reel-runtime/reel/tokenizer/internal/regex"
)

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	model      *bpe
	normalizer normalizer
	pre        []preTokenizer
	lazyBytes  bool // the last pre-tokenizer is ByteLevel, applied by the model
	post       postProcessor
	decoder    decoder
	added      *addedVocab
	config     Config
	vocabSize  int
}

// Config is what a folder's tokenizer_config.json (or, for fields it
// lacks, special_tokens_map.json) says about special tokens and chat.
type Config struct {
	BOS, EOS, PAD, UNK string // token strings; "" when not set
	AddBOS, AddEOS     bool   // add_bos_token, add_eos_token
	// ChatTemplate is the Jinja chat template ("default" of a list).
	ChatTemplate string
}

// Immutable tables shared by all tokenizers.
var (
	bytesTable      = newByteLevel()
	gpt2Regex       = mustCompile(gpt2Pattern)
	whitespaceRegex = mustCompile(`\w+|[^\w\s]+`)
)

func mustCompile(p string) *regex.Regexp {
	re, err := regex.Compile(p)
	if err != nil {
		panic(err)
	}
	return re
}

// maxFileSize bounds a tokenizer.json (after gunzip).
const maxFileSize = 1 << 30

// Load reads a model folder: tokenizer.json (or tokenizer.json.gz), and
// tokenizer_config.json and special_tokens_map.json where present.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if _, errGz := os.Stat(path + ".gz"); errGz == nil {
			path += ".gz"
		}
	}
	t, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	if err := t.config.read(dir); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadFile reads a tokenizer.json file, gunzipping it when its name ends
// in .gz.
func LoadFile(path string) (*Tokenizer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// readFile reads a file, gunzipped if it is named *.gz, up to maxFileSize.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	data, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// Parse reads the contents of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var file struct {
		Version       string          `json:"version"`
		AddedTokens   json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		Model         json.RawMessage `json:"model"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if file.Version != "" && file.Version != "1.0" {
		return nil, fmt.Errorf("version: unknown tokenizer.json version %q", file.Version)
	}
	t := &Tokenizer{}
	var err error
	if t.model, err = parseModel(file.Model); err != nil {
		return nil, err
	}
	if t.normalizer, err = parseNormalizer("normalizer", file.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer("pre_tokenizer", file.PreTokenizer); err != nil {
		return nil, err
	}
	if n := len(t.pre); n > 0 {
		if bl, ok := t.pre[n-1].(*byteLevelPre); ok {
			bl.lazy, t.lazyBytes = true, true
		}
	}
	if t.post, err = parsePostProcessor("post_processor", file.PostProcessor); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder("decoder", file.Decoder); err != nil {
		return nil, err
	}
	if t.added, err = parseAdded(file.AddedTokens, t.model, t.normalizer); err != nil {
		return nil, err
	}
	t.vocabSize = max(len(t.model.tokens), t.added.maxID()+1)
	if t.post != nil {
		t.vocabSize = max(t.vocabSize, t.post.maxID()+1)
	}
	return t, nil
}

// parseModel reads the "model" object.
func parseModel(raw json.RawMessage) (*bpe, error) {
	if isNull(raw) {
		return nil, errors.New("model: missing")
	}
	o, err := parseObject("model", raw)
	if err != nil {
		return nil, err
	}
	typ, err := o.str("type", "")
	if err != nil {
		return nil, err
	}
	switch typ {
	case "BPE":
		return parseBPE(o)
	case "":
		// Old files leave the type out; BPE is the one with merges.
		if o.has("merges") {
			return parseBPE(o)
		}
		return nil, errors.New("model: no \"type\" and no \"merges\"")
	case "Unigram", "WordPiece", "WordLevel":
		return nil, fmt.Errorf("model.type: not supported: model type %q (only BPE is)", typ)
	}
	return nil, fmt.Errorf("model.type: unknown model type %q", typ)
}

// Config is what the folder's tokenizer_config.json and
// special_tokens_map.json say (zero for LoadFile and Parse).
func (t *Tokenizer) Config() Config { return t.config }

// VocabSize is one more than the largest id the tokenizer can produce or
// decode: the model's vocabulary, the added tokens and the post-processor's.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// CheckVocab returns an error when the tokenizer has ids a model with a
// vocabulary of modelVocab rows cannot take (a larger model vocabulary,
// padded for alignment, is fine).
func (t *Tokenizer) CheckVocab(modelVocab int) error {
	if t.vocabSize > modelVocab {
		return fmt.Errorf("tokenizer: the tokenizer has %d ids (0 to %d) but the model's vocabulary has only %d",
			t.vocabSize, t.vocabSize-1, modelVocab)
	}
	return nil
}

// TokenID is the id of a token string (an added token's content or a
// vocabulary entry, such as "<|im_end|>" or "Ġthe").
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.added.byText[token]; ok {
		return id, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// Token is the string of an id: an added token's content or the
// vocabulary entry (byte-level runes such as "Ġ" for a space included).
func (t *Tokenizer) Token(id int) (string, bool) {
	if a, ok := t.added.byID[id]; ok {
		return a.Content, true
	}
	if id >= 0 && id < len(t.model.tokens) && t.model.has[id] {
		return t.model.tokens[id], true
	}
	return "", false
}

// IsSpecial reports whether id is a special added token (skipped by
// Decode with skipSpecial).
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.added.byID[id]
	return ok && a.Special
}

// Encode returns the ids of text: added tokens split out, then each
// stretch between them normalized, pre-tokenized and encoded by the model.
// With addSpecial the post-processor adds its special tokens (BOS, for
// one); add_bos_token in tokenizer_config.json does not apply here (see
// Config). The error is a split pattern that ran past its step budget.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	ids := make([]int, 0, len(text)/3+4)
	// chain[i] runs the pre-tokenizers from i on, then the model.
	chain := make([]func(piece) error, len(t.pre)+1)
	chain[len(t.pre)] = func(p piece) error {
		ids = t.model.encode(ids, p.text, t.lazyBytes)
		return nil
	}
	for i := len(t.pre) - 1; i >= 0; i-- {
		step, next := t.pre[i], chain[i+1]
		chain[i] = func(p piece) error { return step.split(p, next) }
	}
	err := t.extract(text, func(p piece, id int) error {
		if id >= 0 {
			ids = append(ids, id)
			return nil
		}
		return chain[0](p)
	})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encode: %w", err)
	}
	if addSpecial && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids, nil
}

// extract splits the added tokens out of text, as the library's
// AddedVocabulary::extract_and_normalize: first those matched in the raw
// text, then, after each stretch between them is normalized, those matched
// in the normalized text. It calls emit with each added token's id and
// the text it covers, or with a non-empty normalized piece and id -1.
func (t *Tokenizer) extract(text string, emit func(p piece, id int) error) error {
	return t.added.split(t.added.raw, text, func(s string, start, id int) error {
		if id >= 0 {
			return emit(piece{text: s}, id)
		}
		if s == "" {
			return nil
		}
		if t.normalizer != nil {
			var err error
			if s, err = t.normalizer.normalize(s); err != nil {
				return err
			}
		}
		orig0 := start == 0
		return t.added.split(t.added.norm, s, func(s string, start, id int) error {
			if id >= 0 {
				return emit(piece{text: s}, id)
			}
			if s == "" {
				return nil
			}
			return emit(piece{text: s, orig0: orig0 && start == 0}, -1)
		})
	})
}

// Decode returns the text of ids, through the tokenizer's decoder; with
// skipSpecial, special added tokens are left out. An id the tokenizer does
// not have is an error.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	tokens := make([]string, 0, len(ids))
	for i, id := range ids {
		tok, ok := t.decodeToken(id)
		if !ok {
			return "", fmt.Errorf("tokenizer: decode: id %d at position %d is not in the vocabulary (%d ids)", id, i, t.vocabSize)
		}
		if skipSpecial && t.added.special[tok] {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " "), nil
	}
	out, err := t.decoder.decodeChain(tokens)
	if err != nil {
		return "", fmt.Errorf("tokenizer: decode: %w", err)
	}
	return strings.Join(out, ""), nil
}

// decodeToken is the string the decoder gets for id: a normalized added
// token's normalized content, another added token's content, or the
// vocabulary entry.
func (t *Tokenizer) decodeToken(id int) (string, bool) {
	if s, ok := t.added.decodeAs[id]; ok {
		return s, true
	}
	return t.Token(id)
}

// read fills the config from the files of dir that exist.
func (c *Config) read(dir string) error {
	var fields struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		PAD          json.RawMessage `json:"pad_token"`
		UNK          json.RawMessage `json:"unk_token"`
		AddBOS       *bool           `json:"add_bos_token"`
		AddEOS       *bool           `json:"add_eos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	// special_tokens_map.json first, so that tokenizer_config.json wins.
	for _, name := range []string{"special_tokens_map.json", "tokenizer_config.json"} {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
		fields.BOS, fields.EOS, fields.PAD, fields.UNK, fields.ChatTemplate = nil, nil, nil, nil, nil
		fields.AddBOS, fields.AddEOS = nil, nil
		if err := json.Unmarshal(data, &fields); err != nil {
			return fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		for _, f := range []struct {
			key string
			raw json.RawMessage
			dst *string
		}{{"bos_token", fields.BOS, &c.BOS}, {"eos_token", fields.EOS, &c.EOS}, {"pad_token", fields.PAD, &c.PAD}, {"unk_token", fields.UNK, &c.UNK}} {
			if f.raw == nil {
				continue
			}
			s, err := tokenString(f.raw)
			if err != nil {
				return fmt.Errorf("tokenizer: %s: %s: %w", path, f.key, err)
			}
			*f.dst = s
		}
		if fields.AddBOS != nil {
			c.AddBOS = *fields.AddBOS
		}
		if fields.AddEOS != nil {
			c.AddEOS = *fields.AddEOS
		}
		if fields.ChatTemplate != nil {
			s, err := chatTemplate(fields.ChatTemplate)
			if err != nil {
				return fmt.Errorf("tokenizer: %s: chat_template: %w", path, err)
			}
			c.ChatTemplate = s
		}
	}
	return nil
}

// tokenString reads a special token given as a string, as an
// {"content": ...} object, or null.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", errors.New("want a string or an object with \"content\"")
	}
	return *o.Content, nil
}

// chatTemplate reads a template string or a list of named templates (the
// one named "default").
func chatTemplate(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(bytes.TrimSpace(raw), &s) == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", errors.New("want a string or a list of {name, template}")
	}
	for _, t := range list {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	return "", nil
}
