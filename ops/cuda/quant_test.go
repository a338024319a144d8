package cuda

import (
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestQmvPlan needs no device: quant_matmul's matvec takes the qmvs
// kernels only where 16-byte code vectors fit (K and the groups whole
// vectors, rows of codes and pointers aligned) and the tuning allows them;
// their launches cover every unit, stage x only within qmvSharedMax, and a
// capped grid covers every block of units.
func TestQmvPlan(t *testing.T) {
	type c struct {
		in  qmvIn
		old bool
	}
	u4 := func(rows, k, n, bc int, aligned bool) qmvIn {
		return qmvIn{name: "u4", perVec: 32, rows: rows, k: k, nOut: n, stride: (k + 1) / 2, blockCols: bc, aligned: aligned}
	}
	i8 := func(rows, k, n, bc int, aligned bool) qmvIn {
		return qmvIn{name: "i8", perVec: 16, rows: rows, k: k, nOut: n, stride: k, blockCols: bc, aligned: aligned}
	}
	f8 := func(rows, k, n int) qmvIn {
		return qmvIn{name: "f8", perVec: 16, rows: rows, k: k, nOut: n, stride: k, blockCols: 128, aligned: true}
	}
	for _, tc := range []c{
		{u4(1, 2560, 2560, 32, true), false}, {u4(8, 7168, 2560, 32, true), false}, {u4(3, 64, 33, 64, true), false},
		{i8(1, 2560, 7168, 32, true), false}, {f8(1, 2560, 4096), false}, {f8(8, 64, 5), false}, {f8(2, 4096, 2560), false},
		{u4(1, 2560, 2560, 32, false), true}, {u4(1, 48, 7, 32, true), true}, {u4(1, 2560, 40, 16, true), true},
		{i8(1, 100, 33, 32, true), true}, {i8(1, 2560, 9, 8, true), true}, {i8(2, 2560, 9, 32, false), true},
		{f8(1, 257, 300), true},
	} {
		for _, tune := range []mvTuning{{}, {feats: 1}, {feats: 4, split: 2}, {warps: 8}, {quantGrid: 2}, {quantNoStage: true}, {quantOld: true}} {
			l := qmvPlan(tune, tc.in, 0, 132)
			wantOld := tc.old || tune.quantOld
			rb := "_r1"
			if tc.in.rows > 1 {
				rb = "_r8"
			}
			if l.old != wantOld || !strings.Contains(l.name, tc.in.name+rb) {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: want old %v", tune, tc.in, l, wantOld)
				continue
			}
			if l.old {
				if !strings.HasPrefix(l.name, "qmv_") || l.vec != !tc.old || l.shape.blocks*qmvWarps < tc.in.nOut {
					t.Errorf("qmvPlan(%+v, %+v) = %+v", tune, tc.in, l)
				}
				continue
			}
			sh := l.shape
			units := (tc.in.nOut + sh.feats - 1) / sh.feats
			if !strings.HasPrefix(l.name, "qmvs_") || (tune.feats != 0 && sh.feats != tune.feats) ||
				sh.split < 1 || sh.warps%sh.split != 0 || sh.warps > mvMaxWarps || l.nb*(sh.warps/sh.split) < units || l.nb != sh.blocks {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: bad shape", tune, tc.in, l)
			}
			if per := (l.nb + l.grid - 1) / l.grid; l.grid < 1 || l.grid > l.nb || (tune.quantGrid == 0 && l.grid != l.nb) ||
				(tune.quantGrid > 0 && (l.grid > tune.quantGrid*132 || (l.grid-1)*per >= l.nb)) {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: bad grid", tune, tc.in, l)
			}
			chunks := (tc.in.k/tc.in.perVec + 31) / 32
			need := 4 * tc.in.rows * chunks * 32 * tc.in.perVec
			if stage := need <= qmvSharedMax && !tune.quantNoStage; (l.shared != 0) != stage || (stage && l.shared != need) {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: shared %d, want %d staged %v", tune, tc.in, l, l.shared, need, stage)
			}
		}
	}
	if l := qmvPlan(mvTuning{}, u4(1, 2560, 2560, 32, true), 0, 132); l.shape.feats != qmvFeats["u4"] || l.name != "qmvs_u4_r1_f4" {
		t.Errorf("q4 default: %+v", l)
	}
}

// qmvTunings are the quantized matvec's launches every quant_matmul case
// must pass with: the old kernels, each unit size, x through L1, a grid
// looping over blocks of units, other splits.
var qmvTunings = []mvTuning{
	{quantOld: true}, {feats: 1}, {feats: 2}, {feats: 4}, {quantNoStage: true}, {quantGrid: 1, warps: 8}, {quantGrid: 1, feats: 1, quantNoStage: true},
	{split: 1}, {warps: 8, split: 8, feats: 4}, {warps: 1}, {warps: 2, split: 2, feats: 1},
}

// TestQuantMatVec runs every quant_matmul case of the table with the
// automatic launch, against its reference and the CPU, then with every
// qmvTunings launch; and checks that eager runs and a replay agree bit for
// bit.
func TestQuantMatVec(t *testing.T) {
	be := newTestBackend(t, Options{})
	ref := cpu.New(0)
	n := 0
	for _, c := range optest.Cases() {
		if !strings.HasPrefix(c.Name, "quant_matmul/") {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
			for _, tune := range qmvTunings {
				be.mv = tune
				optest.Check(t, be, c)
			}
			be.mv = mvTuning{}
			checkDeterministic(t, be, c)
		})
	}
	if n == 0 {
		t.Fatal("no quant_matmul cases in the table")
	}
}

// TestQuantHalf needs no device: the 16-bit type of each format's prompt
// products and REEL_QUANT_HALF's values.
func TestQuantHalf(t *testing.T) {
	be := &Backend{}
	for dt, want := range map[graph.DType]int32{graph.F8E4M3: 1, graph.I8: 2, graph.U8: 1} {
		if got := be.quantHalf(dt); got != want {
			t.Errorf("quantHalf(%s) = %d, want %d", dt, got, want)
		}
	}
	for v, want := range map[string]int32{"": 0, "bf16": 1, "f16": 2} {
		got, err := parseQuantHalf(v)
		if err != nil || got != want {
			t.Errorf("parseQuantHalf(%q) = %d, %v; want %d", v, got, err, want)
		}
		be.quantHalfOverride = got
		if want != 0 && be.quantHalf(graph.I8) != want || want != 0 && be.quantHalf(graph.F8E4M3) != want {
			t.Errorf("REEL_QUANT_HALF=%s: not every format takes it", v)
		}
	}
	if _, err := parseQuantHalf("f32"); err == nil || !strings.Contains(err.Error(), "REEL_QUANT_HALF") {
		t.Errorf("parseQuantHalf(f32): %v, want an error naming REEL_QUANT_HALF", err)
	}
}

// caseRows is the rows of a quantized product case: of x for quant_matmul,
// of the ids for quant_expert_matmul.
func caseRows(c optest.Case) int {
	if strings.HasPrefix(c.Name, "quant_expert_matmul/") {
		return c.Inputs[3].Shape[0]
	}
	return c.Inputs[0].Shape.Rows()
}

// TestQuantPrompt runs every quantized product case of more than 8 rows (a
// prompt chunk's path) in PrecisionExact, at f32's bounds (TolQuantF32:
// the weight dequantized to f32, f32 GEMMs, the experts' f32 tiles), and
// with each 16-bit type forced on every format (REEL_QUANT_HALF), so that
// all six dequant16 and qmoe_mma kernels run, at that type's bound
// (TestOpCases and TestQuantMatVec run the default types); the error
// cases must fail on every path.
func TestQuantPrompt(t *testing.T) {
	be := newTestBackend(t, Options{})
	ref := cpu.New(0)
	n := 0
	for _, m := range []struct {
		name string
		prec Precision
		half int32
		tol  func(graph.DType) float64
	}{
		{"exact", PrecisionExact, 0, func(dt graph.DType) float64 { return optest.TolQuantF32[dt] }},
		{"bf16", PrecisionAuto, 1, func(graph.DType) float64 { return optest.TolBF16 }},
		{"f16", PrecisionHalf, 2, func(graph.DType) float64 { return optest.TolF16 }},
	} {
		be.opts.Precision, be.quantHalfOverride = m.prec, m.half
		for _, c := range optest.Cases() {
			if !strings.HasPrefix(c.Name, "quant_") || caseRows(c) <= matvecMaxRows {
				continue
			}
			n++
			c.Tol = m.tol(c.Inputs[1].DType)
			t.Run(m.name+"/"+c.Name, func(t *testing.T) {
				optest.Check(t, be, c)
				optest.Compare(t, ref, be, c)
			})
		}
	}
	be.opts.Precision, be.quantHalfOverride = PrecisionAuto, 0
	if n == 0 {
		t.Fatal("no quantized product cases of more than 8 rows in the table")
	}
}
