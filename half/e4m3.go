package half

import "math"

// float8_e4m3fn (the FP8 of published checkpoints, safetensors F8_E4M3):
// a sign bit, 4 exponent bits with bias 7 and 3 mantissa bits. There are
// no infinities: the one NaN of each sign is S.1111.111, so the largest
// finite magnitude is 1.75·2⁸ = 448 (S.1111.110) and the smallest
// subnormal 2⁻⁹.

// e4m3Values holds the float32 value of every e4m3 bit pattern; it is
// filled once from e4m3Value and never written again.
var e4m3Values = func() (t [256]float32) {
	for i := range t {
		t[i] = e4m3Value(uint8(i))
	}
	return t
}()

// e4m3Value computes the value of one e4m3 pattern from its fields.
func e4m3Value(b uint8) float32 {
	e, m := int(b>>3)&15, float64(b&7)
	var v float64
	switch {
	case e == 15 && m == 7:
		v = math.NaN()
	case e == 0:
		v = m * 0x1p-9
	default:
		v = math.Ldexp(1+m/8, e-7)
	}
	if b&0x80 != 0 {
		v = -v // a NaN keeps its sign too
	}
	return float32(v)
}

// E4M3ToF32 returns the float32 value of the float8_e4m3fn bit pattern b.
// It is exact for every pattern (subnormals included); the two NaN
// patterns give NaNs.
func E4M3ToF32(b uint8) float32 { return e4m3Values[b] }

// F32ToE4M3 returns the float8_e4m3fn bit pattern nearest to f, rounding
// ties to even, as PyTorch's cast does: a magnitude that rounds past 448
// (464 and more rounds up; 464 itself is a tie that goes to 448) becomes a
// NaN of f's sign, since the format has no infinity, and so do infinities
// and NaNs. Quantizers scale their values into [-448, 448] first.
func F32ToE4M3(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	abs := b & 0x7fffffff
	switch {
	case abs >= 0x43f00000: // >= 480 (rounds to the NaN pattern), Inf, NaN
		return sign | 0x7f
	case abs >= 0x3c800000: // >= 2⁻⁶: a normal e4m3
		abs -= (127 - 7) << 23 // rebias; mantissa carries reach the exponent
		abs += 0x7ffff + (abs>>20)&1
		return sign | uint8(abs>>20) // (464, 480) gives 0x7f: NaN, as in PyTorch
	case abs <= 0x3a800000: // <= 2⁻¹⁰: half the smallest subnormal or less, ties to 0
		return sign
	}
	// A subnormal e4m3 counts units of 2⁻⁹. The float32 is mant·2^(e-150)
	// with the implicit bit set (e is 117..120 here), so shift right by
	// 141-e.
	e := abs >> 23
	// rounding may carry to 8, the smallest normal: still the right encoding
	return sign | uint8(subnormal(abs, 141-e)) // shift 21..24
}

// DecodeE4M3 converts float8_e4m3fn values in src to float32 values in
// dst. Like copy, it converts min(len(dst), len(src)) elements.
func DecodeE4M3(dst []float32, src []byte) {
	n := min(len(dst), len(src))
	src, dst = src[:n], dst[:n]
	for i, b := range src {
		dst[i] = e4m3Values[b]
	}
}

// EncodeE4M3 converts the float32 values in src to float8_e4m3fn in dst,
// rounding as F32ToE4M3 does. Like copy, it converts min(len(dst),
// len(src)) elements.
func EncodeE4M3(dst []byte, src []float32) {
	n := min(len(dst), len(src))
	src, dst = src[:n], dst[:n]
	for i, f := range src {
		dst[i] = F32ToE4M3(f)
	}
}
