// Shared by the matrix-product kernels (matvec.cu, and the quantized and
// expert products that stream weights as it does): row and segment
// limits, the 16-byte streaming load, and the fixed-order reductions.

#define MV_MAXR 8
#define MV_SEGS 4
#define MV_MAXWARPS 8

// MV_LOADS is the 16-byte weight loads each lane issues per iteration, over
// all the features of its unit (matmul.go's mvLoads).
#ifndef MV_LOADS
#define MV_LOADS 2
#endif

// ld_stream loads 16 bytes of weights that are read once: through the
// read-only path without allocating in L1, which keeps x there.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
	uint4 r;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
	return r;
}

// mv_x reads the E elements of x that one 16-byte weight vector multiplies.
template <int WT>
__device__ __forceinline__ void mv_x(const float* xs, float* xv) {
	float4 a = __ldg((const float4*)xs);
	xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
	if (WT != WT_F32) {
		float4 b = __ldg((const float4*)xs + 1);
		xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
	}
}

// mv_fma adds one 16-byte weight vector (4 f32 or 8 bf16/f16 elements)
// times xv to acc, element by element in order.
template <int WT>
__device__ __forceinline__ float mv_fma(uint4 q, const float* xv, float acc) {
	u32 u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (WT == WT_F32) {
			acc = fmaf(xv[i], __uint_as_float(u[i]), acc);
		} else if (WT == WT_BF16) {
			acc = fmaf(xv[2 * i], __uint_as_float(u[i] << 16), acc);
			acc = fmaf(xv[2 * i + 1], __uint_as_float(u[i] & 0xffff0000u), acc);
		} else {
			acc = fmaf(xv[2 * i], f16_to_f32((u16)(u[i] & 0xffffu)), acc);
			acc = fmaf(xv[2 * i + 1], f16_to_f32((u16)(u[i] >> 16)), acc);
		}
	}
	return acc;
}

// mv_prefetch asks, before pdl_entry, for the L2 lines of the first n
// batches of weight vectors that a lane of warp p of its unit's S will read
// (vector ((p + S·u)·32 + lane) of each row wr[i] that is ok, of V): every
// eighth lane, since eight 16-byte vectors make a line.
template <int MF>
__device__ __forceinline__ void mv_prefetch(const char* const* wr, const bool* ok, int V, int p, int S, int n) {
	int lane = threadIdx.x & 31;
	if (lane & 7) return;
	for (int u = 0; u < n; u++) {
		int v = ((p + S * u) << 5) + lane;
		if (v >= V) break;
#pragma unroll
		for (int i = 0; i < MF; i++)
			if (ok[i]) prefetch_l2((const uint4*)wr[i] + v);
	}
}

// mv_warp_sums sums each of a lane's MF·RB partial sums acc (feature i, row
// r at i·RB + r) over the warp and stores them in red[(warp·MF + i)·RB + r]
// (0 for rows from R on), for mv_group_sum after a __syncthreads.
template <int MF, int RB>
__device__ __forceinline__ void mv_warp_sums(const float* acc, int R, float* red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
	for (int t = 0; t < MF * RB; t++) {
		float v = t % RB < R ? warp_sum(acc[t]) : 0.f;
		if (lane == 0) red[warp * MF * RB + t] = v;
	}
}

// mv_group_sum is the sum of feature i, row r of group g: its S warps'
// sums (mv_warp_sums) added in warp order, so the same bits on every run.
__device__ __forceinline__ float mv_group_sum(const float* red, int g, int S, int MF, int RB, int i, int r) {
	float a = 0.f;
	for (int q = 0; q < S; q++) a += red[((g * S + q) * MF + i) * RB + r];
	return a;
}

// mv_put writes output row r of group gi of block b (G groups of S warps
// a block; red and nred as mv_warp_sums leaves them): with SW,
// silu(g·sg[j])·(u·su[j]) of unit j = b·G + gi, whose gate and up are its
// first and last feature; else feature f = (b·G + gi/MF)·MF + gi%MF (of
// NF) into its segment (y0..y3, ending at e0, e1, e2 and NF), divided by
// sqrt(Σx² + eps) with NRM. Nothing past NF.
template <int MF, int RB, bool SW, bool NRM>
__device__ __forceinline__ void mv_put(const float* red, const float* nred, int b, int G, int S, int gi, int r, int NF, float* y0,
                                       float* y1, float* y2, float* y3, int e0, int e1, int e2, const float* sg, const float* su,
                                       float eps) {
	if (SW) {
		int j = b * G + gi;
		if (j >= NF) return;
		float a = mv_group_sum(red, gi, S, MF, RB, 0, r), u = mv_group_sum(red, gi, S, MF, RB, MF - 1, r);
		y0[(long long)r * NF + j] = (float)silu_d((double)(a * sg[j])) * (u * su[j]);
		return;
	}
	int i = gi % MF, gg = gi / MF;
	int f = (b * G + gg) * MF + i;
	if (f >= NF) return;
	float a = mv_group_sum(red, gg, S, MF, RB, i, r);
	if (NRM) {
		float n2 = mv_group_sum(nred, gg, S, 1, RB, 0, r);
		a = (float)((double)a / sqrt((double)n2 + (double)eps));
	}
	int s = (f >= e0) + (f >= e1) + (f >= e2);
	int lo = s == 0 ? 0 : s == 1 ? e0 : s == 2 ? e1 : e2;
	int hi = s == 0 ? e0 : s == 1 ? e1 : s == 2 ? e2 : NF;
	float* y = s == 0 ? y0 : s == 1 ? y1 : s == 2 ? y2 : y3;
	y[(long long)r * (hi - lo) + (f - lo)] = a;
}
