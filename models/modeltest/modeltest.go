// Package modeltest is what the tests of every architecture's package
// share beyond weights/weightstest: setups that rewrite a checkpoint's
// tensors, and the fuzzing of a model's config.json with a forward of
// what it accepts.
package modeltest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/weights"
	"github.com/reel-runtime/reel/weights/weightstest"
)

// Rewrite makes a ConfigCase Setup that writes the checkpoint src's
// tensors, changed by edit, into the case's folder.
func Rewrite(src string, edit func([]weights.NamedTensor) []weights.NamedTensor) func(testing.TB, string) {
	return func(t testing.TB, dir string) {
		t.Helper()
		if err := weights.Rewrite(src, dir, nil, edit); err != nil {
			t.Fatal(err)
		}
	}
}

// EditTensor makes a Setup that writes src's tensors with the one called
// name changed by f.
func EditTensor(src, name string, f func(*weights.NamedTensor)) func(testing.TB, string) {
	return Rewrite(src, func(ts []weights.NamedTensor) []weights.NamedTensor {
		for i := range ts {
			if ts[i].Name == name {
				f(&ts[i])
			}
		}
		return ts
	})
}

// FuzzConfig fuzzes a model's config.json on a copy of the checkpoint src,
// under the budget b. read reads a config as the model's loader does: nil
// for a config it refuses (fine), or the config it accepts (an error for an
// accepted config it should have refused). An accepted config is written
// into the copy and load (a model's Load, a session, one token) runs once
// per distinct config: it may refuse the checkpoint, but logits it gives
// must be finite. Never a panic, a hang or an allocation past the budget.
func FuzzConfig(f *testing.F, src string, b weightstest.Budget, read func(*weights.Config) (any, error), load func(dir string) ([]float32, error)) {
	dir := weightstest.CopyDir(f, src)
	path := filepath.Join(dir, "config.json")
	ran := map[string]bool{} // configs whose forward has run, in this process
	f.Fuzz(func(t *testing.T, data []byte) {
		err := weightstest.Run(t, b, func() error {
			cfg, err := weights.ParseConfig(path, data)
			if err != nil {
				return nil
			}
			c, err := read(cfg)
			if c == nil || err != nil {
				return err
			}
			key := fmt.Sprintf("%+v", c)
			if ran[key] {
				return nil
			}
			ran[key] = true
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
			logits, err := load(dir)
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
