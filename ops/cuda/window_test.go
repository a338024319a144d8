package cuda

import (
	"math"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestWindowRows needs no device: REEL_WINDOW_CUBLAS's values, and which
// products take cuBLAS as a window.
func TestWindowRows(t *testing.T) {
	for v, want := range map[string]int{"": windowMinRows, "0": 0, "1": 1, "5": 5, "8": 8} {
		if got, err := parseWindowRows(v); err != nil || got != want {
			t.Errorf("parseWindowRows(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"9", "-1", "two", "2.5"} {
		if _, err := parseWindowRows(v); err == nil {
			t.Errorf("parseWindowRows(%q): no error", v)
		}
	}
	be := &Backend{blas: nil, winRows: windowMinRows}
	if be.windowed(1, 4) {
		t.Error("a window without cuBLAS")
	}
	be.blas = new(cu.BLAS) // only its presence counts
	for _, c := range []struct {
		wt         int32
		rows       int
		tune, want bool
	}{{1, 1, false, false}, {1, 2, false, false}, {1, 3, false, true}, {2, 8, false, true}, {1, 9, false, false}, {0, 4, false, false}, {1, 4, true, false}} {
		be.mv = mvTuning{}
		if c.tune {
			be.mv.winRows = -1
		}
		if got := be.windowed(c.wt, c.rows); got != c.want {
			t.Errorf("windowed(wt %d, %d rows, tuning %+v) = %v, want %v", c.wt, c.rows, be.mv, got, c.want)
		}
	}
	be.mv, be.winRows = mvTuning{}, 0
	if be.windowed(1, 4) {
		t.Error("REEL_WINDOW_CUBLAS=0 takes a window to cuBLAS")
	}
}

// TestWindowSplitBound needs no device: win_half's split of x (hi + lo in
// bf16; in f16 after the row's power-of-two scale), multiplied exactly as
// the tensor cores do and summed in f64, stays within a twentieth of
// optest.TolSplit of the f32 product (about 5e-12 in bf16, 2e-15 in f16:
// the rest is room for cuBLAS's f32 sums), at ranges
// from 1e-30 to 1e30 a row, while one rounding of x to bf16 fails it.
func TestWindowSplitBound(t *testing.T) {
	const k, n = 2560, 64
	seed := uint64(12345)
	next := func() float64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return float64(int64(seed>>11)%2000001)/1e6 - 1
	}
	w := make([]float64, n*k)
	for i := range w {
		w[i] = float64(half.BF16ToF32(half.F32ToBF16(float32(next()))))
	}
	product := func(x []float64) []float64 {
		y := make([]float64, n)
		for j := range y {
			for i, v := range x {
				y[j] += w[j*k+i] * v
			}
		}
		return y
	}
	split := func(x []float32, f16 bool) []float64 {
		sc := 1.0
		if f16 {
			m := float32(0)
			for _, v := range x {
				m = max(m, float32(math.Abs(float64(v))))
			}
			_, e := math.Frexp(float64(m)) // m in [2^(e-1), 2^e)
			sc = math.Ldexp(1, min(100, 15-e))
		}
		out := make([]float64, len(x))
		for i, v := range x {
			s := float32(float64(v) * sc)
			var hi, lo float32
			if f16 {
				hi = half.F16ToF32(half.F32ToF16(s))
				lo = half.F16ToF32(half.F32ToF16(s - hi))
			} else {
				hi = half.BF16ToF32(half.F32ToBF16(s))
				lo = half.BF16ToF32(half.F32ToBF16(s - hi))
			}
			out[i] = (float64(hi) + float64(lo)) / sc
		}
		return out
	}
	for _, scale := range []float64{1e-30, 1e-6, 1, 1e6, 1e30} {
		x := make([]float32, k)
		xf := make([]float64, k)
		once := make([]float64, k)
		for i := range x {
			x[i] = float32(scale * next())
			xf[i] = float64(x[i])
			once[i] = float64(half.BF16ToF32(half.F32ToBF16(x[i])))
		}
		want := product(xf)
		for _, f16 := range []bool{false, true} {
			if e := optest.NMSE(product(split(x, f16)), want); !(e <= optest.TolSplit/20) {
				t.Errorf("x of %g, f16 %v: NMSE %.3g of the split, want at most %g", scale, f16, e, optest.TolSplit/20)
			}
		}
		if e := optest.NMSE(product(once), want); !(e > optest.TolSplit) {
			t.Errorf("x of %g: NMSE %.3g of one bf16 rounding passes TolSplit %g", scale, e, optest.TolSplit)
		}
	}
}

// TestWindowDeterministic runs the op table's windows (optest's window/
// cases) eagerly twice and recorded once on cuBLAS's route: the results
// must agree bit for bit (cuBLAS picks one algorithm for a shape, its
// alignment and workspace, with atomics off); each case must have taken
// the route (its scratch grown; from 2 rows, REEL_WINDOW_CUBLAS=2, as
// some cases have fewer than windowMinRows) and pass its bound on the
// matvec kernels too (REEL_WINDOW_CUBLAS=0).
func TestWindowDeterministic(t *testing.T) {
	be := newTestBackend(t, Options{})
	if !be.HasBLAS() {
		t.Skip("no cuBLAS: windows stay on the matvec kernels")
	}
	n := 0
	for _, c := range optest.Cases() {
		if !strings.HasPrefix(c.Name, "window/") {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			be.mv = mvTuning{winRows: 2}
			be.win = reused{}
			checkDeterministic(t, be, c)
			if be.win.bytes == 0 {
				t.Errorf("%s did not take cuBLAS's window", c.Name)
			}
			be.mv = mvTuning{winRows: -1}
			defer func() { be.mv = mvTuning{} }()
			optest.Check(t, be, c)
		})
	}
	if n == 0 {
		t.Fatal("no window/ cases in the op table")
	}
}
