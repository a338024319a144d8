package cpu

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestRandomValues: a float weight's element i is a·(2u − 1) for u the
// splitmix64 number of (stream, i), written here from the definition in
// float64 and rounded once to the weight's dtype; the same description
// gives the same bytes on any number of goroutines, another stream other
// bytes; the values lie in [-a, a] with mean 0 and the standard deviation
// a/√3 of a uniform.
func TestRandomValues(t *testing.T) {
	const a, n = 0.25, 1<<17 + 3
	splitmix := func(state uint64) float64 {
		z := state + 0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return float64((z^z>>31)>>11) / (1 << 53)
	}
	for _, dt := range []graph.DType{graph.F32, graph.BF16, graph.F16} {
		r := ops.Random{Stream: 5, Scale: a, Float: dt, Shape: []int{3, n / 3}}
		data, err := Random(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != r.Len()*dt.Size() {
			t.Fatalf("%s: %d bytes for %d elements", dt, len(data), r.Len())
		}
		one, err := Random(r, 1)
		if err != nil || !bytes.Equal(one, data) {
			t.Fatalf("%s: one goroutine made other bytes (%v)", dt, err)
		}
		var sum, sq float64
		for i := range r.Len() {
			u := splitmix(5 + uint64(i)*0x9e3779b97f4a7c15)
			want := float32(a) * float32(2*u-1)
			var got float32
			switch dt {
			case graph.F32:
				got = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			case graph.BF16:
				got, want = half.BF16ToF32(binary.LittleEndian.Uint16(data[2*i:])), half.BF16ToF32(half.F32ToBF16(want))
			default:
				got, want = half.F16ToF32(binary.LittleEndian.Uint16(data[2*i:])), half.F16ToF32(half.F32ToF16(want))
			}
			if got != want {
				t.Fatalf("%s: element %d is %v, want %v", dt, i, got, want)
			}
			if got < -a || got > a {
				t.Fatalf("%s: element %d is %v, outside [-%v, %v]", dt, i, got, a, a)
			}
			sum += float64(got)
			sq += float64(got) * float64(got)
		}
		mean := sum / float64(r.Len())
		std := math.Sqrt(sq/float64(r.Len()) - mean*mean)
		if math.Abs(mean) > 0.01*a || math.Abs(std-a/math.Sqrt(3)) > 0.01*a {
			t.Errorf("%s: mean %v, std %v; want 0 and %v", dt, mean, std, a/math.Sqrt(3))
		}
		r.Stream = 6
		other, err := Random(r, 0)
		if err != nil || bytes.Equal(other, data) {
			t.Errorf("%s: stream 6 made stream 5's bytes (%v)", dt, err)
		}
	}
}

// TestRandomQuantized: a quantized weight's codes and scales dequantize to
// its values (within half a code's step of each block's scale; q4 one
// step, as the side opposite its peak clamps at 7) with their
// standard deviation, and are made the same on any number of goroutines.
func TestRandomQuantized(t *testing.T) {
	const a = 0.05
	for _, c := range []struct {
		codes  graph.DType
		blocks ops.QuantAttrs
		scales graph.DType
		step   float64 // the largest rounding error of a code, in scales
	}{
		{graph.F8E4M3, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}, graph.F32, 16},
		{graph.I8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16, 0.5},
		{graph.U8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16, 1}, // the far side of the peak clamps to 7
	} {
		shape := []int{2, 200, 300}
		r := ops.Random{Stream: 9, Scale: a, Float: graph.BF16, Shape: shape, Codes: c.codes, Blocks: c.blocks, ScaleType: c.scales}
		codes, err := Random(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Random(r, 1)
		if err != nil || !bytes.Equal(again, codes) {
			t.Fatalf("%s: one goroutine made other codes (%v)", c.codes, err)
		}
		r.Scales = true
		sraw, err := Random(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		sc := make([]float32, r.Len())
		if c.scales == graph.F32 {
			half.DecodeF32(sc, sraw)
		} else {
			half.DecodeF16(sc, sraw)
		}
		out, in := shape[1], shape[2]
		sr, scols := r.MadeShape()[1], r.MadeShape()[2]
		stride := ops.QuantCols(c.codes, in)
		var sq float64
		for m := range shape[0] {
			for o := range out {
				for k := range in {
					i := (m*out+o)*in + k
					s := sc[(m*sr+o/c.blocks.BlockRows)*scols+k/c.blocks.BlockCols]
					row := codes[(m*out+o)*stride:]
					var code float64
					switch c.codes {
					case graph.F8E4M3:
						code = float64(half.E4M3ToF32(row[k]))
					case graph.I8:
						code = float64(int8(row[k]))
					default:
						code = float64(int(row[k/2]>>(4*(k%2))&15) - 8)
					}
					w := code * float64(s)
					v := float64(half.BF16ToF32(half.F32ToBF16(ops.RandomUniform(9, i, a))))
					if math.Abs(w-v) > c.step*math.Abs(float64(s))*1.0001 {
						t.Fatalf("%s: element %d dequantizes to %v, its value is %v (scale %v)", c.codes, i, w, v, s)
					}
					sq += w * w
				}
			}
		}
		std := math.Sqrt(sq / float64(shape[0]*out*in))
		if math.Abs(std-a/math.Sqrt(3)) > 0.03*a {
			t.Errorf("%s: dequantized std %v, want about %v", c.codes, std, a/math.Sqrt(3))
		}
	}
}

// TestLoadRandom: the backend's LoadRandom makes Random's bytes for every
// case of the table (the check every RandomLoader passes).
func TestLoadRandom(t *testing.T) {
	optest.CheckRandom(t, New(0), func(r ops.Random) ([]byte, error) { return Random(r, 1) })
	if _, err := New(0).LoadRandom(ops.Random{Float: graph.I32, Shape: []int{3}}); err == nil {
		t.Error("LoadRandom of i32 values did not fail")
	}
}
