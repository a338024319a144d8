package weights

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Rewrite copies the checkpoint in src (config.json and every tensor) into a
// single-file checkpoint in dst, passing the config and the tensors through
// the edit functions first (either may be nil). Tests use it to make broken
// checkpoints from good ones: a field changed, a tensor dropped or reshaped.
func Rewrite(src, dst string, editConfig func(map[string]any), editTensors func([]NamedTensor) []NamedTensor) error {
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", src, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("rewrite %s: config.json: %w", src, err)
	}
	if editConfig != nil {
		editConfig(cfg)
	}
	if raw, err = json.Marshal(cfg); err != nil {
		return fmt.Errorf("rewrite %s: config.json: %w", src, err)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		return fmt.Errorf("rewrite %s: %w", src, err)
	}
	ck, err := Open(src)
	if err != nil {
		return fmt.Errorf("rewrite: %w", err)
	}
	defer ck.Close()
	var ts []NamedTensor
	for _, n := range ck.Names() {
		info, err := ck.Info(n)
		if err != nil {
			return fmt.Errorf("rewrite: %w", err)
		}
		b, err := ck.Bytes(n)
		if err != nil {
			return fmt.Errorf("rewrite: %w", err)
		}
		ts = append(ts, NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), b...)})
	}
	if editTensors != nil {
		ts = editTensors(ts)
	}
	return WriteFile(filepath.Join(dst, SingleFile), ts)
}
