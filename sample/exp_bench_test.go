package sample

import (
	"math"
	"testing"
)

var sinkF float64

func BenchmarkExpNeg(b *testing.B) {
	z := make([]float64, 151936)
	for i := range z {
		z[i] = -float64(i%4000) / 100
	}
	b.Run("expNeg", func(b *testing.B) {
		for b.Loop() {
			s := 0.0
			for _, v := range z {
				s += expNeg(v)
			}
			sinkF = s
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			s := 0.0
			for _, v := range z {
				s += math.Exp(v)
			}
			sinkF = s
		}
	})
}
