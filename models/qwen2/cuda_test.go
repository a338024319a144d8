package qwen2_test

import (
	"testing"

	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
)

// TestCUDAGolden: on the card within 1e-3 of transformers' logits, whole
// and incrementally (in chunks of 7 rows too, so the GEMM path runs).
func TestCUDAGolden(t *testing.T) {
	be := cudatest.Backend(t, cuda.Options{})
	m := load(t)
	for _, chunk := range []int{0, 7} {
		modeltest.CheckGolden(t, session(t, m, be, chunk), dir, 1e-3)
	}
}
