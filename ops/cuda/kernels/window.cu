// Decode windows of 16-bit weights on cuBLAS (window.go): a product of R
// rows (2..8) keeps decode's f32 activations by splitting each row of x
// into hi + lo in the weights' 16-bit type and stacking the parts as the
// 2R rows of ONE GEMM (the weight read once), then adding the two halves
// of each output row.

// win_pow2 gives, for a row whose largest magnitude over the block is
// that of the threads' m (|x| as its bits: non-negative, ordered as ints)
// times inv, the power of two sc = 2^e that takes it into [2^14, 2^15),
// as qmma_stage scales for f16 (E the biased exponent of the largest
// magnitude, 1 for subnormals and 0, and sc = 2^(141-E); at most 2^100 so
// that 2^-e stays normal), and us = 2^-e. wmax holds 32 ints. Rounding is
// monotonic: the largest normalized magnitude is the largest magnitude
// normalized.
__device__ __forceinline__ void win_pow2(int m, double inv, int* wmax, float* sc, float* us) {
	for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) wmax[w] = m;
	__syncthreads();
	m = 0;
	for (int i = 0; i < nw; i++) m = max(m, wmax[i]);
	float mf = (float)((double)__int_as_float(m) * inv);
	int be = max(1, (int)((__float_as_uint(mf) >> 23) & 0xff));
	int e = min(100, 141 - be);
	*sc = __uint_as_float((u32)(127 + e) << 23);
	*us = __uint_as_float((u32)(127 - e) << 23);
}

// win_half writes row r (one block a row) of x [R, k] split hi + lo in
// the weights' type wt: hi as row r and lo as row R + r of h [2R, k]
// (half_split). With nrm the row is first divided by sqrt(Σx² + eps) (the
// sum in f64, rounded to f32 as to_half_norm). For f16 (wt 2) the row is
// then scaled by a power of two (win_pow2: f16's range and subnormals
// would lose the bits of a row far from 1; a power of two changes no bit)
// and unscale[r] is its inverse; for bf16 unscale[r] = 1.
extern "C" __global__ void win_half(const float* __restrict__ x, u16* __restrict__ h, float* __restrict__ unscale, int R, int k,
                                    int wt, int nrm, float eps) {
	pdl_entry();
	__shared__ double scratch[32];
	__shared__ int wmax[32];
	int r = blockIdx.x;
	const float* xr = x + (long long)r * k;
	u16* hi = h + (long long)r * k;
	u16* lo = h + (long long)(R + r) * k;
	double inv = 1.0;
	if (nrm) inv = 1.0 / sqrt(sumsq_d(xr, k, scratch) + (double)eps);
	float sc = 1.f, us = 1.f;
	if (wt == WT_F16) {
		int m = 0;
		for (int i = threadIdx.x; i < k; i += blockDim.x) m = max(m, __float_as_int(xr[i]) & 0x7fffffff);
		win_pow2(m, inv, wmax, &sc, &us);
	}
	if (threadIdx.x == 0) unscale[r] = us;
	if (half_vec(xr, hi, lo, k)) {
		for (int i = threadIdx.x; i < k / 4; i += blockDim.x) {
			float4 v = ((const float4*)xr)[i];
			if (nrm)
				v = make_float4((float)((double)v.x * inv), (float)((double)v.y * inv), (float)((double)v.z * inv),
				                (float)((double)v.w * inv));
			v = make_float4(v.x * sc, v.y * sc, v.z * sc, v.w * sc);
			half_split4(v, hi + 4 * i, lo + 4 * i, wt);
		}
		return;
	}
	for (int i = threadIdx.x; i < k; i += blockDim.x) {
		float v = xr[i];
		if (nrm) v = (float)((double)v * inv);
		half_split(v * sc, hi + i, lo + i, wt);
	}
}

// win_glu is element i of row r of a window's SwiGLU, silu(g·sg)·(u·su),
// from the halves of its gate's and up's GEMMs (cg and cu [2R, f], rows r
// and R + r) times the row's unscale us, as mvsw_* computes it.
__device__ __forceinline__ float win_glu(const float* __restrict__ cg, const float* __restrict__ cu, const float* __restrict__ sg,
                                         const float* __restrict__ su, int R, int f, int r, int i, float us) {
	long long a = (long long)r * f + i, b = (long long)(R + r) * f + i;
	float g = (cg[a] + cg[b]) * us, u = (cu[a] + cu[b]) * us;
	return (float)silu_d((double)(g * sg[i])) * (u * su[i]);
}

// win_sum adds the halves of a window's GEMM outputs: segment s (features
// [e_{s-1}, e_s) of nf, e_{-1} = 0, e_3 = nf) has its GEMM's output c_s
// [2R, n_s] (row r from hi, row R + r from lo) and its result y_s [R, n_s]
// = (c_s[r] + c_s[R + r]) · unscale[r]. With sg (matmul_swiglu), c0 is the
// gate's and c1 the up's [2R, nf] and y0 [R, nf] their SwiGLU (win_glu).
// One thread an output element.
extern "C" __global__ void win_sum(const float* __restrict__ c0, const float* __restrict__ c1, const float* __restrict__ c2,
                                   const float* __restrict__ c3, float* y0, float* y1, float* y2, float* y3, int e0, int e1, int e2,
                                   int R, int nf, const float* __restrict__ unscale, const float* __restrict__ sg,
                                   const float* __restrict__ su) {
	pdl_entry();
	GRID_STRIDE(t, (long long)R * nf) {
		int r = (int)(t / nf), f = (int)(t - (long long)r * nf);
		float us = unscale[r];
		if (sg) {
			y0[t] = win_glu(c0, c1, sg, su, R, nf, r, f, us);
			continue;
		}
		int s = (f >= e0) + (f >= e1) + (f >= e2);
		int lo = s == 0 ? 0 : s == 1 ? e0 : s == 2 ? e1 : e2;
		int hi = s == 0 ? e0 : s == 1 ? e1 : s == 2 ? e2 : nf;
		const float* c = s == 0 ? c0 : s == 1 ? c1 : s == 2 ? c2 : c3;
		float* y = s == 0 ? y0 : s == 1 ? y1 : s == 2 ? y2 : y3;
		long long n = hi - lo, j = f - lo;
		y[r * n + j] = (c[r * n + j] + c[(R + r) * n + j]) * us;
	}
}

// win_glu_half is a window's SwiGLU MLP between its gate/up and down GEMMs
// (swiglu_norm_matmul), one block a row: a = win_glu over the row's f
// features (the halves of cg and cu times us_in[r]), divided by sqrt(Σa² +
// eps) (the sum in f64), scaled for f16 as win_half scales (unscale[r] its
// inverse) and split hi + lo into rows r and R + r of h [2R, f], the down
// GEMM's input: win_sum's SwiGLU and win_half's norm in one launch, a never
// written in f32. Each thread keeps its SNH_PER activations in registers
// when the row fits the block, else computes them again.
extern "C" __global__ void __launch_bounds__(1024) win_glu_half(const float* __restrict__ cg, const float* __restrict__ cu,
                                                                const float* __restrict__ us_in, const float* __restrict__ sg,
                                                                const float* __restrict__ su, u16* __restrict__ h,
                                                                float* __restrict__ unscale, int R, int f, int wt, float eps) {
	pdl_entry();
	__shared__ double scratch[32];
	__shared__ int wmax[32];
	int r = blockIdx.x;
	float usr = us_in[r];
	bool kept = f <= SNH_PER * (int)blockDim.x;
	float a[SNH_PER];
	double s = 0;
	int m = 0;
	if (kept) {
#pragma unroll
		for (int j = 0; j < SNH_PER; j++) {
			int i = threadIdx.x + j * blockDim.x;
			a[j] = i < f ? win_glu(cg, cu, sg, su, R, f, r, i, usr) : 0.f;
			s += (double)a[j] * a[j];
			m = max(m, __float_as_int(a[j]) & 0x7fffffff);
		}
	} else {
		for (int i = threadIdx.x; i < f; i += blockDim.x) {
			float v = win_glu(cg, cu, sg, su, R, f, r, i, usr);
			s += (double)v * v;
			m = max(m, __float_as_int(v) & 0x7fffffff);
		}
	}
	double inv = 1.0 / sqrt(block_sum_d(s, scratch) + (double)eps);
	float sc = 1.f, us = 1.f;
	if (wt == WT_F16) win_pow2(m, inv, wmax, &sc, &us);
	if (threadIdx.x == 0) unscale[r] = us;
	u16* hi = h + (long long)r * f;
	u16* lo = h + (long long)(R + r) * f;
	if (kept) {
#pragma unroll
		for (int j = 0; j < SNH_PER; j++) {
			int i = threadIdx.x + j * blockDim.x;
			if (i < f) half_split((float)((double)a[j] * inv) * sc, hi + i, lo + i, wt);
		}
		return;
	}
	for (int i = threadIdx.x; i < f; i += blockDim.x)
		half_split((float)((double)win_glu(cg, cu, sg, su, R, f, r, i, usr) * inv) * sc, hi + i, lo + i, wt);
}
