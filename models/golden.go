package models

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/reel-runtime/reel/lm"
)

// Golden is a golden.json of logits made by an independent implementation
// (transformers) for a checkpoint beside it: per case, the ids, the logits
// of one forward over all of them, and the logits of a prefill of the
// first half followed by one token per call.
type Golden struct {
	Cases []GoldenCase `json:"cases"`
}

// GoldenCase is one sequence of a Golden.
type GoldenCase struct {
	IDs         []int       `json:"ids"`
	Full        [][]float64 `json:"logits_full"`
	Incremental [][]float64 `json:"logits_incremental"`
}

// ReadGolden reads dir/golden.json; it must hold cases whose logits have a
// row per id.
func ReadGolden(dir string) (Golden, error) {
	path := filepath.Join(dir, "golden.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return Golden{}, err
	}
	var g Golden
	if err := json.Unmarshal(raw, &g); err != nil {
		return Golden{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(g.Cases) == 0 {
		return Golden{}, fmt.Errorf("%s: no cases", path)
	}
	for i, c := range g.Cases {
		if len(c.IDs) == 0 || len(c.Full) != len(c.IDs) || len(c.Incremental) != len(c.IDs) {
			return Golden{}, fmt.Errorf("%s: case %d: %d ids, %d full rows, %d incremental rows", path, i, len(c.IDs), len(c.Full), len(c.Incremental))
		}
	}
	return g, nil
}

// GoldenResult is the largest absolute difference of one case's logits
// from the golden ones, run whole and incrementally.
type GoldenResult struct {
	Full, Incremental float64
}

// Check runs case c on s, whole (one forward of every id from a reset) and
// incrementally (the first half, then one id per call), and gives the
// largest absolute differences from the golden logits (+Inf for a NaN).
func (c GoldenCase) Check(s Session) (GoldenResult, error) {
	var r GoldenResult
	s.Reset()
	out, err := s.Forward(c.IDs, 0, lm.WantAll)
	if err != nil {
		return r, fmt.Errorf("whole: %w", err)
	}
	if r.Full, err = maxDiff(out.Data().([]float32), c.Full); err != nil {
		return r, fmt.Errorf("whole: %w", err)
	}
	s.Reset()
	half := len(c.IDs) / 2
	var inc []float32
	if half > 0 {
		out, err = s.Forward(c.IDs[:half], 0, lm.WantAll)
		if err != nil {
			return r, fmt.Errorf("incremental, positions 0 to %d: %w", half-1, err)
		}
		inc = append(inc, out.Data().([]float32)...)
	}
	for p := half; p < len(c.IDs); p++ {
		out, err := s.Forward(c.IDs[p:p+1], p, lm.WantLast)
		if err != nil {
			return r, fmt.Errorf("incremental, position %d: %w", p, err)
		}
		inc = append(inc, out.Data().([]float32)...)
	}
	if r.Incremental, err = maxDiff(inc, c.Incremental); err != nil {
		return r, fmt.Errorf("incremental: %w", err)
	}
	return r, nil
}

// maxDiff is the largest |got − want| over rows of logits laid end to end.
func maxDiff(got []float32, want [][]float64) (float64, error) {
	n := 0
	for _, row := range want {
		n += len(row)
	}
	if len(got) != n {
		return 0, fmt.Errorf("%d logits, want %d", len(got), n)
	}
	m, i := 0.0, 0
	for _, row := range want {
		for _, w := range row {
			d := math.Abs(float64(got[i]) - w)
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			m = math.Max(m, d)
			i++
		}
	}
	return m, nil
}
