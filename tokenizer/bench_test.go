package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkEncode encodes long_go.txt (1 MB of Go source) on one goroutine.
// The Rust library does about 1.0 MB/s (Qwen3) and 1.3 MB/s (DeepSeek-V3)
// on the GPU machine's CPU (golden.json's throughput_reference). Each
// iteration starts with an empty word cache, as one call of the library
// does.
func BenchmarkEncode(b *testing.B) {
	text := readLongGo(b)
	for _, name := range realTokenizers {
		b.Run(name, func(b *testing.B) {
			tok := loadReal(b, name)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				b.StopTimer()
				tok.model.cache.reset()
				tok.model.rawCache.reset()
				b.StartTimer()
				if _, err := tok.Encode(text, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeScaling encodes 1x and 10x long_go.txt: equal MB/s shows
// encoding is linear in the text's length.
func BenchmarkEncodeScaling(b *testing.B) {
	text := readLongGo(b)
	tok := loadReal(b, "qwen3")
	for _, n := range []int{1, 10} {
		long := strings.Repeat(text, n)
		b.Run(map[int]string{1: "1MB", 10: "10MB"}[n], func(b *testing.B) {
			b.SetBytes(int64(len(long)))
			for b.Loop() {
				if _, err := tok.Encode(long, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad parses Qwen3's tokenizer.json (7 MB).
func BenchmarkLoad(b *testing.B) {
	data, err := readFile(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
