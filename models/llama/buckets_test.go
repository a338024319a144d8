package llama_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
)

// TestBuckets: prompt chunks on row buckets reproduce transformers' logits
// of every checkpoint, and two prompt lengths of one bucket share its plan.
func TestBuckets(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			m, err := models.Load(dir)
			require.NoError(t, err)
			defer m.Close()
			modeltest.CheckBuckets(t, m, cpu.New(2), dir, 1e-4)
		})
	}
}

// TestCUDABuckets is TestBuckets on the card, within 1e-3 (f32 goldens,
// the GEMM and flash paths from 16 rows).
func TestCUDABuckets(t *testing.T) {
	be := cudatest.Backend(t, cuda.Options{})
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			modeltest.CheckBuckets(t, load(t, dir), be, dir, 1e-3)
		})
	}
}
