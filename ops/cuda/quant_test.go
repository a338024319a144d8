package cuda

import (
	"fmt"
	"math"
	"slices"
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
// capped grid covers every block of units. One row whose codes fit a
// lane's registers takes the qmvr kernels where the tuning asks or, by
// default, where the case says (row: FP8 products but the gate/up SwiGLU
// and plain products of more than 3072 features).
func TestQmvPlan(t *testing.T) {
	type c struct {
		in       qmvIn
		old, row bool
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
	grouped := func(in qmvIn) qmvIn { in.grouped = true; return in }
	swiglu := func(in qmvIn) qmvIn { in.swiglu = true; return in }
	for _, tc := range []c{
		{u4(1, 2560, 2560, 32, true), false, false}, {u4(8, 7168, 2560, 32, true), false, false}, {u4(3, 64, 33, 64, true), false, false},
		{i8(1, 2560, 7168, 32, true), false, false}, {f8(1, 2560, 4096), false, false}, {f8(8, 64, 5), false, false},
		{f8(2, 4096, 2560), false, false}, {u4(1, 2560, 2560, 32, false), true, false}, {u4(1, 48, 7, 32, true), true, false},
		{u4(1, 2560, 40, 16, true), true, false}, {i8(1, 100, 33, 32, true), true, false}, {i8(1, 2560, 9, 8, true), true, false},
		{i8(2, 2560, 9, 32, false), true, false}, {f8(1, 257, 300), true, false},
		// Rows past 8 vectors a lane: qmvs rather than qmvr; rows of 4 and
		// just over (qmvr_*_v4, _v8).
		{u4(1, 8224, 64, 32, true), false, false}, {f8(1, 7168, 9), false, false}, {u4(1, 4096, 9, 32, true), false, false},
		{u4(1, 4128, 9, 32, true), false, false}, {f8(1, 2048, 9), false, true}, {f8(1, 2064, 9), false, true},
		{f8(1, 2560, 2560), false, true}, {f8(1, 2560, 3072), false, true}, {f8(1, 2560, 3073), false, false},
		// The fused forms: an FP8 grouped product of any width takes
		// qmvr, the gate/up SwiGLU never by default.
		{grouped(f8(1, 2560, 10240)), false, true}, {swiglu(f8(1, 2560, 2048)), false, false},
		{grouped(f8(2, 2560, 10240)), false, false}, {grouped(u4(1, 2560, 10240, 32, true)), false, false},
	} {
		for _, tune := range []mvTuning{{}, {feats: 1}, {feats: 4, split: 2}, {warps: 8}, {quantGrid: 2}, {quantNoStage: true}, {quantOld: true},
			{quantRow: true}, {quantRow: true, feats: 1, warps: 8}, {quantRow: true, feats: 4, warps: 3}, {quantRow: true, quantOld: true},
			{quantNoRow: true}, {quantNoRow: true, feats: 2}, {quantNoStaged: true}, {quantNoStaged: true, feats: 4}, {qmvx: [3]int{8, 1, 4}},
			{qmvx: [3]int{32, 4, 1}, split: 2}} {
			l := qmvPlan(tune, tc.in, 0, 132)
			wantOld := tc.old || tune.quantOld
			vecs := tc.in.k / tc.in.perVec
			wantVM := 0
			for _, v := range []int{8, 4} {
				if vecs <= 32*v {
					wantVM = v
				}
			}
			wantStaged := !wantOld && !(tune.quantRow && tc.in.rows == 1 && wantVM > 0) && tc.in.rows == 1 && !tune.quantNoStaged &&
				qmvxShared(tc.in.k, tc.in.perVec) <= qmvSharedMax
			wantRow := !wantOld && !wantStaged && tc.in.rows == 1 && wantVM > 0 && (tune.quantRow || !tune.quantNoRow && tc.row)
			if l.row != wantRow {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: want row %v", tune, tc.in, l, wantRow)
				continue
			}
			if l.row {
				sh := l.shape
				wantFeats := qmvrFeats
				if tune.feats == 1 || tune.feats == 2 {
					wantFeats = tune.feats
				}
				want := fmt.Sprintf("qmvr_%s_f%d_v%d", tc.in.name, sh.feats, wantVM)
				if l.name != want || !slices.Contains(quantKernels, l.name) || sh.feats != wantFeats || sh.split != 1 || !isPow2(sh.warps) ||
					sh.warps > mvMaxWarps || l.grid != l.nb || l.nb != sh.blocks || l.shared != 0 ||
					l.grid*sh.warps*sh.feats < tc.in.nOut || (l.grid-1)*sh.warps*sh.feats >= tc.in.nOut {
					t.Errorf("qmvPlan(%+v, %+v) = %+v: bad one-row launch (want %s)", tune, tc.in, l, want)
				}
				continue
			}
			if (l.staged != "") != wantStaged {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: want staged %v", tune, tc.in, l, wantStaged)
				continue
			}
			if l.staged != "" {
				sh := l.shape
				units := (tc.in.nOut + sh.feats - 1) / sh.feats
				perSM, wantFeats := qmvxGrid, qmvxFeats
				if tune.quantGrid > 0 {
					perSM = tune.quantGrid
				}
				if tune.feats > 0 {
					wantFeats = tune.feats
				}
				if tune.qmvx[1] > 0 {
					perSM, wantFeats = tune.qmvx[1], tune.qmvx[2]
				}
				if tc.in.swiglu {
					wantFeats = 2
				}
				per := (l.nb + l.grid - 1) / l.grid
				if l.staged != qmvxKinds[tc.in.name] || l.name != fmt.Sprintf("qmv%s_%s_f%d", l.staged, tc.in.name, wantFeats) ||
					!slices.Contains(quantKernels, l.name) || sh.feats != wantFeats ||
					sh.split < 1 || sh.warps%sh.split != 0 || sh.warps > qmvxMaxWarps || !isPow2(sh.warps) ||
					l.nb*(sh.warps/sh.split) < units || l.nb != sh.blocks || l.grid < 1 || l.grid > l.nb || l.grid > perSM*132 ||
					(l.grid-1)*per >= l.nb || l.shared != qmvxShared(tc.in.k, tc.in.perVec) || (tune.split > 0 && sh.split != tune.split) {
					t.Errorf("qmvPlan(%+v, %+v) = %+v: bad staged launch", tune, tc.in, l)
				}
				continue
			}
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
			if stage := tc.in.rows > 1 && need <= qmvSharedMax && !tune.quantNoStage; (l.shared != 0) != stage || (stage && l.shared != need) {
				t.Errorf("qmvPlan(%+v, %+v) = %+v: shared %d, want %d staged %v", tune, tc.in, l, l.shared, need, stage)
			}
		}
	}
	if l := qmvPlan(mvTuning{}, u4(1, 2560, 2560, 32, true), 0, 132); l.name != "qmvi_u4_f1" || l.shape.warps != qmvxWarps ||
		l.grid > qmvxGrid*132 || l.shared != 3*2304 {
		t.Errorf("q4 one-row default: %+v", l)
	}
	exact := u4(1, 2560, 2560, 32, true)
	exact.f32x = true
	if l := qmvPlan(mvTuning{}, exact, 0, 132); l.shape.feats != qmvFeats["u4"] || l.name != "qmvs_u4_r1_f4" {
		t.Errorf("q4 one-row with f32 x: %+v", l)
	}
	if l := qmvPlan(mvTuning{}, u4(1, 32*32*43, 64, 32, true), 0, 132); l.staged != "" {
		t.Errorf("q4 one row of %d inputs: %+v: want x too large for the staged kernels' shared memory", 32*32*43, l)
	}
	if l := qmvPlan(mvTuning{}, f8(1, 2560, 2560), 0, 132); l.name != "qmvh_f8_f1" || l.shared != 5*1280 {
		t.Errorf("FP8 one-row default: %+v", l)
	}
	if l := qmvPlan(mvTuning{}, i8(1, 2560, 7168, 32, true), 0, 132); l.name != "qmvi_i8_f1" {
		t.Errorf("q8 one-row default: %+v", l)
	}
	if l := qmvPlan(mvTuning{quantNoStaged: true}, f8(1, 2560, 2560), 0, 132); l.name != "qmvr_f8_f2_v8" || l.shape.warps != qmvrWarps {
		t.Errorf("FP8 one-row without staging: %+v", l)
	}
}

// qmvTunings are the quantized matvec's launches every quant_matmul case
// must pass with: the old kernels, each unit size, x through L1, a grid
// looping over blocks of units, other splits.
var qmvTunings = []mvTuning{
	{quantOld: true}, {quantNoMMA: true, feats: 1}, {quantNoMMA: true, feats: 2}, {quantNoMMA: true, feats: 4},
	{quantNoMMA: true, quantNoStage: true}, {quantNoMMA: true, quantGrid: 1, warps: 8},
	{quantNoMMA: true, quantGrid: 1, feats: 1, quantNoStage: true}, {quantNoMMA: true, split: 1},
	{quantNoMMA: true, warps: 8, split: 8, feats: 4}, {quantNoMMA: true, warps: 1}, {quantNoMMA: true, warps: 2, split: 2, feats: 1},
	// The one-row kernels (qmvr_*) with each unit size and block.
	{quantNoMMA: true, quantRow: true}, {quantRow: true, feats: 1}, {quantRow: true, feats: 2, warps: 8}, {quantRow: true, feats: 1, warps: 1},
	// One row on the split-K kernels where the default takes qmvr.
	{quantNoMMA: true, quantNoRow: true}, {quantNoRow: true, feats: 4, quantNoStage: true},
	// One row on the staged kernels (qmvi_*, qmvh_*, the default) in other
	// shapes: one warp a block and a block an SM (every block looping over
	// many blocks of units), the most warps, each unit size, no split; and
	// on the f32 kernels.
	{qmvx: [3]int{1, 1, 1}}, {qmvx: [3]int{16, 1, 4}}, {qmvx: [3]int{4, 8, 2}, split: 1}, {qmvx: [3]int{16, 2, 4}, split: 4},
	{quantNoStaged: true},
	// The tensor-core kernels' launch shapes, from one row (the default
	// takes qmma from qmmaMinRows).
	{quantMMARows: 1}, {quantMMARows: 1, split: 1}, {quantMMARows: 1, warps: 16}, {quantMMARows: 1, warps: 16, split: 16},
	{quantMMARows: 1, warps: 4, split: 2}, {quantMMARows: 1, warps: 1}, {quantMMARows: 1, warps: 2, split: 1},
}

// TestQuantMatVec runs every quant_matmul case of the table with the
// automatic launch (the tensor-core qmma kernels where they apply, from
// qmmaMinRows rows), against its reference and the CPU, then with every
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

// TestQuantRowBatches runs the one-row cases of quant_matmul and the
// fused products with the one-row kernels (quantRow) compiled to hold two
// vectors a lane (QMVR_VMAX), so that rows of more vectors take several
// batches, and with their loads after pdl_entry (QMVR_EARLY=0): the paths
// the default build does not take. (It compiles every kernel file anew.)
func TestQuantRowBatches(t *testing.T) {
	for _, vmax := range []string{"2"} {
		t.Run("vmax"+vmax, func(t *testing.T) {
			be := newTestBackend(t, Options{Defines: []string{"-DQMVR_VMAX=" + vmax, "-DQMVR_EARLY=0"}})
			n := 0
			for _, c := range optest.Cases() {
				if !slices.ContainsFunc([]string{"quant_matmul/", "quant_grouped_matmul/", "quant_matmul_swiglu/", "quant_norm_matmul/"},
					func(p string) bool { return strings.HasPrefix(c.Name, p) }) || c.Inputs[0].Shape.Rows() != 1 {
					continue
				}
				n++
				t.Run(c.Name, func(t *testing.T) {
					for _, tune := range []mvTuning{{quantRow: true}, {quantRow: true, feats: 1}} {
						be.mv = tune
						optest.Check(t, be, c)
					}
				})
			}
			if n == 0 {
				t.Fatal("no one-row quantized product cases in the table")
			}
		})
	}
}

// quantCaseTol is tol of the loosest format of case c's quantized weights,
// times the factor the case's own bound puts on TolQuantRows of its
// formats (2 for a SwiGLU's two products, 3 for a whole MLP).
func quantCaseTol(c optest.Case, tol func(graph.DType) float64) float64 {
	base, want := 0.0, 0.0
	for _, in := range c.Inputs {
		if r, ok := optest.TolQuantRows[in.DType]; ok {
			base, want = max(base, r), max(want, tol(in.DType))
		}
	}
	if base == 0 {
		return 0 // no quantized weight: every check fails
	}
	return want * max(1, c.Tol/base)
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
			c.Tol = quantCaseTol(c, m.tol)
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

// TestQmmaPlan needs no device: quant_matmul's qmmaMinRows..8 rows (or
// from the tuning's quantMMARows) take the tensor-core kernels exactly
// where 16-byte code vectors fit, in scale groups of a power of two of
// them, and x's fragments fit in qmmaSharedMax, with the kernel of the
// fewest row sets that hold the rows, and a grid whose tiles of 16
// features cover the output.
func TestQmmaPlan(t *testing.T) {
	u4 := func(rows, k, n, bc int, aligned bool) qmvIn {
		return qmvIn{name: "u4", perVec: 32, rows: rows, k: k, nOut: n, stride: (k + 1) / 2, blockCols: bc, aligned: aligned}
	}
	i8 := func(rows, k, n, bc int) qmvIn {
		return qmvIn{name: "i8", perVec: 16, rows: rows, k: k, nOut: n, stride: k, blockCols: bc, aligned: true}
	}
	f8 := func(rows, k, n int) qmvIn {
		return qmvIn{name: "f8", perVec: 16, rows: rows, k: k, nOut: n, stride: k, blockCols: 128, aligned: true}
	}
	for _, tc := range []struct {
		in   qmvIn
		ok   bool
		sets int
	}{
		{u4(1, 2560, 2560, 32, true), true, 1}, {u4(2, 2560, 2560, 32, true), true, 1}, {u4(3, 7168, 2560, 32, true), true, 2},
		{u4(8, 2560, 7168, 32, true), true, 4}, {u4(5, 64, 33, 64, true), true, 4}, {i8(4, 4096, 2560, 32), true, 2},
		{f8(1, 2560, 4096), true, 1}, {f8(7, 160, 17), true, 4}, {i8(1, 96, 1, 32), true, 1},
		// Not 16-byte vectors: the CUDA-core kernels.
		{u4(1, 2560, 2560, 32, false), false, 0}, {u4(1, 48, 7, 32, true), false, 0}, {u4(1, 2560, 40, 16, true), false, 0},
		{u4(2, 192, 9, 96, true), false, 0}, {i8(1, 192, 9, 48), false, 0},
		{i8(1, 100, 33, 32), false, 0}, {i8(1, 2560, 9, 8), false, 0}, {f8(1, 257, 300), false, 0},
		// x's fragments past qmmaSharedMax (8 rows of 7168).
		{u4(8, 7168, 2560, 32, true), false, 0}, {i8(8, 7168, 13, 32), false, 0},
		// Not decode rows.
		{u4(9, 2560, 2560, 32, true), false, 0},
	} {
		for _, tune := range []mvTuning{{}, {warps: 16}, {warps: 4, split: 1}, {split: 2}, {warps: 1}, {warps: 32, split: 64},
			{quantNoMMA: true}, {quantOld: true}, {quantMMARows: 1}, {quantMMARows: 1, warps: 4, split: 2}, {quantMMARows: 4}} {
			l, ok := qmmaPlan(tune, tc.in, 132)
			minRows := qmmaMinRows
			if tune.quantMMARows > 0 {
				minRows = tune.quantMMARows
			}
			want := tc.ok && !tune.quantNoMMA && !tune.quantOld && tc.in.rows >= minRows
			if ok != want {
				t.Errorf("qmmaPlan(%+v, %+v): ok %v, want %v", tune, tc.in, ok, want)
				continue
			}
			if !ok {
				continue
			}
			if name := fmt.Sprintf("qmma_%s_n%d", tc.in.name, tc.sets); l.name != name {
				t.Errorf("qmmaPlan(%+v, %+v) = %+v: want kernel %s", tune, tc.in, l, name)
			}
			if !slices.Contains(qmmaKernelNames(), l.name) || !slices.Contains(quantKernels, l.name) {
				t.Errorf("qmmaPlan(%+v, %+v): kernel %s is not registered", tune, tc.in, l.name)
			}
			tiles := (tc.in.nOut + 15) / 16
			steps := (tc.in.k + 4*tc.in.perVec - 1) / (4 * tc.in.perVec)
			if l.warps < 1 || l.warps > qmmaMaxWarps || l.warps&(l.warps-1) != 0 || l.split < 1 || l.warps%l.split != 0 ||
				l.grid*(l.warps/l.split) < tiles || (l.grid-1)*(l.warps/l.split) >= tiles {
				t.Errorf("qmmaPlan(%+v, %+v) = %+v: bad shape", tune, tc.in, l)
			}
			if tune.split == 0 && l.split > steps {
				t.Errorf("qmmaPlan(%+v, %+v) = %+v: %d warps for %d steps", tune, tc.in, l, l.split, steps)
			}
			if (1<<l.groupShift)*tc.in.perVec != tc.in.blockCols {
				t.Errorf("qmmaPlan(%+v, %+v) = %+v: groups of 2^%d vectors, want %d codes", tune, tc.in, l, l.groupShift, tc.in.blockCols)
			}
			if need := tc.in.rows * (steps*tc.in.perVec + 4) * 16; l.shared != need || need > qmmaSharedMax {
				t.Errorf("qmmaPlan(%+v, %+v) = %+v: shared %d, want %d", tune, tc.in, l, l.shared, need)
			}
		}
	}
}

// qmmaTol is the NMSE the tensor-core decode product keeps against the
// float64 reference: codes are exact in f16, x split hi + lo in f16 after
// a power-of-two scaling keeps about 22 bits of each activation, and the
// sums and scales are f32; the bf16 rounding that TolQuant allows for would
// be 1e-6 or more.
const qmmaTol = 1e-9

// TestQuantMMAPrecision runs the quant_matmul cases of 1..8 rows with the
// automatic launch, qmma from one row, and reports each format's largest
// NMSE of a row of the output against the float64 reference, which must
// stay within qmmaTol.
func TestQuantMMAPrecision(t *testing.T) {
	be := newTestBackend(t, Options{})
	be.mv = mvTuning{quantMMARows: 1}
	worst := map[string]float64{}
	for _, c := range optest.Cases() {
		if !strings.HasPrefix(c.Name, "quant_matmul/") || c.Inputs[0].Shape.Rows() > matvecMaxRows {
			continue
		}
		outs, err := runPlain(be, c)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		want := c.Ref(caseData(c))[0]
		got, n := outs[0], c.Inputs[1].Shape[0]
		for r := 0; r*n < len(want); r++ {
			e := optest.NMSE(got[r*n:(r+1)*n], want[r*n:(r+1)*n])
			if e > qmmaTol {
				t.Errorf("%s: row %d: NMSE %.3g against the reference, want at most %g", c.Name, r, e, qmmaTol)
			}
			f := c.Inputs[1].DType.String()
			worst[f] = max(worst[f], e)
		}
	}
	t.Logf("largest NMSE by codes: %v", worst)
}

// qmvxTol is the NMSE the staged one-row products keep against the
// float64 reference, by the codes' dtype: x rounded to a step of at most
// 2^-13 of its vector's largest magnitude m (4-bit and i8 codes, integer
// dot products; the codes, their products and the scales exact, the sums
// f32) is an NMSE of about 4e-9 for x uniform in ±m, at most 2.6e-8 in
// an output of the table (an i8 group's two features; H200, session 10);
// FP8's f16 x (2^-12 of m at worst) and f16 sums over a vector's 8
// products a half are about 1e-7 (5.6e-7 at most in the table). A bf16
// rounding of x (1e-6) fails the integers' bound.
var qmvxTol = map[graph.DType]float64{graph.U8: 1e-7, graph.I8: 1e-7, graph.F8E4M3: 2e-6}

// TestQuantStagedPrecision runs the one-row quantized cases of quant_matmul
// and of the fused products with the default launch (the staged kernels)
// and in PrecisionExact (the f32 kernels), and bounds each output's NMSE
// against the float64 reference at qmvxTol of its codes (f32's for
// PrecisionExact); then puts a NaN, and an infinity, into x and wants
// every output of the plain product non-finite, as f32 arithmetic gives.
func TestQuantStagedPrecision(t *testing.T) {
	be := newTestBackend(t, Options{})
	exact := newTestBackend(t, Options{Precision: PrecisionExact})
	worst, n := map[graph.DType]float64{}, 0
	for _, c := range optest.Cases() {
		if c.Inputs[0].Shape.Rows() != 1 || len(c.Inputs) < 2 ||
			!slices.ContainsFunc([]string{"quant_matmul/", "quant_grouped_matmul/", "quant_matmul_swiglu/", "quant_norm_matmul/"},
				func(p string) bool { return strings.HasPrefix(c.Name, p) }) {
			continue
		}
		dt := c.Inputs[1].DType
		if slices.ContainsFunc(c.Inputs[1:], func(in optest.Tensor) bool { return in.Kind == graph.Weight && qmvxTol[in.DType] > qmvxTol[dt] }) {
			continue // a group of several formats, which the first's bound would not hold: their own cases cover them
		}
		n++
		for _, b := range []*Backend{be, exact} {
			tol := qmvxTol[dt]
			if b == exact {
				tol = optest.TolQuantF32[dt]
			}
			outs, err := runPlain(b, c)
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
				continue
			}
			want := c.Ref(caseData(c))
			for i := range want {
				e := optest.NMSE(outs[i], want[i])
				if b == be {
					worst[dt] = max(worst[dt], e)
				}
				if e > tol {
					t.Errorf("%s (precision %s): output %d: NMSE %.3g against the reference, want at most %g", c.Name, b.opts.Precision, i, e, tol)
				}
			}
		}
		if !strings.HasPrefix(c.Name, "quant_matmul/") {
			continue
		}
		for _, bad := range []float64{math.NaN(), math.Inf(-1)} {
			cb := c
			cb.Inputs = slices.Clone(c.Inputs)
			cb.Inputs[0].Data = slices.Clone(c.Inputs[0].Data)
			cb.Inputs[0].Data[len(cb.Inputs[0].Data)/2] = bad
			outs, err := runPlain(be, cb)
			if err != nil {
				t.Errorf("%s with x holding %v: %v", c.Name, bad, err)
				continue
			}
			for j, v := range outs[0] {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					t.Errorf("%s with x holding %v: output %d is %v, want not finite", c.Name, bad, j, v)
					break
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no one-row quantized cases in the table")
	}
	t.Logf("%d one-row quantized cases; largest NMSE of the staged kernels by codes: %v", n, worst)
}

// TestParseQMVXShape needs no device: REEL_QMVX_SHAPE is empty or three
// counts.
func TestParseQMVXShape(t *testing.T) {
	for v, want := range map[string][3]int{"": {}, "16,2,2": {16, 2, 2}, "0,0,4": {0, 0, 4}, "16, 1, 1": {16, 1, 1}} {
		if got, err := parseQMVXShape(v); err != nil || got != want {
			t.Errorf("parseQMVXShape(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"16", "16,2", "64,1,1", "32,1,1", "16,2,3", "a,b,c", "-1,0,0", "1,2,3,4"} {
		if _, err := parseQMVXShape(v); err == nil || !strings.Contains(err.Error(), "REEL_QMVX_SHAPE") {
			t.Errorf("parseQMVXShape(%q): %v, want an error naming REEL_QMVX_SHAPE", v, err)
		}
	}
}

// runPlain runs case c as built (optest.Plain) on be and gives its
// outputs, or the error of the run or the one the backend recorded.
func runPlain(be *Backend, c optest.Case) ([][]float64, error) {
	res, err := optest.Run(be, c, optest.Plain)
	if err == nil {
		err = res.Err
	}
	return res.Outputs, err
}

// caseData is a case's inputs' values.
func caseData(c optest.Case) [][]float64 {
	d := make([][]float64, len(c.Inputs))
	for i, in := range c.Inputs {
		d[i] = in.Data
	}
	return d
}

// TestParseQMMARows needs no device: REEL_QMMA_ROWS is empty (the default)
// or a number of decode rows.
func TestParseQMMARows(t *testing.T) {
	for v, want := range map[string]int{"": 0, "1": 1, "2": 2, "8": matvecMaxRows} {
		if got, err := parseQMMARows(v); err != nil || got != want {
			t.Errorf("parseQMMARows(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "9", "-1", "two", "1.5"} {
		if _, err := parseQMMARows(v); err == nil || !strings.Contains(err.Error(), "number of rows") {
			t.Errorf("parseQMMARows(%q): %v, want an error naming the rows", v, err)
		}
	}
}

// TestQuantSlerpStaged runs the op table's one-row quantized slerp
// products with the slerp computed as the staged kernels stage h
// (REEL_SLERP_STAGED=1): each takes one slerp-form launch where its K is
// whole vectors (the slerp row kernel and the product otherwise), its h
// within f32 rounding of the float64 reference, its products within the
// staged kernels' bounds.
func TestQuantSlerpStaged(t *testing.T) {
	be := newTestBackend(t, Options{})
	be.mv.slerpStaged = true
	n := 0
	for _, c := range optest.Cases() {
		if c.Inputs[0].Shape.Rows() != 1 || !strings.HasPrefix(c.Name, "quant_slerp_matmul") {
			continue
		}
		dt := c.Inputs[3].DType
		if slices.ContainsFunc(c.Inputs[3:], func(in optest.Tensor) bool {
			return in.Kind == graph.Weight && in.DType.IsQuantized() && in.DType != dt
		}) {
			continue // a group of several formats: one launch takes one
		}
		n++
		var names []string
		be.bound = &names
		outs, err := runPlain(be, c)
		be.bound = nil
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		k := c.Inputs[0].Shape.Last()
		_, _, perVec, err := quantCode(dt)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		form := slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "qmvsg") || strings.HasPrefix(s, "qmvssw") })
		if want := k%perVec == 0; form != want {
			t.Errorf("%s: kernels %v: a slerp form %v, want %v", c.Name, names, form, want)
		}
		want := c.Ref(caseData(c))
		for i := range want {
			tol := qmvxTol[dt]
			if i == 0 {
				tol = 1e-13 // h, in f64 rounded to f32
			}
			if e := optest.NMSE(outs[i], want[i]); e > tol {
				t.Errorf("%s: output %d: NMSE %.3g against the reference, want at most %g", c.Name, i, e, tol)
			}
		}
	}
	if n == 0 {
		t.Fatal("no one-row quantized slerp cases in the table")
	}
}

// TestParseDecodeSwitches needs no device: the decode switches New reads
// from the environment, their defaults, and a clear error for any other
// value.
func TestParseDecodeSwitches(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	var t0 mvTuning
	if err := parseDecodeSwitches(&t0, env(nil)); err != nil || t0.quantNoStaged || t0.slerpStaged || t0.qkvFold || t0.prefetch != 0 {
		t.Fatalf("defaults: %+v, %v", t0, err)
	}
	var t1 mvTuning
	on := map[string]string{"REEL_QMV_STAGED": "0", "REEL_SLERP_STAGED": "1", "REEL_QKV_ATTN": "1", "REEL_MV_PREFETCH_MB": "16"}
	if err := parseDecodeSwitches(&t1, env(on)); err != nil || !t1.quantNoStaged || !t1.slerpStaged || !t1.qkvFold || t1.prefetch != 16<<20 {
		t.Fatalf("%v: %+v, %v", on, t1, err)
	}
	for _, bad := range []map[string]string{{"REEL_QMV_STAGED": "yes"}, {"REEL_SLERP_STAGED": "2"}, {"REEL_QKV_ATTN": "on"}, {"REEL_MV_PREFETCH_MB": "-1"}, {"REEL_MV_PREFETCH_MB": "lots"}} {
		var tb mvTuning
		err := parseDecodeSwitches(&tb, env(bad))
		for name := range bad {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%v: %v, want an error naming %s", bad, err, name)
			}
		}
	}
}
