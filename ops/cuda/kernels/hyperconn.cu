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
