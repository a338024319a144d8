package half

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refE4M3 is the value of an e4m3 pattern as an integer significand times
// a power of two: (8+m)·2^(e-10) for a normal, m·2^(1-10) for a subnormal.
func refE4M3(b uint8) float64 {
	e, m := int(b>>3&15), float64(b&7)
	if e == 15 && m == 7 {
		return math.NaN()
	}
	sig, ex := 8+m, e
	if e == 0 {
		sig, ex = m, 1
	}
	v := sig * math.Pow(2, float64(ex-10))
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

func TestE4M3ToF32Exhaustive(t *testing.T) {
	for i := range 256 {
		b := uint8(i)
		got, want := E4M3ToF32(b), refE4M3(b)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (b&0x80 != 0) {
				t.Fatalf("E4M3ToF32(%#02x) = %v, want NaN of the pattern's sign", b, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("E4M3ToF32(%#02x) = %v, want %v", b, got, want)
		}
	}
	// Values the format's definition names.
	for b, want := range map[uint8]float32{0x7e: 448, 0xfe: -448, 0x38: 1, 0x40: 2, 0x08: 0x1p-6, 0x07: 7 * 0x1p-9, 0x01: 0x1p-9, 0x00: 0} {
		if got := E4M3ToF32(b); got != want {
			t.Errorf("E4M3ToF32(%#02x) = %v, want %v", b, got, want)
		}
	}
}

// refF32ToE4M3 rounds f to e4m3 by search: the nearest of every finite
// positive value and of 480 (which stands for the NaN pattern, as if the
// exponent went on), ties to the even pattern.
func refF32ToE4M3(f float32) uint8 {
	sign := uint8(0)
	if math.Signbit(float64(f)) {
		sign = 0x80
	}
	a := math.Abs(float64(f))
	if math.IsNaN(a) || math.IsInf(a, 0) {
		return sign | 0x7f
	}
	best, bestD := uint8(0), math.Inf(1)
	for c := range 128 {
		v := 480.0
		if c != 0x7f {
			v = refE4M3(uint8(c))
		}
		d := math.Abs(a - v)
		if d < bestD || d == bestD && c&1 == 0 {
			best, bestD = uint8(c), d
		}
	}
	if a > 480 {
		best = 0x7f
	}
	return sign | best
}

func checkE4M3Encode(t *testing.T, f float32) {
	t.Helper()
	if got, want := F32ToE4M3(f), refF32ToE4M3(f); got != want {
		t.Fatalf("F32ToE4M3(%v = %#08x) = %#02x, want %#02x", f, math.Float32bits(f), got, want)
	}
}

// TestF32ToE4M3 checks the encoder against the search: every e4m3 value,
// every midpoint between neighbours and the float32s on either side of it,
// every bf16 pattern (all exponents, 8 bits of mantissa), and random
// float32s.
func TestF32ToE4M3(t *testing.T) {
	for i := range 256 {
		b := uint8(i)
		v := E4M3ToF32(b)
		if b&0x7f == 0x7f {
			if got := F32ToE4M3(v); got != b {
				t.Fatalf("F32ToE4M3(NaN of %#02x) = %#02x", b, got)
			}
			continue
		}
		if got := F32ToE4M3(v); got != b {
			t.Fatalf("F32ToE4M3(%v) = %#02x, want %#02x (round trip)", v, got, b)
		}
	}
	for c := range 127 {
		lo, hi := float64(refE4M3(uint8(c))), 480.0
		if c+1 < 0x7f {
			hi = refE4M3(uint8(c + 1))
		}
		mid := float32((lo + hi) / 2)
		for _, f := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000)} {
			checkE4M3Encode(t, f)
			checkE4M3Encode(t, -f)
		}
	}
	for i := range 1 << 16 {
		checkE4M3Encode(t, BF16ToF32(uint16(i)))
	}
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 448, 449, 463.99, 464, 464.01, 479.99, 480, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0x1p-10, 0x1.000002p-10, 0x1p-149} {
		checkE4M3Encode(t, f)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		// Magnitudes around the format's range: 2^-14 .. 2^10.
		f := float32(math.Ldexp(r.Float64()+0.5, r.IntN(24)-14))
		if r.IntN(2) == 0 {
			f = -f
		}
		checkE4M3Encode(t, f)
	}
}

func TestE4M3Bulk(t *testing.T) {
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]float32, 300)
	DecodeE4M3(dst, src)
	back := make([]byte, 256)
	EncodeE4M3(back, dst)
	for i := range src {
		if back[i] != src[i] {
			t.Fatalf("pattern %#02x decoded to %v encoded back as %#02x", i, dst[i], back[i])
		}
	}
}
