package qwen4

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/weights"
	"github.com/reel-runtime/reel/weights/weightstest"
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
	dir := weightstest.CopyDir(f, tinyDir)
	path := filepath.Join(dir, "config.json")
	ran := map[string]bool{} // configs whose forward has run, in this process
	f.Fuzz(func(t *testing.T, data []byte) {
		err := weightstest.Run(t, hostileBudget, func() error {
			cfg, err := weights.ParseConfig(path, data)
			if err != nil {
				return nil
			}
			c, err := ConfigFromJSON(cfg)
			if err != nil {
				return nil
			}
			if err := c.Validate(); err != nil {
				return fmt.Errorf("ConfigFromJSON accepted a config that Validate refuses: %w", err)
			}
			key := fmt.Sprintf("%+v", c)
			if ran[key] {
				return nil
			}
			ran[key] = true
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
			logits, err := loadAndForward(dir)
			if err != nil {
				return nil
			}
			for i, x := range logits {
				if x != x || x > 3.4e38 || x < -3.4e38 {
					return fmt.Errorf("loaded, but logit %d is %v", i, x)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
