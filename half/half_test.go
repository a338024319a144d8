package half

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// refF16 is the value of a binary16 pattern computed from the bit layout in
// float64: sign, 5 exponent bits with bias 15, 10 mantissa bits.
func refF16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if mant != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * mant * math.Ldexp(1, -24)
	}
	return sign * (1 + mant/1024) * math.Ldexp(1, exp-15)
}

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := F16ToF32(h)
		want := refF16(h)
		if math.IsNaN(want) {
			gb := math.Float32bits(got)
			if !math.IsNaN(float64(got)) || gb>>31 != uint32(h>>15) || gb>>13&0x3ff != uint32(h&0x3ff) {
				t.Fatalf("F16ToF32(%#04x) = %v (%#08x), want NaN with same sign and payload", h, got, gb)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := math.Float32bits(BF16ToF32(h))
		if got != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) bits = %#08x", h, got)
		}
	}
}

// refF32ToF16 rounds f to binary16 with float64 arithmetic, ties to even.
func refF32ToF16(f float32) uint16 {
	x := float64(f)
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
	}
	a := math.Abs(x)
	switch {
	case math.IsNaN(x):
		return sign | 0x7e00 | uint16(math.Float32bits(f)>>13)&0x3ff
	case a >= 65520:
		return sign | 0x7c00
	case a < math.Ldexp(1, -14):
		return sign | uint16(math.RoundToEven(a*math.Ldexp(1, 24))) // 0x400 at the top is right
	}
	frac, exp := math.Frexp(a) // a = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1
	q := math.RoundToEven((frac*2 - 1) * 1024)
	if q == 1024 {
		q, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(q)
}

// refF32ToBF16 rounds f to bfloat16 with float64 arithmetic, ties to even.
func refF32ToBF16(f float32) uint16 {
	x := float64(f)
	if math.IsNaN(x) {
		return uint16(math.Float32bits(f)>>16) | 0x40
	}
	if math.IsInf(x, 0) || x == 0 {
		return uint16(math.Float32bits(f) >> 16)
	}
	a := math.Abs(x)
	_, exp := math.Frexp(a)
	e := max(exp-1, -126)
	quantum := math.Ldexp(1, e-7)
	v := math.RoundToEven(a/quantum) * quantum
	var r float32
	if v >= math.Ldexp(1, 128) {
		r = float32(math.Inf(1))
	} else {
		r = float32(v) // exact: v has at most 8 significant bits
	}
	if math.Signbit(x) {
		r = -r
	}
	return uint16(math.Float32bits(r) >> 16)
}

func checkF16(t *testing.T, f float32) {
	t.Helper()
	if got, want := F32ToF16(f), refF32ToF16(f); got != want {
		t.Fatalf("F32ToF16(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
	}
}

func checkBF16(t *testing.T, f float32) {
	t.Helper()
	if got, want := F32ToBF16(f), refF32ToBF16(f); got != want {
		t.Fatalf("F32ToBF16(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
	}
}

func TestF32ToF16Random(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		checkF16(t, math.Float32frombits(r.Uint32())) // any pattern
		// Patterns with exponents around the float16 range (2^-26 .. 2^17).
		e := uint32(127-26) + r.Uint32N(44)
		checkF16(t, math.Float32frombits(r.Uint32()&0x807fffff|e<<23))
	}
}

func TestF32ToBF16Random(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2_000_000 {
		checkBF16(t, math.Float32frombits(r.Uint32()))
	}
	// Float32 subnormals and the top of the range.
	for range 100_000 {
		checkBF16(t, math.Float32frombits(r.Uint32()&0x807fffff))
		checkBF16(t, math.Float32frombits(r.Uint32()&0x807fffff|0x7f000000))
	}
}

// TestF32ToF16Midpoints checks every point halfway between neighbouring
// float16 values, and the float32 values on either side of it.
func TestF32ToF16Midpoints(t *testing.T) {
	for h := uint16(0); h < 0x7c00; h++ {
		lo, hi := float64(F16ToF32(h)), refF16(h+1) // h+1 = 0x7c00 is +Inf
		if h == 0x7bff {
			hi = 65536 // the next step past the largest finite value
		}
		mid := float32((lo + hi) / 2) // exact: one more bit than float16
		for _, f := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1)))} {
			checkF16(t, f)
			checkF16(t, -f)
		}
		want := h
		if h&1 == 1 {
			want = h + 1
		}
		if got := F32ToF16(mid); got != want {
			t.Fatalf("F32ToF16(%g), a tie between %#04x and %#04x, = %#04x, want %#04x", mid, h, h+1, got, want)
		}
	}
}

func TestF32ToBF16Midpoints(t *testing.T) {
	for h := uint32(0); h < 0x7f80; h++ {
		mid := math.Float32frombits(h<<16 | 0x8000)
		want := uint16(h)
		if h&1 == 1 {
			want++
		}
		if got := F32ToBF16(mid); got != want {
			t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(mid), got, want)
		}
		checkBF16(t, mid)
		checkBF16(t, math.Nextafter32(mid, 0))
		checkBF16(t, math.Nextafter32(mid, float32(math.Inf(1))))
	}
}

func TestRoundingCases(t *testing.T) {
	inf := float32(math.Inf(1))
	f16 := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65519.996, 0x7bff},
		{65520, 0x7c00}, // tie between 65504 (odd) and 65536: to even, i.e. infinity
		{-65520, 0xfc00},
		{1e10, 0x7c00},
		{inf, 0x7c00},
		{-inf, 0xfc00},
		{1 + 0x1p-11, 0x3c00},           // tie, 1.0 is even
		{1 + 3*0x1p-11, 0x3c02},         // tie, rounds up to even
		{1 + 0x1p-11 + 0x1p-23, 0x3c01}, // just past the tie
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // tie to even (zero)
		{0x1p-25 + 0x1p-40, 0x0001},     // just past the tie
		{3 * 0x1p-25, 0x0002},           // tie between 1 and 2: to 2
		{0x1p-14, 0x0400},               // smallest normal
		{0x1p-14 - 0x1p-25, 0x0400},     // tie between 0x3ff and 0x400: to even
		{float32(math.SmallestNonzeroFloat32), 0x0000},
	}
	for _, c := range f16 {
		if got := F32ToF16(c.in); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	bf16 := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{math.MaxFloat32, 0x7f80}, // rounds past the largest bfloat16
		{math.Float32frombits(0x7f7f7fff), 0x7f7f},
		{-inf, 0xff80},
		{math.Float32frombits(0x00008000), 0x0000}, // subnormal tie to zero
		{math.Float32frombits(0x00018000), 0x0002},
	}
	for _, c := range bf16 {
		if got := F32ToBF16(c.in); got != c.want {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		f := math.Float32frombits(nan)
		if h := F32ToF16(f); h&0x7c00 != 0x7c00 || h&0x3ff == 0 || h>>15 != uint16(nan>>31) {
			t.Errorf("F32ToF16(NaN %#08x) = %#04x, not a NaN with the same sign", nan, h)
		}
		if h := F32ToBF16(f); h&0x7f80 != 0x7f80 || h&0x7f == 0 || h>>15 != uint16(nan>>31) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN with the same sign", nan, h)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		if got := F32ToF16(F16ToF32(h)); got != h {
			if h&0x7c00 == 0x7c00 && h&0x3ff != 0 && got == h|0x200 {
				continue // a signalling NaN comes back quiet
			}
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, got)
		}
		if got := F32ToBF16(BF16ToF32(h)); got != h {
			if h&0x7f80 == 0x7f80 && h&0x7f != 0 && got == h|0x40 {
				continue
			}
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, got)
		}
	}
}

func TestBulk(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 1001
	raw := make([]byte, 4*n+8)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	// Offsets 0..3 exercise both the aligned and the unaligned paths.
	for off := range 4 {
		src := raw[off : off+4*n]
		dst := make([]float32, n+3) // longer than needed: only n are written
		for i := range dst {
			dst[i] = -7
		}
		DecodeF32(dst, src)
		for i := range n {
			if want := binary.LittleEndian.Uint32(src[4*i:]); math.Float32bits(dst[i]) != want {
				t.Fatalf("off %d: DecodeF32[%d] = %#08x, want %#08x", off, i, math.Float32bits(dst[i]), want)
			}
		}
		if dst[n] != -7 {
			t.Fatalf("DecodeF32 wrote past the values in src")
		}
		DecodeF16(dst, src[:2*n+1]) // odd trailing byte is ignored
		for i := range n {
			want := F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
			if math.Float32bits(dst[i]) != math.Float32bits(want) {
				t.Fatalf("off %d: DecodeF16[%d] = %v, want %v", off, i, dst[i], want)
			}
		}
		DecodeBF16(dst[:n/2], src) // short dst: only n/2 written
		for i := range n / 2 {
			want := BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
			if math.Float32bits(dst[i]) != math.Float32bits(want) {
				t.Fatalf("off %d: DecodeBF16[%d] = %v, want %v", off, i, dst[i], want)
			}
		}

		fs := make([]float32, n)
		for i := range fs {
			fs[i] = float32(r.NormFloat64() * 100)
		}
		out := raw[off : off+4*n]
		EncodeF32(out, fs)
		back := make([]float32, n)
		DecodeF32(back, out)
		for i := range n {
			if back[i] != fs[i] {
				t.Fatalf("off %d: EncodeF32/DecodeF32[%d] = %v, want %v", off, i, back[i], fs[i])
			}
		}
		EncodeF16(out, fs)
		for i := range n {
			if got, want := binary.LittleEndian.Uint16(out[2*i:]), F32ToF16(fs[i]); got != want {
				t.Fatalf("off %d: EncodeF16[%d] = %#04x, want %#04x", off, i, got, want)
			}
		}
		EncodeBF16(out, fs)
		for i := range n {
			if got, want := binary.LittleEndian.Uint16(out[2*i:]), F32ToBF16(fs[i]); got != want {
				t.Fatalf("off %d: EncodeBF16[%d] = %#04x, want %#04x", off, i, got, want)
			}
		}
	}
	// Empty and nil slices are fine.
	DecodeF32(nil, raw)
	DecodeF16(make([]float32, 4), nil)
	DecodeBF16(nil, nil)
	EncodeF32(nil, []float32{1})
	EncodeF16([]byte{1}, []float32{1})
	EncodeBF16(nil, nil)
}

func TestDecodeAllocs(t *testing.T) {
	src := make([]byte, 4096)
	dst := make([]float32, 1024)
	allocs := testing.AllocsPerRun(10, func() {
		DecodeBF16(dst, src)
		DecodeF16(dst, src)
		DecodeF32(dst, src)
		DecodeF32(dst, src[1:])
		EncodeF16(src, dst)
	})
	if allocs != 0 {
		t.Errorf("bulk conversions allocate %v times per run", allocs)
	}
}

func benchDecode(b *testing.B, width int, decode func([]float32, []byte)) {
	const n = 1 << 16
	// Weights as checkpoints hold them: small normally distributed values.
	r := rand.New(rand.NewPCG(7, 8))
	fs := make([]float32, n)
	for i := range fs {
		fs[i] = float32(r.NormFloat64() * 0.02)
	}
	src := make([]byte, width*n)
	switch width {
	case 2:
		EncodeF16(src, fs)
	case 4:
		EncodeF32(src, fs)
	}
	dst := make([]float32, n)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		decode(dst, src)
	}
}

func BenchmarkDecodeBF16(b *testing.B) { benchDecode(b, 2, DecodeBF16) }
func BenchmarkDecodeF16(b *testing.B)  { benchDecode(b, 2, DecodeF16) }
func BenchmarkDecodeF32(b *testing.B)  { benchDecode(b, 4, DecodeF32) }
