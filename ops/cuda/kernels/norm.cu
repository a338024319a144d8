// Row kernels: l2norm / rmsnorm over runs, the fused row ops (slerp, mix,
// gated_norm) and rope with its fused forms (norm_rope, norm_rope_kv). One
// block per run or row (per head for rope); sums of squares in f64 as the
// CPU reference does.

// sumsq_d is the sum of squares of x[0..n) over the block (f64).
__device__ double sumsq_d(const float* x, int n, double* scratch) {
	double s = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		double v = x[i];
		s += v * v;
	}
	return block_sum_d(s, scratch);
}

// normalize_row scales y[0..n) to unit l2 norm (with eps), in place. The
// caller's threads wrote y with the same index mapping.
__device__ void normalize_row(float* y, int n, float eps, double* scratch) {
	double inv = 1.0 / sqrt(sumsq_d(y, n, scratch) + (double)eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = (float)((double)y[i] * inv);
}

// norm: one block per run of g elements; rms with w, else l2 (justnorm).
extern "C" __global__ void norm_rows(const float* x, const float* w, float* y, int g, float eps, int rms) {
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * g;
	double ss = sumsq_d(x + o, g, scratch);
	double inv = rms ? 1.0 / sqrt(ss / g + (double)eps) : 1.0 / sqrt(ss + (double)eps);
	for (int i = threadIdx.x; i < g; i += blockDim.x) {
		double v = (double)x[o + i] * inv;
		if (rms) v *= (double)w[i];
		y[o + i] = (float)v;
	}
}

#define ROW_SLERP 0
#define ROW_MIX 1
#define ROW_GATED_NORM 2

// rowfuse: one block per row of n. slerp(a=x, b=y, v=alpha), mix(a, b),
// gated_norm(a=y, b=g, v=s); the output may be a's buffer.
extern "C" __global__ void rowfuse(int kind, const float* a, const float* b, const float* v, float* y, int n, float eps) {
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * n;
	a += o, b += o, y += o;
	if (kind == ROW_SLERP) {
		double nx = 1.0 / sqrt(sumsq_d(a, n, scratch) + (double)eps);
		double ny = 1.0 / sqrt(sumsq_d(b, n, scratch) + (double)eps);
		for (int i = threadIdx.x; i < n; i += blockDim.x) {
			double ax = (double)a[i] * nx;
			y[i] = (float)(ax + (double)v[i] * ((double)b[i] * ny - ax));
		}
	} else if (kind == ROW_MIX) {
		for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = a[i] + b[i];
	} else {
		for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = a[i] * (float)sigmoid_d((double)(b[i] * v[i]));
	}
	normalize_row(y, n, eps, scratch);
}

// rope: one block per (row, head). It rotates the first rot dims of the head
// by position call[pos] + row (NeoX half split, angles in f64 from freq),
// copies the rest; with norm, then l2-normalizes the head and multiplies by
// scale (when not null). With slot not null (norm_rope_kv) the result goes
// to the row's slot row as kv_write places it, else to y.
extern "C" __global__ void rope(const float* x, float* y, const int* call, int* err, const double* freq, const float* scale,
                                float* slot, int rows, int width, int hd, int rot, int norm, float eps, int cap, int ring) {
	__shared__ double scratch[32];
	int r = blockIdx.x, o = blockIdx.y * hd, h = rot / 2;
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
	const float* src = x + (long long)r * width + o;
	double p = (double)(pos + r);
	for (int j = threadIdx.x; j < h; j += blockDim.x) {
		double s, c;
		sincos(p * freq[j], &s, &c);
		float cf = (float)c, sf = (float)s;
		float a = src[j], b = src[j + h];
		dst[j] = a * cf - b * sf;
		dst[j + h] = b * cf + a * sf;
	}
	for (int i = rot + threadIdx.x; i < hd; i += blockDim.x) dst[i] = src[i];
	if (!norm) return;
	__syncthreads();
	double inv = 1.0 / sqrt(sumsq_d(dst, hd, scratch) + (double)eps);
	for (int i = threadIdx.x; i < hd; i += blockDim.x) {
		float v = (float)((double)dst[i] * inv);
		if (scale) v *= scale[o + i];
		dst[i] = v;
	}
}
