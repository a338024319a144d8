package dory

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/weights"
	"github.com/reel-runtime/reel/weights/weightstest"
)

// FuzzDoryConfig parses and validates arbitrary config.json bytes: never a
// panic, a hang or an allocation past the budget, and a config that
// validates must validate again. Where it loads with the tiny checkpoint's
// tensors (the smallest shape there is), a one-token forward must give
// finite logits (once per distinct Config, as the rest of the file does not
// reach the forward).
func FuzzDoryConfig(f *testing.F) {
	for _, dir := range []string{tinyDir, filepath.Join(testdata, "dory", "dory-tiny-last_loop"), filepath.Join(testdata, "dory-gotiny")} {
		data, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"vocab_size": 97, "hidden_size": 64, "init_method_std": 1e-300}`))
	f.Add([]byte(`{"swa_window_size": 1000000000, "hybrid_layer_pattern": "S-"}`))
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
