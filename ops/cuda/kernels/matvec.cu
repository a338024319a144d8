// Matrix products. matvec_*: 1..MV_MAXR rows against a weight stored
// [N, K], bandwidth bound: one warp per output feature, 16-byte weight loads
// (MV_UNROLL, eight by default, in flight per lane), f32 accumulation, split-K across grid.y so that
// short-output/long-input shapes keep every SM busy (the last block of each
// column adds the partial sums, in order).
// matmul_tiled: a plain shared-memory tiled product for more rows when
// cuBLAS is not used.

#define MV_MAXR 8

__device__ __forceinline__ void unpack8(uint4 q, int wt, float* f) {
	u32 u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (wt == WT_BF16) {
			f[2 * i] = __uint_as_float(u[i] << 16);
			f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
		} else {
			f[2 * i] = f16_to_f32((u16)(u[i] & 0xffffu));
			f[2 * i + 1] = f16_to_f32((u16)(u[i] >> 16));
		}
	}
}

// ld_stream loads 16 bytes of weights that are read once: through the
// read-only path without allocating in L1, which keeps x there.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
	uint4 r;
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
	return r;
}

// mv_acc adds one 16-byte weight vector times x[r][kk..] (row stride ld) to acc.
template <int WT>
__device__ __forceinline__ void mv_acc(uint4 q, const float* x, int R, int ld, int kk, float* acc) {
	if (WT == WT_F32) {
		float w0 = __uint_as_float(q.x), w1 = __uint_as_float(q.y), w2 = __uint_as_float(q.z), w3 = __uint_as_float(q.w);
#pragma unroll
		for (int r = 0; r < MV_MAXR; r++) {
			if (r < R) {
				float4 a = __ldg((const float4*)(x + (long long)r * ld + kk));
				acc[r] += a.x * w0 + a.y * w1 + a.z * w2 + a.w * w3;
			}
		}
	} else {
		float f[8];
		unpack8(q, WT, f);
#pragma unroll
		for (int r = 0; r < MV_MAXR; r++) {
			if (r < R) {
				const float4* xr = (const float4*)(x + (long long)r * ld + kk);
				float4 a = __ldg(xr), b = __ldg(xr + 1);
				acc[r] += a.x * f[0] + a.y * f[1] + a.z * f[2] + a.w * f[3] + b.x * f[4] + b.y * f[5] + b.z * f[6] + b.w * f[7];
			}
		}
	}
}

// MV_UNROLL is the 16-byte weight loads each lane issues before using any.
#ifndef MV_UNROLL
#define MV_UNROLL 8
#endif

// matvec_impl: block = warps output features, grid (ceil(N/warps), S). Each
// warp streams its feature's weight row chunk in batches of MV_UNROLL
// 16-byte loads per lane (all issued before the first is used), reading x
// through the read-only cache. With S > 1 each block writes its partial
// sums to part [S][R][N]; the last block of a column (counted in cnt, reset
// after) adds them in order and writes y, so split-K costs no second launch.
template <int WT>
__device__ void matvec_impl(const float* x, const void* w, float* y, float* part, int* cnt, int R, int N, int K, int kchunk,
                            int vec) {
	__shared__ int last;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	int n = blockIdx.x * nw + warp;
	int s = blockIdx.y, S = gridDim.y;
	int k0 = s * kchunk, k1 = min(K, k0 + kchunk);
	float acc[MV_MAXR];
#pragma unroll
	for (int r = 0; r < MV_MAXR; r++) acc[r] = 0.f;
	if (n < N) {
		if (vec) {
			const int E = WT == WT_F32 ? 4 : 8;
			const int ES = WT == WT_F32 ? 4 : 2;
			const float* xb = x + k0;
			const uint4* wr = (const uint4*)((const char*)w + ((long long)n * K + k0) * ES);
			int nv = (k1 - k0) / E;
			for (int base = lane; base < nv; base += 32 * MV_UNROLL) {
				uint4 q[MV_UNROLL];
#pragma unroll
				for (int u = 0; u < MV_UNROLL; u++) {
					int v = base + 32 * u;
					q[u] = v < nv ? ld_stream(wr + v) : make_uint4(0u, 0u, 0u, 0u);
				}
#pragma unroll
				for (int u = 0; u < MV_UNROLL; u++) {
					int v = base + 32 * u;
					if (v < nv) mv_acc<WT>(q[u], xb, R, K, v * E, acc);
				}
			}
		} else {
			for (int kk = k0 + lane; kk < k1; kk += 32) {
				float wv = load_w(w, WT, (long long)n * K + kk);
#pragma unroll
				for (int r = 0; r < MV_MAXR; r++)
					if (r < R) acc[r] += x[(long long)r * K + kk] * wv;
			}
		}
	}
#pragma unroll
	for (int r = 0; r < MV_MAXR; r++) {
		if (r < R) {
			float t = warp_sum(acc[r]);
			if (lane == 0 && n < N) {
				if (S > 1) part[((long long)s * R + r) * N + n] = t;
				else y[(long long)r * N + n] = t;
			}
		}
	}
	if (S == 1) return;
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) last = atomicAdd(&cnt[blockIdx.x], 1) == S - 1;
	__syncthreads();
	if (!last) return;
	__threadfence();
	for (int i = threadIdx.x; i < R * nw; i += blockDim.x) {
		int r = i / nw, nn = blockIdx.x * nw + i % nw;
		if (nn >= N) continue;
		float a = 0.f;
		for (int j = 0; j < S; j++) a += __ldcg(part + ((long long)j * R + r) * N + nn);
		y[(long long)r * N + nn] = a;
	}
	if (threadIdx.x == 0) cnt[blockIdx.x] = 0;
}

extern "C" __global__ void matvec_f32(const float* x, const void* w, float* y, float* part, int* cnt, int R, int N, int K, int kchunk,
                                int vec) {
	matvec_impl<WT_F32>(x, w, y, part, cnt, R, N, K, kchunk, vec);
}
extern "C" __global__ void matvec_bf16(const float* x, const void* w, float* y, float* part, int* cnt, int R, int N, int K, int kchunk,
                                int vec) {
	matvec_impl<WT_BF16>(x, w, y, part, cnt, R, N, K, kchunk, vec);
}
extern "C" __global__ void matvec_f16(const float* x, const void* w, float* y, float* part, int* cnt, int R, int N, int K, int kchunk,
                                int vec) {
	matvec_impl<WT_F16>(x, w, y, part, cnt, R, N, K, kchunk, vec);
}

#define TILE 16

// matmul_tiled: grid (ceil(N/16), ceil(R/16)), block (16, 16).
extern "C" __global__ void matmul_tiled(const float* x, const void* w, int wt, float* y, int R, int N, int K) {
	__shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1];
	int tx = threadIdx.x, ty = threadIdx.y;
	int n = blockIdx.x * TILE + tx, r = blockIdx.y * TILE + ty;
	int wn = blockIdx.x * TILE + ty;
	float acc = 0.f;
	for (int k0 = 0; k0 < K; k0 += TILE) {
		int kk = k0 + tx;
		xs[ty][tx] = (r < R && kk < K) ? x[(long long)r * K + kk] : 0.f;
		ws[ty][tx] = (wn < N && kk < K) ? load_w(w, wt, (long long)wn * K + kk) : 0.f;
		__syncthreads();
#pragma unroll
		for (int i = 0; i < TILE; i++) acc += xs[ty][i] * ws[tx][i];
		__syncthreads();
	}
	if (r < R && n < N) y[(long long)r * N + n] = acc;
}
