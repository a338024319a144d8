package sample

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// run pushes pieces (token i has id 100+i unless it is "<eos>", id 2) and
// returns what was shown, whether it stopped, and after how many tokens.
func run(t *testing.T, o StopOptions, pieces ...string) (shown string, s *Stopper) {
	t.Helper()
	s, err := NewStopper(o)
	require.NoError(t, err)
	var b strings.Builder
	for i, p := range pieces {
		id := 100 + i
		if p == "<eos>" {
			id = 2
		}
		show, stop := s.Push(id, p)
		b.WriteString(show)
		if stop {
			return b.String(), s
		}
	}
	b.WriteString(s.Flush())
	return b.String(), s
}

func TestStopper(t *testing.T) {
	for _, c := range []struct {
		name   string
		o      StopOptions
		pieces []string
		shown  string
		reason Reason
		tokens int
		match  string
	}{
		{"eos", StopOptions{EOS: []int{7, 2}}, []string{"a", "b", "<eos>", "c"}, "ab", StopEOS, 3, ""},
		{"max tokens", StopOptions{MaxTokens: 2}, []string{"a", "b", "c"}, "ab", StopMaxTokens, 2, ""},
		{"none", StopOptions{}, []string{"a", "b"}, "ab", NotStopped, 2, ""},
		{"in one token", StopOptions{Strings: []string{"END"}}, []string{"xy", "zENDw", "q"}, "xyz", StopString, 2, "END"},
		{"across tokens", StopOptions{Strings: []string{"END"}}, []string{"ab", "E", "N", "Dcd"}, "ab", StopString, 4, "END"},
		{"false start", StopOptions{Strings: []string{"END"}}, []string{"ab", "EN", "x", "E"}, "abENxE", NotStopped, 4, ""},
		{"false start then match", StopOptions{Strings: []string{"END"}}, []string{"E", "EN", "END"}, "EEN", StopString, 3, "END"},
		{"the earliest of several", StopOptions{Strings: []string{"cd", "bc"}}, []string{"a", "bcd"}, "a", StopString, 2, "bc"},
		{"overlapping prefixes", StopOptions{Strings: []string{"aab"}}, []string{"a", "a", "a", "b"}, "a", StopString, 4, "aab"},
		{"held text shown at eos", StopOptions{EOS: []int{2}, Strings: []string{"END"}}, []string{"x", "EN", "<eos>"}, "xEN", StopEOS, 3, ""},
		{"held text shown at the limit", StopOptions{Strings: []string{"END"}, MaxTokens: 2}, []string{"x", "EN", "D"}, "xEN", StopMaxTokens, 2, ""},
		{"stop string before the limit", StopOptions{Strings: []string{"END"}, MaxTokens: 2}, []string{"x", "END"}, "x", StopString, 2, "END"},
		{"multi-byte", StopOptions{Strings: []string{"→|"}}, []string{"a", "\xe2\x86", "\x92", "|b"}, "a", StopString, 4, "→|"},
		{"stop string is all", StopOptions{Strings: []string{"x"}}, []string{"x"}, "", StopString, 1, "x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			shown, s := run(t, c.o, c.pieces...)
			require.Equal(t, c.shown, shown)
			require.Equal(t, c.reason, s.Reason())
			require.Equal(t, c.tokens, s.Tokens())
			require.Equal(t, c.match, s.Match())
			show, stop := s.Push(1, "more")
			if c.reason != NotStopped {
				require.True(t, stop, "stays stopped")
				require.Empty(t, show)
			}
		})
	}
}

// TestStopperHoldsBackOnlyPrefixes: pushed in random pieces, the text shown
// never reaches into the first stop string, what is held back is always the
// beginning of a stop string, and in the end what is shown is the text before
// the first stop string: checked against strings.Index on the whole text.
func TestStopperHoldsBackOnlyPrefixes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	stops := []string{"abab", "bba", "c"}
	for range 2000 {
		var text strings.Builder
		for range 1 + r.IntN(12) {
			text.WriteByte("aaabbbc"[r.IntN(7)])
		}
		full := text.String()
		first := len(full)
		for _, st := range stops {
			if i := strings.Index(full, st); i >= 0 {
				first = min(first, i)
			}
		}
		s, err := NewStopper(StopOptions{Strings: stops})
		require.NoError(t, err)
		var shown strings.Builder
		stopped, pushed := false, 0
		for pushed < len(full) && !stopped {
			n := 1 + r.IntN(min(3, len(full)-pushed))
			var show string
			show, stopped = s.Push(0, full[pushed:pushed+n])
			pushed += n
			shown.WriteString(show)
			require.LessOrEqual(t, shown.Len(), first, "text %q", full)
			if !stopped {
				held := full[shown.Len():pushed]
				isStart := held == ""
				for _, st := range stops {
					isStart = isStart || len(held) < len(st) && strings.HasPrefix(st, held)
				}
				require.True(t, isStart, "text %q: held %q", full, held)
			}
		}
		if !stopped {
			shown.WriteString(s.Flush())
		}
		require.Equal(t, full[:first], shown.String(), "text %q", full)
		require.Equal(t, first < len(full), stopped, "text %q", full)
	}
}

func TestStopOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    StopOptions
		name string
	}{
		{StopOptions{EOS: []int{1, -1}}, "EOS id -1"},
		{StopOptions{Strings: []string{"a", ""}}, "stop string #1 is empty"},
		{StopOptions{MaxTokens: -3}, "max tokens -3"},
	} {
		_, err := NewStopper(c.o)
		require.ErrorContains(t, err, c.name)
	}
	require.Equal(t, "stop string", StopString.String())
	require.Equal(t, "Reason(9)", fmt.Sprint(Reason(9)))
}
