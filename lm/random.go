package lm

import (
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

// UnitUniform is a uniform number in [0, 1) from a counter-based hash
// (splitmix64) of stream and i, so that any element of a synthetic weight
// can be drawn on any goroutine and the same seed gives the same model
// (ops.UnitUniform, which every backend's synthetic weights use).
func UnitUniform(stream, i uint64) float64 { return ops.UnitUniform(stream, i) }

// RandomUniform is a synthetic weight of shape stored as dt (f32 or bf16):
// elements uniform on [-a, a], element i drawn from UnitUniform(stream, i),
// generated on every core (a released model's gigabytes take seconds). It
// is the weight ops.Random{Stream: stream, Scale: a, Float: dt, Shape:
// shape} describes, made on the host.
func RandomUniform(dt graph.DType, a float32, stream uint64, shape ...int) (Tensor, error) {
	if dt != graph.F32 && dt != graph.BF16 {
		return Tensor{}, fmt.Errorf("synthetic weights in %s: want f32 or bf16", dt)
	}
	data, err := cpu.Random(ops.Random{Stream: stream, Scale: a, Float: dt, Shape: shape}, 0)
	if err != nil {
		return Tensor{}, fmt.Errorf("synthetic weights: %w", err)
	}
	return Tensor{DType: dt, Shape: slices.Clone(shape), Data: data}, nil
}
