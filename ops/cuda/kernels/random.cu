// Synthetic weights made on the card (ops.Random; the Go side is
// random.go): element i of a weight is scale * (2u - 1), u =
// unit_uniform(stream, i) (splitmix64, as ops.UnitUniform), in f32, rounded
// to the values' type wt; a quantized weight's codes and scales are those
// ops.QuantBandScales and ops.QuantRowCodes make of those values. Every
// step is IEEE arithmetic the Go reference does in the same order (the
// divisions and the double to float conversion round to nearest, none is
// fused with another), so the bytes are the CPU backend's.
//
// rand_values: the float weight itself, a thread an element.
// rand_quant_rows: blocks of one row (q8 and q4 groups, FP8 of 1 x bc), a
// thread a block, reading its values in order: the value of largest
// magnitude is the first one, as the reference finds it (a q4 scale is
// that value / -8). codes or scales may be null (the other is made).
// rand_quant_blocks: blocks of br > 1 rows (FP8 128 x 128), a thread block
// a block: the largest magnitude reduced over the block (any order gives
// the same maximum; i8 and FP8 need no more), then the codes.
// The scale of a block is rounded to st (the scales' type) before the
// codes are computed with it, and stored as sst (st, or bf16 for f32
// scales the backend stores as bf16, as Load converts them).

__device__ __forceinline__ double unit_uniform(unsigned long long stream, unsigned long long i) {
	unsigned long long z = stream + (i + 1ull) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

// rand_f32 is element i of the weight in f32, before any rounding.
__device__ __forceinline__ float rand_f32(unsigned long long stream, long long i, float scale) {
	double u = 2.0 * unit_uniform(stream, (unsigned long long)i); // exact
	return scale * (float)(u - 1.0);                               // 2u - 1 is exact too
}

// rand_val is element i rounded to the values' type wt.
__device__ __forceinline__ float rand_val(unsigned long long stream, long long i, float scale, int wt) {
	float v = rand_f32(stream, i, scale);
	if (wt == WT_BF16) return bf16_to_f32(f32_to_bf16(v));
	if (wt == WT_F16) return f16_to_f32(f32_to_f16(v));
	return v;
}

// store_as writes v as element i of a tensor of type t.
__device__ __forceinline__ void store_as(void* p, int t, long long i, float v) {
	if (t == WT_F32)
		((float*)p)[i] = v;
	else if (t == WT_BF16)
		((u16*)p)[i] = f32_to_bf16(v);
	else
		((u16*)p)[i] = f32_to_f16(v);
}

// f32_to_e4m3 is half.F32ToE4M3: the float8_e4m3fn pattern nearest to f,
// ties to even; past 464 (and non-finite) the NaN pattern of f's sign.
__device__ __forceinline__ u32 f32_to_e4m3(float f) {
	u32 b = __float_as_uint(f);
	u32 sign = (b >> 24) & 0x80u;
	u32 a = b & 0x7fffffffu;
	if (a >= 0x43f00000u) return sign | 0x7fu;
	if (a >= 0x3c800000u) { // a normal e4m3
		a -= (127u - 7u) << 23;
		a += 0x7ffffu + ((a >> 20) & 1u);
		return sign | ((a >> 20) & 0xffu);
	}
	if (a <= 0x3a800000u) return sign; // half the smallest subnormal or less
	u32 e = a >> 23;
	u32 mant = (a & 0x7fffffu) | 0x800000u;
	u32 shift = 141u - e; // 21..24
	u32 q = mant >> shift;
	u32 rem = mant & ((1u << shift) - 1u);
	u32 half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (q & 1u))) q++;
	return sign | q;
}

// rand_qscale is a block's scale (ops.QuantBandScales) from its largest
// magnitude amax and the first value that has it, rounded to st.
__device__ __forceinline__ float rand_qscale(int qt, float amax, float peak, int st) {
	float s = qt == QT_F8 ? amax / 448.f : (qt == QT_I8 ? amax / 127.f : peak / -8.f);
	if (amax == 0.f) s = 0.f;
	if (st == WT_F16) s = f16_to_f32(f32_to_f16(s));
	if (st == WT_BF16) s = bf16_to_f32(f32_to_bf16(s));
	return s;
}

// rand_code is the code of v, a weight times its block's inverse scale
// (ops.QuantRowCodes): an e4m3 pattern, an i8's byte, or a 4-bit u.
__device__ __forceinline__ u32 rand_code(int qt, float v) {
	if (qt == QT_F8) return f32_to_e4m3(fmaxf(-448.f, fminf(448.f, v)));
	float r = roundf(v); // half away from zero, as math.Round
	if (qt == QT_I8) return (u32)(unsigned char)(signed char)(int)fmaxf(-127.f, fminf(127.f, r));
	return (u32)((int)fmaxf(-8.f, fminf(7.f, r)) + 8);
}

extern "C" __global__ void rand_values(void* dst, int wt, long long n, unsigned long long stream, float scale) {
	pdl_entry();
	GRID_STRIDE(i, n) { store_as(dst, wt, i, rand_f32(stream, i, scale)); }
}

extern "C" __global__ void rand_quant_rows(unsigned char* codes, void* scales, int qt, int st, int sst, int wt, long long rows, int in,
                                           int bc, unsigned long long stream, float scale) {
	pdl_entry();
	int gpr = (in + bc - 1) / bc;
	long long stride = qt == QT_U4 ? (in + 1) / 2 : in;
	GRID_STRIDE(g, rows * gpr) {
		long long row = g / gpr;
		int j = (int)(g - row * gpr);
		int k0 = j * bc, k1 = min(k0 + bc, in);
		long long base = row * in;
		float amax = 0.f, peak = 0.f;
		for (int k = k0; k < k1; k++) {
			float v = rand_val(stream, base + k, scale, wt);
			float a = fabsf(v);
			if (a > amax) {
				amax = a;
				peak = v;
			}
		}
		float s = rand_qscale(qt, amax, peak, st);
		if (scales) store_as(scales, sst, g, s);
		if (!codes) continue;
		float inv = s != 0.f ? 1.f / s : 0.f;
		unsigned char* out = codes + row * stride;
		if (qt == QT_U4) {
			for (int k = k0; k < k1; k += 2) { // bc is even: a byte is one block's
				u32 lo = rand_code(qt, rand_val(stream, base + k, scale, wt) * inv);
				u32 hi = k + 1 < k1 ? rand_code(qt, rand_val(stream, base + k + 1, scale, wt) * inv) : 0u;
				out[k >> 1] = (unsigned char)(lo | (hi << 4));
			}
		} else {
			for (int k = k0; k < k1; k++) out[k] = (unsigned char)rand_code(qt, rand_val(stream, base + k, scale, wt) * inv);
		}
	}
}

#define RQ_THREADS 256

extern "C" __global__ void __launch_bounds__(RQ_THREADS) rand_quant_blocks(unsigned char* codes, void* scales, int qt, int st, int sst,
                                                                           int wt, int mats, int out, int in, int br, int bc,
                                                                           unsigned long long stream, float scale) {
	pdl_entry();
	__shared__ float red[RQ_THREADS / 32];
	int sr = (out + br - 1) / br, sc = (in + bc - 1) / bc;
	long long blocks = (long long)mats * sr * sc;
	for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
		long long band = blk / sc; // matrix m's row of blocks b: m * sr + b
		int j = (int)(blk - band * sc);
		int m = (int)(band / sr), b = (int)(band - (long long)m * sr);
		int r0 = b * br, r1 = min(r0 + br, out), k0 = j * bc, k1 = min(k0 + bc, in);
		int w = k1 - k0;
		long long cells = (long long)(r1 - r0) * w;
		long long base = (long long)m * out * in;
		float amax = 0.f;
		for (long long t = threadIdx.x; t < cells; t += blockDim.x) {
			long long at = base + (long long)(r0 + (int)(t / w)) * in + k0 + (int)(t % w);
			amax = fmaxf(amax, fabsf(rand_val(stream, at, scale, wt)));
		}
		for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
		if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
		__syncthreads();
		amax = 0.f;
		for (int i = 0; i < (int)(blockDim.x >> 5); i++) amax = fmaxf(amax, red[i]);
		__syncthreads(); // red is the next block's
		float s = rand_qscale(qt, amax, amax, st);
		if (scales && threadIdx.x == 0) store_as(scales, sst, blk, s);
		if (!codes) continue;
		float inv = s != 0.f ? 1.f / s : 0.f;
		for (long long t = threadIdx.x; t < cells; t += blockDim.x) {
			long long at = base + (long long)(r0 + (int)(t / w)) * in + k0 + (int)(t % w);
			codes[at] = (unsigned char)rand_code(qt, rand_val(stream, at, scale, wt) * inv);
		}
	}
}
