// Elementwise kernels: binary and unary ops, the fused elementwise chain,
// swiglu, embedding gather, argmax, KV row writes and the f32 -> 16-bit
// conversion that feeds cuBLAS. Loops are grid-stride over 64-bit indices.

// The op codes OP_ADD, OP_SUB, OP_MUL (the binary ones, first), OP_SIGMOID,
// OP_SILU and OP_SCALE are generated from ops.ElementwiseOps (module.go).

__device__ __forceinline__ float apply_op(int op, float a, float b, float factor) {
	switch (op) {
	case OP_ADD: return a + b;
	case OP_SUB: return a - b;
	case OP_MUL: return a * b;
	case OP_SIGMOID: return (float)sigmoid_d((double)a);
	case OP_SILU: return (float)silu_d((double)a);
	default: return factor * a;
	}
}

// binary: y[i] = a[i] op b[i mod nb].
extern "C" __global__ void binary(int op, const float* a, const float* b, float* y, long long n, long long nb) {
	pdl_entry();
	GRID_STRIDE(i, n) { y[i] = apply_op(op, a[i], b[i % nb], 0.f); }
}

// unary: y[i] = op(x[i]) (scale multiplies by factor).
extern "C" __global__ void unary(int op, const float* x, float* y, long long n, float factor) {
	pdl_entry();
	GRID_STRIDE(i, n) { y[i] = apply_op(op, x[i], 0.f, factor); }
}

#define CHAIN_MAX 16

// chain evaluates an elementwise_chain: steps holds (op, arg0, arg1) per step,
// an argument >= 0 naming input ins[arg] (broadcast by lens[arg]) and -1-s
// naming step s's result; the last step's result is y.
extern "C" __global__ void chain(const int* steps, const float* factors, int nsteps, const unsigned long long* ins,
                                 const long long* lens, float* y, long long n) {
	pdl_entry();
	GRID_STRIDE(i, n) {
		float res[CHAIN_MAX];
		for (int s = 0; s < nsteps; s++) {
			float v[2] = {0.f, 0.f};
			int op = steps[3 * s], nargs = op <= OP_MUL ? 2 : 1;
			for (int j = 0; j < nargs; j++) {
				int a = steps[3 * s + 1 + j];
				v[j] = a >= 0 ? ((const float*)ins[a])[i % lens[a]] : res[-1 - a];
			}
			res[s] = apply_op(op, v[0], v[1], factors[s]);
		}
		y[i] = res[nsteps - 1];
	}
}

// swiglu: y = silu(g * sg) * (u * su), the scales broadcast over rows of f;
// silu in f32 (expf, not the f64 of the decode epilogues: this kernel runs
// over whole prompt chunks, where f64 exponentials made it compute-bound).
extern "C" __global__ void swiglu(const float* g, const float* u, const float* sg, const float* su, float* y, long long n, int f) {
	pdl_entry();
	GRID_STRIDE(i, n) {
		int c = (int)(i % f);
		float x = g[i] * sg[c];
		y[i] = x / (1.f + expf(-x)) * (u[i] * su[c]);
	}
}

// embed gathers table rows as f32; an id outside [0, vocab) is reported.
extern "C" __global__ void embed(const void* table, int wt, const int* ids, float* y, int rows, int h, int vocab, int* err) {
	pdl_entry();
	GRID_STRIDE(i, (long long)rows * h) {
		int t = (int)(i / h), c = (int)(i % h);
		int id = ids[t];
		if (id < 0 || id >= vocab) {
			if (c == 0) report(err, ERR_EMBED_ID, t, id, vocab);
			continue;
		}
		y[i] = load_w(table, wt, (long long)id * h + c);
	}
}

// check_finite reports ERR_NOT_FINITE when one of the n values of x is a
// NaN or an infinity (Backend.CheckFinite: a reader's logits, checked on
// the card rather than scanned on the host): an all-ones exponent is the
// only one that carries into bit 31 when one more is added to it. With
// vec (x 16-byte aligned) a thread takes four values a step.
extern "C" __global__ void check_finite(const float* __restrict__ x, long long n, int* err, int vec) {
	pdl_entry();
	const u32 e = 0x7f800000u, one = 0x00800000u;
	u32 acc = 0;
	long long done = 0;
	if (vec) {
		const float4* x4 = (const float4*)x;
		GRID_STRIDE(i, n / 4) {
			float4 v = __ldg(x4 + i);
			acc |= ((__float_as_uint(v.x) & e) + one) | ((__float_as_uint(v.y) & e) + one) | ((__float_as_uint(v.z) & e) + one) |
			       ((__float_as_uint(v.w) & e) + one);
		}
		done = n / 4 * 4;
	}
	for (long long i = done + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		acc |= (__float_as_uint(x[i]) & e) + one;
	if (acc & 0x80000000u) report(err, ERR_NOT_FINITE, 0, 0, 0);
}

// argmax: one block per row; NaNs are skipped, ties go to the lowest index,
// a row of NaNs gives -1.
extern "C" __global__ void argmax(const float* x, int* y, int n) {
	pdl_entry();
	__shared__ float bv[32];
	__shared__ int bi[32];
	const float* r = x + (long long)blockIdx.x * n;
	float best = 0.f;
	int at = -1;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float v = r[i];
		if (v != v) continue;
		if (at < 0 || v > best) best = v, at = i;
	}
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, best, o);
		int oi = __shfl_xor_sync(0xffffffffu, at, o);
		if (oi >= 0 && (at < 0 || ov > best || (ov == best && oi < at))) best = ov, at = oi;
	}
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (lane == 0) bv[w] = best, bi[w] = at;
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int k = 1; k < (int)(blockDim.x >> 5); k++) {
			float ov = bv[k];
			int oi = bi[k];
			if (oi >= 0 && (at < 0 || ov > best || (ov == best && oi < at))) best = ov, at = oi;
		}
		y[blockIdx.x] = at;
	}
}

// last_row: y[n] = x[used − 1], the last row (of n floats) the call
// computes, of a plan of rows rows; 1-D grid-stride.
extern "C" __global__ void last_row(const float* x, float* y, const int* call, int* err, int rows, long long n) {
	pdl_entry();
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return;
	const float* src = x + (long long)(used - 1) * n;
	GRID_STRIDE(i, n) y[i] = src[i];
}

// kv_write: one block per row of the chunk.
extern "C" __global__ void kv_write(const float* rows, float* slot, const int* call, int* err, int t, int w, int cap, int ring) {
	pdl_entry();
	int pos, used;
	if (!kv_check(call, t, cap, ring, err, &pos, &used)) return;
	long long p = kv_row(blockIdx.x, pos, used, cap, ring);
	if (p < 0) return;
	const float* src = rows + (long long)blockIdx.x * w;
	float* dst = slot + p * w;
	for (int i = threadIdx.x; i < w; i += blockDim.x) dst[i] = src[i];
}

// to_half rounds f32 activations to 16 bits into hi (and lo): half_split,
// four elements at a time where alignment allows.
extern "C" __global__ void to_half(const float* x, u16* hi, u16* lo, long long n, int wt) {
	pdl_entry();
	if (half_vec(x, hi, lo, n)) {
		GRID_STRIDE(i, n / 4) half_split4(((const float4*)x)[i], hi + 4 * i, lo ? lo + 4 * i : 0, wt);
		return;
	}
	GRID_STRIDE(i, n) half_split(x[i], hi + i, lo ? lo + i : 0, wt);
}

// to_half_norm is to_half of each row of k activations divided by
// sqrt(Σx² + eps), rounded to f32 first as l2norm writes it: one block a
// row.
extern "C" __global__ void to_half_norm(const float* x, u16* hi, u16* lo, int k, int wt, float eps) {
	pdl_entry();
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * k;
	double inv = 1.0 / sqrt(sumsq_d(x + o, k, scratch) + (double)eps);
	if (half_vec(x + o, hi + o, lo ? lo + o : 0, k)) {
		for (int i = threadIdx.x; i < k / 4; i += blockDim.x) {
			float4 v = ((const float4*)(x + o))[i];
			v = make_float4((float)((double)v.x * inv), (float)((double)v.y * inv), (float)((double)v.z * inv), (float)((double)v.w * inv));
			half_split4(v, hi + o + 4 * i, lo ? lo + o + 4 * i : 0, wt);
		}
		return;
	}
	for (int i = threadIdx.x; i < k; i += blockDim.x) half_split((float)((double)x[o + i] * inv), hi + o + i, lo ? lo + o + i : 0, wt);
}

// swiglu_at is element i of a SwiGLU row at offset o: silu(g·sg)·(u·su),
// the products g and u of type gt (f32, bf16 or f16), silu in f32 as
// swiglu computes it.
__device__ __forceinline__ float swiglu_at(const void* g, const void* u, int gt, const float* sg, const float* su, long long o, int i) {
	float x = load_w(g, gt, o + i) * sg[i];
	return x / (1.f + expf(-x)) * (load_w(u, gt, o + i) * su[i]);
}

// swiglu_norm_half is one row of a SwiGLU MLP between its gate/up and down
// products (swiglu_norm_matmul): a = silu(g·sg)·(u·su) over the row's f
// products, divided by sqrt(Σa² + eps) (the sum in f64, as to_half_norm),
// rounded to 16 bits of type wt into hi (and the rest into lo, when not
// null) for the down product. One block a row; each thread keeps its
// SNH_PER activations in registers when the row fits the block, else
// computes them again for the second pass.
extern "C" __global__ void __launch_bounds__(1024) swiglu_norm_half(const void* g, const void* u, int gt, const float* sg,
                                                                    const float* su, u16* hi, u16* lo, int f, int wt, float eps) {
	pdl_entry();
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * f;
	bool kept = f <= SNH_PER * (int)blockDim.x;
	float a[SNH_PER];
	double s = 0;
	if (kept) {
#pragma unroll
		for (int j = 0; j < SNH_PER; j++) {
			int i = threadIdx.x + j * blockDim.x;
			a[j] = i < f ? swiglu_at(g, u, gt, sg, su, o, i) : 0.f;
			s += (double)a[j] * a[j];
		}
	} else {
		for (int i = threadIdx.x; i < f; i += blockDim.x) {
			double v = swiglu_at(g, u, gt, sg, su, o, i);
			s += v * v;
		}
	}
	double inv = 1.0 / sqrt(block_sum_d(s, scratch) + (double)eps);
	if (kept) {
#pragma unroll
		for (int j = 0; j < SNH_PER; j++) {
			int i = threadIdx.x + j * blockDim.x;
			if (i < f) half_split((float)((double)a[j] * inv), hi + o + i, lo ? lo + o + i : 0, wt);
		}
		return;
	}
	for (int i = threadIdx.x; i < f; i += blockDim.x)
		half_split((float)((double)swiglu_at(g, u, gt, sg, su, o, i) * inv), hi + o + i, lo ? lo + o + i : 0, wt);
}
