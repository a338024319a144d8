package cu

import (
	"errors"
	"math/rand/v2"
)

// MeasureMatMulPeak measures the card's dense 16-bit matrix rate: reps
// products of two random n×n bf16 matrices into f32 (cublasGemmEx, f32
// accumulation: the shape and types of a prompt's products), timed with
// events after a warm-up. It returns floating-point operations per second
// (2·n³ a product). Random data matters: tensor cores draw less power, and
// clock higher, on constant data.
func MeasureMatMulPeak(c *Context, b *BLAS, n, reps int) (flops float64, err error) {
	if n <= 0 || reps <= 0 {
		return 0, errors.New("cu: MeasureMatMulPeak: n and reps must be positive")
	}
	elems := uint64(n) * uint64(n)
	var ptrs [3]DevicePtr
	for i, bytes := range [3]uint64{2 * elems, 2 * elems, 4 * elems} {
		p, err := c.Alloc(bytes)
		if err != nil {
			return 0, err
		}
		defer func() { err = errors.Join(err, c.Free(p)) }()
		ptrs[i] = p
	}
	// One random tile of 1 MiB, copied over both matrices: random enough for
	// the tensor cores' power draw, without drawing 2n² numbers on the host
	// (128 MB at n = 8192, about a second) at every bench.
	rng := rand.New(rand.NewPCG(1, 2))
	tile := make([]byte, min(1<<20, 2*elems))
	for i := 0; i < len(tile); i += 2 {
		// bf16 of a uniform number in (-1, 1): sign, exponent 119..126, mantissa.
		v := uint16(rng.IntN(2))<<15 | uint16(119+rng.IntN(8))<<7 | uint16(rng.IntN(128))
		tile[i], tile[i+1] = byte(v), byte(v>>8)
	}
	for _, p := range ptrs[:2] {
		for off := uint64(0); off < 2*elems; off += uint64(len(tile)) {
			if err := c.HtoD(p.Offset(off), tile[:min(uint64(len(tile)), 2*elems-off)]); err != nil {
				return 0, err
			}
		}
	}
	g := Gemm{
		TransA: Trans, TransB: NoTrans, M: n, N: n, K: n, Alpha: 1,
		A: ptrs[0], AType: BF16, LDA: n, B: ptrs[1], BType: BF16, LDB: n,
		C: ptrs[2], CType: F32, LDC: n, Compute: Compute32F,
	}
	d, err := timeReps(c, "MeasureMatMulPeak", reps, func() error { return b.GemmEx(g) })
	if err != nil {
		return 0, err
	}
	return 2 * float64(n) * float64(n) * float64(n) * float64(reps) / d.Seconds(), nil
}
