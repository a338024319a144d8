package cuda

import (
	"fmt"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestQSARowsKernel needs no device: qsa_attention_rows takes the shapes
// its threads and shared memory fit, with the shared memory its layout
// needs, and leaves the rest to qsa_attention.
func TestQSARowsKernel(t *testing.T) {
	for _, c := range []struct {
		g, d, keep int
		vec        bool
		name       string
		shared     int
	}{
		// qwen4-12l: 4·(24 + 512 + 12·256 + 4·16·256 + 12·16 + 12 + 12)
		{12, 256, 512, true, "qsa_attention_rows_v4", 80832},
		{12, 256, 512, false, "", 0}, // 256 columns a float at a time: 12 heads a thread
		{16, 256, 512, true, "qsa_attention_rows_v4", 4 * (32 + 512 + 16*256 + 4*16*256 + 16*16 + 16 + 16)},
		{20, 256, 64, true, "", 0}, // 5 heads a thread
		{4, 30, 63, false, "qsa_attention_rows_v1", 4 * (8 + 64 + 120 + 4*16*30 + 4*16 + 4 + 4)},
		{1, 2048, 8, true, "", 0},    // 512 columns
		{12, 256, 8192, true, "", 0}, // past qsaRowsSharedMax
		{1, 1024, 16, true, "", 0},   // 4·16·1024 floats of tiles
		{3, 36, 100, true, "qsa_attention_rows_v4", 4 * (8 + 100 + 108 + 4*16*36 + 3*16 + 4 + 3)},
	} {
		name, shared := qsaRowsKernel(c.g, c.d, c.keep, c.vec)
		if name != c.name || shared != c.shared {
			t.Errorf("qsaRowsKernel(%d heads of %d, keep %d, vec %v) = %q, %d bytes; want %q, %d", c.g, c.d, c.keep, c.vec, name, shared, c.name, c.shared)
		}
	}
}

// TestQSASplits needs no device: decode rows' qsa_attention takes enough
// key chunks to fill the card, none shorter than qsaSplitMinKeys, and
// REEL_QSA_SPLIT forces or turns them off.
func TestQSASplits(t *testing.T) {
	for _, c := range []struct{ rows, kvh, maxKeys, sms, force, want int }{
		{1, 2, 2051, 132, 0, 65},      // qwen4-12l at 2048 positions: 32 keys a chunk
		{1, 2, 2051 * 4, 132, 0, 132}, // longer: two blocks an SM
		{4, 2, 2051, 132, 0, 33},
		{1, 2, 5, 132, 0, 1},
		{8, 8, 100, 132, 0, 4},
		{1, 2, 2051, 132, -1, 0},
		{1, 2, 2051, 132, 7, 7},
		{1, 2, 2051, 132, 5000, qsaSplitMax},
	} {
		if got := qsaSplits(c.rows, c.kvh, c.maxKeys, c.sms, c.force); got != c.want {
			t.Errorf("qsaSplits(%d rows, %d kv heads, %d keys, %d SMs, force %d) = %d, want %d", c.rows, c.kvh, c.maxKeys, c.sms, c.force, got, c.want)
		}
	}
	for v, want := range map[string]int{"": 0, "off": -1, "12": 12} {
		if got, err := parseQSASplit(v); err != nil || got != want {
			t.Errorf("parseQSASplit(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-3", "on", "1.5"} {
		if _, err := parseQSASplit(v); err == nil {
			t.Errorf("parseQSASplit(%q) took it", v)
		}
	}
}

// TestQSASplit runs the qsa_attention cases with decode rows' key chunks
// forced: the unsplit kernel, a few chunks, and more chunks than most rows
// have keys for (empty chunks' partials).
func TestQSASplit(t *testing.T) {
	be := newTestBackend(t, Options{})
	ref := cpu.New(0)
	n := 0
	for _, split := range []int{-1, 3, 64} {
		for _, c := range optest.Cases() {
			if !strings.HasPrefix(c.Name, "qsa_attention") {
				continue
			}
			n++
			t.Run(fmt.Sprintf("split=%d/%s", split, c.Name), func(t *testing.T) {
				be.qsaSplit = split
				defer func() { be.qsaSplit = 0 }()
				optest.Check(t, be, c)
				optest.Compare(t, ref, be, c)
			})
		}
	}
	if n == 0 {
		t.Fatal("no qsa_attention cases in the table")
	}
}
