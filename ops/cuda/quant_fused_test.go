package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"

	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// qfuseTunings are the launches every fused quantized case must pass with
// besides the default: the fused kernels at every decode row count (qmvg,
// qmvsw and qmvn with RB 8), with each unit size, x through L1, a grid
// looping over blocks of units, other splits; and the parts alone
// (qfuseRows negative: each weight's quant_matmul matvec, on the tensor
// cores or the CUDA cores).
var qfuseTunings = []struct {
	rows int
	mv   mvTuning
}{
	{8, mvTuning{}}, {8, mvTuning{feats: 1}}, {8, mvTuning{feats: 2}}, {8, mvTuning{feats: 4}},
	{8, mvTuning{quantNoStage: true}}, {8, mvTuning{quantGrid: 1, warps: 8}}, {8, mvTuning{warps: 8, split: 8, feats: 4}},
	{8, mvTuning{warps: 1}}, {1, mvTuning{split: 1, feats: 1}},
	// One row with x through L1 (BenchmarkQuantGEMV's nostage).
	{1, mvTuning{quantNoStage: true}},
	// The one-row kernels (qmvgr_*, qmvswr_*, qmvnr_*) with each unit
	// size and block; rows past one take the split-K ones as before.
	{1, mvTuning{quantRow: true}}, {1, mvTuning{quantRow: true, feats: 1}}, {1, mvTuning{quantRow: true, feats: 2, warps: 8}},
	{1, mvTuning{quantRow: true, feats: 1, warps: 1}}, {1, mvTuning{quantNoRow: true}},
	// One row on the staged kernels (qmvgi_*, qmvswi_*, qmvni_*, qmvgh_*,
	// ..., the default) in other shapes, and on the f32 kernels.
	{1, mvTuning{qmvx: [3]int{1, 1, 1}}}, {1, mvTuning{qmvx: [3]int{16, 1, 4}}}, {1, mvTuning{qmvx: [3]int{4, 8, 2}, split: 1}},
	{1, mvTuning{quantNoStaged: true}},
	{8, mvTuning{quantRow: true}},
	{-1, mvTuning{}}, {-1, mvTuning{quantNoMMA: true}}, {-1, mvTuning{quantOld: true}},
}

// TestQuantFused runs every case of the fused quantized products (and of
// quant_swiglu_norm_matmul and quant_slerp_matmul, whose decode rows take
// them) with the
// default launches, against its reference and the CPU, then with every
// qfuseTunings launch; checks that eager runs and a replay agree bit for
// bit; and runs the prompt cases in PrecisionExact (f32 products).
func TestQuantFused(t *testing.T) {
	be := newTestBackend(t, Options{})
	exact := newTestBackend(t, Options{Precision: PrecisionExact})
	ref := cpu.New(0)
	n := 0
	for _, c := range optest.Cases() {
		if !slices.ContainsFunc([]string{"quant_grouped_matmul/", "quant_matmul_swiglu/", "quant_norm_matmul/", "quant_swiglu_norm_matmul/",
			"quant_slerp_matmul/"}, func(p string) bool { return strings.HasPrefix(c.Name, p) }) {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
			for _, tune := range qfuseTunings {
				be.qfuseRows, be.mv = tune.rows, tune.mv
				optest.Check(t, be, c)
			}
			be.qfuseRows, be.mv = 0, mvTuning{}
			checkDeterministic(t, be, c)
			optest.Check(t, exact, c)
		})
	}
	if n == 0 {
		t.Fatal("no fused quantized cases in the table")
	}
}

// TestQuantFuseRows needs no device: REEL_QFUSE_ROWS's values.
func TestQuantFuseRows(t *testing.T) {
	for v, want := range map[string]int{"": qfuseRows, "0": 0, "1": 1, "8": 8} {
		got, err := parseQuantFuseRows(v)
		if err != nil {
			t.Fatalf("parseQuantFuseRows(%q): %v", v, err)
		}
		if rows := (&Backend{qfuseRows: got}).fuseRows(); rows != want {
			t.Errorf("REEL_QFUSE_ROWS=%q: %d rows, want %d", v, rows, want)
		}
	}
	for _, v := range []string{"9", "-1", "one", "1x"} {
		if _, err := parseQuantFuseRows(v); err == nil || !strings.Contains(err.Error(), "REEL_QFUSE_ROWS") {
			t.Errorf("parseQuantFuseRows(%q): %v, want an error naming REEL_QFUSE_ROWS", v, err)
		}
	}
}

// TestFusedNames needs no device: every fused launch qmvPlan gives, in each
// format, at one and eight rows, split-K, one-row and staged, names a
// kernel the sources define (quantKernels), the staged ones by default
// at one row.
func TestFusedNames(t *testing.T) {
	formats := []qmvIn{
		{name: "u4", perVec: 32, k: 2560, stride: 1280, blockCols: 32, aligned: true},
		{name: "i8", perVec: 16, k: 2560, stride: 2560, blockCols: 32, aligned: true},
		{name: "f8", perVec: 16, k: 2560, stride: 2560, blockCols: 128, aligned: true},
	}
	for _, in := range formats {
		for _, rows := range []int{1, matvecMaxRows} {
			rb := 1
			if rows > 1 {
				rb = matvecMaxRows
			}
			for _, tune := range []mvTuning{{}, {quantRow: true}, {quantNoStaged: true}, {quantNoStaged: true, quantNoRow: true}, {feats: 4}} {
				for _, prefix := range []string{"qmvg", "qmvn", "qmvsw", "qmvsg", "qmvssw"} {
					in, t2 := in, tune
					in.rows, in.nOut, in.grouped, in.swiglu = rows, 4096, prefix == "qmvg" || prefix == "qmvsg", prefix == "qmvsw" || prefix == "qmvssw"
					if in.swiglu {
						t2.feats = 2
					}
					l := qmvPlan(t2, in, 0, 132)
					if (prefix == "qmvsg" || prefix == "qmvssw") && l.staged == "" {
						continue // the slerp forms are staged kernels only (qfuseLaunch refuses the rest)
					}
					name := l.fusedName(prefix, in.name, rb, in.swiglu)
					if l.old || !slices.Contains(quantKernels, name) {
						t.Errorf("%s rows %d %+v: %s (%+v) is no kernel", in.name, rows, tune, name, l)
					}
					if staged := rows == 1 && !tune.quantRow && !tune.quantNoStaged; staged != (l.staged != "") {
						t.Errorf("%s rows %d %+v: %s: staged %q, want staged %v", in.name, rows, tune, name, l.staged, staged)
					}
				}
			}
		}
	}
}

// TestQuantRuns needs no device: a group splits into runs of one format of
// up to qfuseSegs weights.
func TestQuantRuns(t *testing.T) {
	i8 := quantWeight{w: &Buffer{store: graph.I8}, st: 2}
	u4 := quantWeight{w: &Buffer{store: graph.U8}, st: 2}
	var segs []qfuseSeg
	for _, q := range []quantWeight{i8, i8, u4, u4, u4, u4, u4, i8} {
		segs = append(segs, qfuseSeg{q: q, n: 1})
	}
	var got []int
	for _, r := range quantRuns(segs) {
		got = append(got, len(r))
	}
	if want := []int{2, 4, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}
}
