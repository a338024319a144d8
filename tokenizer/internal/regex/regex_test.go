package regex

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pieces splits s at the matches of pattern.
func pieces(t *testing.T, pattern, s string) []string {
	t.Helper()
	re, err := Compile(pattern)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := re.FindAll(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, s[m[0]:m[1]])
	}
	return out
}

// The patterns of real tokenizers, with splits worked out by hand from
// Oniguruma's rules: leftmost match, alternatives in order, greedy
// quantifiers giving back one character at a time.
func TestTokenizerPatterns(t *testing.T) {
	const gpt2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	const llama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	cases := []struct {
		pattern, text string
		want          []string
	}{
		// \s+(?!\S) leaves the last space of a run for the next word.
		{gpt2, "Hello  world", []string{"Hello", " ", " world"}},
		{gpt2, "a   b", []string{"a", "  ", " b"}},
		// At the end of the text the whole run goes.
		{gpt2, "a   ", []string{"a", "   "}},
		{gpt2, "it's 42!", []string{"it", "'s", " 42", "!"}},
		{gpt2, "I'M", []string{"I", "'", "M"}}, // case-sensitive
		{llama3, "I'M", []string{"I", "'M"}},   // (?i:...)
		{llama3, "12345", []string{"123", "45"}},
		{llama3, "x\n\n  y", []string{"x", "\n\n", " ", " y"}},
		{llama3, "a);\n\nb", []string{"a", ");\n\n", "b"}},
		{llama3, "\tfoo", []string{"\tfoo"}},
		{llama3, "héllo wörld", []string{"héllo", " wörld"}},
		// \s is Unicode White_Space: U+3000 and U+00A0 are spaces.
		{`\s+`, "a\u3000\u00a0b", []string{"\u3000\u00a0"}},
		{`\S+`, "a\u3000b", []string{"a", "b"}},
		// \d is Unicode Nd.
		{`\d+`, "x١٢٣y", []string{"١٢٣"}},
		// \w takes letters, marks, digits and '_'.
		{`\w+`, "e\u0301_9-x", []string{"e\u0301_9", "x"}},
		// Lookbehind, atomic groups and possessive quantifiers.
		{`(?<=a)b`, "ab cb", []string{"b"}},
		{`(?<!a)b`, "ab cb", []string{"b"}},
		{`(?>a+)b`, "aaab", []string{"aaab"}},
		{`a++a`, "aaaa", nil},
		{`a*+b`, "aab", []string{"aab"}},
		// Lazy quantifiers.
		{`a+?`, "aaa", []string{"a", "a", "a"}},
		{`<.*?>`, "<a><b>", []string{"<a>", "<b>"}},
		// Generic repetition of a group.
		{`(?:ab)+`, "ababa", []string{"abab"}},
		{`(?:ab){2}`, "ababab", []string{"abab"}},
		{`(?:a|ab)(?:c|bcd)`, "abcd", []string{"abcd"}}, // a, then bcd
		// Classes: nested, negated, escapes, ranges of CJK.
		{`[一-龥]+`, "ab中文cd", []string{"中文"}},
		{`[^\s\p{L}]+`, "ab!?  cd", []string{"!?"}},
		{`[a[0-9]]+`, "xa1b", []string{"a1"}},
		{`[\S]+`, "a b", []string{"a", "b"}},
		{`\x{4e2d}\u6587`, "中文", []string{"中文"}},
		// '{' that is not an interval is a literal.
		{`a{`, "a{", []string{"a{"}},
		{`x{,2}`, "xxx", []string{"xx", "x"}},
		// Anchors on lines.
		{`^a`, "a\na", []string{"a", "a"}},
		{`a$`, "a\na", []string{"a", "a"}},
		{`\Aa`, "a\na", []string{"a"}},
		{`\bx\b`, "x xx x", []string{"x", "x"}},
	}
	for _, c := range cases {
		if got := pieces(t, c.pattern, c.text); !cmp.Equal(got, c.want) {
			t.Errorf("%s on %q: got %q, want %q", c.pattern, c.text, got, c.want)
		}
	}
}

// Empty matches follow rust-onig's find_iter: an empty match right after
// the previous match is skipped.
func TestEmptyMatches(t *testing.T) {
	re, err := Compile(`a*`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := re.FindAll("baab", nil)
	if err != nil {
		t.Fatal(err)
	}
	// At 0 an empty match; "aa" at 1; the empty match at 3 right after it
	// is skipped; an empty match at 4, the end.
	want := [][2]int{{0, 0}, {1, 3}, {4, 4}}
	if !cmp.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Without lookaround, a backtracking engine's leftmost match is Go's
// leftmost-first match: check the two agree on random text.
func TestAgreesWithGoRegexp(t *testing.T) {
	patterns := []string{
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^ \t\n\p{L}\p{N}]+|[ \t\n]+`,
		`(?i:'s|'t|'re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^ \t\r\n\p{L}\p{N}]+[\r\n]*|[ \t]*[\r\n]+|[ \t\r\n]+`,
		`[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|[ \t]*[\r\n]+|[ \t\r\n]+`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t)?|\p{N}{1,3}|.`,
		`(?:ab|a)(?:bc|c)+|x+?y|[一-龥]+|\p{Han}+|\p{Hiragana}+`,
		`a{2,3}|b{1,}|c{3}`,
	}
	alphabet := []string{"a", "b", "c", "x", "y", "A", "Z", "'", "s", "t", "r", "e", " ", " ", "\t", "\n", "\r",
		"1", "2", "3", "!", "?", ".", "-", "_", "é", "ß", "中", "文", "の", "😀", "\u0301", "١", "\u00a0", "Σ"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range patterns {
		ours, err := Compile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		goRe := regexp.MustCompile(p)
		for n := 0; n < 300; n++ {
			var b strings.Builder
			for k := rng.IntN(40); k > 0; k-- {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			got, err := ours.FindAll(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			var want [][2]int
			for _, m := range goRe.FindAllStringIndex(s, -1) {
				want = append(want, [2]int{m[0], m[1]})
			}
			if !cmp.Equal(got, want) {
				t.Fatalf("%s on %q:\n got  %v\n want %v", p, s, got, want)
			}
		}
	}
}

// Invalid UTF-8 is read byte by byte as U+FFFD.
func TestInvalidUTF8(t *testing.T) {
	got := pieces(t, `\p{L}+|[^\p{L}]+`, "ab\xff\xfecd\xe4\xb8")
	want := []string{"ab", "\xff\xfe", "cd", "\xe4\xb8"}
	if !cmp.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, p := range []string{strings.Repeat("(", 2000) + "a" + strings.Repeat(")", 2000), strings.Repeat("[", 2000) + "a", `(a`, `a)`, `[a`, `*a`, `\p{Nope}`, `(?<=a+)b`, `\1`, `[[:alpha:]]`, `[a&&b]`, `\q`, `(?x)a`} {
		if _, err := Compile(p); err == nil {
			t.Errorf("Compile(%q) succeeded", p)
		}
	}
}

// Catastrophic backtracking ends with ErrBudget instead of running on.
func TestBudget(t *testing.T) {
	re, err := Compile(`(?:a|a)+b`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = re.FindAll(strings.Repeat("a", 40), nil)
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("got %v, want ErrBudget", err)
	}
}

func TestLiteral(t *testing.T) {
	re := Literal("a.b")
	got, err := re.FindAll("a.bxa.b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]int{{0, 3}, {4, 7}}; !cmp.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
