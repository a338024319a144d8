package trace_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
	"github.com/reel-runtime/reel/trace"
)

// TestCUDAAgainstCPU traces the tiny goldens on the card and on the CPU,
// fused, in chunks of 4 rows (prompt plans, cuBLAS, recorded CUDA graphs):
// every value agrees within 1e-3 (the bound of the golden tests on CUDA),
// and on the card a traced run gives the logits of an untraced one bit
// for bit. It skips where CUDA cannot run.
func TestCUDAAgainstCPU(t *testing.T) {
	be := cudatest.Backend(t, cuda.Options{})
	for _, dir := range []string{doryTiny, qwen4Small, llama3} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, fuse := range []bool{true, false} {
				host, _, err := run(t, dir, &trace.Recorder{}, fuse, 4, nil)
				require.NoError(t, err)
				dev, logits, err := run(t, dir, &trace.Recorder{}, fuse, 4, be)
				require.NoError(t, err)
				_, plain, err := run(t, dir, nil, fuse, 4, be)
				require.NoError(t, err)
				require.Equal(t, plain, logits, "tracing changed the logits on the card (fuse %v)", fuse)
				rep := trace.Diff(host, dev, 1e-3, trace.Abs)
				worst := trace.Comparison{}
				for _, c := range rep.Compared {
					if c.MaxAbs > worst.MaxAbs {
						worst = c
					}
				}
				t.Logf("fuse %v: %d values, largest |cpu - cuda| %.3g at %s (op %s, call %d)", fuse, len(rep.Compared), worst.MaxAbs, worst.Name, worst.Op, worst.Call)
				require.False(t, rep.Diverged(), "first divergence %+v", rep.Compared[max(rep.First, 0)])
				require.Equal(t, len(host), len(rep.Compared), "the same values on both")
			}
		})
	}
}
