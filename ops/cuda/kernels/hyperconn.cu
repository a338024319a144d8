// Gated residual streams (ops/hyperconn.go): rmsnorm1p (the RMS
// norm whose weights are offsets from one), hc_expand, hc_mix and hc_inject
// over the hyper-state X[T, C·H] (stream c = columns [cH, (c+1)H)). reshape
// is a device copy on the Go side and has no kernel. Sums of squares and the
// mix's sum over streams are in f64, as the CPU reference computes them.
// No kernel reports an error (the group has no error codes, 30..39 unused).

// hc_prefetch_w asks for the L2 lines of the n weight elements of type wt
// from element wo of w (the run's scale) before the wait on the previous
// kernel: the weight does not depend on it.
__device__ __forceinline__ void hc_prefetch_w(const void* w, int wt, long long wo, int n) {
	long long esz = wt == WT_F32 ? 4 : 2;
	const char* p = (const char*)w + wo * esz;
	for (long long b = (long long)threadIdx.x * 128; b < (long long)n * esz; b += (long long)blockDim.x * 128) prefetch_l2(p + b);
}

// hc_rms1p_woff is the offset in w of the scale of run blockIdx.x (g
// elements) of rows of last elements: w holds wn = g values (one scale for
// every run) or wn = last (a scale per element of the row).
__device__ __forceinline__ long long hc_rms1p_woff(int g, int last, int wn) {
	long long o = (long long)blockIdx.x * g;
	return (o % last) % wn;
}

// hc_rms1p_body: one block per run of g elements (grid.x = runs, any
// multiple of 32 threads up to 1024 with g <= R·blockDim.x). Each thread
// keeps up to R of the run's elements in registers (index threadIdx.x +
// k·blockDim.x), so x is read once and y may be x's buffer:
// y = x / sqrt(Σx²/g + eps) ⊙ (1 + w[wo..wo+g)), in f64 as the CPU does.
template <int R>
__device__ void hc_rms1p_body(const float* x, const void* w, int wt, float* y, int g, int last, int wn, float eps) {
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * g;
	long long wo = hc_rms1p_woff(g, last, wn);
	float r[R];
	double ss = 0;
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		r[k] = i < g ? x[o + i] : 0.f;
		ss += (double)r[k] * (double)r[k];
	}
	ss = block_sum_d(ss, scratch);
	double inv = 1.0 / sqrt(ss / (double)g + (double)eps);
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		if (i < g) y[o + i] = (float)((double)r[k] * inv * (1.0 + (double)load_w(w, wt, wo + i)));
	}
}

// hc_rmsnorm1p: rmsnorm1p over runs of g <= 8·blockDim.x elements; one block
// per run (grid.x = x's elements / g). w is of type wt with wn = g or last
// elements.
extern "C" __global__ void hc_rmsnorm1p(const float* x, const void* w, int wt, float* y, int g, int last, int wn, float eps) {
	hc_prefetch_w(w, wt, hc_rms1p_woff(g, last, wn), g);
	pdl_entry();
	hc_rms1p_body<8>(x, w, wt, y, g, last, wn, eps);
}

// hc_rmsnorm1p_wide: hc_rmsnorm1p for runs of g <= 32·blockDim.x elements.
extern "C" __global__ void hc_rmsnorm1p_wide(const float* x, const void* w, int wt, float* y, int g, int last, int wn,
                                             float eps) {
	hc_prefetch_w(w, wt, hc_rms1p_woff(g, last, wn), g);
	pdl_entry();
	hc_rms1p_body<32>(x, w, wt, y, g, last, wn, eps);
}

// hc_rmsnorm1p_long: hc_rmsnorm1p for runs of any length (one block per run,
// blockDim.x a multiple of 32): x is read twice, once for the sum of squares
// and once to scale; each thread writes only the elements it read, so y may
// be x's buffer.
extern "C" __global__ void hc_rmsnorm1p_long(const float* x, const void* w, int wt, float* y, int g, int last, int wn,
                                             float eps) {
	pdl_entry();
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * g;
	long long wo = hc_rms1p_woff(g, last, wn);
	double ss = 0;
	for (int i = threadIdx.x; i < g; i += blockDim.x) {
		double v = x[o + i];
		ss += v * v;
	}
	ss = block_sum_d(ss, scratch);
	double inv = 1.0 / sqrt(ss / (double)g + (double)eps);
	for (int i = threadIdx.x; i < g; i += blockDim.x)
		y[o + i] = (float)((double)x[o + i] * inv * (1.0 + (double)load_w(w, wt, wo + i)));
}

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
