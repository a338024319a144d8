package qwen4

import (
	"github.com/reel-runtime/reel/lm"
	"path/filepath"
	"testing"
)

// BenchmarkVerify times a speculation window of 1 + 4 rows whose second
// draft is refused (so the session settles on 2 rows), on the CPU, over the
// small checkpoint with an MTP head: the window's forward and the settle.
func BenchmarkVerify(b *testing.B) {
	f := newMTPFixture(b)
	ids := longest(readGolden(b, filepath.Join(testdata, checkpoints[0])))[:9]
	m := loadModel(b, f.withHead)
	s := newSession(b, m, Options{})
	if _, err := s.Forward(ids, 0, lm.WantLast); err != nil {
		b.Fatal(err)
	}
	if err := s.Snapshot(); err != nil {
		b.Fatal(err)
	}
	p0 := s.Pos()
	refuse := func(_ []float32, _ int) bool { return false }
	first := true
	accept := func(row []float32, d int) bool {
		ok := first
		first = false
		return ok || refuse(row, d)
	}
	for b.Loop() {
		first = true
		if _, _, err := s.VerifyFunc(1, []int{2, 3, 4, 5}, accept); err != nil {
			b.Fatal(err)
		}
		if err := s.Rollback(p0); err != nil {
			b.Fatal(err)
		}
	}
}
