package cuda

import (
	"testing"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// TestLinkAhead checks what LinkSteps writes into a latency-bound launch:
// the next step's first stream, capped; nothing (cleared) where the next
// step streams no weight, is another backend's, is missing, or the cap is
// 0. It needs no card: the steps are built by hand.
func TestLinkAhead(t *testing.T) {
	ahead := func() *steps {
		// A stale address, as a plan bound before would leave it.
		return &steps{ahead: &launch{name: "attn_part_v4", args: []any{int32(7), cu.DevicePtr(0x55), int64(9)}}}
	}
	prod := &steps{streams: []span{{ptr: 0x1000, bytes: 64 << 20}, {ptr: 0x9000, bytes: 8}}}
	small := &steps{streams: []span{{ptr: 0x2000, bytes: 4096}}}
	a, b, c, d, e := ahead(), ahead(), ahead(), ahead(), ahead()
	linkAhead([]ops.Step{a, prod, b, small, c, e, ops.StepFunc(func() error { return nil }), d}, 32<<20)
	want := []struct {
		name  string
		s     *steps
		ptr   cu.DevicePtr
		bytes int64
	}{
		{"before a product: its first stream, capped", a, 0x1000, 32 << 20},
		{"before a small product: all of it", b, 0x2000, 4096},
		{"before a step with no streams", c, 0, 0},
		{"before another backend's step", e, 0, 0},
		{"last", d, 0, 0},
	}
	for _, w := range want {
		args := w.s.ahead.args
		if args[0] != int32(7) || args[1] != w.ptr || args[2] != w.bytes {
			t.Errorf("%s: args %v, want [7 %#x %d]", w.name, args, w.ptr, w.bytes)
		}
	}
	f := ahead()
	linkAhead([]ops.Step{f, prod}, 0)
	if f.ahead.args[1] != cu.DevicePtr(0) || f.ahead.args[2] != int64(0) {
		t.Errorf("cap 0: args %v, want no prefetch", f.ahead.args)
	}
	for _, v := range []string{"x", "-1", "65537"} {
		if _, err := parseAheadL2(v); err == nil {
			t.Errorf("REEL_AHEAD_L2=%q: no error", v)
		}
	}
	if n, err := parseAheadL2("8"); err != nil || n != 8<<20 {
		t.Errorf("REEL_AHEAD_L2=8: %d, %v", n, err)
	}
	if n, err := parseAheadL2(""); err != nil || n != aheadMaxBytes {
		t.Errorf("REEL_AHEAD_L2 unset: %d, %v", n, err)
	}
}
