package qwen4

import (
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/models"
)

// ReleasedShapeName names ReleasedShape among the synthetic shapes.
const ReleasedShapeName = "qwen4-released"

// ReleasedPLEBase is ReleasedShape's ngram_vocab_size_base: 10⁶ rows a
// table head, a twentieth of the released 2·10⁷. The released tables (16
// heads of 160 columns, 102 GB in bf16) fit on one H200 beside neither
// the FP8 projections (121 GiB) nor, with a long context, the 4-bit ones
// (70 GiB); these are 5.1 GB. A token reads one row a head whatever the
// table's size, so decode reads what the released model's does.
const ReleasedPLEBase = 1_000_000

// ReleasedShape is the released model's config (48 layers, QSA at 3, 7,
// ..., 47, 512 experts, top-10, hidden 2560, vocabulary 248320, the MTP
// head) with n-gram tables of ReleasedPLEBase rows a head: 131 B
// parameters, 123 B of them the routed experts' (the MTP head's layer
// has its own 512): 262 GB in bf16, 135.5 GB (126.2 GiB) with the
// projections in FP8 and 80.2 GB (74.7 GiB) in q4, the tables, embedding
// and head in bf16. Only weights made on the card (SyntheticDeferred) and
// quantized fit one H200 (140 GiB).
func ReleasedShape() Config {
	c := Released()
	c.NGramBase = ReleasedPLEBase
	return c
}

// SyntheticDeferred is Synthetic with the matrices (every weight of two or
// more dimensions) made where the model is uploaded, by the backend
// (lm.SynthesizeDeferred): the host holds only the vectors, and a GPU
// makes a released model's weights in seconds. Uploaded, they are
// Synthetic's of the same seed, byte for byte, and Quantize quantizes them
// (as descriptions, made quantized on the backend) as it quantizes
// Synthetic's.
func SyntheticDeferred(c Config, dt graph.DType, seed uint64) (*Model, error) {
	return synthetic(c, dt, seed, makeDeferred, nil)
}

// deferred is the Deferred maker of a shape.
func deferred(shape func() Config) func(graph.DType, uint64) (models.Model, error) {
	return func(dt graph.DType, seed uint64) (models.Model, error) { return SyntheticDeferred(shape(), dt, seed) }
}
