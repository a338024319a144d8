package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestMoEMaxTiles needs no device: the tensor-core expert product's grid
// (moeMaxTiles) covers the tiles of every routing, exactly when each
// expert with units has one past whole tiles.
func TestMoEMaxTiles(t *testing.T) {
	tiles := func(counts []int) int {
		n := 0
		for _, c := range counts {
			n += (c + moeMMAUnits - 1) / moeMMAUnits
		}
		return n
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][2]int{{1, 1}, {5, 64}, {64, 1}, {65, 1}, {130, 5}, {520, 9}, {5120, 64}, {5120, 512}, {40, 7}} {
		units, e := s[0], s[1]
		bound := moeMaxTiles(units, e)
		for range 200 {
			counts := make([]int, e)
			spread := 1 + r.IntN(e)
			for range units {
				counts[r.IntN(spread)]++
			}
			if n := tiles(counts); n > bound {
				t.Fatalf("%d units over %d experts %v: %d tiles, over moeMaxTiles %d", units, e, counts, n, bound)
			}
		}
	}
	for _, s := range [][2]int{{9, 9}, {65 * 7, 7}, {129 * 3, 3}} {
		units, e := s[0], s[1]
		counts := make([]int, e)
		for i := range counts {
			counts[i] = units / e
		}
		if n, bound := tiles(counts), moeMaxTiles(units, e); n != bound {
			t.Errorf("%d units, %d to each of %d experts: %d tiles, moeMaxTiles %d", units, units/e, e, n, bound)
		}
	}
}

// windowCases are the op table's expert products (expert_matmul and
// expert_matmul_glu) of 2 to matvecMaxRows rows without a bad id: the
// decode windows that take moe_expert_window.
func windowCases(t *testing.T) []optest.Case {
	var cs []optest.Case
	for _, c := range optest.Cases() {
		if !strings.HasPrefix(c.Name, "expert_matmul") || c.WantErr != "" {
			continue
		}
		if rows := c.Inputs[2].Shape[0]; rows >= 2 && rows <= matvecMaxRows {
			cs = append(cs, c)
		}
	}
	if len(cs) < 20 {
		t.Fatalf("%d expert product cases of 2 to %d rows in the op table, want 20 or more", len(cs), matvecMaxRows)
	}
	return cs
}

// rowCase is row r of an expert product case c: its x row (or the row's
// units of x per unit) and ids row, the same experts.
func rowCase(c optest.Case, r int) optest.Case {
	x, w, ids := c.Inputs[0], c.Inputs[1], c.Inputs[2]
	n := x.Len() / x.Shape[0]
	x.Shape = append(graph.Shape{1}, x.Shape[1:]...)
	x.Data = x.Data[r*n : (r+1)*n]
	k := ids.Shape[1]
	ids.Shape = graph.Shape{1, k}
	ids.Data = ids.Data[r*k : (r+1)*k]
	c.Name = fmt.Sprintf("%s/row=%d", c.Name, r)
	c.Inputs = []optest.Tensor{x, w, ids}
	return c
}

// TestMoEWindowRows checks the grouping moe_expert_window relies on: each
// window case (up to 80 units, experts shared by every row, experts with
// more units than one pass, over 1024 experts) must give every row the
// bits that row gives alone (a 1-row token takes the warp forms, whose
// sums the window form makes in the same order): a unit computed under
// another expert, left out of its expert's list (its output is the
// harness's poison) or written to another unit's row fails it. Cases whose
// row alone has more units than experts are left to TestOpCases (the row
// alone takes the grouped tile, which sums in another order).
func TestMoEWindowRows(t *testing.T) {
	be := newTestBackend(t, Options{})
	if be.moeWindowRows != moeWindowMinRows {
		t.Skipf("REEL_MOE_WINDOW sets the window form from %d rows", be.moeWindowRows)
	}
	for _, c := range windowCases(t) {
		if k, e := c.Inputs[2].Shape[1], c.Inputs[1].Shape[0]; k > e {
			continue // a row alone has more units than experts: the grouped tile, other sums
		}
		t.Run(c.Name, func(t *testing.T) {
			win, err := optest.Run(be, c, optest.Plain)
			if err == nil {
				err = win.Err
			}
			if err != nil {
				t.Fatal(err)
			}
			rows := c.Inputs[2].Shape[0]
			per := len(win.Outputs[0]) / rows
			for r := range rows {
				one, err := optest.Run(be, rowCase(c, r), optest.Plain)
				if err == nil {
					err = one.Err
				}
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range one.Outputs[0] {
					if got := win.Outputs[0][r*per+i]; math.Float64bits(got) != math.Float64bits(v) {
						t.Fatalf("row %d output %d (unit %d): %v in the window, %v alone", r, i, i/(per/c.Inputs[2].Shape[1]), got, v)
					}
				}
			}
		})
	}
}

// TestMoEWindowOff runs the window cases, and the error cases of 2 to 8
// rows, in the forms before moe_expert_window (REEL_MOE_WINDOW=off: the
// warp forms, and the grouped tile where units outnumber experts), which
// stay in use past its bounds.
func TestMoEWindowOff(t *testing.T) {
	be := newTestBackend(t, Options{})
	be.moeWindowRows = 0
	ref := cpu.New(0)
	cs := windowCases(t)
	for _, c := range optest.Cases() {
		if strings.HasPrefix(c.Name, "expert_matmul") && c.WantErr != "" && c.Inputs[2].Shape[0] <= matvecMaxRows {
			cs = append(cs, c)
		}
	}
	for _, c := range cs {
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
		})
	}
}

// TestMoEWindowPlan needs no device: which expert products take the window
// form, the features a warp of it takes, and REEL_MOE_WINDOW's values.
func TestMoEWindowPlan(t *testing.T) {
	qwen := func(rows int) expertShape { return expertShape{units: 10 * rows, k: 10, e: 64, nOut: 1280, nIn: 2560} }
	for rows := 1; rows <= 9; rows++ {
		if got, want := qwen(rows).window(moeWindowMinRows), rows >= 2 && rows <= matvecMaxRows; got != want {
			t.Errorf("qwen4-12l's experts at %d rows: window %v, want %v", rows, got, want)
		}
		if qwen(rows).window(0) {
			t.Errorf("%d rows: the window form with REEL_MOE_WINDOW=off", rows)
		}
	}
	if !qwen(1).window(1) {
		t.Error("1 row: no window form with REEL_MOE_WINDOW=1")
	}
	for _, d := range []expertShape{
		{units: 8 * 33, k: 33, e: 64, nOut: 8, nIn: 8},   // more units than MOE_WIN_MAXU
		{units: 8 * 2, k: 2, e: 5000, nOut: 8, nIn: 8},   // more experts than MOE_WIN_MAXE
		{units: 9 * 10, k: 10, e: 64, nOut: 8, nIn: 8},   // a prompt chunk
		{units: 8 * 32, k: 32, e: 4096, nOut: 8, nIn: 8}, // at both bounds
	} {
		want := d.units <= moeWinMaxUnits && d.e <= moeWinMaxExperts && d.units/d.k <= matvecMaxRows
		if got := d.window(moeWindowMinRows); got != want {
			t.Errorf("%d units of %d picks over %d experts: window %v, want %v", d.units, d.k, d.e, got, want)
		}
	}
	for _, c := range []struct{ f, slots, sms, force, want int }{
		{640, 20, 132, 0, 2},  // gate_up at 2 rows: 20 x 40 blocks
		{2560, 20, 132, 0, 4}, // down at 2 rows
		{640, 64, 132, 0, 4},  // gate_up at 8 rows
		{640, 10, 132, 0, 1},  // 1 row (REEL_MOE_WINDOW=1)
		{16, 20, 132, 0, 1},   // tiny
		{2560, 20, 132, 8, 8}, // forced
	} {
		if got := moeWindowFPW(c.f, c.slots, c.sms, c.force); got != c.want {
			t.Errorf("moeWindowFPW(%d features, %d slots, %d SMs, force %d) = %d, want %d", c.f, c.slots, c.sms, c.force, got, c.want)
		}
	}
	for _, c := range []struct {
		rows, fpw       string
		minRows, forced int
	}{{"", "", moeWindowMinRows, 0}, {"off", "", 0, 0}, {"0", "2", 0, 2}, {"1", "", 1, 0}, {"8", "4", 8, 4}} {
		minRows, force, err := parseMoEWindow(c.rows, c.fpw)
		if err != nil || minRows != c.minRows || force != c.forced {
			t.Errorf("REEL_MOE_WINDOW=%q REEL_MOE_WINDOW_FPW=%q: %d rows, fpw %d, %v; want %d, %d", c.rows, c.fpw, minRows, force, err, c.minRows, c.forced)
		}
	}
	for _, c := range [][2]string{{"9", ""}, {"-1", ""}, {"on", ""}, {"", "0"}, {"", "x"}} {
		if _, _, err := parseMoEWindow(c[0], c[1]); err == nil || !strings.Contains(err.Error(), "REEL_MOE_WINDOW") {
			t.Errorf("REEL_MOE_WINDOW=%q REEL_MOE_WINDOW_FPW=%q: %v, want an error naming the variable", c[0], c[1], err)
		}
	}
}
