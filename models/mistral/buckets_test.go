package mistral_test

import (
	"testing"

	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
)

// TestBuckets: prompt chunks on row buckets reproduce transformers' logits,
// and two prompt lengths of one bucket share its plan.
func TestBuckets(t *testing.T) {
	modeltest.CheckBuckets(t, load(t), cpu.New(2), dir, 1e-4)
}

// TestCUDABuckets is TestBuckets on the card, within 1e-3.
func TestCUDABuckets(t *testing.T) {
	modeltest.CheckBuckets(t, load(t), cudatest.Backend(t, cuda.Options{}), dir, 1e-3)
}
