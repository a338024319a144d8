package dory

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops/cpu"
)

// synthetic512 is a Dory of hidden 512 with 8 input, 8 recurrent and 8
// output sub-layers: the benchmark shape between the tiny models and 4B.
func synthetic512() Config {
	c := Config{
		Vocab: 4096, Hidden: 512, FFN: 1536, Heads: 8, KVHeads: 2, HeadDim: 64,
		Pattern: strings.Repeat("S-S-S-*-", 3), NIn: 8, NRec: 8, NOut: 8, Loops: 2,
		KV: PerLoop, Window: 256, Std: 0.02, AlphaInit: 0.05, GateLogitScale: 22.6,
		Profiles: [2]RopeProfile{{Theta: 1e5, Rotary: 64}, {Theta: 1e4, Rotary: 64}},
	}
	c.LayerProfile = make([]int, len(c.Pattern))
	for i := range c.LayerProfile {
		c.LayerProfile[i] = 1
	}
	return c
}

func benchModels(b *testing.B) map[string]*Model {
	gotiny, err := Load(filepath.Join(testdata, "dory-gotiny"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gotiny.Close() })
	syn, err := Synthetic(synthetic512(), graph.BF16, 1)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]*Model{"gotiny": gotiny, "h512": syn}
}

// BenchmarkDecode measures one-token forwards after a 64-token prompt;
// tokens/s is 1e9 / ns/op.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"gotiny", "h512"} {
		b.Run(name, func(b *testing.B) {
			m := benchModels(b)[name]
			s, err := NewSession(m, Options{Backend: cpu.New(0)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			prompt := make([]int, 64)
			for i := range prompt {
				prompt[i] = (i * 7) % m.Config.Vocab
			}
			if _, err := s.Forward(prompt, 0, m.Config.Loops, WantNone); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if s.Pos() >= 64+Rewind {
					if err := s.Rollback(64); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := s.Forward([]int{i % m.Config.Vocab}, s.Pos(), m.Config.Loops, WantLast); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkPrefill measures a 256-token prompt in chunks of 64.
func BenchmarkPrefill(b *testing.B) {
	for _, name := range []string{"gotiny", "h512"} {
		b.Run(name, func(b *testing.B) {
			m := benchModels(b)[name]
			s, err := NewSession(m, Options{Backend: cpu.New(0)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			prompt := make([]int, 256)
			for i := range prompt {
				prompt[i] = (i * 7) % m.Config.Vocab
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.Reset()
				if _, err := s.Forward(prompt, 0, m.Config.Loops, WantLast); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
