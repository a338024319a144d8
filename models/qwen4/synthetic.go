package qwen4

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
)

// BenchShape is the released model's layer (hidden 2560, its Gated
// DeltaNet, QSA, hyper-connection and expert widths, its vocabulary) in a
// model one GPU holds: 12 layers (QSA at 3, 7 and 11), 64 experts (top-10)
// and n-gram tables of about 10^5 rows a head, with the MTP head; about
// 6.6 B parameters (13 GB in bf16), of which a decode token reads about
// 4.3 GB. Its decode path is the released model's, for benchmarks.
func BenchShape() Config {
	c := Released()
	c.Layers = make([]LayerKind, 12)
	for i := 3; i < len(c.Layers); i += 4 {
		c.Layers[i] = QSA
	}
	c.Experts = 64
	c.NGramBase = 100000
	return c
}

// Synthetic makes a model of config c with random weights, for benchmarks
// and tests that need no file: matrices, experts and n-gram tables stored
// as dt (f32 or bf16), uniform with the variance of 1/fan-in; the vectors
// (norm weights, the GDN's A_log and dt_bias) and conv kernels in f32, the
// vectors small, so every offset norm's 1 + w (folded as Load folds it)
// stays near 1 and the forward well-conditioned; each PLE layer's hash constants from the config; the
// MTP head when c.MTPLayers is 1. The same seed gives the same model.
func Synthetic(c Config, dt graph.DType, seed uint64) (*Model, error) {
	return synthetic(c, dt, seed, false)
}

// Shapes is Synthetic without the values: every weight has its dtype and
// shape and no data, for building, planning and dumping the graphs of a
// shape too large to make (uploading its weights fails).
func Shapes(c Config, dt graph.DType) (*Model, error) {
	return synthetic(c, dt, 0, true)
}

// synthetic makes Synthetic's model, or only its weights' dtypes and shapes.
func synthetic(c Config, dt graph.DType, seed uint64, shapesOnly bool) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if dt != graph.F32 && dt != graph.BF16 {
		return nil, fmt.Errorf("qwen4: synthetic weights in %s: want f32 or bf16", dt)
	}
	m := &Model{Config: c, tensors: lm.Tensors{}, ple: map[int]ops.PLEHashAttrs{}, shards: map[int][]string{}}
	next := uint64(0)
	add := func(name string, dt graph.DType, a float64, shape ...int) error {
		next++
		if shapesOnly {
			m.keep(name, lm.Tensor{DType: dt, Shape: shape})
			return nil
		}
		t, err := lm.RandomUniform(dt, float32(a), seed*0x9e3779b97f4a7c15+next, shape...)
		if err != nil {
			return fmt.Errorf("qwen4: %s: %w", name, err)
		}
		m.keep(name, t)
		return nil
	}
	fanIn := func(shape []int) float64 { return math.Sqrt(3 / float64(shape[len(shape)-1])) }
	plain := func(specs []spec) error {
		for _, s := range specs {
			var err error
			switch {
			case len(s.shape) == 1:
				err = add(s.name, graph.F32, 0.1, s.shape...)
			case len(s.shape) == 3 && s.shape[1] == 1: // a depthwise conv kernel [C, 1, K]
				err = add(s.name, graph.F32, fanIn(s.shape), s.shape...)
			default:
				err = add(s.name, dt, fanIn(s.shape), s.shape...)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	experts := func(pre string) error {
		e, f, h := c.Experts, c.ExpertFFN, c.Hidden
		if err := add(pre+ExpertsGateUp, dt, fanIn([]int{h}), e, 2*f, h); err != nil {
			return err
		}
		return add(pre+ExpertsDown, dt, fanIn([]int{f}), e, h, f)
	}
	if err := plain(c.specs()); err != nil {
		return nil, err
	}
	for li := range c.Layers {
		if err := experts(LayerPrefix(li)); err != nil {
			return nil, err
		}
		if !c.HasPLE(li) {
			continue
		}
		idx := c.PLEIndex(li)
		mult, sizes, offs := PLEConstants(&c, idx)
		rows, width, parts := PLETableRows(&c, idx), c.PLEDim/c.PLEHeads(), max(c.PLEShards, 1)
		var names []string
		for k := range parts {
			name := ShardName(li, k)
			if err := add(name, dt, fanIn([]int{width}), (k+1)*rows/parts-k*rows/parts, width); err != nil {
				return nil, err
			}
			names = append(names, name)
		}
		m.ple[li] = ops.PLEHashAttrs{NGram: c.NGram, HeadsPerNGram: c.HeadsPerNGram, EOS: int32(c.EOS), Mult: mult, Sizes: sizes, Offsets: offs}
		m.shards[li] = names
	}
	if c.MTPLayers > 0 {
		if err := plain(c.mtpSpecs()); err != nil {
			return nil, err
		}
		if err := experts(MTPPrefix); err != nil {
			return nil, err
		}
		m.HasMTP = true
	}
	return m, nil
}
