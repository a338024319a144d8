package weights

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/graph"
)

// FuzzSafetensors opens arbitrary bytes as a safetensors file and reads every
// tensor: it must never panic, and every tensor it accepts must lie inside
// the file with the size its dtype and shape call for.
func FuzzSafetensors(f *testing.F) {
	valid := rawFile(validHeader, validData())
	f.Add(valid)
	f.Add(valid[:len(valid)-3])                                                                                                                      // truncated data
	f.Add(valid[:20])                                                                                                                                // truncated header
	f.Add(rawFile(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8)))                                                       // past the end
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12))) // overlap
	f.Add(rawFileLen(1<<40, `{}`, nil))                                                                                                              // header length 2^40
	f.Add(rawFile(`{"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)))                                                    // unknown dtype
	f.Add(rawFile(`{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)))                                                       // shape/bytes mismatch
	f.Add(rawFile(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)))                                                       // negative shape
	f.Add(rawFile(`[1,2,3]`, nil))                                                                                                                   // not an object
	f.Add(rawFile(`{"w":{"dtype":"I64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil))                                                // overflow
	f.Add([]byte{})
	f.Add(make([]byte, 8))
	for _, c := range badCases {
		f.Add(c.file)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.safetensors")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := OpenFile(path)
		if err != nil {
			return
		}
		defer sf.Close()
		for _, name := range sf.Names() {
			info, err := sf.Info(name)
			if err != nil {
				t.Fatalf("Info(%q): %v", name, err)
			}
			b, err := sf.Bytes(name)
			if err != nil {
				t.Fatalf("Bytes(%q): %v", name, err)
			}
			if len(b) != info.NBytes() {
				t.Fatalf("tensor %q: %d bytes, want %d", name, len(b), info.NBytes())
			}
			sum := 0
			for _, x := range b { // touch every byte: must not fault
				sum += int(x)
			}
			_ = sum
			if info.DType.Size() == 0 || info.DType == graph.Invalid {
				t.Fatalf("tensor %q: dtype %v", name, info.DType)
			}
		}
	})
}

// FuzzConfig parses arbitrary bytes as config.json and reads every field
// with every getter: nothing may panic.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(sampleConfig))
	f.Add([]byte(`{"rope_theta": NaN, "a": [Infinity, -Infinity], "b": {"c": NaN}}`))
	f.Add([]byte(`{"a": "NaN\"", "b": -Infinit}`))
	f.Add([]byte(`{"a": 1e999, "b": 2.5, "c": 99999999999999999999}`))
	f.Add([]byte(`[NaN]`))
	f.Add([]byte(`{"a": {"b": {"c": [1, 2, {"d": null}]}}}`))
	f.Add([]byte(`{"\u00e9\\": true}`))
	f.Add([]byte(`{`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("config.json", data)
		if err != nil {
			return
		}
		keys := cfg.Keys()
		g := cfg.Get()
		for _, k := range append(keys, "missing", "a.b", "a.b.c") {
			cfg.Int(k, 0)
			cfg.Float(k, 0)
			cfg.String(k, "")
			cfg.Bool(k, false)
			cfg.Ints(k)
			cfg.Floats(k)
			cfg.Strings(k)
			cfg.Has(k)
			cfg.IsNull(k)
			cfg.Raw(k)
			g.Int(k, 0)
			g.Require(k)
		}
		g.Err()
		var v any
		cfg.Decode(&v)
	})
}
