// Decode windows of 16-bit weights on cuBLAS (window.go): a product of R
// rows (2..8) keeps decode's f32 activations by splitting each row of x
// into hi + lo in the weights' 16-bit type and stacking the parts as the
// 2R rows of ONE GEMM (the weight read once), then adding the two halves
// of each output row.

// win_half writes row r (one block a row) of x [R, k] split hi + lo in
// the weights' type wt: hi as row r and lo as row R + r of h [2R, k]
// (half_split). With nrm the row is first divided by sqrt(Σx² + eps) (the
// sum in f64, rounded to f32 as to_half_norm). For f16 (wt 2) the row is
// first scaled by 2^e_r so that its largest magnitude lies in [2^14,
// 2^15), as qmma_stage scales (f16's range and subnormals would lose the
// bits of a row far from 1; a power of two changes no bit), and
// unscale[r] = 2^-e_r; for bf16 unscale[r] = 1.
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
		int m = 0; // the largest |x| as its bits (non-negative: ordered as ints)
		for (int i = threadIdx.x; i < k; i += blockDim.x) m = max(m, __float_as_int(xr[i]) & 0x7fffffff);
		for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
		int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
		if (lane == 0) wmax[w] = m;
		__syncthreads();
		m = 0;
		for (int i = 0; i < nw; i++) m = max(m, wmax[i]);
		float mf = __int_as_float(m);
		// Rounding is monotonic: the largest normalized magnitude is the
		// largest magnitude normalized.
		if (nrm) mf = (float)((double)mf * inv);
		// The power of two as qmma_stage's: E the biased exponent of the
		// largest magnitude (1 for subnormals and 0), times 2^(141-E) in
		// [2^14, 2^15); at most 2^100 so that 2^-e stays normal.
		int be = max(1, (int)(__float_as_uint(mf) >> 23));
		int e = min(100, 141 - be);
		sc = __uint_as_float((u32)(127 + e) << 23);
		us = __uint_as_float((u32)(127 - e) << 23);
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

// win_sum adds the halves of a window's GEMM outputs: segment s (features
// [e_{s-1}, e_s) of nf, e_{-1} = 0, e_3 = nf) has its GEMM's output c_s
// [2R, n_s] (row r from hi, row R + r from lo) and its result y_s [R, n_s]
// = (c_s[r] + c_s[R + r]) · unscale[r]. With sg (matmul_swiglu), c0 is the
// gate's and c1 the up's [2R, nf] and y0 [R, nf] = silu(g·sg)·(u·su), as
// mvmma_sw computes it. One thread an output element.
extern "C" __global__ void win_sum(const float* __restrict__ c0, const float* __restrict__ c1, const float* __restrict__ c2,
                                   const float* __restrict__ c3, float* y0, float* y1, float* y2, float* y3, int e0, int e1, int e2,
                                   int R, int nf, const float* __restrict__ unscale, const float* __restrict__ sg,
                                   const float* __restrict__ su) {
	pdl_entry();
	GRID_STRIDE(t, (long long)R * nf) {
		int r = (int)(t / nf), f = (int)(t - (long long)r * nf);
		float us = unscale[r];
		if (sg) {
			long long a = (long long)r * nf + f, b = (long long)(R + r) * nf + f;
			float g = (c0[a] + c0[b]) * us, u = (c1[a] + c1[b]) * us;
			y0[a] = (float)silu_d((double)(g * sg[f])) * (u * su[f]);
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
