package cuda

import "testing"

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
