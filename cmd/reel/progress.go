package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

// Progress on long work (uploading or making gigabytes of weights, a long
// prompt, a benchmark's decode) is one line on stderr, redrawn in place,
// shown only when stderr is a terminal or --progress is given, and only for
// work that lasts: nothing is drawn in the first half second. It is a few
// dozen lines of our own rather than a progress-bar library, since reel
// needs one line of text and no animation, and it must not write to a pipe
// unless asked.

// progressFlag is --progress: unset, progress shows when stderr is a
// terminal; --progress shows it anyway (as whole lines when stderr is not
// a terminal: a log keeps them); --progress=false never.
type progressFlag struct {
	set, on bool
}

func (p *progressFlag) String() string {
	if p == nil || !p.set {
		return "auto"
	}
	return strconv.FormatBool(p.on)
}

func (p *progressFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false")
	}
	p.set, p.on = true, v
	return nil
}

// IsBoolFlag lets --progress stand without a value.
func (p *progressFlag) IsBoolFlag() bool { return true }

// to gives the writer progress goes to (w, or nil for none).
func (p progressFlag) to(w io.Writer) io.Writer {
	if p.set && !p.on || w == nil || !p.set && !isTerminal(w) {
		return nil
	}
	return w
}

// isTerminal says whether f (a reader or a writer) is a terminal (a
// character device).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	fi, err := file.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressUnit says how a progress line counts.
type progressUnit int

const (
	progressBytes  progressUnit = iota // "1.2 of 8.0 GB"
	progressTokens                     // "1200 of 4000 tokens, 412 tok/s"
)

// Timing of the progress line.
const (
	progressDelay    = 500 * time.Millisecond // nothing before: short work stays silent
	progressTTYEvery = 100 * time.Millisecond // redraws on a terminal
	progressLogEvery = 2 * time.Second        // lines written to a file or pipe
)

// progress draws the progress of one piece of work. A nil *progress (no
// writer) does nothing, so callers need no checks.
type progress struct {
	w     io.Writer
	tty   bool
	label string
	total int64
	unit  progressUnit
	now   func() time.Time // time.Now; tests set their own

	start, drawn time.Time
	done         int64
	drawnDone    int64 // done at the last line drawn
	shown        bool  // a line is drawn (on a terminal: to clear)
}

// newProgress starts the progress of work of total units, drawn on w under
// label; nil when w is nil (see progressFlag.to).
func newProgress(w io.Writer, label string, total int64, unit progressUnit) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, tty: isTerminal(w), label: label, total: total, unit: unit, now: time.Now}
	p.start = p.now()
	return p
}

// Set says done units are done, redrawing the line when it is due.
func (p *progress) Set(done int64) {
	if p == nil {
		return
	}
	p.done = done
	t := p.now()
	every := progressLogEvery
	if p.tty {
		every = progressTTYEvery
	}
	if t.Sub(p.start) < progressDelay || p.shown && t.Sub(p.drawn) < every {
		return
	}
	p.drawn, p.drawnDone, p.shown = t, done, true
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", p.line(t))
	} else {
		fmt.Fprintf(p.w, "%s\n", p.line(t))
	}
}

// Add says n more units are done.
func (p *progress) Add(n int64) {
	if p != nil {
		p.Set(p.done + n)
	}
}

// Done ends the work: a line on a terminal is cleared, so the output
// after it starts on a clean line; elsewhere the last count gets its line.
func (p *progress) Done() {
	if p == nil || !p.shown {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
	} else if p.done != p.drawnDone {
		fmt.Fprintf(p.w, "%s\n", p.line(p.now()))
	}
	p.shown = false
}

// line is the text of the progress line at t.
func (p *progress) line(t time.Time) string {
	secs := t.Sub(p.start).Seconds()
	pct := 0.0
	if p.total > 0 {
		pct = 100 * float64(p.done) / float64(p.total)
	}
	switch p.unit {
	case progressTokens:
		rate := ""
		if secs > 0 {
			rate = fmt.Sprintf(", %.0f tok/s", float64(p.done)/secs)
		}
		return fmt.Sprintf("%s: %d of %d tokens (%.0f %%%s), %.1f s", p.label, p.done, p.total, pct, rate, secs)
	default:
		return fmt.Sprintf("%s: %.2f of %.2f GB (%.0f %%), %.1f s", p.label, float64(p.done)/1e9, float64(p.total)/1e9, pct, secs)
	}
}

// progressFunc is an lm.Progress that draws on w (none when w is nil): the
// line starts at the first report, which gives the total, and ends at the
// last (done == total).
func progressFunc(w io.Writer, label string, unit progressUnit) lm.Progress {
	if w == nil {
		return nil
	}
	var p *progress
	return func(done, total int64) {
		if p == nil {
			p = newProgress(w, label, total, unit)
		}
		p.Set(done)
		if done >= total {
			p.Done()
			p = nil
		}
	}
}

// progressSession is a session whose forwards count their tokens on a
// progress line: a prompt fed in chunks (prefill) shows how far it is.
type progressSession struct {
	models.Session
	p *progress
}

// Forward runs ids and counts them.
func (s progressSession) Forward(ids []int, pos0 int, want lm.Want) (*tensor.Dense, error) {
	d, err := s.Session.Forward(ids, pos0, want)
	if err == nil {
		s.p.Add(int64(len(ids)))
	}
	return d, err
}
