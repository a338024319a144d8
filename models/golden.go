package models

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/reel-runtime/reel/lm"
)

// Golden is a golden.json of logits made by an independent implementation
// (transformers, a PyTorch reference) in one of two forms:
//
//   - an object {"cases": [...]} beside a checkpoint: per case, the ids,
//     the logits of one forward over all of them (logits_full) and, where
//     given, of a prefill of the first half followed by one token per call
//     (logits_incremental);
//   - a list of cases each naming a checkpoint folder beside golden.json
//     (model), the ids, the rows of a chunk, the architecture's params
//     (loops: Dory's loops) and the logits of the last position
//     (logits_last).
type Golden struct {
	Cases []GoldenCase `json:"cases"`
}

// GoldenCase is one sequence of a Golden.
type GoldenCase struct {
	// Model is the checkpoint folder of the case, relative to golden.json's
	// ("": golden.json's own folder).
	Model string `json:"model"`
	IDs   []int  `json:"ids"`
	// Chunk is the rows of a chunk the case runs in (0: the session's).
	Chunk int `json:"chunk"`
	// Loops is Dory's loops (a param; 0: the checkpoint's).
	Loops       int         `json:"loops"`
	Full        [][]float64 `json:"logits_full"`
	Incremental [][]float64 `json:"logits_incremental"`
	Last        []float64   `json:"logits_last"`
}

// Params are the architecture params the case sets, as flags would.
func (c GoldenCase) Params() map[string]string {
	if c.Loops == 0 {
		return nil
	}
	return map[string]string{"loops": strconv.Itoa(c.Loops)}
}

// ReadGolden reads dir/golden.json in either form; every case must hold
// ids and logits of as many rows.
func ReadGolden(dir string) (Golden, error) {
	path := filepath.Join(dir, "golden.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return Golden{}, err
	}
	var g Golden
	if err := json.Unmarshal(raw, &g.Cases); err != nil {
		if err := json.Unmarshal(raw, &g); err != nil {
			return Golden{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	if len(g.Cases) == 0 {
		return Golden{}, fmt.Errorf("%s: no cases", path)
	}
	for i, c := range g.Cases {
		if len(c.IDs) == 0 {
			return Golden{}, fmt.Errorf("%s: case %d: no ids", path, i)
		}
		if c.Last == nil && (len(c.Full) != len(c.IDs) || (c.Incremental != nil && len(c.Incremental) != len(c.IDs))) {
			return Golden{}, fmt.Errorf("%s: case %d: %d ids, %d full rows, %d incremental rows", path, i, len(c.IDs), len(c.Full), len(c.Incremental))
		}
		if c.Chunk < 0 || c.Loops < 0 || (c.Model != "" && !filepath.IsLocal(c.Model)) {
			return Golden{}, fmt.Errorf("%s: case %d: chunk %d, loops %d, model %q", path, i, c.Chunk, c.Loops, c.Model)
		}
	}
	return g, nil
}

// GoldenResult is the largest absolute (and relative) difference of one
// case's logits from the golden ones, run whole and incrementally, or at
// the last position.
type GoldenResult struct {
	Full, Incremental, Last float64
	// Rel is the largest difference relative to the golden logit (over
	// |golden| ≥ 1e-6).
	Rel float64
}

// Max is the largest of the absolute differences.
func (r GoldenResult) Max() float64 { return max(r.Full, r.Incremental, r.Last) }

// Check runs case c on s: with logits_last, the ids from a reset in one
// forward (the session's chunks); else whole (one forward of every id from
// a reset) and incrementally (the first half, then one id per call). It
// gives the largest absolute differences from the golden logits (+Inf for
// a NaN).
func (c GoldenCase) Check(s Session) (GoldenResult, error) {
	var r GoldenResult
	s.Reset()
	if c.Last != nil {
		out, err := s.Forward(c.IDs, 0, lm.WantLast)
		if err != nil {
			return r, err
		}
		r.Last, r.Rel, err = maxDiff(out.Data().([]float32), [][]float64{c.Last})
		return r, err
	}
	out, err := s.Forward(c.IDs, 0, lm.WantAll)
	if err != nil {
		return r, fmt.Errorf("whole: %w", err)
	}
	var rel float64
	if r.Full, r.Rel, err = maxDiff(out.Data().([]float32), c.Full); err != nil {
		return r, fmt.Errorf("whole: %w", err)
	}
	if c.Incremental == nil {
		return r, nil // a golden of whole-sequence logits only
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
	if r.Incremental, rel, err = maxDiff(inc, c.Incremental); err != nil {
		return r, fmt.Errorf("incremental: %w", err)
	}
	r.Rel = max(r.Rel, rel)
	return r, nil
}

// maxDiff is the largest |got − want| over rows of logits laid end to
// end, and the largest relative to |want|.
func maxDiff(got []float32, want [][]float64) (abs, rel float64, err error) {
	n := 0
	for _, row := range want {
		n += len(row)
	}
	if len(got) != n {
		return 0, 0, fmt.Errorf("%d logits, want %d", len(got), n)
	}
	i := 0
	for _, row := range want {
		for _, w := range row {
			d := math.Abs(float64(got[i]) - w)
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			abs = math.Max(abs, d)
			rel = math.Max(rel, d/math.Max(math.Abs(w), 1e-6))
			i++
		}
	}
	return abs, rel, nil
}
