package dory

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/weights"
)

// Router is the recon early-exit router: two low-rank "topologies" fitted on
// loop states of easy and hard tokens. After a token's first pass, the class
// whose mean and basis reconstruct the state better decides: easy tokens stop
// after one pass.
//
// A checkpoint carries one as the tensors dory.router.easy.mean [H],
// dory.router.easy.basis [R·H], dory.router.hard.mean [H],
// dory.router.hard.basis [R·H] and, optionally, dory.router.bias [1] (the
// score a state must reach to exit; default 0).
type Router struct {
	dim, rank          int
	easyMean, easyBase []float32
	hardMean, hardBase []float32
	Bias               float32
}

// Router tensor names.
const (
	routerEasyMean  = "dory.router.easy.mean"
	routerEasyBasis = "dory.router.easy.basis"
	routerHardMean  = "dory.router.hard.mean"
	routerHardBasis = "dory.router.hard.basis"
	routerBias      = "dory.router.bias"
)

// loadRouter reads the router a checkpoint carries, or nil when it has none.
func loadRouter(ck *weights.Checkpoint, hidden int) (*Router, error) {
	if !ck.Has(routerEasyMean) {
		return nil, nil
	}
	get := func(name string) ([]float32, error) {
		v, err := ck.Float32(name)
		if err != nil {
			return nil, fmt.Errorf("router: %w", err)
		}
		return v, nil
	}
	r := &Router{dim: hidden}
	var err error
	for _, t := range []struct {
		name string
		dst  *[]float32
	}{{routerEasyMean, &r.easyMean}, {routerEasyBasis, &r.easyBase}, {routerHardMean, &r.hardMean}, {routerHardBasis, &r.hardBase}} {
		if *t.dst, err = get(t.name); err != nil {
			return nil, err
		}
	}
	if len(r.easyMean) != hidden || len(r.hardMean) != hidden {
		return nil, fmt.Errorf("router: means of %d and %d values, want %d", len(r.easyMean), len(r.hardMean), hidden)
	}
	if len(r.easyBase) == 0 || len(r.easyBase)%hidden != 0 || len(r.hardBase) != len(r.easyBase) {
		return nil, fmt.Errorf("router: bases of %d and %d values, want equal multiples of %d", len(r.easyBase), len(r.hardBase), hidden)
	}
	r.rank = len(r.easyBase) / hidden
	if ck.Has(routerBias) {
		b, err := get(routerBias)
		if err != nil {
			return nil, err
		}
		if len(b) != 1 || math.IsNaN(float64(b[0])) {
			return nil, fmt.Errorf("router: %s must be one finite value", routerBias)
		}
		r.Bias = b[0]
	}
	return r, nil
}

// reconError is ‖x − μ‖² minus its projection on the basis rows.
func (r *Router) reconError(x, mean, basis []float32) float64 {
	y := make([]float64, r.dim)
	e := 0.0
	for i := range y {
		y[i] = float64(x[i] - mean[i])
		e += y[i] * y[i]
	}
	for k := 0; k < r.rank; k++ {
		row := basis[k*r.dim : (k+1)*r.dim]
		d := 0.0
		for i, v := range row {
			d += float64(v) * y[i]
		}
		e -= d * d
	}
	return e
}

// Score is positive when the easy class reconstructs the state better.
func (r *Router) Score(state []float32) float32 {
	return float32(r.reconError(state, r.hardMean, r.hardBase) - r.reconError(state, r.easyMean, r.easyBase))
}
