package dory

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/models/modeltest"
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
	modeltest.FuzzConfig(f, tinyDir, hostileBudget, modeltest.Validated(ConfigFromJSON), loadAndForward)
}
