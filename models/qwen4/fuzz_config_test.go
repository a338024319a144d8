package qwen4

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/models/modeltest"
)

// FuzzQwen4Config parses and validates arbitrary config.json bytes: never a
// panic, a hang or an allocation past the budget, and a config that
// validates must validate again. Where it loads with the tiny checkpoint's
// tensors (the smallest shape there is), a one-token forward must give
// finite logits (once per distinct Config, as the rest of the file does not
// reach the forward).
func FuzzQwen4Config(f *testing.F) {
	for _, dir := range []string{tinyDir, filepath.Join(testdata, "qwen4-tiny-wide-21")} {
		data, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"ngram_size": 4294967297, "heads_per_ngram": 4294967296, "ple_layer_ids": [1], "layer_types": ["linear_attention"]}`))
	f.Add([]byte(`{"text_config": {"ngram_vocab_size_base": 9223372036854775783, "rms_norm_eps": 1e-300}}`))
	modeltest.FuzzConfig(f, tinyDir, hostileBudget, modeltest.Validated(ConfigFromJSON), loadAndForward)
}
