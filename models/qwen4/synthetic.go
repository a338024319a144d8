package qwen4

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
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
// and tests that need no file: the weights its graphs declare (those of a
// checkpoint of c), matrices, experts and n-gram tables stored as dt (f32
// or bf16), uniform with the variance of 1/fan-in; the vectors (norm
// weights, the GDN's A_log and dt_bias) and conv kernels in f32, the
// vectors small, so every (1 + w) norm stays near 1 and the forward
// well-conditioned; each PLE layer's hash constants from the config; the
// MTP head when c.MTPLayers is 1. The same seed gives the same model.
func Synthetic(c Config, dt graph.DType, seed uint64) (*Model, error) {
	return synthetic(c, dt, seed, makeValues, nil)
}

// Shapes is Synthetic without the values: every weight has its dtype and
// shape and no data, for building, planning and dumping the graphs of a
// shape too large to make (uploading its weights fails).
func Shapes(c Config, dt graph.DType) (*Model, error) {
	return synthetic(c, dt, 0, makeShapes, nil)
}

// configModel is a model of config c without weights: each PLE layer's
// hash constants computed and its table in ple_shards parts (at least
// one), the MTP head when c has one.
func configModel(c Config) *Model {
	m := newModel(c)
	for li := range c.Layers {
		idx := c.PLEIndex(li)
		if idx < 0 {
			continue
		}
		m.ple[li] = pleHash(&c, li)
		rows, parts := PLETableRows(&c, idx), max(c.PLEShards, 1)
		for k := range parts {
			m.shards[li] = append(m.shards[li], shard{ShardName(li, k), (k+1)*rows/parts - k*rows/parts})
		}
	}
	m.HasMTP = c.MTPLayers > 0
	return m
}

// making is what synthetic makes of the weights.
type making int

const (
	makeValues   making = iota // the weights, on the host
	makeShapes                 // their dtypes and shapes only
	makeDeferred               // the matrices at upload (SyntheticDeferred)
)

// synthetic makes Synthetic's model, or only its weights' dtypes and
// shapes, or its model with the matrices made at upload, telling progress
// the bytes made.
func synthetic(c Config, dt graph.DType, seed uint64, how making, progress lm.Progress) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if dt != graph.F32 && dt != graph.BF16 {
		return nil, fmt.Errorf("qwen4: synthetic weights in %s: want f32 or bf16", dt)
	}
	m := configModel(c)
	decl, err := m.declare(lm.Stored{DType: func(string) graph.DType { return dt }})
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	for i, d := range decl {
		if len(d.Shape) == 1 || (len(d.Shape) == 3 && d.Shape[1] == 1) { // a vector, a depthwise conv kernel [C, 1, K]
			decl[i].DType = graph.F32
		}
	}
	if how == makeShapes {
		m.Tensors = lm.ShapesOf(decl)
		return m, nil
	}
	small := func(d lm.Declared, _ int, u float64) float32 {
		if isOffsetNorm(d.Name) {
			return float32(1 + 0.2*u - 0.1) // 1 + w, folded as Load folds it
		}
		return float32(0.2*u - 0.1)
	}
	if how == makeDeferred {
		m.Tensors, err = lm.SynthesizeDeferred(decl, seed, small)
	} else {
		m.Tensors, err = lm.Synthesize(decl, seed, small, progress)
	}
	if err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	return m, nil
}
