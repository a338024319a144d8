package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
)

// postProcessor adds a single sequence's special tokens (when asked to).
type postProcessor interface {
	process(ids []int) []int
	// maxID is the largest id it can add, -1 for none.
	maxID() int
}

// parsePostProcessor reads a "post_processor" object (nil for JSON null).
func parsePostProcessor(path string, raw json.RawMessage) (postProcessor, error) {
	o, typ, err := parseComponent(path, raw)
	if o == nil || err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := sequence(o, "processors", parsePostProcessor)
		return postSequence(seq), err
	case "ByteLevel":
		return nil, nil // it only trims offsets
	case "TemplateProcessing":
		return parseTemplate(o)
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenPair(o, "cls")
		if err != nil {
			return nil, err
		}
		sep, err := tokenPair(o, "sep")
		if err != nil {
			return nil, err
		}
		return template{{ids: []int{cls}}, {seq: true}, {ids: []int{sep}}}, nil
	}
	return nil, fmt.Errorf("%s: unknown post-processor type %q", o.at("type"), typ)
}

// tokenPair reads a [token, id] field and returns the id.
func tokenPair(o *object, key string) (int, error) {
	var pair []json.RawMessage
	if err := o.decode(key, &pair); err != nil {
		return 0, err
	}
	var id int
	if len(pair) != 2 || json.Unmarshal(pair[1], &id) != nil || id < 0 {
		return 0, fmt.Errorf("%s: want [token, id]", o.at(key))
	}
	return id, nil
}

// postSequence applies post-processors in order.
type postSequence []postProcessor

func (seq postSequence) process(ids []int) []int {
	for _, p := range seq {
		ids = p.process(ids)
	}
	return ids
}

func (seq postSequence) maxID() int {
	m := -1
	for _, p := range seq {
		m = max(m, p.maxID())
	}
	return m
}

// templatePiece is the sequence ($A) or a special token's ids.
type templatePiece struct {
	seq bool
	ids []int
}

// template is TemplateProcessing's "single" template.
type template []templatePiece

func (t template) process(ids []int) []int {
	n := len(ids)
	for _, p := range t {
		n += len(p.ids)
	}
	out := make([]int, 0, n)
	for _, p := range t {
		if p.seq {
			out = append(out, ids...)
		} else {
			out = append(out, p.ids...)
		}
	}
	return out
}

func (t template) maxID() int {
	m := -1
	for _, p := range t {
		for _, id := range p.ids {
			m = max(m, id)
		}
	}
	return m
}

// parseTemplate reads TemplateProcessing's single template and its
// special tokens.
func parseTemplate(o *object) (template, error) {
	var special map[string]struct {
		IDs []int `json:"ids"`
	}
	if err := o.decode("special_tokens", &special); err != nil {
		return nil, err
	}
	var pieces []json.RawMessage
	if err := o.decode("single", &pieces); err != nil {
		return nil, err
	}
	var t template
	for i, raw := range pieces {
		at := fmt.Sprintf("%s[%d]", o.at("single"), i)
		var p struct {
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		switch {
		case p.Sequence != nil:
			if p.Sequence.ID != "A" {
				return nil, fmt.Errorf("%s: sequence %q in a single template", at, p.Sequence.ID)
			}
			t = append(t, templatePiece{seq: true})
		case p.SpecialToken != nil:
			st, ok := special[p.SpecialToken.ID]
			if !ok {
				keys := make([]string, 0, len(special))
				for k := range special {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				return nil, fmt.Errorf("%s: special token %q is not in special_tokens %q", at, p.SpecialToken.ID, keys)
			}
			for _, id := range st.IDs {
				if id < 0 {
					return nil, fmt.Errorf("%s: special token %q has negative id %d", at, p.SpecialToken.ID, id)
				}
			}
			t = append(t, templatePiece{ids: st.IDs})
		default:
			return nil, fmt.Errorf("%s: want {\"Sequence\": ...} or {\"SpecialToken\": ...}", at)
		}
	}
	return t, nil
}
