package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns token strings back into text, as the library's
// Decoder::decode_chain: tokens in, tokens out; the caller joins them.
type decoder interface {
	decodeChain(tokens []string) ([]string, error)
}

// parseDecoder reads a "decoder" object (nil for JSON null).
func parseDecoder(path string, raw json.RawMessage) (decoder, error) {
	o, typ, err := parseComponent(path, raw)
	if o == nil || err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := sequence(o, "decoders", parseDecoder)
		return decSequence(seq), err
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		content, err := o.char("content", ' ')
		if err != nil {
			return nil, err
		}
		start, err := o.integer("start", 0)
		if err != nil {
			return nil, err
		}
		stop, err := o.integer("stop", 0)
		if err != nil {
			return nil, err
		}
		return stripDec{content, start, stop}, nil
	case "Replace":
		r, err := parseReplace(o)
		return replaceDec{r}, err
	case "Metaspace":
		r, scheme, _, err := parseMetaspace(o)
		if err != nil {
			return nil, err
		}
		return metaspaceDec{r, scheme}, nil
	case "BPEDecoder":
		suffix, err := o.str("suffix", "</w>")
		if err != nil {
			return nil, err
		}
		return bpeDec{suffix}, nil
	case "WordPiece", "CTC":
		return nil, fmt.Errorf("%s: not supported: decoder type %q", o.at("type"), typ)
	}
	return nil, fmt.Errorf("%s: unknown decoder type %q", o.at("type"), typ)
}

// decSequence chains decoders.
type decSequence []decoder

func (seq decSequence) decodeChain(tokens []string) ([]string, error) {
	var err error
	for _, d := range seq {
		if tokens, err = d.decodeChain(tokens); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// byteLevelDec maps the byte-level runes of all tokens back to bytes and
// reads them as UTF-8, each ill-formed part becoming U+FFFD.
type byteLevelDec struct{}

func (byteLevelDec) decodeChain(tokens []string) ([]string, error) {
	var b []byte
	for _, t := range tokens {
		b = bytesTable.decodeToken(b, t)
	}
	return []string{lossyString(b)}, nil
}

// byteFallbackDec turns runs of <0xXX> tokens into their bytes' text; a run
// that is not valid UTF-8 becomes one U+FFFD per byte.
type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out, nil
}

// byteToken reads a token "<0xXX>".
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	return byte(v), err == nil
}

// fuseDec joins all tokens into one.
type fuseDec struct{}

func (fuseDec) decodeChain(tokens []string) ([]string, error) {
	return []string{strings.Join(tokens, "")}, nil
}

// stripDec removes up to start leading and stop trailing content runes
// from each token.
type stripDec struct {
	content     rune
	start, stop int
}

func (s stripDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rs := []rune(t)
		lo := 0
		for lo < s.start && lo < len(rs) && rs[lo] == s.content {
			lo++
		}
		hi := len(rs)
		for k := 0; k < s.stop && hi > lo && rs[hi-1] == s.content; k++ {
			hi--
		}
		out[i] = string(rs[lo:hi])
	}
	return out, nil
}

// replaceDec replaces each match of a pattern in each token.
type replaceDec struct{ replace }

func (r replaceDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		s, err := r.normalize(t)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// metaspaceDec turns the replacement rune back into spaces; in the first
// token, unless the scheme is never, it is dropped instead.
type metaspaceDec struct {
	replacement rune
	scheme      prependScheme
}

func (m metaspaceDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		with := " "
		if i == 0 && m.scheme != prependNever {
			with = ""
		}
		out[i] = strings.ReplaceAll(t, string(m.replacement), with)
	}
	return out, nil
}

// bpeDec replaces the end-of-word suffix with a space (nothing in the last
// token).
type bpeDec struct{ suffix string }

func (b bpeDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		with := " "
		if i == len(tokens)-1 {
			with = ""
		}
		out[i] = strings.ReplaceAll(t, b.suffix, with)
	}
	return out, nil
}
