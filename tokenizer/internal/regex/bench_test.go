package regex

import (
	"compress/gzip"
	"io"
	"os"
	"testing"
)

// BenchmarkFindAll splits 1 MB of Go source with Qwen3's and DeepSeek-V3's
// main split patterns.
func BenchmarkFindAll(b *testing.B) {
	f, err := os.Open("../../testdata/long_go.txt.gz")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
	text := string(data)
	for _, c := range []struct{ name, pattern string }{
		{"qwen3", `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		{"deepseek_v3", "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
	} {
		re, err := Compile(c.pattern)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var dst [][2]int
			for b.Loop() {
				if dst, err = re.FindAll(text, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
