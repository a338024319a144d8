// The nGPT residual folded into the product after it (slerp_matmul,
// slerp_matmul_swiglu): slerp_rows, the row kernel that runs before the
// product (cuBLAS for prompt rows, the matvec otherwise), also writes the
// 16-bit copy of h the prompt products read. Sums of squares in f64 as the
// CPU reference does; a block's threads add in a fixed order, so h is the
// same bit for bit on every run.

// slerp_row computes dst[0..n) = n(n(x) + a ⊙ (n(y) − n(x))) with the
// whole block, and when hi is not null writes it rounded to 16 bits of type
// wt into hi (and the rest into lo, when not null), as half_split does.
// x and y are read twice (the second time from L1); each thread reads back
// only the dst elements it wrote. Every thread of the block must call it.
__device__ void slerp_row(const float* x, const float* y, const float* a, float* dst, int n, float eps, u16* hi, u16* lo, int wt) {
	__shared__ double scratch[64];
	double sx = 0, sy = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		double u = x[i], v = y[i];
		sx += u * u, sy += v * v;
	}
	block_sum2_d(&sx, &sy, scratch);
	double nx = 1.0 / sqrt(sx + (double)eps), ny = 1.0 / sqrt(sy + (double)eps);
	double ss = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		double ax = (double)x[i] * nx;
		float t = (float)(ax + (double)a[i] * ((double)y[i] * ny - ax));
		dst[i] = t;
		ss += (double)t * (double)t;
	}
	double inv = 1.0 / sqrt(block_sum_d(ss, scratch) + (double)eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float v = (float)((double)dst[i] * inv);
		dst[i] = v;
		if (hi) half_split(v, hi + i, lo ? lo + i : 0, wt);
	}
}

// slerp_rows: one block per row of n; h = slerp(x, y, a) and, when hi is
// not null, its 16-bit copy (to_half's layout: hi and lo of the same shape).
extern "C" __global__ void slerp_rows(const float* x, const float* y, const float* a, float* h, u16* hi, u16* lo, int n, int wt, float eps) {
	for (int i = threadIdx.x * 32; i < n; i += blockDim.x * 32) prefetch_l2(a + i);
	pdl_entry();
	long long o = (long long)blockIdx.x * n;
	slerp_row(x + o, y + o, a, h + o, n, eps, hi ? hi + o : 0, lo ? lo + o : 0, wt);
}
