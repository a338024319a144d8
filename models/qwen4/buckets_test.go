package qwen4

import (
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cpu"
)

// TestBuckets: prompt chunks on row buckets (the GDN scans and conv rings,
// the QSA caches and block keys, the PLE histories and the MoE over padded
// rows) reproduce transformers' logits of both tiny checkpoints, and two
// prompt lengths of one bucket share its plan; with the MTP head, whose
// draft rows a forward feeds on a bucket's plan too.
func TestBuckets(t *testing.T) {
	for _, name := range append(checkpoints, "qwen4-tiny-mtp") {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			golden := dir
			if name == "qwen4-tiny-mtp" {
				golden = "" // no golden.json: against exact rows only
			}
			modeltest.CheckBuckets(t, loadModel(t, dir), cpu.New(2), golden, 1e-4)
		})
	}
}

// TestCUDABuckets is TestBuckets on the card, within 1e-3.
func TestCUDABuckets(t *testing.T) {
	be := cudaBackend(t)
	for _, name := range append(checkpoints, "qwen4-tiny-mtp") {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			golden := dir
			if name == "qwen4-tiny-mtp" {
				golden = ""
			}
			modeltest.CheckBuckets(t, loadModel(t, dir), be, golden, 1e-3)
		})
	}
}
