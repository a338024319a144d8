package cuda

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// TestGemmRuns needs no device: which products gemm16 makes one strided
// batched call.
func TestGemmRuns(t *testing.T) {
	w := func(ptrs ...cu.DevicePtr) []*Buffer {
		out := make([]*Buffer, len(ptrs))
		for i, p := range ptrs {
			out[i] = &Buffer{ptr: p}
		}
		return out
	}
	for _, c := range []struct {
		name  string
		ws    []*Buffer
		ys    []cu.DevicePtr
		batch bool
		want  []gemmRun
	}{
		{"one", w(0x1000), []cu.DevicePtr{0x9000}, true, []gemmRun{{w: 0x1000, y: 0x9000, n: 1}}},
		{"gate and up", w(0x1000, 0x5000), []cu.DevicePtr{0x9000, 0xa000}, true,
			[]gemmRun{{w: 0x1000, y: 0x9000, n: 2, strideW: 0x2000, strideY: 0x400}}},
		{"off", w(0x1000, 0x5000), []cu.DevicePtr{0x9000, 0xa000}, false,
			[]gemmRun{{w: 0x1000, y: 0x9000, n: 1}, {w: 0x5000, y: 0xa000, n: 1}}},
		{"up first in memory", w(0x5000, 0x1000), []cu.DevicePtr{0xa000, 0x9000}, true,
			[]gemmRun{{w: 0x1000, y: 0x9000, n: 2, strideW: 0x2000, strideY: 0x400}}},
		{"outputs the other way", w(0x1000, 0x5000), []cu.DevicePtr{0xa000, 0x9000}, true,
			[]gemmRun{{w: 0x1000, y: 0xa000, n: 1}, {w: 0x5000, y: 0x9000, n: 1}}},
		{"uneven third", w(0x1000, 0x2000, 0x4000), []cu.DevicePtr{0x9000, 0xa000, 0xb000}, true,
			[]gemmRun{{w: 0x1000, y: 0x9000, n: 2, strideW: 0x800, strideY: 0x400}, {w: 0x4000, y: 0xb000, n: 1}}},
		{"even three", w(0x1000, 0x2000, 0x3000), []cu.DevicePtr{0x9000, 0xa000, 0xb000}, true,
			[]gemmRun{{w: 0x1000, y: 0x9000, n: 3, strideW: 0x800, strideY: 0x400}}},
		{"odd byte step", w(0x1000, 0x2001), []cu.DevicePtr{0x9000, 0xa000}, true,
			[]gemmRun{{w: 0x1000, y: 0x9000, n: 1}, {w: 0x2001, y: 0xa000, n: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := gemmRuns(c.ws, c.ys, 2, 4, c.batch)
			if d := cmp.Diff(c.want, got, cmp.AllowUnexported(gemmRun{})); d != "" {
				t.Errorf("gemmRuns (-want +got):\n%s", d)
			}
		})
	}
}
