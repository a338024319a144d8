package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
)

// Synthetic weights made where they are stored. A model of a known shape
// with random weights (for benchmarks) need not exist on the host: its
// matrices are Random descriptions, and a backend that is a RandomLoader
// makes each in its own memory (a GPU makes a released model's hundred
// gigabytes in seconds, which the host could neither make quickly nor
// hold). Every element is a function of its index alone (a counter-based
// hash), so any backend, and the host, make the same bytes.

// UnitUniform is a uniform number in [0, 1) from a counter-based hash
// (splitmix64) of stream and i: the numbers of element i of the weight
// drawn from stream, on any goroutine or device thread.
func UnitUniform(stream, i uint64) float64 {
	z := stream + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// RandomUniform is element i of a weight drawn uniform on [-a, a] from
// stream, in f32: a · (2·UnitUniform(stream, i) − 1).
func RandomUniform(stream uint64, i int, a float32) float32 {
	return a * float32(2*UnitUniform(stream, uint64(i))-1)
}

// Random describes a synthetic weight: a float tensor of Shape whose
// element i is RandomUniform(Stream, i, Scale) rounded to Float, or, when
// Codes is a quantized dtype, that tensor (a matrix [out, in], or a stack
// of them [E, out, in]) quantized in blocks of Blocks with scales of
// ScaleType, exactly as QuantBandScales and QuantRowCodes quantize a band
// of rows: its codes, or its scales when Scales is set.
type Random struct {
	Stream uint64
	Scale  float32
	// Float is the dtype of the values: f32, bf16 or f16.
	Float graph.DType
	// Shape is the float tensor's.
	Shape []int
	// Codes is the dtype of the codes (f8_e4m3, i8, u8: two a byte);
	// graph.Invalid (the zero value) for the float tensor itself.
	Codes graph.DType
	// Blocks are the quantization's scale blocks.
	Blocks QuantAttrs
	// ScaleType is the scales' dtype: f32, bf16 or f16.
	ScaleType graph.DType
	// Scales asks for the scales [E..., ⌈out/R⌉, ⌈in/C⌉] rather than the
	// codes [E..., out, QuantCols(in)].
	Scales bool
}

// Quantized says whether r is a quantized matrix's codes or scales.
func (r Random) Quantized() bool { return r.Codes != graph.Invalid }

// DType is the dtype of the tensor r makes.
func (r Random) DType() graph.DType {
	switch {
	case !r.Quantized():
		return r.Float
	case r.Scales:
		return r.ScaleType
	}
	return r.Codes
}

// MadeShape is the shape of the tensor r makes.
func (r Random) MadeShape() []int {
	if !r.Quantized() || len(r.Shape) < 2 {
		return slices.Clone(r.Shape)
	}
	s := slices.Clone(r.Shape)
	n := len(s)
	out, in := s[n-2], s[n-1]
	if r.Scales {
		s[n-2], s[n-1] = ceilDiv(out, max(r.Blocks.BlockRows, 1)), ceilDiv(in, max(r.Blocks.BlockCols, 1))
	} else {
		s[n-1] = QuantCols(r.Codes, in)
	}
	return s
}

// Matrices is the shape of a quantized r's float tensor as a stack: its
// matrices (1 for a matrix [out, in], E for a stack [E, out, in]) and each
// one's rows and columns. r must have passed Check.
func (r Random) Matrices() (mats, out, in int) {
	n := len(r.Shape)
	mats = 1
	if n == 3 {
		mats = r.Shape[0]
	}
	return mats, r.Shape[n-2], r.Shape[n-1]
}

// Len is the elements of the tensor r makes.
func (r Random) Len() int {
	n := 1
	for _, d := range r.MadeShape() {
		n *= d
	}
	return n
}

// maxRandomElems bounds a synthetic weight's elements (a released expert
// stack is 1.7·10⁹).
const maxRandomElems = 1 << 40

// Check says whether r describes a tensor that can be made.
func (r Random) Check() error {
	if !r.Float.IsFloat() {
		return fmt.Errorf("random weight of %s values: want f32, bf16 or f16", r.Float)
	}
	n := 1
	for _, d := range r.Shape {
		if d < 1 || n > maxRandomElems/d {
			return fmt.Errorf("random weight of shape %v: want positive sides, at most %d elements", r.Shape, maxRandomElems)
		}
		n *= d
	}
	if len(r.Shape) == 0 {
		return fmt.Errorf("random weight of no shape")
	}
	if !(math.Abs(float64(r.Scale)) <= math.MaxFloat32) {
		return fmt.Errorf("random weight of scale %v", r.Scale)
	}
	if !r.Quantized() {
		return nil
	}
	if !r.Codes.IsQuantized() || len(r.Shape) != 2 && len(r.Shape) != 3 {
		return fmt.Errorf("random %s codes of shape %v: want f8_e4m3, i8 or u8 codes of a matrix or a stack of them", r.Codes, r.Shape)
	}
	if err := checkPositive("random codes", "BlockRows", r.Blocks.BlockRows, "BlockCols", r.Blocks.BlockCols); err != nil {
		return err
	}
	if !r.ScaleType.IsFloat() {
		return fmt.Errorf("random codes with %s scales: want f32, bf16 or f16", r.ScaleType)
	}
	return nil
}

// RandomLoader is a backend that makes synthetic weights in its own
// memory: LoadRandom is Load of the bytes r describes, which the host
// never holds. Every implementation makes the bytes the CPU backend's
// does (the reference).
type RandomLoader interface {
	LoadRandom(r Random) (Buffer, error)
}

// QuantBandScales sets sc to the scales of one band of rows x [rows, in]
// (the rows of one row of blocks, rows <= a.BlockRows) for codes of dt:
// block j's scale maps its largest magnitude to the largest code (f8_e4m3:
// amax/448; i8: amax/127; u8, 4-bit: the value of largest magnitude, the
// first in row-major order, to −8), rounded to the scales' dtype sdt; an
// all-zero block's is 0. A non-finite weight, or a scale past sdt's range,
// is an error naming the block's columns.
func QuantBandScales(dt graph.DType, a QuantAttrs, sdt graph.DType, x []float32, rows, in int, sc []float32) error {
	for j := range sc {
		k0, k1 := j*a.BlockCols, min((j+1)*a.BlockCols, in)
		var amax, peak float32 // the largest magnitude, and the value that has it
		for r := range rows {
			for _, v := range x[r*in+k0 : r*in+k1] {
				a := float32(math.Abs(float64(v)))
				if !(a <= math.MaxFloat32) {
					return fmt.Errorf("columns %d..%d: the weight %v", k0, k1-1, v)
				}
				if a > amax {
					amax, peak = a, v
				}
			}
		}
		var s float32
		switch dt {
		case graph.F8E4M3:
			s = amax / 448
		case graph.I8:
			s = amax / 127
		default:
			s = peak / -8
		}
		if amax == 0 {
			s = 0 // not -0
		}
		switch sdt {
		case graph.F16:
			h := half.F32ToF16(s)
			if h&0x7c00 == 0x7c00 {
				return fmt.Errorf("columns %d..%d: the scale %g is past f16's range", k0, k1-1, s)
			}
			s = half.F16ToF32(h)
		case graph.BF16:
			h := half.F32ToBF16(s)
			if h&0x7f80 == 0x7f80 {
				return fmt.Errorf("columns %d..%d: the scale %g is past bf16's range", k0, k1-1, s)
			}
			s = half.BF16ToF32(h)
		}
		sc[j] = s
	}
	return nil
}

// QuantRowCodes writes into dst (zeroed) the codes of dt of one row x of
// a matrix, whose blocks of blockCols columns have the scales sc: the
// code of x[k] / s, through its reciprocal (0 for a zero scale), rounded
// to nearest: the e4m3 pattern of it clamped to ±448, the i8 of it
// clamped to ±127, or the 4-bit u (u − 8 it clamped to −8..7), element
// 2j in the low nibble of byte j and 2j+1 in the high one.
func QuantRowCodes(dt graph.DType, blockCols int, x, sc []float32, dst []byte) {
	for j, s := range sc {
		k0, k1 := j*blockCols, min((j+1)*blockCols, len(x))
		inv := float32(0)
		if s != 0 {
			inv = 1 / s
		}
		for k := k0; k < k1; k++ {
			v := x[k] * inv
			switch dt {
			case graph.F8E4M3:
				dst[k] = half.F32ToE4M3(max(-448, min(448, v)))
			case graph.I8:
				dst[k] = byte(int8(max(-127, min(127, math.Round(float64(v))))))
			default:
				u := byte(max(-8, min(7, math.Round(float64(v)))) + 8)
				dst[k>>1] |= u << (4 * (k & 1))
			}
		}
	}
}
