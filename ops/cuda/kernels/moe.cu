// Mixture-of-experts kernels (ops/moe.go), bound in moe.go:
// moe_route (the router's softmax and top-k), expert_matmul (moe_expert_warp
// for a decode token, moe_expert_window for a decode window of 2 to 8 rows,
// moe_expert_group then moe_expert_tile for a few rows of many units past
// the window's bounds, and for many rows moe_expert_rank, moe_expert_group and the tensor-core
// moe_expert_mma_bf16 / _f16; the quantized experts of quant_expert_matmul
// share the grouping, moe_expert_tile's tile (kernels/quant.cu) and
// moe_expert_mma (kernels/quant_prompt.cu), silu_glu
// (moe_silu_glu) and moe_combine. Every sum has a fixed order (no float
// atomics), so results are the same bit for bit on every run.

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

extern "C" __global__ void moe_expert_warp(const float* x, const void* w, int wt, const int* ids, float* y, int units, int K, int E,
                                           int nOut, int nIn, int perUnit, int vec, int* err) {
	pdl_entry();
	int lane = threadIdx.x & 31, u, f, id;
	float* yo;
	const float* xu;
	if (!moe_warp_unit(x, ids, y, units, K, E, nOut, nIn, perUnit, err, &u, &f, &id, &yo, &xu)) return;
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

// moe_expert_warp_glu: expert_matmul_glu's warp form (moe_expert_warp's
// layout, the experts' rows 2F each): warp g computes, for u = g / F and
// f = g mod F, the gate a = w[id, f] · x_u and the up b = w[id, F + f] · x_u
// as moe_expert_warp computes each (f32), then y[u, f] = f32(silu(a) · b)
// in f64 as moe_silu_glu does; a bad id is reported and its outputs are
// zero, as silu_glu makes of zero products.
extern "C" __global__ void moe_expert_warp_glu(const float* x, const void* w, int wt, const int* ids, float* y, int units, int K, int E,
                                               int F, int nIn, int perUnit, int vec, int* err) {
	pdl_entry();
	int lane = threadIdx.x & 31, u, f, id;
	float* yo;
	const float* xu;
	if (!moe_warp_unit(x, ids, y, units, K, E, F, nIn, perUnit, err, &u, &f, &id, &yo, &xu)) return;
	long long ga = ((long long)id * 2 * F + f) * nIn, gb = ga + (long long)F * nIn; // the gate's and up's first elements
	float a, b;
	if (wt == WT_BF16) {
		a = moe_row_dot<WT_BF16>((const u16*)w + ga, xu, nIn, vec, lane);
		b = moe_row_dot<WT_BF16>((const u16*)w + gb, xu, nIn, vec, lane);
	} else if (wt == WT_F16) {
		a = moe_row_dot<WT_F16>((const u16*)w + ga, xu, nIn, vec, lane);
		b = moe_row_dot<WT_F16>((const u16*)w + gb, xu, nIn, vec, lane);
	} else {
		a = moe_row_dot<WT_F32>((const float*)w + ga, xu, nIn, vec, lane);
		b = moe_row_dot<WT_F32>((const float*)w + gb, xu, nIn, vec, lane);
	}
	if (lane == 0) *yo = (float)(silu_d((double)a) * (double)b);
}

extern "C" __global__ void __launch_bounds__(256) moe_expert_window(MOE_WIN_PARAMS) { moe_window<false>(MOE_WIN_ARGS); }
extern "C" __global__ void __launch_bounds__(256) moe_expert_window_glu(MOE_WIN_PARAMS) { moe_window<true>(MOE_WIN_ARGS); }

// moe_expert_group: one block (blockDim.x a multiple of 32), dynamic shared
// memory of E ints. It groups the units by expert: offs[e] .. offs[e+1]
// index list, which holds the units of expert e, in unit order when rank
// (moe_expert_rank's) is given, else in no particular order (the results
// of moe_expert_tile and quant.cu's qmoe_tile_* do not depend on it). With
// tm > 0 it also cuts each expert's units into tiles of tm for
// moe_expert_mma: toffs[e] .. toffs[e+1] are expert e's tiles, toffs[E]
// their total, and tiles[t] is the expert of tile t. An id outside [0, E)
// is reported and its unit left out.
extern "C" __global__ void moe_expert_group(const int* ids, int units, int K, int E, int* offs, int* list, const int* rank, int tm,
                                            int* toffs, int* tiles, int* err) {
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
	// The first warp scans the counts (and the tiles): lane i takes a run of
	// experts.
	if (threadIdx.x < 32) {
		int lane = threadIdx.x, per = (E + 31) / 32;
		int lo = min(E, lane * per), hi = min(E, lo + per);
		int c = 0, tc = 0;
		for (int e = lo; e < hi; e++) {
			c += cnt[e];
			if (tm > 0) tc += (cnt[e] + tm - 1) / tm;
		}
		int inc = c, tinc = tc;
		for (int d = 1; d < 32; d <<= 1) {
			int o = __shfl_sync(0xffffffffu, inc, lane >= d ? lane - d : lane);
			int to = __shfl_sync(0xffffffffu, tinc, lane >= d ? lane - d : lane);
			if (lane >= d) inc += o, tinc += to;
		}
		int run = inc - c, trun = tinc - tc;
		for (int e = lo; e < hi; e++) {
			int ce = cnt[e];
			offs[e] = run;
			cnt[e] = run; // the first (rank) or next free (atomics) place of expert e
			run += ce;
			if (tm > 0) {
				toffs[e] = trun;
				for (int j = 0; j < (ce + tm - 1) / tm; j++) tiles[trun++] = e;
			}
		}
		if (lane == 31) {
			offs[E] = inc;
			if (tm > 0) toffs[E] = tinc;
		}
	}
	__syncthreads();
	for (int u = threadIdx.x; u < units; u += blockDim.x) {
		int id = ids[u];
		if (id >= 0 && id < E) list[rank ? cnt[id] + rank[u] : atomicAdd(&cnt[id], 1)] = u;
	}
}

// moe_expert_rank: rank[u] is the number of units before u with u's expert
// id, u's place among its expert's units in unit order (moe_expert_group's
// deterministic list). One warp per unit (blockDim.x a multiple of 32): the
// lanes compare 32 earlier ids at a time and count the matches by ballot.
extern "C" __global__ void moe_expert_rank(const int* ids, int units, int* rank) {
	pdl_entry();
	int lane = threadIdx.x & 31;
	int u = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (u >= units) return;
	int id = ids[u], r = 0;
	for (int c = 0; c < u; c += 32) {
		int j = c + lane;
		r += __popc(__ballot_sync(0xffffffffu, j < u && ids[j] == id));
	}
	if (lane == 0) rank[u] = r;
}

// moe_expert_tile: expert_matmul over units grouped by moe_expert_group
// (moe_tile over the stored weights).
extern "C" __global__ void moe_expert_tile(const float* x, const void* w, int wt, const int* offs, const int* list, float* y, int K,
                                           int nOut, int nIn, int perUnit) {
	pdl_entry();
	moe_tile(x, moe_wl{w, wt, nOut, nIn}, offs, list, y, K, nOut, nIn, perUnit);
}

extern "C" __global__ void __launch_bounds__(256, 2) moe_expert_mma_bf16(MOE_MMA_PARAMS) { moe_expert_mma<WT_BF16>(MOE_MMA_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 2) moe_expert_mma_f16(MOE_MMA_PARAMS) { moe_expert_mma<WT_F16>(MOE_MMA_ARGS); }

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
