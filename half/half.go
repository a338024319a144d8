// Package half converts between float32 and the narrow floating-point
// formats used by model checkpoints: bfloat16 and IEEE 754 binary16
// (float16), both stored as uint16 bit patterns, and float8_e4m3fn (FP8),
// stored as a byte.
//
// Every conversion is exact where the value is representable and rounds to the
// nearest value, ties to even, where it is not. NaNs stay NaNs (quiet, with the
// sign and the top payload bits kept) and infinities stay infinities, except
// in FP8, which has no infinities (see F32ToE4M3).
//
// The bulk functions (DecodeBF16, DecodeF16, DecodeF32, DecodeE4M3,
// EncodeBF16, EncodeF16, EncodeF32, EncodeE4M3) read and write
// little-endian bytes, the layout of safetensors and GGUF files, and are meant for large memory-mapped tensors: they allocate
// nothing and, like the built-in copy, convert min(len(dst), len(src)/width)
// elements.
package half

import "math"

// BF16ToF32 returns the float32 value of the bfloat16 bit pattern h. It is
// exact: bfloat16 is the top half of a float32.
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 returns the bfloat16 bit pattern nearest to f, rounding ties to
// even. Values beyond the largest finite bfloat16 become infinities; a NaN
// gives a quiet NaN with the same sign.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload, set quiet bit.
		return uint16(b>>16) | 0x0040
	}
	// Add just under half an ulp, plus one when the kept lowest bit is odd,
	// so that exact halves round to even. Carries into the exponent give the
	// next binade or infinity, as they should.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 returns the float32 value of the IEEE binary16 bit pattern h. It is
// exact for every pattern, subnormals included; infinities map to infinities
// and NaNs to NaNs with the same sign and payload.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	bits := uint32(h&0x7fff) << 13 // exponent and mantissa in float32 position
	switch {
	case bits >= 0x7c00<<13: // Inf or NaN: all-ones exponent.
		return math.Float32frombits(sign | 0x7f800000 | bits)
	case bits < 0x0400<<13: // zero or subnormal: mant * 2^-24.
		// Computed on normal float32 values only, so that a flush-to-zero
		// or denormals-are-zero mode set by foreign code cannot change it.
		return math.Float32frombits(sign | math.Float32bits(float32(bits>>13)*0x1p-24))
	}
	// Normal: rebias the exponent from 15 to 127.
	return math.Float32frombits(sign | (bits + (127-15)<<23))
}

// F32ToF16 returns the IEEE binary16 bit pattern nearest to f, rounding ties to
// even. Values whose magnitude rounds past 65504 become infinities, small
// values become subnormals or signed zeros, and a NaN gives a quiet NaN with
// the same sign.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN: keep the top payload bits, set the quiet bit.
		return sign | 0x7e00 | uint16(abs>>13)&0x3ff
	case abs >= 0x477ff000: // >= 65520 rounds to infinity (65504 is odd); Inf too.
		return sign | 0x7c00
	case abs >= 0x38800000: // >= 2^-14: a normal float16.
		abs -= (127 - 15) << 23 // rebias; mantissa carries reach the exponent
		abs += 0x0fff + (abs>>13)&1
		return sign | uint16(abs>>13)
	case abs <= 0x33000000: // <= 2^-25: half the smallest subnormal or less, ties to 0.
		return sign
	}
	// Subnormal float16: the result counts units of 2^-24. The float32 is
	// mant * 2^(e-150) with the implicit bit set, so shift right by 126-e.
	e := abs >> 23 // 102..112 here
	// rounding may carry to 0x400, the smallest normal: still the right encoding
	return sign | uint16(subnormal(abs, 126-e)) // shift 14..24
}

// subnormal is the significand (implicit bit set) of the normal float32
// bits abs shifted right by shift (at least 1), rounded to nearest even:
// the units of a narrower type's subnormals.
func subnormal(abs, shift uint32) uint32 {
	mant := abs&0x7fffff | 0x800000
	q := mant >> shift
	rem := mant & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}
