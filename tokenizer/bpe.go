package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the tokenizers library's BPE model: a vocabulary, merges ranked
// by their order, and the options for unknown characters.
type bpe struct {
	vocab  map[string]int
	tokens []string // by id; "" where no token has the id
	has    []bool   // by id
	// merges maps a pair of ids to the merge's rank and the merged id.
	merges map[uint64]merge

	unk          string // "" for none
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	byteIDs      [256]int // the ids of <0x00>..<0xFF>, -1 where absent

	cache    wordCache // words as the model sees them
	rawCache wordCache // words before the byte-level mapping (lazy ByteLevel)
}

// merge is one merge rule's rank and result.
type merge struct{ rank, id int32 }

func pairKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// parseBPE reads a "model" object of type BPE.
func parseBPE(o *object) (*bpe, error) {
	m := &bpe{}
	var err error
	if m.unk, err = o.str("unk_token", ""); err != nil {
		return nil, err
	}
	if m.prefix, err = o.str("continuing_subword_prefix", ""); err != nil {
		return nil, err
	}
	if m.suffix, err = o.str("end_of_word_suffix", ""); err != nil {
		return nil, err
	}
	if m.fuseUnk, err = o.boolean("fuse_unk", false); err != nil {
		return nil, err
	}
	if m.byteFallback, err = o.boolean("byte_fallback", false); err != nil {
		return nil, err
	}
	if m.ignoreMerges, err = o.boolean("ignore_merges", false); err != nil {
		return nil, err
	}
	var dropout *float64
	if err := o.decode("dropout", &dropout); err != nil {
		return nil, err
	}
	if dropout != nil && *dropout != 0 {
		return nil, fmt.Errorf("%s: not supported: BPE dropout %g (encoding would be random)", o.at("dropout"), *dropout)
	}
	if !o.has("vocab") {
		return nil, fmt.Errorf("%s: missing", o.at("vocab"))
	}
	if err := o.decode("vocab", &m.vocab); err != nil {
		return nil, err
	}
	maxID := -1
	for tok, id := range m.vocab {
		if id < 0 {
			return nil, fmt.Errorf("%s: token %q has negative id %d", o.at("vocab"), tok, id)
		}
		maxID = max(maxID, id)
	}
	// Ids index a slice: a vocabulary whose ids leave most of it empty
	// would make it huge.
	if maxID >= 2*len(m.vocab)+1<<16 {
		return nil, fmt.Errorf("%s: ids up to %d for %d tokens: too sparse", o.at("vocab"), maxID, len(m.vocab))
	}
	m.tokens = make([]string, maxID+1)
	m.has = make([]bool, maxID+1)
	for tok, id := range m.vocab {
		m.tokens[id] = tok
		m.has[id] = true
	}
	if m.unk != "" {
		if _, ok := m.vocab[m.unk]; !ok {
			return nil, fmt.Errorf("%s: unk_token %q is not in the vocabulary", o.at("unk_token"), m.unk)
		}
	}
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	if err := m.parseMerges(o); err != nil {
		return nil, err
	}
	return m, nil
}

// parseMerges reads the merges, as "a b" strings or ["a", "b"] pairs.
// A later duplicate of a pair overrides an earlier one, as in the library.
func (m *bpe) parseMerges(o *object) error {
	path := o.at("merges")
	var pairs [][2]string
	var strs []string
	raw := o.fields["merges"]
	if isNull(raw) {
		return fmt.Errorf("%s: missing", path)
	}
	// The first element says which spelling the list uses.
	first := bytes.TrimSpace(raw)
	if len(first) > 0 && first[0] == '[' {
		first = bytes.TrimSpace(first[1:])
	}
	if len(first) > 0 && first[0] == '"' {
		if err := json.Unmarshal(raw, &strs); err != nil {
			return fmt.Errorf("%s: want a list of \"a b\" strings: %w", path, err)
		}
		for i, line := range strs {
			if strings.HasPrefix(line, "#version") {
				continue
			}
			a, b, ok := strings.Cut(line, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("%s[%d]: %q is not two tokens separated by a space", path, i, line)
			}
			pairs = append(pairs, [2]string{a, b})
		}
	} else {
		var lists [][]string
		if err := json.Unmarshal(raw, &lists); err != nil {
			return fmt.Errorf("%s: want a list of \"a b\" strings or [\"a\", \"b\"] pairs: %w", path, err)
		}
		for i, l := range lists {
			if len(l) != 2 {
				return fmt.Errorf("%s[%d]: want a pair, got %d strings", path, i, len(l))
			}
			pairs = append(pairs, [2]string{l[0], l[1]})
		}
	}
	m.merges = make(map[uint64]merge, len(pairs))
	for rank, p := range pairs {
		a, okA := m.vocab[p[0]]
		b, okB := m.vocab[p[1]]
		if !okA || !okB {
			return fmt.Errorf("%s[%d]: token of merge %q %q is not in the vocabulary", path, rank, p[0], p[1])
		}
		right := p[1]
		if m.prefix != "" {
			right = strings.TrimPrefix(right, m.prefix)
		}
		id, ok := m.vocab[p[0]+right]
		if !ok {
			return fmt.Errorf("%s[%d]: merged token %q is not in the vocabulary", path, rank, p[0]+right)
		}
		m.merges[pairKey(a, b)] = merge{int32(rank), int32(id)}
	}
	return nil
}

// wordCache maps words to their ids. It is bounded: once full it stops
// taking new words, as the library's cache does.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int
}

const (
	cacheCapacity = 1 << 16 // words
	cacheMaxWord  = 256     // bytes; longer words are not cached
)

func (c *wordCache) get(w string) ([]int, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int) {
	if len(w) >= cacheMaxWord {
		return
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string][]int)
	}
	if len(c.m) < cacheCapacity {
		c.m[strings.Clone(w)] = ids
	}
	c.mu.Unlock()
}

// encode appends the ids of word w (the text of one piece) to dst. With
// raw, w has yet to be mapped to byte-level runes; the cache is then keyed
// by the unmapped text, which saves the mapping on every hit.
func (m *bpe) encode(dst []int, w string, raw bool) []int {
	if w == "" {
		return dst
	}
	cache := &m.cache
	if raw {
		cache = &m.rawCache
	} else if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	if ids, ok := cache.get(w); ok {
		return append(dst, ids...)
	}
	word := w
	if raw {
		word = bytesTable.encode(w)
	}
	var ids []int
	if id, ok := m.vocab[word]; ok && m.ignoreMerges {
		ids = []int{id}
	} else {
		ids = m.mergeWord(word)
	}
	cache.put(w, ids)
	return append(dst, ids...)
}

// symbol is one part of a word being merged, in a linked list.
type symbol struct {
	id         int
	prev, next int // -1 at the ends
	gone       bool
}

// mergeWord splits w into runes (or byte tokens, or unk) and applies the
// merges lowest rank first, leftmost first among equal ranks: the
// library's Word::merge_all, with the same queue discipline.
func (m *bpe) mergeWord(w string) []int {
	syms := make([]symbol, 0, len(w))
	add := func(id int) {
		syms = append(syms, symbol{id: id, prev: len(syms) - 1, next: len(syms) + 1})
	}
	unkID, unkPending := -1, false
	var buf []byte
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+size]
		if m.prefix != "" && i > 0 || m.suffix != "" && i+size == len(w) {
			buf = buf[:0]
			if i > 0 {
				buf = append(buf, m.prefix...)
			}
			buf = append(buf, s...)
			if i+size == len(w) {
				buf = append(buf, m.suffix...)
			}
			s = string(buf)
		}
		i += size
		if id, ok := m.vocab[s]; ok {
			if unkPending {
				add(unkID)
				unkPending = false
			}
			add(id)
			continue
		}
		if m.byteFallback && m.allBytes(s) {
			// As the library, a pending unk waits until the next
			// known rune, after these bytes.
			for k := 0; k < len(s); k++ {
				add(m.byteIDs[s[k]])
			}
			continue
		}
		if m.unk == "" {
			continue // dropped, as the library does without unk_token
		}
		if unkPending && !m.fuseUnk {
			add(unkID)
		}
		unkID, unkPending = m.vocab[m.unk], true
	}
	if unkPending {
		add(unkID)
	}
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1

	var h mergeHeap
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(queued{mg.rank, int32(i), mg.id})
		}
	}
	for h.len() > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if mg, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mg.id != top.id {
			continue // stale: the pair changed since it was queued
		}
		cur.id = int(top.id)
		syms[cur.next].gone = true
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = int(top.pos)
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(queued{mg.rank, int32(cur.prev), mg.id})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h.push(queued{mg.rank, top.pos, mg.id})
			}
		}
	}
	ids := make([]int, 0, len(syms))
	for i := 0; i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}

// allBytes reports whether every byte of s has a <0xXX> token.
func (m *bpe) allBytes(s string) bool {
	for k := 0; k < len(s); k++ {
		if m.byteIDs[s[k]] < 0 {
			return false
		}
	}
	return true
}

// queued is a merge waiting in the queue at a symbol's position.
type queued struct {
	rank, pos, id int32
}

// mergeHeap is a binary min-heap of queued merges by (rank, pos).
type mergeHeap struct{ q []queued }

func (h *mergeHeap) len() int { return len(h.q) }

func less(a, b queued) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }

func (h *mergeHeap) push(x queued) {
	h.q = append(h.q, x)
	i := len(h.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h.q[i], h.q[p]) {
			break
		}
		h.q[i], h.q[p] = h.q[p], h.q[i]
		i = p
	}
}

func (h *mergeHeap) pop() queued {
	top := h.q[0]
	n := len(h.q) - 1
	h.q[0] = h.q[n]
	h.q = h.q[:n]
	i := 0
	for {
		l, r, small := 2*i+1, 2*i+2, i
		if l < n && less(h.q[l], h.q[small]) {
			small = l
		}
		if r < n && less(h.q[r], h.q[small]) {
			small = r
		}
		if small == i {
			break
		}
		h.q[i], h.q[small] = h.q[small], h.q[i]
		i = small
	}
	return top
}

// reset empties the cache (for benchmarks).
func (c *wordCache) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}
