// Row kernels: l2norm / rmsnorm over runs, the fused row ops (slerp, mix,
// gated_norm) and rope with its fused forms (norm_rope, norm_rope_kv). One
// block per run or row (per head for rope); sums of squares in f64 as the
// CPU reference does.

// normalize_row scales y[0..n) to unit l2 norm (with eps), in place. The
// caller's threads wrote y with the same index mapping.
__device__ void normalize_row(float* y, int n, float eps, double* scratch) {
	double inv = 1.0 / sqrt(sumsq_d(y, n, scratch) + (double)eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = (float)((double)y[i] * inv);
}

// The row kernels keep a row in registers: each thread holds up to R of its
// elements (index threadIdx.x + k·blockDim.x), so a row is read once and
// every norm is one block reduction. Rows up to 1024·R elements; the binding
// picks R = 8 or 32 and the block size.

// norm_woff is the offset in w of the scale of run blockIdx.x (g elements)
// of rows of last elements: w holds wn = g values (one scale for every run)
// or wn = last (a scale per element of the row).
__device__ __forceinline__ long long norm_woff(int g, int last, int wn) {
	long long o = (long long)blockIdx.x * g;
	return (o % last) % wn;
}

// norm_body: one block per run of g elements; rms with w (of type wt, wn =
// g or last elements), else l2 (justnorm).
template <int R>
__device__ void norm_body(const float* x, const void* w, int wt, float* y, int g, int last, int wn, float eps, int rms) {
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * g;
	long long wo = rms ? norm_woff(g, last, wn) : 0;
	float r[R];
	double ss = 0;
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		r[k] = i < g ? x[o + i] : 0.f;
		ss += (double)r[k] * (double)r[k];
	}
	ss = block_sum_d(ss, scratch);
	double inv = rms ? 1.0 / sqrt(ss / g + (double)eps) : 1.0 / sqrt(ss + (double)eps);
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		if (i < g) {
			double v = (double)r[k] * inv;
			if (rms) v *= (double)load_w(w, wt, wo + i);
			y[o + i] = (float)v;
		}
	}
}

extern "C" __global__ void norm_rows(const float* x, const void* w, int wt, float* y, int g, int last, int wn, float eps, int rms) {
	if (rms) prefetch_w(w, wt, norm_woff(g, last, wn), g);
	pdl_entry();
	norm_body<8>(x, w, wt, y, g, last, wn, eps, rms);
}
extern "C" __global__ void __launch_bounds__(1024) norm_rows_wide(const float* x, const void* w, int wt, float* y, int g, int last, int wn, float eps,
                                          int rms) {
	if (rms) prefetch_w(w, wt, norm_woff(g, last, wn), g);
	pdl_entry();
	norm_body<32>(x, w, wt, y, g, last, wn, eps, rms);
}

// norm_rows_long: norm_rows for runs of any length (one block per run,
// blockDim.x a multiple of 32): x is read twice, once for the sum of squares
// and once to scale; each thread writes only the elements it read, so y may
// be x's buffer.
extern "C" __global__ void norm_rows_long(const float* x, const void* w, int wt, float* y, int g, int last, int wn, float eps,
                                          int rms) {
	pdl_entry();
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * g;
	long long wo = rms ? norm_woff(g, last, wn) : 0;
	double ss = 0;
	for (int i = threadIdx.x; i < g; i += blockDim.x) {
		double v = x[o + i];
		ss += v * v;
	}
	ss = block_sum_d(ss, scratch);
	double inv = rms ? 1.0 / sqrt(ss / (double)g + (double)eps) : 1.0 / sqrt(ss + (double)eps);
	for (int i = threadIdx.x; i < g; i += blockDim.x) {
		double v = (double)x[o + i] * inv;
		if (rms) v *= (double)load_w(w, wt, wo + i);
		y[o + i] = (float)v;
	}
}

#define ROW_SLERP 0
#define ROW_MIX 1
#define ROW_GATED_NORM 2

// rowfuse_body: one block per row of n. slerp(a=x, b=y, v=alpha), mix(a, b),
// gated_norm(a=y, b=g, v=s); the output may be a's buffer. Every input is
// loaded before the first reduction, and slerp's two norms share one, so
// a row costs two block reductions (one dependent load round trip).
template <int R>
__device__ void rowfuse_body(int kind, const float* a, const float* b, const float* v, float* y, int n, float eps) {
	__shared__ double scratch[64];
	long long o = (long long)blockIdx.x * n;
	a += o, b += o, y += o;
	float ra[R], rb[R], rv[R];
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		ra[k] = i < n ? a[i] : 0.f;
		rb[k] = i < n ? b[i] : 0.f;
		rv[k] = i < n && kind != ROW_MIX ? v[i] : 0.f;
	}
	if (kind == ROW_SLERP) {
		double sa = 0, sb = 0;
#pragma unroll
		for (int k = 0; k < R; k++) sa += (double)ra[k] * (double)ra[k], sb += (double)rb[k] * (double)rb[k];
		block_sum2_d(&sa, &sb, scratch);
		double nx = 1.0 / sqrt(sa + (double)eps);
		double ny = 1.0 / sqrt(sb + (double)eps);
#pragma unroll
		for (int k = 0; k < R; k++) {
			double ax = (double)ra[k] * nx;
			ra[k] = (float)(ax + (double)rv[k] * ((double)rb[k] * ny - ax));
		}
	} else if (kind == ROW_MIX) {
#pragma unroll
		for (int k = 0; k < R; k++) ra[k] = ra[k] + rb[k];
	} else {
#pragma unroll
		for (int k = 0; k < R; k++) ra[k] = ra[k] * (float)sigmoid_d((double)(rb[k] * rv[k]));
	}
	double ss = 0;
#pragma unroll
	for (int k = 0; k < R; k++) ss += (double)ra[k] * (double)ra[k];
	double inv = 1.0 / sqrt(block_sum_d(ss, scratch) + (double)eps);
#pragma unroll
	for (int k = 0; k < R; k++) {
		int i = threadIdx.x + k * blockDim.x;
		if (i < n) y[i] = (float)((double)ra[k] * inv);
	}
}

// rowfuse_prefetch asks for the lines of a row's inputs before the wait on
// the previous kernel (v, a weight, above all).
__device__ __forceinline__ void rowfuse_prefetch(const float* a, const float* b, const float* v, int n) {
	long long o = (long long)blockIdx.x * n;
	for (int i = threadIdx.x * 32; i < n; i += blockDim.x * 32) {
		prefetch_l2(a + o + i);
		prefetch_l2(b + o + i);
		if (v) prefetch_l2(v + i);
	}
}

extern "C" __global__ void rowfuse(int kind, const float* a, const float* b, const float* v, float* y, int n, float eps) {
	rowfuse_prefetch(a, b, v, n);
	pdl_entry();
	rowfuse_body<8>(kind, a, b, v, y, n, eps);
}
extern "C" __global__ void __launch_bounds__(1024) rowfuse_wide(int kind, const float* a, const float* b, const float* v, float* y, int n, float eps) {
	pdl_entry();
	rowfuse_body<32>(kind, a, b, v, y, n, eps);
}

// rope: one block per (row, head): rope_head on the head at position
// call[pos] + row. With slot not null (norm_rope_kv) the result goes to the
// row's slot row as kv_write places it, else to y.
extern "C" __global__ void rope(const float* x, float* y, const int* call, int* err, const double* freq, double m,
                                const float* scale, float* slot, int rows, int width, int hd, int rot, int norm, float eps, int cap,
                                int ring) {
	pdl_entry();
	int r = blockIdx.x, o = blockIdx.y * hd;
	int pos, used;
	float* dst;
	if (slot) {
		if (!kv_check(call, rows, cap, ring, err, &pos, &used)) return;
		long long p = kv_row(r, pos, used, cap, ring);
		if (p < 0) return;
		dst = slot + p * width + o;
	} else {
		if (!read_call(call, rows, err, &pos, &used)) return;
		dst = y + (long long)r * width + o;
	}
	rope_head(x + (long long)r * width + o, dst, pos + r, freq, m, scale ? scale + o : 0, hd, rot, norm, eps);
}
