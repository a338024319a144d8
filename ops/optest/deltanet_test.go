package optest

import (
	"fmt"
	"math"
	"testing"
)

// maxRelDiff is the largest |got − want| over the largest |want|.
func maxRelDiff(got, want []float64) float64 {
	var d, m float64
	for i, w := range want {
		d = max(d, math.Abs(got[i]-w))
		m = max(m, math.Abs(w))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// TestScanChunkedMatchesRecurrent checks the chunked form of the gated
// delta rule (refScanChunked) against the recurrence (refScan), both in
// float64: the same outputs and state up to rounding, at chunk sizes that
// do and do not divide the rows, raw and normalized keys, slow and fast
// decay, from position 0 and from a stored state, and rows past the call's.
func TestScanChunkedMatchesRecurrent(t *testing.T) {
	shapes := append(scanShapes(),
		scanShape{1, 2, 8, 8, 37, 4, 0, false, 0.01}, // raw keys: a growing state
		scanShape{2, 2, 16, 8, 100, 0, 90, true, 5},  // decays down to e⁻⁵ a row
		scanShape{1, 1, 8, 4, 64, 0, 0, true, 0},     // no decay
	)
	for _, s := range shapes {
		in := s.scanInputs(newMaker(fmt.Sprint(s)))
		d := make([][]float64, len(in))
		for i, x := range in {
			d[i] = x.Data
		}
		pos, used := callRows(d[6], s.rows)
		wantO, wantS := refScan(d[0], d[1], d[2], d[3], d[4], d[5], s.nk, s.nv, s.dk, s.dv, pos, used)
		for _, c := range []int{1, 3, 8, 16, 64} {
			o, st := refScanChunked(d[0], d[1], d[2], d[3], d[4], d[5], s.nk, s.nv, s.dk, s.dv, pos, used, c)
			eo, es := maxRelDiff(o, wantO), maxRelDiff(st, wantS)
			if !(eo <= 1e-12 && es <= 1e-12) {
				t.Errorf("%+v, chunks of %d: outputs differ by %.3g, state by %.3g of the largest, want ≤ 1e-12", s, c, eo, es)
			}
		}
	}
}

// TestScanChunkedF32 measures the rounding error of the chunked form in f32
// (scanChunked[float32], the CUDA kernels' arithmetic and order) against the
// float64 recurrence on the op table's gdn_scan cases of many rows and on
// qwen4-12l's head shape (dk = dv = 128, 3 value heads a key head, 512
// rows): within the cases' tolerance.
func TestScanChunkedF32(t *testing.T) {
	shapes := []scanShape{{1, 3, 128, 128, 512, 0, 0, true, 0.05}, {1, 3, 128, 128, 300, 7, 0, true, 1}}
	for _, s := range scanShapes() {
		if s.norm {
			shapes = append(shapes, s)
		}
	}
	for _, s := range shapes {
		in := s.scanInputs(newMaker(fmt.Sprint(s)))
		d := make([][]float64, len(in))
		for i, x := range in {
			d[i] = x.Data
		}
		pos, used := callRows(d[6], s.rows)
		wantO, wantS := refScan(d[0], d[1], d[2], d[3], d[4], d[5], s.nk, s.nv, s.dk, s.dv, pos, used)
		o, st := scanChunked[float32](d[0], d[1], d[2], d[3], d[4], d[5], s.nk, s.nv, s.dk, s.dv, pos, used, 64)
		eo, es := NMSE(o, wantO), NMSE(st, wantS)
		t.Logf("%+v: NMSE of the outputs %.3g, of the state %.3g", s, eo, es)
		if !(eo <= TolF32 && es <= TolF32) {
			t.Errorf("%+v: NMSE %.3g (outputs), %.3g (state) over %g", s, eo, es, TolF32)
		}
	}
}
