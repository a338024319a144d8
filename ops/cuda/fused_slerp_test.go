package cuda

import (
	"fmt"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestSlerpMatvecRows runs the fused slerp cases with the slerp inside the
// matvec for every decode row count (8: the mvs_*_r8 kernels on 5 to 8
// rows, which the default limit leaves to slerp_rows) and never (0: the
// slerp_rows path at every row count).
func TestSlerpMatvecRows(t *testing.T) {
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	ref := cpu.New(0)
	for _, limit := range []int{0, matvecMaxRows} {
		be.slerpRows = limit
		n := 0
		for _, c := range optest.Cases() {
			if !strings.HasPrefix(c.Name, "slerp_matmul") {
				continue
			}
			n++
			t.Run(fmt.Sprintf("rows=%d/%s", limit, c.Name), func(t *testing.T) {
				optest.Check(t, be, c)
				optest.Compare(t, ref, be, c)
			})
		}
		if n == 0 {
			t.Fatal("no slerp_matmul cases in the table")
		}
	}
}
