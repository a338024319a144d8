// Mixture-of-experts kernels (ops/moe.go), bound in moe.go:
// moe_route (the router's softmax and top-k), expert_matmul (moe_expert_warp
// for few units, moe_expert_group then moe_expert_tile for many; the
// quantized experts of quant_expert_matmul share the grouping and the tile,
// kernels/quant.cu), silu_glu
// (moe_silu_glu) and moe_combine. Every sum has a fixed order (no float
// atomics), so results are the same bit for bit on every run.

// Error codes (moe.go's moeKernelErr words them).
#define ERR_MOE_NAN 40 // a = row, b = expert: a NaN router logit
#define ERR_MOE_ID 41  // a = row, b = pick, c = id, err[4] = experts: an expert id outside [0, E)

// moe_expert_warp: warps per block, and 16-byte weight loads each lane has
// in flight.
#define MOE_WARPS 8
#define MOE_LOADS 4

// moe_expert_tile: units and features per tile, inputs per step; 256
// threads compute a 4x4 block of the tile each.
#define MOE_TM 64
#define MOE_TN 64
#define MOE_TK 32

// moe_smem is the dynamic shared memory of moe_route and moe_expert_group.
extern __shared__ double moe_smem[];

// moe_route: one block per row of E logits (blockDim.x a multiple of 32, at
// most 1024); dynamic shared memory holds K doubles, then E floats. As the
// CPU kernel: mx = max of the row (f32), sum = Σ exp(f64(l - mx)) (here in
// the fixed order of block_sum_d), ids = the K largest logits in descending
// order, ties to the smaller id (the rank of expert j counts the experts i
// with l_i > l_j, or l_i == l_j and i < j), w = exp(f64(l - mx)) / sum,
// divided by kept = Σ of the K in rank order when norm. A row holding a NaN
// reports its first NaN and gets ids 0..K-1 with weights 0.
extern "C" __global__ void moe_route(const float* logits, int* ids, float* w, int E, int K, int norm, int* err) {
	pdl_entry();
	double* sp = moe_smem;              // [K] the kept probabilities, by rank
	float* sl = (float*)(moe_smem + K); // [E] the row's logits
	__shared__ float smax[32];
	__shared__ double sred[32];
	__shared__ int snan;
	__shared__ double skept;
	int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = blockDim.x >> 5;
	long long t = blockIdx.x;
	const float* l = logits + t * E;
	int* rid = ids + t * K;
	float* rw = w + t * K;
	if (tid == 0) snan = -E; // -(the first NaN's expert), or -E
	__syncthreads();
	float mx = NEG_INF;
	for (int j = tid; j < E; j += blockDim.x) {
		float x = l[j];
		sl[j] = x;
		if (x != x)
			atomicMax(&snan, -j);
		else
			mx = fmaxf(mx, x);
	}
	mx = warp_max(mx);
	if (lane == 0) smax[wid] = mx;
	__syncthreads();
	if (snan > -E) {
		if (tid == 0) report(err, ERR_MOE_NAN, (int)t, -snan, 0);
		for (int i = tid; i < K; i += blockDim.x) rid[i] = i, rw[i] = 0.f;
		return;
	}
	mx = smax[0];
	for (int i = 1; i < nw; i++) mx = fmaxf(mx, smax[i]);
	double s = 0;
	for (int j = tid; j < E; j += blockDim.x) s += exp((double)(sl[j] - mx));
	double sum = block_sum_d(s, sred);
	for (int j = tid; j < E; j += blockDim.x) {
		float x = sl[j];
		int r = 0;
		for (int i = 0; i < E && r < K; i++) {
			float v = sl[i];
			r += (v > x) || (v == x && i < j);
		}
		if (r < K) {
			double p = exp((double)(x - mx)) / sum;
			sp[r] = p;
			rid[r] = j;
			if (!norm) rw[r] = (float)p;
		}
	}
	if (!norm) return;
	__syncthreads();
	if (tid == 0) {
		double kept = 0;
		for (int i = 0; i < K; i++) kept += sp[i];
		skept = kept;
	}
	__syncthreads();
	for (int i = tid; i < K; i += blockDim.x) rw[i] = (float)(sp[i] / skept);
}

// moe_row_dot is one warp's dot product of a weight row of n elements of
// type WT with x (n f32), every lane getting the sum, with matvec.cu's
// streaming loads (ld_stream) and element order (mv_x, mv_fma). vec: 16-byte loads
// (row and x 16-byte aligned, n a multiple of the vector's elements); each
// lane streams every 32nd vector, MOE_LOADS in flight, then the lanes' sums
// are added by shuffles.
template <int WT>
__device__ __forceinline__ float moe_row_dot(const void* row, const float* x, int n, int vec, int lane) {
	float acc = 0.f;
	if (vec) {
		const int E = WT == WT_F32 ? 4 : 8; // elements per vector
		int V = n / E;
		const uint4* wv = (const uint4*)row;
		for (int v0 = lane; v0 < V; v0 += 32 * MOE_LOADS) {
			uint4 q[MOE_LOADS];
#pragma unroll
			for (int u = 0; u < MOE_LOADS; u++) {
				int v = v0 + 32 * u;
				q[u] = v < V ? ld_stream(wv + v) : make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
			for (int u = 0; u < MOE_LOADS; u++) {
				int v = v0 + 32 * u;
				if (v < V) {
					float xv[8];
					mv_x<WT>(x + (long long)v * E, xv);
					acc = mv_fma<WT>(q[u], xv, acc);
				}
			}
		}
	} else {
		for (int i = lane; i < n; i += 32) acc = fmaf(x[i], load_w(row, WT, i), acc);
	}
	return warp_sum(acc);
}

// moe_expert_warp: expert_matmul with one warp per (unit, output feature):
// warp g of the grid (MOE_WARPS per block, blockDim.x = 32·MOE_WARPS)
// computes y[u, f] = w[ids[u], f] · x_u for u = g / nOut, f = g mod nOut,
// where x_u is row u of x [units, nIn] (perUnit) or row u / K of x [rows,
// nIn]. A unit's warps read consecutive rows of its expert (the decode
// shape: few units, each streaming its expert's matrix). An id outside
// [0, E) is reported and its outputs are zero.
extern "C" __global__ void moe_expert_warp(const float* x, const void* w, int wt, const int* ids, float* y, int units, int K, int E,
                                           int nOut, int nIn, int perUnit, int vec, int* err) {
	pdl_entry();
	int lane = threadIdx.x & 31;
	long long g = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (g >= (long long)units * nOut) return;
	int u = (int)(g / nOut), f = (int)(g % nOut);
	int id = ids[u];
	float* yo = y + (long long)u * nOut + f;
	if (id < 0 || id >= E) {
		if (lane == 0) {
			if (f == 0) report5(err, ERR_MOE_ID, u / K, u % K, id, E, 0);
			*yo = 0.f;
		}
		return;
	}
	const float* xu = x + (long long)(perUnit ? u : u / K) * nIn;
	long long at = ((long long)id * nOut + f) * nIn; // the row's first element
	float acc;
	if (wt == WT_BF16)
		acc = moe_row_dot<WT_BF16>((const u16*)w + at, xu, nIn, vec, lane);
	else if (wt == WT_F16)
		acc = moe_row_dot<WT_F16>((const u16*)w + at, xu, nIn, vec, lane);
	else
		acc = moe_row_dot<WT_F32>((const float*)w + at, xu, nIn, vec, lane);
	if (lane == 0) *yo = acc;
}

// moe_expert_group: one block (blockDim.x a multiple of 32), dynamic shared
// memory of E ints. It groups the units by expert for moe_expert_tile:
// offs[e] .. offs[e+1] index list, which holds the units of expert e (in no
// particular order: each unit's result does not depend on it). An id
// outside [0, E) is reported and its unit left out.
extern "C" __global__ void moe_expert_group(const int* ids, int units, int K, int E, int* offs, int* list, int* err) {
	pdl_entry();
	int* cnt = (int*)moe_smem;
	for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
	__syncthreads();
	for (int u = threadIdx.x; u < units; u += blockDim.x) {
		int id = ids[u];
		if (id < 0 || id >= E)
			report5(err, ERR_MOE_ID, u / K, u % K, id, E, 0);
		else
			atomicAdd(&cnt[id], 1);
	}
	__syncthreads();
	// The first warp scans the counts: lane i takes a run of experts.
	if (threadIdx.x < 32) {
		int lane = threadIdx.x, per = (E + 31) / 32;
		int lo = min(E, lane * per), hi = min(E, lo + per);
		int c = 0;
		for (int e = lo; e < hi; e++) c += cnt[e];
		int inc = c;
		for (int d = 1; d < 32; d <<= 1) {
			int o = __shfl_sync(0xffffffffu, inc, lane >= d ? lane - d : lane);
			if (lane >= d) inc += o;
		}
		int run = inc - c;
		for (int e = lo; e < hi; e++) {
			int ce = cnt[e];
			offs[e] = run;
			cnt[e] = run; // the next free place of expert e
			run += ce;
		}
		if (lane == 31) offs[E] = inc;
	}
	__syncthreads();
	for (int u = threadIdx.x; u < units; u += blockDim.x) {
		int id = ids[u];
		if (id >= 0 && id < E) list[atomicAdd(&cnt[id], 1)] = u;
	}
}

// moe_tile is the tiled product over units grouped by moe_expert_group,
// the experts' weights read through wl: wl(e, n, k) is element (n, k) of
// expert e in f32 (moe_expert_tile's stored floats, qmoe_tile_*'s
// dequantized codes, kernels/quant.cu). Grid (ceil(nOut / MOE_TN), E), 256
// threads: block (b, e) computes features [b·MOE_TN, (b+1)·MOE_TN) of every
// unit of expert e, MOE_TM units at a time, stepping over the inputs
// MOE_TK at a time through shared tiles of x and w. Thread (ty, tx) =
// (tid / 16, tid mod 16) sums units ty + 16i and features tx + 16j (i, j <
// 4) in input order, in f32.
template <class WL>
__device__ __forceinline__ void moe_tile(const float* x, WL wl, const int* offs, const int* list, float* y, int K, int nOut, int nIn,
                                         int perUnit) {
	__shared__ float xs[MOE_TK][MOE_TM + 1];
	__shared__ float ws[MOE_TK][MOE_TN + 1];
	__shared__ int su[MOE_TM];
	int e = blockIdx.y, n0 = blockIdx.x * MOE_TN;
	int lo = offs[e], hi = offs[e + 1];
	if (lo >= hi) return;
	int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
	for (int m0 = lo; m0 < hi; m0 += MOE_TM) {
		int cnt = min(MOE_TM, hi - m0);
		__syncthreads(); // the previous units are written
		if (tid < MOE_TM) su[tid] = tid < cnt ? list[m0 + tid] : -1;
		__syncthreads();
		float acc[4][4];
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
		for (int k0 = 0; k0 < nIn; k0 += MOE_TK) {
			for (int i = tid; i < MOE_TK * MOE_TM; i += blockDim.x) {
				int m = i / MOE_TK, kk = i % MOE_TK, k = k0 + kk, u = su[m];
				float v = 0.f;
				if (u >= 0 && k < nIn) v = x[(long long)(perUnit ? u : u / K) * nIn + k];
				xs[kk][m] = v;
			}
			for (int i = tid; i < MOE_TK * MOE_TN; i += blockDim.x) {
				int n = i / MOE_TK, kk = i % MOE_TK, k = k0 + kk;
				float v = 0.f;
				if (n0 + n < nOut && k < nIn) v = wl(e, n0 + n, k);
				ws[kk][n] = v;
			}
			__syncthreads();
#pragma unroll 8
			for (int kk = 0; kk < MOE_TK; kk++) {
				float a[4], b[4];
#pragma unroll
				for (int i = 0; i < 4; i++) a[i] = xs[kk][ty + 16 * i], b[i] = ws[kk][tx + 16 * i];
#pragma unroll
				for (int i = 0; i < 4; i++)
#pragma unroll
					for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
			}
			__syncthreads();
		}
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int m = ty + 16 * i;
			if (m >= cnt) continue;
			long long u = su[m];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				int f = n0 + tx + 16 * j;
				if (f < nOut) y[u * nOut + f] = acc[i][j];
			}
		}
	}
}

// moe_wl reads stored float experts w [E, nOut, nIn] of type wt for moe_tile.
struct moe_wl {
	const void* w;
	int wt, nOut, nIn;
	__device__ float operator()(int e, int n, int k) const { return load_w(w, wt, ((long long)e * nOut + n) * nIn + k); }
};

// moe_expert_tile: expert_matmul over units grouped by moe_expert_group
// (moe_tile over the stored weights).
extern "C" __global__ void moe_expert_tile(const float* x, const void* w, int wt, const int* offs, const int* list, float* y, int K,
                                           int nOut, int nIn, int perUnit) {
	pdl_entry();
	moe_tile(x, moe_wl{w, wt, nOut, nIn}, offs, list, y, K, nOut, nIn, perUnit);
}

// moe_silu_glu: y[r, c] = silu(x[r, c]) · x[r, f + c] over rows of 2f (in
// f64, rounded once, as the CPU); grid-stride over the n outputs.
extern "C" __global__ void moe_silu_glu(const float* x, float* y, long long n, int f) {
	pdl_entry();
	GRID_STRIDE(i, n) {
		long long r = i / f;
		const float* xr = x + 2 * r * f;
		int c = (int)(i - r * f);
		y[i] = (float)(silu_d((double)xr[c]) * (double)xr[f + c]);
	}
}

// moe_combine: out[t, c] = Σ_j w[t, j]·y[t, j, c] in j order, plus
// sigmoid(sg[t])·s[t, c] when s is given (sg then too); grid-stride over
// the n = rows·H outputs.
extern "C" __global__ void moe_combine(const float* y, const float* w, const float* s, const float* sg, float* out, long long n, int K,
                                       int H) {
	pdl_entry();
	GRID_STRIDE(i, n) {
		long long t = i / H;
		int c = (int)(i - t * H);
		float acc = 0.f;
		for (int j = 0; j < K; j++) acc = fmaf(w[t * K + j], y[(t * K + j) * H + c], acc);
		if (s) acc = fmaf((float)sigmoid_d((double)sg[t]), s[t * H + c], acc);
		out[i] = acc;
	}
}
