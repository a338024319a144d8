package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestProgress(w *bytes.Buffer, unit progressUnit, total int64, c *fakeClock) *progress {
	p := newProgress(w, "work", total, unit)
	p.now = c.now
	p.start = c.now()
	return p
}

// TestProgressLines: nothing in the first half second; then whole lines on
// a writer that is not a terminal, at most one every progressLogEvery, and
// a last one at Done.
func TestProgressLines(t *testing.T) {
	var w bytes.Buffer
	c := &fakeClock{t: time.Unix(1000, 0)}
	p := newTestProgress(&w, progressTokens, 400, c)
	c.advance(100 * time.Millisecond)
	p.Set(10)
	require.Empty(t, w.String(), "short work draws nothing")
	c.advance(time.Second)
	p.Set(100)
	require.Equal(t, "work: 100 of 400 tokens (25 %, 91 tok/s), 1.1 s\n", w.String())
	c.advance(time.Second)
	p.Add(100)
	require.Equal(t, 1, strings.Count(w.String(), "\n"), "throttled")
	c.advance(time.Second)
	p.Add(200)
	p.Done()
	require.Equal(t, "work: 100 of 400 tokens (25 %, 91 tok/s), 1.1 s\nwork: 400 of 400 tokens (100 %, 129 tok/s), 3.1 s\n", w.String(), "no second line for the same count")

	w.Reset()
	p = newTestProgress(&w, progressBytes, 8e9, c)
	c.advance(time.Second)
	p.Set(2e9)
	c.advance(time.Second)
	p.Set(3e9)
	p.Done()
	require.Equal(t, "work: 2.00 of 8.00 GB (25 %), 1.0 s\nwork: 3.00 of 8.00 GB (38 %), 2.0 s\n", w.String(), "Done writes the last count")

	w.Reset()
	p = newTestProgress(&w, progressBytes, 8e9, c)
	p.Set(8e9)
	p.Done()
	require.Empty(t, w.String(), "work done within the delay draws nothing, even at Done")

	var none *progress
	none.Set(1)
	none.Add(1)
	none.Done() // a nil progress does nothing
}

// TestProgressFlag: unset, progress goes only to a terminal; --progress
// forces it, --progress=false stops it.
func TestProgressFlag(t *testing.T) {
	var w bytes.Buffer
	for _, tc := range []struct {
		args []string
		on   bool
	}{
		{nil, false},
		{[]string{"--progress"}, true},
		{[]string{"--progress=true"}, true},
		{[]string{"--progress=false"}, false},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var p progressFlag
		fs.Var(&p, "progress", "")
		require.NoError(t, fs.Parse(tc.args))
		require.Equal(t, tc.on, p.to(&w) != nil, "%v", tc.args)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&w)
	var p progressFlag
	fs.Var(&p, "progress", "")
	require.Error(t, fs.Parse([]string{"--progress=maybe"}))
}

// TestProgressFunc: an lm.Progress starts its line at the first report and
// ends it at the last.
func TestProgressFunc(t *testing.T) {
	require.Nil(t, progressFunc(nil, "x", progressBytes), "no writer, no function")
	var w bytes.Buffer
	f := progressFunc(&w, "x", progressBytes)
	f(0, 10)
	f(10, 10) // ends within the delay: nothing drawn
	require.Empty(t, w.String())
}

// TestNoProgressOnAPipe: a command whose stderr is not a terminal prints
// no progress lines unless asked.
func TestNoProgressOnAPipe(t *testing.T) {
	code, _, errOut := reel("bench", "--prompt", "4", "--tokens", "2")
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, errOut, "prompt:")
	require.NotContains(t, errOut, "\x1b[K")
}
