// Shared definitions of Reel's CUDA kernels. The Go side concatenates this
// file and every kernels/*.cu into one NVRTC program; no CUDA header is used.

typedef unsigned short u16;
typedef unsigned int u32;

// Element types of weights, as the Go side passes them (wtype arguments).
#define WT_F32 0
#define WT_BF16 1
#define WT_F16 2

// Call record words (ops.CallPos, ops.CallRows).
#define CALL_POS 0
#define CALL_ROWS 1

// Error codes a kernel reports through the backend's error record; the Go
// side (errors.go) turns them into messages.
#define ERR_CALL_POS 1      // a = pos
#define ERR_CALL_ROWS 2     // a = rows asked, b = plan rows
#define ERR_EMBED_ID 3      // a = row, b = id, c = vocab
#define ERR_KV_CAPACITY 4   // a = last position, b = capacity
#define ERR_ATTN_CAPACITY 5 // a = last position, b = capacity
#define ERR_SLOT_EMPTY 6    // the slot has no rows
#define ERR_NOT_FINITE 7    // check_finite found a NaN or an infinity

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ float f16_to_f32(u16 h) {
	float f;
	asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
	return f;
}

// f32_to_bf16 rounds to nearest even; NaN stays NaN.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
	u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (u16)(u >> 16);
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
	u16 h;
	asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
	return h;
}

// load_w reads element i of a weight of type wt as f32.
__device__ __forceinline__ float load_w(const void* w, int wt, long long i) {
	if (wt == WT_BF16) return bf16_to_f32(((const u16*)w)[i]);
	if (wt == WT_F16) return f16_to_f32(((const u16*)w)[i]);
	return ((const float*)w)[i];
}

// report5 records the first error of a run: code and up to five values
// (the record has 8 words; the Go side, kernelErr and the op families'
// functions, words them by code).
__device__ __forceinline__ void report5(int* err, int code, int a, int b, int c, int d, int e) {
	if (atomicCAS(err, 0, code) == 0) {
		err[1] = a;
		err[2] = b;
		err[3] = c;
		err[4] = d;
		err[5] = e;
	}
}

// report records the first error of a run: code and up to three values.
__device__ __forceinline__ void report(int* err, int code, int a, int b, int c) { report5(err, code, a, b, c, 0, 0); }

// read_call reads the call record: the position of row 0 and the rows the
// run computes (0 means all rows of the plan). It returns false, after
// reporting, when the record is out of range.
__device__ __forceinline__ bool read_call(const int* call, int rows, int* err, int* pos, int* used) {
	int p = call[CALL_POS], u = call[CALL_ROWS];
	if (p < 0) {
		report(err, ERR_CALL_POS, p, 0, 0);
		return false;
	}
	if (u < 0 || u > rows) {
		report(err, ERR_CALL_ROWS, u, rows, 0);
		return false;
	}
	*pos = p;
	*used = u == 0 ? rows : u;
	return true;
}

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum_d sums v over the block (blockDim.x a multiple of 32, at most
// 1024); every thread gets the total. scratch holds 32 doubles.
__device__ double block_sum_d(double v, double* scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum_d(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	double t = 0;
	for (int i = 0; i < nw; i++) t += scratch[i];
	return t;
}

// block_sum2_d sums two values over the block at once, in place (every
// thread gets both totals); scratch holds 64 doubles.
__device__ void block_sum2_d(double* a, double* b, double* scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	double x = warp_sum_d(*a), y = warp_sum_d(*b);
	__syncthreads();
	if (lane == 0) scratch[w] = x, scratch[32 + w] = y;
	__syncthreads();
	x = 0, y = 0;
	for (int i = 0; i < nw; i++) x += scratch[i], y += scratch[32 + i];
	*a = x, *b = y;
}

// block_sum_n_d sums N values over the block at once, in place (every
// thread gets every total, added in warp order: the same bits on every
// run); scratch holds 32·N doubles.
template <int N>
__device__ void block_sum_n_d(double (&v)[N], double* scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
	for (int j = 0; j < N; j++) v[j] = warp_sum_d(v[j]);
	__syncthreads();
	if (lane == 0)
#pragma unroll
		for (int j = 0; j < N; j++) scratch[32 * j + w] = v[j];
	__syncthreads();
#pragma unroll
	for (int j = 0; j < N; j++) {
		double t = 0;
		for (int i = 0; i < nw; i++) t += scratch[32 * j + i];
		v[j] = t;
	}
}

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ double silu_d(double x) { return x / (1.0 + exp(-x)); }

#define NEG_INF __int_as_float(0xff800000u)

// GRID_STRIDE loops i over [0, n) across the grid, in 64-bit indices.
#define GRID_STRIDE(i, n) \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// prefetch_l2 asks for the cache line of p in L2. It reads nothing into the
// thread, so it is safe before pdl_entry: a kernel prefetches what it will
// read first (its weights, above all) while the previous kernel finishes,
// and its loads after the wait find L2 (the point of coherence) current.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// prefetch_w asks for the L2 lines of the n weight elements of type wt from
// element wo of w, before the wait on the previous kernel (a weight does not
// depend on it).
__device__ __forceinline__ void prefetch_w(const void* w, int wt, long long wo, int n) {
	long long esz = wt == WT_F32 ? 4 : 2;
	const char* p = (const char*)w + wo * esz;
	for (long long b = (long long)threadIdx.x * 128; b < (long long)n * esz; b += (long long)blockDim.x * 128) prefetch_l2(p + b);
}

// pdl_entry comes first in every kernel, after at most prefetch_l2 calls
// (and quant_row.cu's loads of weights, QMVR_EARLY):
// under programmatic dependent launch a kernel may be scheduled while the
// previous one on the stream still runs, so it waits for that one's
// completion and memory (griddepcontrol.wait), then lets the next kernel be
// scheduled in turn. Launched without the attribute, both are no-ops.
__device__ __forceinline__ void pdl_entry() {
#if __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// ---------------------------------------------------------------- shared by several files

// kv_check checks a write of the call's rows into a slot; false when the
// write must not happen (reported, or nothing to do).
__device__ __forceinline__ bool kv_check(const int* call, int rows, int cap, int ring, int* err, int* pos, int* used) {
	if (!read_call(call, rows, err, pos, used)) return false;
	if (cap <= 0) {
		report(err, ERR_SLOT_EMPTY, 0, 0, 0);
		return false;
	}
	if (!ring && *pos + *used - 1 >= cap) {
		report(err, ERR_KV_CAPACITY, *pos + *used - 1, cap, 0);
		return false;
	}
	return true;
}

// kv_row gives the slot row that row r writes, or -1 when it writes none: a
// padding row, or a ring row that a later row of the chunk overwrites.
__device__ __forceinline__ long long kv_row(int r, int pos, int used, int cap, int ring) {
	if (r >= used || (ring && r < used - cap)) return -1;
	long long p = (long long)pos + r;
	return ring ? p % cap : p;
}

// sumsq_d is the sum of squares of x[0..n) over the block (f64).
__device__ double sumsq_d(const float* x, int n, double* scratch) {
	double s = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		double v = x[i];
		s += v * v;
	}
	return block_sum_d(s, scratch);
}

// rope_heads is one block's work on G consecutive heads of hd elements
// (src and dst G·hd, dst may be src): it rotates the first rot dims of
// each head by position p (NeoX half split, angles in f64 from freq,
// cosines and sines times the attention factor m) into dst, copies the
// rest; with NORM, then l2-normalizes each head of dst (one block
// reduction of the G sums) and multiplies it by scale (their G·hd values,
// when not null). Every thread of the block must call it (with NORM it
// synchronizes).
template <int G, bool NORM>
__device__ void rope_heads(const float* src, float* dst, int p, const double* freq, double m, const float* scale, int hd, int rot, float eps) {
	__shared__ double scratch[32 * G];
	int h = rot / 2;
	double pp = (double)p;
	for (int it = threadIdx.x; it < G * h; it += blockDim.x) {
		int g = G == 1 ? 0 : it / h, j = it - g * h;
		// The angle is reduced to [-π, π] in f64, then its sine and
		// cosine taken in f32 (an f64 sincos made the prompt's rope
		// compute-bound): within an ulp or two of f32 of the f64 values.
		double t = pp * freq[j];
		t -= 6.283185307179586 * rint(t * 0.15915494309189535);
		float sn, c;
		sincosf((float)t, &sn, &c);
		float cf = (float)(m * (double)c), sf = (float)(m * (double)sn);
		const float* x = src + (long long)g * hd;
		float* y = dst + (long long)g * hd;
		float a = x[j], b = x[j + h];
		y[j] = a * cf - b * sf;
		y[j + h] = b * cf + a * sf;
	}
	int rest = hd - rot;
	for (int it = threadIdx.x; it < G * rest; it += blockDim.x) {
		int g = G == 1 ? 0 : it / rest, i = rot + it - g * rest;
		dst[(long long)g * hd + i] = src[(long long)g * hd + i];
	}
	if (!NORM) return;
	__syncthreads();
	double ss[G];
#pragma unroll
	for (int g = 0; g < G; g++) {
		ss[g] = 0;
		for (int i = threadIdx.x; i < hd; i += blockDim.x) {
			double v = dst[(long long)g * hd + i];
			ss[g] += v * v;
		}
	}
	block_sum_n_d<G>(ss, scratch);
	for (int it = threadIdx.x; it < G * hd; it += blockDim.x) {
		int g = G == 1 ? 0 : it / hd;
		float v = (float)((double)dst[it] * (1.0 / sqrt(ss[g] + (double)eps)));
		if (scale) v *= scale[it];
		dst[it] = v;
	}
}

// rope_head is rope_heads of one head, norm saying whether to normalize
// (and scale) it.
__device__ void rope_head(const float* src, float* dst, int p, const double* freq, double m, const float* scale, int hd, int rot,
                          int norm, float eps) {
	if (norm)
		rope_heads<1, true>(src, dst, p, freq, m, scale, hd, rot, eps);
	else
		rope_heads<1, false>(src, dst, p, freq, m, scale, hd, rot, eps);
}

// smem_addr is the shared-memory address of a generic pointer into it, for
// cp.async.
__device__ __forceinline__ u32 smem_addr(const void* p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

// cp_async16 copies 16 bytes from global to shared memory asynchronously
// (both 16-byte aligned); cp_commit closes a group of copies and
// cp_wait<N> waits until at most N groups are in flight.
__device__ __forceinline__ void cp_async16(void* s, const void* g) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(s)), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
	asm volatile("cp.async.wait_group %0;" ::"n"(N));
}
