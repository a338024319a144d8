package dory

import (
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops/cpu"
)

func benchModels(b *testing.B) map[string]*Model {
	gotiny, err := Load(filepath.Join(testdata, "dory-gotiny"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gotiny.Close() })
	syn, err := Synthetic(SmallBench(), graph.BF16, 1)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]*Model{"gotiny": gotiny, "h512": syn}
}

// benchSession starts a CPU session on a benchmark model.
func benchSession(b *testing.B, name string) (*Session, *Model) {
	m := benchModels(b)[name]
	s, err := NewSession(m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.New(0)}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, m
}

// benchPrompt is n token ids spread over the vocabulary.
func benchPrompt(n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i * 7) % vocab
	}
	return p
}

// BenchmarkDecode measures one-token forwards after a 64-token prompt;
// tokens/s is 1e9 / ns/op.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"gotiny", "h512"} {
		b.Run(name, func(b *testing.B) {
			s, m := benchSession(b, name)
			benchDecode(b, s, m)
		})
	}
}

// benchDecode times one-token forwards of s after a 64-token prompt,
// rolling back to the prompt before the slots' rewind margin runs out, and
// reports tokens/s.
func benchDecode(b *testing.B, s *Session, m *Model) {
	if _, err := s.ForwardLoops(benchPrompt(64, m.Config.Vocab), 0, m.Config.Loops, lm.WantNone); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.Pos() >= 64+Rewind {
			if err := s.Rollback(64); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.ForwardLoops([]int{i % m.Config.Vocab}, s.Pos(), m.Config.Loops, lm.WantLast); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefill measures a 256-token prompt in chunks of 64.
func BenchmarkPrefill(b *testing.B) {
	for _, name := range []string{"gotiny", "h512"} {
		b.Run(name, func(b *testing.B) {
			s, m := benchSession(b, name)
			prompt := benchPrompt(256, m.Config.Vocab)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.Reset()
				if _, err := s.ForwardLoops(prompt, 0, m.Config.Loops, lm.WantLast); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkDecodeWeights compares the CPU's two ways of holding bf16
// weights, in one run: decoded to f32 at load (the default) and kept in 16
// bits, decoded row by row as kernels read them.
func BenchmarkDecodeWeights(b *testing.B) {
	for _, half := range []bool{false, true} {
		name := "f32-at-load"
		if half {
			name = "bf16-kept"
		}
		b.Run(name, func(b *testing.B) {
			m := benchModels(b)["gotiny"]
			s, err := NewSession(m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: cpu.NewWith(cpu.Options{HalfWeights: half})}}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchDecode(b, s, m)
		})
	}
}
