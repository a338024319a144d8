package cuda

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// copyBound is the H200's measured device copy bandwidth (read + write) that
// the README compares against.
const copyBound = 4.24e12

// TestMvPlan needs no device: every launch shape covers its units with
// whole groups and splits K into at most the warps of a block; on Dory's
// shapes the default is the split measured best on the H200.
func TestMvPlan(t *testing.T) {
	for _, s := range [][2]int{{2560, 2560}, {4096, 2560}, {2560, 4096}, {7168, 2560}, {2560, 7168}, {131072, 2560}, {7, 33}, {300, 257}, {1, 8}} {
		for _, feats := range []int{1, 2} {
			for _, tune := range []mvTuning{{}, {warps: 8}, {split: 2}, {warps: 2, split: 8}, {loads: 8}} {
				n, k := s[0], s[1]
				units := (n + feats - 1) / feats
				sh := mvPlan(tune, units, feats, k, 8, 0, 132)
				if sh.split < 1 || sh.split > sh.warps || sh.warps > mvMaxWarps || sh.warps%sh.split != 0 ||
					sh.blocks*(sh.warps/sh.split) < units || (sh.blocks-1)*(sh.warps/sh.split) >= units {
					t.Errorf("mvPlan(%+v, %d units of %d, k %d) = %+v", tune, units, feats, k, sh)
				}
			}
		}
	}
	for _, c := range []struct{ n, k, split int }{
		{2560, 2560, 4}, {4096, 2560, 2}, {2560, 4096, 4}, {7168, 2560, 1}, {2560, 7168, 4}, {131072, 2560, 1}, {10240, 2560, 1},
	} {
		if sh := mvPlan(mvTuning{}, c.n/mvFeats, mvFeats, c.k, 8, 0, 132); sh.split != c.split {
			t.Errorf("mvPlan(%d x %d) = %+v, want split %d", c.n, c.k, sh, c.split)
		}
	}
	if sh := mvPlan(mvTuning{}, 2560, 1, 8192, 8, 2048, 132); sh.split != 4 {
		t.Errorf("a chunk cap of 2048 over 8192 inputs: split %d, want 4", sh.split)
	}
}

// productCase is a product case long enough in K for the matvec's split-K
// path: one weight (matmul), several (grouped_matmul, rows ns) or a gate
// and an up weight (matmul_swiglu, with scales).
func productCase(rows, k int, ns []int, dt graph.DType, swiglu bool) optest.Case {
	seed := uint64(rows*1000003 + k*1009 + ns[0]*7 + len(ns))
	next := func() float64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return float64(int64(seed>>11)%2000)/1000 - 1
	}
	round := func(v float64) float64 {
		switch dt {
		case graph.BF16:
			return float64(half.BF16ToF32(half.F32ToBF16(float32(v))))
		case graph.F16:
			return float64(half.F16ToF32(half.F32ToF16(float32(v))))
		}
		return float64(float32(v))
	}
	x := optest.Tensor{Name: "x", Kind: graph.Input, DType: graph.F32, Shape: graph.Shape{rows, k}, Data: make([]float64, rows*k)}
	for i := range x.Data {
		x.Data[i] = float64(float32(next()))
	}
	in := []optest.Tensor{x}
	if swiglu {
		ns = []int{ns[0], ns[0]} // gate, up
	}
	for i, n := range ns {
		w := optest.Tensor{Name: fmt.Sprintf("w%d", i), Kind: graph.Weight, DType: dt, Shape: graph.Shape{n, k}, Data: make([]float64, n*k)}
		for j := range w.Data {
			w.Data[j] = round(next())
		}
		in = append(in, w)
	}
	if swiglu {
		for _, name := range []string{"sg", "su"} {
			s := optest.Tensor{Name: name, Kind: graph.Input, DType: graph.F32, Shape: graph.Shape{ns[0]}, Data: make([]float64, ns[0])}
			for j := range s.Data {
				s.Data[j] = float64(float32(0.05 * next()))
			}
			in = append(in, s)
		}
	}
	tol := optest.TolF32
	switch {
	case dt != graph.F32 && rows <= matvecMaxRows:
		tol = optest.TolSplit // decode rows: x split hi + lo at most
	case dt == graph.BF16:
		tol = optest.TolBF16
	case dt == graph.F16:
		tol = optest.TolF16
	}
	name := fmt.Sprintf("matmul/%s/%dx%dx%v", dt, rows, k, ns)
	if swiglu {
		name = fmt.Sprintf("matmul_swiglu/%s/%dx%dx%d", dt, rows, k, ns[0])
	}
	return optest.Case{
		Name:   name,
		Inputs: in,
		Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
			switch {
			case swiglu:
				return b.Apply(ops.OpMatMulSwiGLU, nil, 1, in...)
			case len(ns) == 1:
				return []*graph.Value{ops.MatMul(b, in[0], in[1])}
			}
			return ops.GroupedMatMul(b, in[0], in[1:]...)
		},
		Ref: func(in [][]float64) [][]float64 {
			if swiglu {
				f := ns[0]
				g, u := optest.RefMatMul(in[0], k, in[1]), optest.RefMatMul(in[0], k, in[2])
				y := make([]float64, len(g))
				for i := range y {
					a := g[i] * in[3][i%f]
					y[i] = a / (1 + math.Exp(-a)) * (u[i] * in[4][i%f])
				}
				return [][]float64{y}
			}
			var out [][]float64
			for i := range ns {
				out = append(out, optest.RefMatMul(in[0], k, in[1+i]))
			}
			return out
		},
		Tol: tol,
	}
}

// matvecCases are products for the matvec kernels: long K (split across
// warps), odd K (element loads), grouped weights whose rows straddle
// units, matmul_swiglu, one to eight rows.
func matvecCases() []optest.Case {
	return []optest.Case{
		productCase(1, 4096, []int{300}, graph.BF16, false), productCase(3, 7168, []int{64}, graph.F16, false),
		productCase(8, 5000, []int{33}, graph.F32, false), productCase(2, 2560, []int{2560}, graph.BF16, false),
		productCase(1, 2560, []int{9}, graph.F32, false), productCase(1, 1000, []int{17}, graph.BF16, false),
		productCase(1, 2560, []int{33, 7, 129, 64, 3}, graph.BF16, false), productCase(5, 1024, []int{31, 1, 40}, graph.F32, false),
		productCase(1, 2560, []int{257}, graph.BF16, true), productCase(6, 4104, []int{70}, graph.F16, true),
		productCase(1, 999, []int{45}, graph.F32, true), productCase(8, 3072, []int{96}, graph.BF16, true),
		// Windows (cuBLAS by default from windowMinRows, mv_* with
		// winRows −1): long K, K not a multiple of 32, grouped rows of
		// several sizes.
		productCase(5, 7168, []int{100}, graph.BF16, false), productCase(8, 7168, []int{40}, graph.F16, false),
		productCase(4, 2568, []int{17, 40}, graph.F16, false), productCase(7, 72, []int{33}, graph.BF16, true),
		productCase(2, 40, []int{16}, graph.F16, true), productCase(3, 2560, []int{4096, 1024, 1024, 4096}, graph.BF16, false),
	}
}

// mvTunings are launch shapes every matvec case must pass with: the
// default (windows of 16-bit weights on cuBLAS from windowMinRows rows),
// cuBLAS from one row, and
// the matvec kernels' shapes with the windows kept on them (winRows −1).
var mvTunings = []mvTuning{{}, {winRows: 1}, {winRows: -1}, {feats: 1, winRows: -1}, {split: 1, winRows: -1},
	{warps: 8, split: 8, winRows: -1}, {warps: 8, split: 2, feats: 1, winRows: -1}, {warps: 1, winRows: -1}, {warps: 2, split: 2, winRows: -1},
	{feats: 1, split: 2, winRows: -1}}

// TestMatVecSplitK runs the matvec cases with the automatic launch shape
// against their references and the CPU, then with every mvTunings shape.
func TestMatVecSplitK(t *testing.T) {
	be := newTestBackend(t, Options{})
	ref := cpu.New(0)
	for _, c := range matvecCases() {
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
			for _, tune := range mvTunings[1:] {
				be.mv = tune
				optest.Check(t, be, c)
			}
			be.mv = mvTuning{}
		})
	}
}

// TestMatVecDeterministic runs grouped and swiglu products eagerly twice and
// recorded once: the results must agree bit for bit.
func TestMatVecDeterministic(t *testing.T) {
	be := newTestBackend(t, Options{})
	for _, c := range []optest.Case{productCase(1, 2560, []int{300, 64, 64, 300}, graph.BF16, false), productCase(2, 7168, []int{200}, graph.BF16, true),
		productCase(5, 2560, []int{300, 64, 64, 300}, graph.F16, false), productCase(8, 7168, []int{50}, graph.BF16, false),
		productCase(4, 2560, []int{70}, graph.F16, true), productCase(5, 7168, []int{2560}, graph.BF16, false)} {
		for _, tune := range []mvTuning{{}, {winRows: -1}} { // windows on cuBLAS, on the matvec kernels
			be.mv = tune
			checkDeterministic(t, be, c)
		}
		be.mv = mvTuning{}
	}
}

// checkDeterministic runs case c eagerly twice and recorded once: the
// results must agree bit for bit.
func checkDeterministic(t *testing.T, be *Backend, c optest.Case) {
	t.Helper()
	b := bindCase(t, be, c)
	b.reset(t, be, 0)
	st := b.steps(t, be)
	run := func() [][]float64 {
		for _, s := range st {
			if err := s.Run(); err != nil {
				t.Fatal(err)
			}
		}
		return b.results(t, be)
	}
	first, second := run(), run()
	rec, err := be.Record(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Replay(); err != nil {
		t.Fatal(err)
	}
	replayed := b.results(t, be)
	rec.Close()
	for i := range first {
		for j := range first[i] {
			if math.Float64bits(first[i][j]) != math.Float64bits(second[i][j]) || math.Float64bits(first[i][j]) != math.Float64bits(replayed[i][j]) {
				t.Fatalf("%s: output %d[%d]: %v, %v, replayed %v", c.Name, i, j, first[i][j], second[i][j], replayed[i][j])
			}
		}
	}
}

// TestMatVecSweep times the matvec kernels over launch shapes (2, 4 or 8
// warps a block, each split, one or two features a unit) and compiled
// loads per lane on gemvShapes, for tuning: set REEL_MV_SWEEP (e.g. "2 4
// 8", the MV_LOADS values to compile) to run it.
func TestMatVecSweep(t *testing.T) {
	env := os.Getenv("REEL_MV_SWEEP")
	if env == "" {
		t.Skip("REEL_MV_SWEEP is not set")
	}
	reps := 20
	for _, f := range strings.Fields(env) {
		loads, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			be := newTestBackend(t, Options{Defines: []string{"-DMV_LOADS=" + f}})
			for _, s := range gemvShapes {
				if s.form == "separate" || s.form == "swiglu_split" || s.rows != 1 {
					continue
				}
				gb := newGEMVBench(t, be, s, 1)
				var tunes []mvTuning
				for _, warps := range []int{2, mvWarps, 8} {
					for _, split := range []int{0, 1, 2, 4} {
						for _, feats := range []int{1, 2} {
							if split <= warps && (feats == 1 || s.form == "matmul" || s.form == "grouped") {
								tunes = append(tunes, mvTuning{loads: loads, warps: warps, split: split, feats: feats})
							}
						}
					}
				}
				best, bestT := 0.0, mvTuning{}
				for _, tune := range tunes {
					be.mv = tune
					per, gbps := gb.time(t, be, gb.steps(t, be, false), reps)
					fmt.Printf("sweep %-20s loads=%-2d warps=%d split=%d feats=%d: %6.0f GB/s %5.1f%% %7.2f us\n",
						s.name, loads, tune.warps, tune.split, tune.feats, gbps, 100*gbps*1e9/copyBound, float64(per.Nanoseconds())/1e3)
					if gbps > best {
						best, bestT = gbps, tune
					}
				}
				fmt.Printf("best  %-20s %+v: %.0f GB/s %.1f%%\n", s.name, bestT, best, 100*best*1e9/copyBound)
				be.mv = mvTuning{}
				gb.free()
			}
		}()
	}
}

// TestSegEnds: the kernels' segment ends are the running sums of the
// segments' features, the total repeated past the last segment.
func TestSegEnds(t *testing.T) {
	n := func(x int) int { return x }
	for _, c := range []struct {
		segs []int
		want [mvSegs - 1]int32
	}{
		{[]int{7}, [3]int32{7, 7, 7}},
		{[]int{3, 4}, [3]int32{3, 7, 7}},
		{[]int{1, 2, 3, 4}, [3]int32{1, 3, 6}},
	} {
		if got := segEnds(c.segs, n); got != c.want {
			t.Errorf("segEnds(%v) = %v, want %v", c.segs, got, c.want)
		}
	}
}

// TestMVPrefetch needs no device: the chunks a matvec's warps ask L2 for
// before their wait.
func TestMVPrefetch(t *testing.T) {
	for _, c := range []struct {
		budget, bytes, chunks int
		want                  int32
	}{
		{0, 1 << 20, 10, 0},                             // off (the default): the kernel's two batches
		{16 << 20, 13 << 20, 16, 16},                    // a 2560x2560 bf16 product within 16 MB: all of it
		{16 << 20, 32 << 20, 10, 5},                     // twice the budget: half
		{16 << 20, 73 << 20, 20, 4},                     // 16 of 73 MB: 4.4 chunks, rounded down
		{1 << 20, 73 << 20, 20, 0},                      // a budget below a chunk: the two batches
		{16 << 20, 0, 10, 0}, {16 << 20, 1 << 20, 0, 0}, // nothing to read
		{8 << 20, 8 << 20, 7, 7}, // exactly the budget
	} {
		if got := mvPrefetch(c.budget, c.bytes, c.chunks); got != c.want {
			t.Errorf("mvPrefetch(%d, %d, %d) = %d, want %d", c.budget, c.bytes, c.chunks, got, c.want)
		}
	}
}
