// Package reel holds what the whole runtime shares: the embedded default
// model. The runtime itself lives in the packages below (graph, ops, planner,
// capture, models, weights) and the command in cmd/reel.
package reel

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// goTiny is dory-gotiny: a 6.97 M-parameter Dory trained on Go source,
// byte-level (token id = byte value). See testdata/dory-gotiny/README.md.
//
//go:embed testdata/dory-gotiny/config.json testdata/dory-gotiny/model.safetensors testdata/dory-gotiny/README.md
var goTiny embed.FS

// DefaultModelName names the embedded default model.
const DefaultModelName = "dory-gotiny"

// DefaultModelDir gives a folder holding the embedded default model,
// writing it under the user's cache folder (or the system temp folder) on
// first use, so it can be memory-mapped like any checkpoint.
func DefaultModelDir() (string, error) {
	sub, err := fs.Sub(goTiny, "testdata/dory-gotiny")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	files := []string{"config.json", "model.safetensors", "README.md"}
	contents := make([][]byte, len(files))
	for i, f := range files {
		if contents[i], err = fs.ReadFile(sub, f); err != nil {
			return "", err
		}
		h.Write(contents[i])
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "reel", DefaultModelName+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	for i, f := range files {
		tmp, err := os.CreateTemp(dir, f+".tmp*")
		if err != nil {
			return "", fmt.Errorf("default model: %w", err)
		}
		_, werr := tmp.Write(contents[i])
		cerr := tmp.Close()
		if werr != nil || cerr != nil {
			os.Remove(tmp.Name())
			return "", fmt.Errorf("default model: writing %s: %v %v", f, werr, cerr)
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("default model: %w", err)
		}
	}
	return dir, nil
}
