package lm

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
)

// UnitUniform is a uniform number in [0, 1) from a counter-based hash
// (splitmix64) of stream and i, so that any element of a synthetic weight
// can be drawn on any goroutine and the same seed gives the same model.
func UnitUniform(stream, i uint64) float64 {
	z := stream + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// RandomUniform is a synthetic weight of shape stored as dt (f32 or bf16):
// elements uniform on [-a, a], element i drawn from UnitUniform(stream, i),
// generated on every core (a released model's gigabytes take seconds).
func RandomUniform(dt graph.DType, a float32, stream uint64, shape ...int) (Tensor, error) {
	if dt != graph.F32 && dt != graph.BF16 {
		return Tensor{}, fmt.Errorf("synthetic weights in %s: want f32 or bf16", dt)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, n*dt.Size())
	workers := min(runtime.GOMAXPROCS(0), max(1, n/(1<<16)))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			x := make([]float32, min(hi-lo, 4096))
			for at := lo; at < hi; at += len(x) {
				k := min(len(x), hi-at)
				for j := range k {
					x[j] = a * float32(2*UnitUniform(stream, uint64(at+j))-1)
				}
				if dt == graph.BF16 {
					half.EncodeBF16(data[2*at:2*(at+k)], x[:k])
				} else {
					half.EncodeF32(data[4*at:4*(at+k)], x[:k])
				}
			}
		}(w*n/workers, (w+1)*n/workers)
	}
	wg.Wait()
	return Tensor{DType: dt, Shape: shape, Data: data}, nil
}
