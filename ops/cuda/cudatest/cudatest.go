// Package cudatest opens the CUDA backend for tests: a test that needs a
// card skips with the one-line reason where CUDA cannot be used (no driver,
// no card, no NVRTC), and fails on any other error, such as kernels that do
// not compile.
package cudatest

import (
	"errors"
	"testing"

	"github.com/reel-runtime/reel/ops/cuda"
)

// Backend opens the CUDA backend with opts, closed when the test ends, or
// skips the test when the machine cannot run CUDA (cuda.ErrUnavailable).
func Backend(t testing.TB, opts cuda.Options) *cuda.Backend {
	t.Helper()
	be, err := cuda.New(opts)
	if err != nil {
		if errors.Is(err, cuda.ErrUnavailable) {
			t.Skip(err.Error())
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}
