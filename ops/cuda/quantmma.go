package cuda

import (
	"fmt"
	"math/bits"
	"strconv"
)

// The tensor-core decode product of quantized weights (qmma_*,
// kernels/quantmma.cu): quant_matmul's qmmaMinRows..matvecMaxRows rows take
// it wherever the codes can be read as 16-byte vectors (qmvs_*'s
// condition) and x's B fragments fit in qmmaSharedMax bytes of shared
// memory, unless the tuning asks for the CUDA-core kernels
// (mvTuning.quantNoMMA, REEL_QMMA=0, or quantOld) or for other rows
// (mvTuning.quantMMARows, REEL_QMMA_ROWS).
const (
	// qmmaMinRows is the fewest rows that take qmma by default. Measured on
	// the H200 (session 5), one row is faster on the CUDA cores (qmvs_*):
	// Dory 4B q4 decode at 129.7 tok/s against 118.9 with qmma, and
	// BenchmarkQuantGEMV's fp8 2560x2560 at 7.73 against 8.76 µs and down
	// at 15.3 against 21.2 µs; from two rows qmma is faster (fp8 gate/up: 2
	// rows 16.3 against 26.5 µs, 4 rows 27.9 against 34.7, 8 rows 48.6
	// against 64.6).
	qmmaMinRows = 2

	// qmmaSharedMax is the most dynamic shared memory a qmma block
	// stages x in (4 bytes an element of each row, plus padding).
	qmmaSharedMax = 128 << 10
	// qmmaMaxWarps is QMMA_MAXWARPS: the most warps a block.
	qmmaMaxWarps = 16
	// qmmaWarps is the default warps a block; qmmaWaveWarps the warps an
	// SM the default split aims at (one resident wave: two blocks of 8
	// warps at about 100 registers a thread).
	qmmaWarps     = 8
	qmmaWaveWarps = 16
)

// qmmaSets are the kernels' row sets (two rows of x each).
var qmmaSets = []int{1, 2, 4}

// qmmaKernelNames are the qmma kernels' names (quantmma.cu's instances).
func qmmaKernelNames() []string {
	var out []string
	for _, q := range []string{"f8", "i8", "u4"} {
		for _, ns := range qmmaSets {
			out = append(out, fmt.Sprintf("qmma_%s_n%d", q, ns))
		}
	}
	return out
}

// qmmaLaunch is a qmma launch: grid blocks of warps warps, split warps
// sharing a tile of 16 features, shared bytes of dynamic shared memory,
// scale groups of 2^groupShift code vectors.
type qmmaLaunch struct {
	name                       string
	grid, warps, split, shared int
	groupShift                 int
}

// qmmaPlan chooses the qmma launch of a quant_matmul of 1..matvecMaxRows
// rows on sms multiprocessors, or false where the product must take the
// CUDA-core kernels: fewer rows than qmmaMinRows (or the tuning's
// quantMMARows), codes not readable as 16-byte vectors, scale groups not a
// power of two of them (the kernels shift rather than divide), x's
// fragments past qmmaSharedMax, or a tuning that asks for them. The warps of a tile
// split its steps of K (4 vectors of codes a row) as the bf16 matvec's
// mvPlan splits K: as many as keep the grid within one resident wave of
// qmmaWaveWarps an SM while each has a step.
func qmmaPlan(t mvTuning, in qmvIn, sms int) (qmmaLaunch, bool) {
	minRows := qmmaMinRows
	if t.quantMMARows > 0 {
		minRows = t.quantMMARows
	}
	if t.quantOld || t.quantNoMMA || in.rows < max(1, minRows) || in.rows > matvecMaxRows || in.k < 1 || in.nOut < 1 {
		return qmmaLaunch{}, false
	}
	if in.k%in.perVec != 0 || in.blockCols%in.perVec != 0 || in.stride%16 != 0 || !in.aligned {
		return qmmaLaunch{}, false
	}
	vpg := in.blockCols / in.perVec
	if vpg&(vpg-1) != 0 {
		return qmmaLaunch{}, false
	}
	steps := (in.k + 4*in.perVec - 1) / (4 * in.perVec)
	shared := in.rows * (steps*in.perVec + 4) * 16
	if shared > qmmaSharedMax {
		return qmmaLaunch{}, false
	}
	ns := 4
	for _, n := range qmmaSets {
		if 2*n >= in.rows {
			ns = n
			break
		}
	}
	warps := qmmaWarps
	if t.warps > 0 {
		warps = t.warps
	}
	warps = min(pow2Floor(warps), qmmaMaxWarps)
	tiles := (in.nOut + 15) / 16
	split := t.split
	if split <= 0 {
		split = 1
		for split*2 <= warps && split*2 <= steps && tiles*split*2 <= qmmaWaveWarps*sms {
			split *= 2
		}
	}
	split = max(1, min(pow2Ceil(split), warps))
	group := warps / split
	return qmmaLaunch{
		name:  fmt.Sprintf("qmma_%s_n%d", in.name, ns),
		grid:  (tiles + group - 1) / group,
		warps: warps, split: split, shared: shared,
		groupShift: bits.TrailingZeros(uint(vpg)),
	}, true
}

// parseQMMARows reads REEL_QMMA_ROWS: "" for qmmaMinRows (0), else the
// fewest rows, 1 to matvecMaxRows, that take the qmma kernels.
func parseQMMARows(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > matvecMaxRows {
		return 0, fmt.Errorf("%q is not a number of rows from 1 to %d", v, matvecMaxRows)
	}
	return n, nil
}
