package graph

import (
	"testing"

	"github.com/reel-runtime/reel/half"
)

func TestDecodeFloats(t *testing.T) {
	want := []float32{1.5, -2, 0.25, 0}
	for _, c := range []struct {
		dt     DType
		encode func([]byte, []float32)
	}{{F32, half.EncodeF32}, {F16, half.EncodeF16}, {BF16, half.EncodeBF16}} {
		src := make([]byte, len(want)*c.dt.Size())
		c.encode(src, want)
		got := make([]float32, len(want))
		if !c.dt.DecodeFloats(got, src) {
			t.Fatalf("%s: DecodeFloats reported a non-float type", c.dt)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: element %d = %v, want %v", c.dt, i, got[i], want[i])
			}
		}
	}
	for _, dt := range []DType{I32, I64, F8E4M3, I8, U8, Invalid} {
		dst := []float32{7}
		if dt.DecodeFloats(dst, make([]byte, 8)) || dst[0] != 7 {
			t.Errorf("%s: DecodeFloats converted a non-float type", dt)
		}
	}
}
