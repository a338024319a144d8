package cuda

import (
	"testing"

	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// gdnQwenCases are gdn_scan at qwen4-12l's heads (16 key heads, 48 value
// heads, dk = dv = 128): prompt chunks from position 0 and from a stored
// state (the chunked kernels), and a speculation window of 8 rows (the
// recurrent one).
func gdnQwenCases() []optest.Case {
	return []optest.Case{
		optest.GDNScanCase(16, 48, 128, 128, 512, 0, 0.05),
		optest.GDNScanCase(16, 48, 128, 128, 300, 1000, 0.5),
		optest.GDNScanCase(16, 48, 128, 128, 8, 40, 0.05),
	}
}

// TestGDNScanQwenShape runs gdnQwenCases against the float64 reference
// and the CPU backend, then the chunked kernels against the recurrent one
// on the card.
func TestGDNScanQwenShape(t *testing.T) {
	be := newTestBackend(t, Options{})
	rec := newTestBackend(t, Options{})
	rec.gdnRowByRow = true
	ref := cpu.New(0)
	for _, c := range gdnQwenCases() {
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
			optest.Compare(t, rec, be, c)
		})
	}
}
