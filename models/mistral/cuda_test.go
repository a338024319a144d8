package mistral_test

import (
	"testing"

	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
)

// TestCUDAGolden: on the card within 1e-3 of transformers' logits, whole
// and incrementally (in chunks of 7 rows too, so the GEMM path runs), and
// the rings wrapping in chunks of 1 and 7 rows give one forward's logits.
func TestCUDAGolden(t *testing.T) {
	be := cudatest.Backend(t, cuda.Options{})
	m := load(t)
	for _, chunk := range []int{0, 7} {
		modeltest.CheckGolden(t, session(t, m, be, chunk), dir, 1e-3)
	}
	ids := make([]int, 2*llama.Rewind+30)
	for i := range ids {
		ids[i] = (i*101 + 7) % m.Config.Vocab
	}
	modeltest.CheckChunks(t, m, be, ids, 2*llama.Rewind, []int{1, 7}, 1e-3)
}
