package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/reel-runtime/reel/tokenizer/internal/regex"
)

// addedToken is an entry of tokenizer.json's "added_tokens".
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedVocab holds the added tokens and finds them in text before the
// model runs: those with normalized false in the raw text, the others in
// the normalized text.
type addedVocab struct {
	byID    map[int]*addedToken
	byText  map[string]int
	special map[string]bool // contents of special tokens
	// decodeAs is the text a normalized added token decodes as: its
	// content normalized, where that differs.
	decodeAs map[int]string
	raw      *trie // tokens with normalized false
	norm     *trie // tokens with normalized true, by their normalized content
}

// parseAdded reads "added_tokens" and assigns ids as the library does: a
// token already in the model's vocabulary keeps the model's id; the others
// take ids after the vocabulary in order. A JSON id that differs is an
// error (the file would not mean what it says).
func parseAdded(raw json.RawMessage, m *bpe, n normalizer) (*addedVocab, error) {
	av := &addedVocab{
		byID:     map[int]*addedToken{},
		byText:   map[string]int{},
		special:  map[string]bool{},
		decodeAs: map[int]string{},
	}
	var tokens []addedToken
	if !isNull(raw) {
		if err := json.Unmarshal(raw, &tokens); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
	}
	next := len(m.vocab)
	for i := range tokens {
		t := &tokens[i]
		if t.Content == "" {
			continue
		}
		if prev, ok := av.byText[t.Content]; ok && *av.byID[prev] == *t {
			continue
		}
		id, ok := av.byText[t.Content]
		if !ok {
			id, ok = m.vocab[t.Content]
		}
		if !ok {
			id = next
			next++
		}
		if id != t.ID {
			return nil, fmt.Errorf("added_tokens[%d]: %q has id %d, but the tokenizer gives it %d", i, t.Content, t.ID, id)
		}
		av.byText[t.Content] = id
		av.byID[id] = t
		if t.Special {
			av.special[t.Content] = true
		}
		if t.Normalized && n != nil {
			s, err := n.normalize(t.Content)
			if err != nil {
				return nil, fmt.Errorf("added_tokens[%d]: normalizing %q: %w", i, t.Content, err)
			}
			if s != t.Content {
				av.decodeAs[id] = s
			}
		}
	}
	av.raw, av.norm = newTrie(), newTrie()
	for id, t := range av.byID {
		if t.Normalized {
			s := t.Content
			if d, ok := av.decodeAs[id]; ok {
				s = d
			}
			av.norm.add(s, id)
		} else {
			av.raw.add(t.Content, id)
		}
	}
	return av, nil
}

// maxID is the largest added id, -1 without added tokens.
func (av *addedVocab) maxID() int {
	m := -1
	for id := range av.byID {
		m = max(m, id)
	}
	return m
}

// split cuts s at the added tokens of t, calling emit with each stretch of
// text (id -1) and each token found (its id), in order; start is the
// stretch's byte offset in s. It follows the library's find_matches:
// leftmost-longest matches, single_word ones dropped inside words, lstrip
// and rstrip taking the spaces around.
func (av *addedVocab) split(t *trie, s string, emit func(text string, start, id int) error) error {
	if t.empty() {
		return emit(s, 0, -1)
	}
	done := 0 // s[:done] is emitted
	for pos := 0; pos < len(s); {
		start, end, id := t.find(s, pos)
		if id < 0 {
			break
		}
		pos = end
		tok := av.byID[id]
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := end == len(s) || !startsWithWord(s[end:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(spaceStartAtEnd(s[:start]), done)
		}
		if tok.RStrip {
			// The search goes on from the token's own end, as the
			// library's iterator does.
			end += spaceLenAtStart(s[end:])
		}
		if done < start {
			if err := emit(s[done:start], done, -1); err != nil {
				return err
			}
		}
		if err := emit(s[start:end], start, id); err != nil {
			return err
		}
		done = end
	}
	if done < len(s) {
		return emit(s[done:], done, -1)
	}
	return nil
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && regex.IsWord(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && regex.IsWord(r)
}

// spaceStartAtEnd is where the run of White_Space that ends s starts.
func spaceStartAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= w
	}
	return i
}

// spaceLenAtStart is the length of the run of White_Space that starts s.
func spaceLenAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += w
	}
	return i
}

// trie is a byte trie of token contents for leftmost-longest search.
type trie struct {
	nodes []trieNode
	first [256]bool // bytes a token starts with
}

type trieNode struct {
	next map[byte]int32
	id   int // -1: no token ends here
}

func newTrie() *trie { return &trie{nodes: []trieNode{{id: -1}}} }

func (t *trie) empty() bool { return len(t.nodes) == 1 }

func (t *trie) add(s string, id int) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	n := 0
	for i := 0; i < len(s); i++ {
		nx, ok := t.nodes[n].next[s[i]]
		if !ok {
			if t.nodes[n].next == nil {
				t.nodes[n].next = map[byte]int32{}
			}
			nx = int32(len(t.nodes))
			t.nodes[n].next[s[i]] = nx
			t.nodes = append(t.nodes, trieNode{id: -1})
		}
		n = int(nx)
	}
	t.nodes[n].id = id
}

// find returns the leftmost-longest token in s at or after from; id is -1
// when there is none.
func (t *trie) find(s string, from int) (start, end, id int) {
	for i := from; i < len(s); i++ {
		if !t.first[s[i]] {
			continue
		}
		n, best, bestEnd := 0, -1, 0
		for j := i; j < len(s); j++ {
			nx, ok := t.nodes[n].next[s[j]]
			if !ok {
				break
			}
			n = int(nx)
			if t.nodes[n].id >= 0 {
				best, bestEnd = t.nodes[n].id, j+1
			}
		}
		if best >= 0 {
			return i, bestEnd, best
		}
	}
	return 0, 0, -1
}
