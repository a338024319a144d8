// Gated residual streams (ops/hyperconn.go): hc_expand, hc_mix and
// hc_inject over the hyper-state X[T, C·H] (stream c = columns
// [cH, (c+1)H)); their norm is rmsnorm (norm.cu). reshape is a device copy
// on the Go side and has no kernel. The mix's sum over streams is in f64, as
// the CPU reference computes it.
// No kernel reports an error (the group has no error codes, 30..39 unused).

// hc_expand: y[T, C·H] = [x | x | ... | x] for x[T, H]. grid.x = T·chunks,
// block b covering row b / chunks, columns (b % chunks)·blockDim.x + tid;
// a thread reads its x once and writes it to each of the c streams.
extern "C" __global__ void hc_expand(const float* x, float* y, int c, int h, int chunks) {
	pdl_entry();
	long long r = blockIdx.x / chunks;
	int i = (blockIdx.x % chunks) * blockDim.x + threadIdx.x;
	if (i >= h) return;
	float v = x[r * h + i];
	float* yr = y + r * c * h + i;
	for (int k = 0; k < c; k++) yr[(long long)k * h] = v;
}

// hc_mix: u[T, H] = (1/C) Σ_c sigmoid(g_c) ⊙ xn_c, xn and g [T, C·H], the sum
// in f64 in stream order as the CPU does. Launch layout as hc_expand: a
// thread computes one column i of one row.
extern "C" __global__ void hc_mix(const float* xn, const float* g, float* u, int c, int h, int chunks) {
	pdl_entry();
	long long r = blockIdx.x / chunks;
	int i = (blockIdx.x % chunks) * blockDim.x + threadIdx.x;
	if (i >= h) return;
	long long o = r * c * h + i;
	double s = 0;
	for (int k = 0; k < c; k++) {
		long long j = o + (long long)k * h;
		s += sigmoid_d((double)g[j]) * (double)xn[j];
	}
	u[r * h + i] = (float)(s * (1.0 / (double)c));
}

// hc_inject: out_c = x_c + 2·sigmoid(l_c / C) · y for every stream c, x and
// out [T, C·H] (out may be x's buffer: each element is read, then written,
// by one thread), y [T, H], l [T, C]. Launch layout as hc_expand; the
// block's row's c stream weights (rounded to f32 as the CPU does) are
// computed once into dynamic shared memory of c floats.
extern "C" __global__ void hc_inject(const float* x, const float* y, const float* l, float* out, int c, int h, int chunks) {
	pdl_entry();
	extern __shared__ float hc_inject_s[];
	long long r = blockIdx.x / chunks;
	for (int k = threadIdx.x; k < c; k += blockDim.x)
		hc_inject_s[k] = (float)(2.0 * sigmoid_d((double)l[r * c + k] / (double)c));
	__syncthreads();
	int i = (blockIdx.x % chunks) * blockDim.x + threadIdx.x;
	if (i >= h) return;
	float yv = y[r * h + i];
	long long o = r * c * h + i;
	for (int k = 0; k < c; k++) {
		long long j = o + (long long)k * h;
		out[j] = x[j] + hc_inject_s[k] * yv;
	}
}

// ---------------------------------------------------------------- fused (ops/fused_hyperconn.go)

// moe_inject_norm: x' = hc_inject(x, y, l) into xo (which may be x's
// buffer: each element is read, then written, by one thread) and
// xn = rmsnorm(x', w) over runs of g elements of rows of c·h (w of type wt,
// wn = g or c·h elements), y moe_combine's output computed here as
// moe_combine computes it: the K routed experts' products ye [T, K, h]
// under their weights ew [T, K] in order, then the shared expert sh [T, h]
// (when not null) under its gate sigmoid(sg [T, 1]). One block per run, a
// thread keeping up to R of its elements (index threadIdx.x + k·blockDim.x)
// in registers, as norm_rows does; the run's row's c stream weights,
// rounded to f32 as hc_inject rounds them, and the shared expert's gate in
// dynamic shared memory of c + 1 floats. x' is rounded to f32 before its
// sum of squares (in f64, as rmsnorm's).
template <int R>
__device__ void moe_inject_norm_body(const float* x, const float* l, float* xo, const void* w, int wt, float* xn, int c, int h, int g,
                                     int wn, float eps, const float* ye, const float* ew, const float* sh, const float* sg, int K) {
	__shared__ double scratch[32];
	extern __shared__ float moe_inject_norm_s[];
	long long width = (long long)c * h;
	long long o = (long long)blockIdx.x * g;
	long long r = o / width;
	long long ro = o - r * width; // the run's first column in its row
	long long wo = ro % wn;
	for (int k = threadIdx.x; k < c; k += blockDim.x)
		moe_inject_norm_s[k] = (float)(2.0 * sigmoid_d((double)l[r * c + k] / (double)c));
	if (threadIdx.x == 0 && sh) moe_inject_norm_s[c] = (float)sigmoid_d((double)sg[r]);
	__syncthreads();
	float v[R];
	double ss = 0;
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		v[k] = 0.f;
		if (i < g) {
			long long j = ro + i;
			int s = (int)(j / h);
			long long col = j - (long long)s * h;
			float yv = 0.f;
			for (int q = 0; q < K; q++) yv = fmaf(ew[r * K + q], ye[(r * K + q) * h + col], yv);
			if (sh) yv = fmaf(moe_inject_norm_s[c], sh[r * h + col], yv);
			v[k] = x[o + i] + moe_inject_norm_s[s] * yv;
			xo[o + i] = v[k];
		}
		ss += (double)v[k] * (double)v[k];
	}
	ss = block_sum_d(ss, scratch);
	double inv = 1.0 / sqrt(ss / g + (double)eps);
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		if (i < g) xn[o + i] = (float)((double)v[k] * inv * (double)load_w(w, wt, wo + i));
	}
}

#define MOE_INJECT_NORM_PARAMS                                                                                           \
	const float *x, const float *l, float *xo, const void *w, int wt, float *xn, int c, int h, int g, int wn, float eps, \
	    const float *ye, const float *ew, const float *sh, const float *sg, int K
#define MOE_INJECT_NORM_ARGS x, l, xo, w, wt, xn, c, h, g, wn, eps, ye, ew, sh, sg, K

extern "C" __global__ void __launch_bounds__(1024) moe_inject_norm(MOE_INJECT_NORM_PARAMS) {
	prefetch_w(w, wt, ((long long)blockIdx.x * g % ((long long)c * h)) % wn, g);
	pdl_entry();
	moe_inject_norm_body<8>(MOE_INJECT_NORM_ARGS);
}

extern "C" __global__ void __launch_bounds__(1024) moe_inject_norm_wide(MOE_INJECT_NORM_PARAMS) {
	prefetch_w(w, wt, ((long long)blockIdx.x * g % ((long long)c * h)) % wn, g);
	pdl_entry();
	moe_inject_norm_body<32>(MOE_INJECT_NORM_ARGS);
}

// HC_MIX_MAXC is the most streams hc_mix_mv takes (the binder runs the
// parts past it).
#define HC_MIX_MAXC 4

// hc_mix_mv: u[T, H] = hc_mix(xn, silu(scale·d) · wᵀ) for T = rows ≤ RB
// (1 or MV_MAXR) and c ≤ HC_MIX_MAXC streams; xn [T, c·h], d [T, r], w
// [c·h, r] of type WT. Every block first stages the activation silu(scale·d)
// of every row (rounded to f32 as scale and silu round it) in dynamic
// shared memory (rows·r floats); warp q of block b then takes column
// i = b·warps + q: the c weight rows k·h + i, streamed once (16-byte
// loads when vec: r a multiple of the vector and w 16-byte aligned), dotted
// with every row's activation, each sum over the warp in a fixed order,
// and the streams mixed in f64 in stream order as hc_mix does.
template <int WT, int RB>
__device__ void hc_mix_mv_body(const float* xn, const float* d, const void* w, float* u, int rows, int c, int h, int r, float scale,
                               int vec) {
	extern __shared__ float4 hc_mix_s4[];
	float* t = (float*)hc_mix_s4;
	const int E = WT == WT_F32 ? 4 : 8;
	const long long esz = WT == WT_F32 ? 4 : 2;
	int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
	int i = blockIdx.x * warps + (threadIdx.x >> 5);
	if (i < h && (lane & 7) == 0) {
		for (int k = 0; k < c; k++) {
			const char* row = (const char*)w + ((long long)k * h + i) * r * esz;
			for (long long b = (long long)(lane >> 3) * 128; b < r * esz; b += 4 * 128) prefetch_l2(row + b);
		}
	}
	pdl_entry();
	for (int j = threadIdx.x; j < rows * r; j += blockDim.x) t[j] = (float)silu_d((double)(scale * d[j]));
	__syncthreads();
	if (i >= h) return;
	float acc[HC_MIX_MAXC * RB];
#pragma unroll
	for (int a = 0; a < HC_MIX_MAXC * RB; a++) acc[a] = 0.f;
	if (vec) {
		int V = r / E;
		const uint4* wr[HC_MIX_MAXC];
#pragma unroll
		for (int k = 0; k < HC_MIX_MAXC; k++) wr[k] = (const uint4*)((const char*)w + ((long long)(k < c ? k : 0) * h + i) * r * esz);
		for (int v = lane; v < V; v += 32) {
			uint4 q[HC_MIX_MAXC];
#pragma unroll
			for (int k = 0; k < HC_MIX_MAXC; k++)
				if (k < c) q[k] = ld_stream(wr[k] + v);
#pragma unroll
			for (int tr = 0; tr < RB; tr++) {
				if (tr < rows) {
					float xv[8];
					const float4* xs = (const float4*)(t + (long long)tr * r + (long long)v * E);
					float4 a0 = xs[0];
					xv[0] = a0.x, xv[1] = a0.y, xv[2] = a0.z, xv[3] = a0.w;
					if (WT != WT_F32) {
						float4 a1 = xs[1];
						xv[4] = a1.x, xv[5] = a1.y, xv[6] = a1.z, xv[7] = a1.w;
					}
#pragma unroll
					for (int k = 0; k < HC_MIX_MAXC; k++)
						if (k < c) acc[k * RB + tr] = mv_fma<WT>(q[k], xv, acc[k * RB + tr]);
				}
			}
		}
	} else {
		for (int e = lane; e < r; e += 32) {
#pragma unroll
			for (int k = 0; k < HC_MIX_MAXC; k++) {
				if (k < c) {
					float wv = load_w(w, WT, ((long long)k * h + i) * r + e);
#pragma unroll
					for (int tr = 0; tr < RB; tr++)
						if (tr < rows) acc[k * RB + tr] = fmaf(t[tr * r + e], wv, acc[k * RB + tr]);
				}
			}
		}
	}
#pragma unroll
	for (int tr = 0; tr < RB; tr++) {
		if (tr < rows) { // uniform over the warp: every lane takes part in the sums
			double s = 0;
#pragma unroll
			for (int k = 0; k < HC_MIX_MAXC; k++) {
				if (k < c) {
					float g = warp_sum(acc[k * RB + tr]);
					s += sigmoid_d((double)g) * (double)xn[(long long)tr * c * h + (long long)k * h + i];
				}
			}
			if (lane == 0) u[(long long)tr * h + i] = (float)(s * (1.0 / (double)c));
		}
	}
}

#define HC_MIX_PARAMS const float *xn, const float *d, const void *w, float *u, int rows, int c, int h, int r, float scale, int vec
#define HC_MIX_ARGS xn, d, w, u, rows, c, h, r, scale, vec
extern "C" __global__ void hc_mix_mv_f32_r1(HC_MIX_PARAMS) { hc_mix_mv_body<WT_F32, 1>(HC_MIX_ARGS); }
extern "C" __global__ void hc_mix_mv_bf16_r1(HC_MIX_PARAMS) { hc_mix_mv_body<WT_BF16, 1>(HC_MIX_ARGS); }
extern "C" __global__ void hc_mix_mv_f16_r1(HC_MIX_PARAMS) { hc_mix_mv_body<WT_F16, 1>(HC_MIX_ARGS); }
extern "C" __global__ void hc_mix_mv_f32_r8(HC_MIX_PARAMS) { hc_mix_mv_body<WT_F32, MV_MAXR>(HC_MIX_ARGS); }
extern "C" __global__ void hc_mix_mv_bf16_r8(HC_MIX_PARAMS) { hc_mix_mv_body<WT_BF16, MV_MAXR>(HC_MIX_ARGS); }
extern "C" __global__ void hc_mix_mv_f16_r8(HC_MIX_PARAMS) { hc_mix_mv_body<WT_F16, MV_MAXR>(HC_MIX_ARGS); }

// hc_mix_act: t = silu(scale·d) over n elements (hc_mix_matmul's parts
// for prompt rows: then the up product and hc_mix), rounded as scale and
// silu round it.
extern "C" __global__ void hc_mix_act(const float* d, float* t, long long n, float scale) {
	pdl_entry();
	GRID_STRIDE(j, n) t[j] = (float)silu_d((double)(scale * d[j]));
}
