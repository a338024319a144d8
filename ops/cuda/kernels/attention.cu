// Attention over KV slots, flash-decoding style: attn_part computes, for one
// (row, kv head, key chunk), the scores of the group's query heads against
// the chunk's keys, their maximum, the sum of exponentials and the weighted
// sum of values; attn_finish merges the chunks of each (row, head). The
// grid is sized at bind time for the slot's capacity (or window); the key
// range of each row comes from the call record and is split evenly over the
// grid's chunks, so one launch shape serves every position and every chunk
// has work.
//
// Heads whose dimension is a multiple of 4 are read as float4 (E = 4), the
// others element by element (E = 1); sums run in f32 in a fixed order, so a
// result is the same on every run.

// ATTN_MAX_GROUP is the most query heads per KV head attn_part takes.
#define ATTN_MAX_GROUP 16

// ATTN_MAX_SPLIT is the most thread groups that split one sum (over keys in
// attn_part, over chunks in attn_finish) before their parts are added in
// shared memory.
#define ATTN_MAX_SPLIT 8

// ATTN_FINISH_SPLIT is the most thread groups that split attn_finish's sum
// over chunks.
#define ATTN_FINISH_SPLIT 16

// ATTN_FPF is the chunks' vectors an attn_finish thread loads up front.
#define ATTN_FPF 8

// ldg_v loads E consecutive floats (E = 4: 16-byte aligned) of data that no
// kernel writes while this one runs.
template <int E>
__device__ __forceinline__ void ldg_v(const float* p, float* a) {
	if (E == 4) {
		float4 t = __ldg((const float4*)p);
		a[0] = t.x, a[1] = t.y, a[2] = t.z, a[3] = t.w;
	} else {
		a[0] = __ldg(p);
	}
}

// ld_kv loads E consecutive floats of keys or values: through the
// read-only path (ldg_v), or with coh from L2 (ld.global.cg), as a block
// must read what it wrote itself in this kernel (attn_part's prep form).
template <int E>
__device__ __forceinline__ void ld_kv(const float* p, float* a, bool coh) {
	if (!coh) {
		ldg_v<E>(p, a);
	} else if (E == 4) {
		float4 t = __ldcg((const float4*)p);
		a[0] = t.x, a[1] = t.y, a[2] = t.z, a[3] = t.w;
	} else {
		a[0] = __ldcg(p);
	}
}

// attnPrep is what attn_part's prep form (qkv_attention_gate of one row)
// reads besides attn_part's own: the row's raw key and value rows (knew,
// vnew) and the slots to write them to (ks, vs: k and v, writable), the
// rotary table and attention factor (freq, fm), the queries' scale sq,
// the rotary width and the norms' epsilon (qkv_prep's).
struct attnPrep {
	const float *knew, *vnew;
	float *ks, *vs;
	const double* freq;
	double fm;
	const float* sq;
	int rot;
	float eps;
};

// lds_v loads E consecutive floats of shared memory.
template <int E>
__device__ __forceinline__ void lds_v(const float* p, float* a) {
	if (E == 4) {
		float4 t = *(const float4*)p;
		a[0] = t.x, a[1] = t.y, a[2] = t.z, a[3] = t.w;
	} else {
		a[0] = *p;
	}
}

// attn_part_body: grid (rows, kv heads, S), dynamic shared memory
// (G·d + G·chunk) floats and chunk ints (the chunk's slot rows); chunk is
// the most keys a chunk can hold (the span over S). Partials: m, l
// [rows][heads][S], acc [rows][heads][S][d]. GT is the group size G when
// known at compile time (the loops over the group then unroll to exactly
// G), 0 for any G up to ATTN_MAX_GROUP.
//
// A decode block is short (tens of keys), so its time is load latency, not
// bandwidth: each thread issues the loads of its first ATTN_VPF value
// vectors before anything else, and a warp loads the keys of KPW keys at
// once, so the block waits for memory about twice, not once per key.
//
// PREP (one row: qkv_attention_gate) makes q the row's raw queries: each
// block prepares its group's heads into shared memory as qkv_prep does
// (rope_heads: the rotary, the l2 norm, the scale), and the block whose
// chunk holds the row's own key (the span's last) first prepares that key
// and writes it and its value row into the slots (pr), then reads its
// keys and values from L2 (ld_kv): the rows it wrote are in this kernel.
// Its dynamic shared memory has d more floats (the key being prepared).
#define ATTN_VPF 8
template <int E, int GT, bool PREP = false>
__device__ void attn_part_body(const float* q, const float* k, const float* v, const int* call, int* err, float* pm, float* pl,
                               float* pacc, int rows, int heads, int kvh, int d, int cap, int window, int ring, float scale,
                               int chunk, attnPrep pr = {}) {
	extern __shared__ float sh[];
	const int GM = GT > 0 ? GT : ATTN_MAX_GROUP;
	const int KPW = GT > 0 && GT <= 4 ? 4 : 2; // keys a warp scores at once
	int t = blockIdx.x, kh = blockIdx.y, s = blockIdx.z, S = gridDim.z;
	int G = GT > 0 ? GT : heads / kvh;
	float* qs = sh;
	float* sc = sh + G * d;
	int* ridx = (int*)(sc + G * chunk);
	int pos, used;
	bool okc = read_call(call, rows, err, &pos, &used); // the host wrote the call record before the launch
	if (okc && t < used && ((ring && window > 0) || pos + used <= cap)) {
		// The lines of this chunk's keys and values, asked for before the
		// wait on the previous kernel.
		int p = pos + t;
		int lo = window > 0 ? max(0, p - window + 1) : 0;
		int per = (p - lo + S) / S;
		int j0 = lo + s * per, n = max(0, min(p + 1, j0 + per) - j0);
		int r0 = ring ? j0 % cap : j0, lines = (d + 31) / 32;
		for (int x = threadIdx.x; x < n * lines; x += blockDim.x) {
			int r = r0 + x / lines;
			long long o = (long long)(r >= cap ? r - cap : r) * kvh * d + kh * d + (x % lines) * 32;
			prefetch_l2(k + o);
			prefetch_l2(v + o);
		}
	}
	pdl_entry();
	if (!okc) return;
	if ((!ring || window == 0) && pos + used > cap) {
		if (t == 0 && kh == 0 && s == 0) report(err, ERR_ATTN_CAPACITY, pos + used - 1, cap, 0);
		return;
	}
	if (t >= used) return;
	int p = pos + t;
	int lo = window > 0 ? max(0, p - window + 1) : 0;
	int per = (p - lo + S) / S; // this row's keys per chunk: ceil((p-lo+1)/S) <= chunk
	int j0 = lo + s * per, j1 = min(p + 1, j0 + per);
	int n = max(0, j1 - j0);
	int r0 = ring ? j0 % cap : j0; // slot row of key j0; key j0+jj is at r0+jj, less cap past the end
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int dn = d / E;
	long long kw = (long long)kvh * d;
	// Values: thread (part, c) will sum vector c of the values of every
	// KG-th key from its part; with one vector per thread (dn <= threads),
	// the first ATTN_VPF of them are loaded now.
	int KG = dn <= (int)blockDim.x ? min((int)blockDim.x / dn, ATTN_MAX_SPLIT) : 1;
	int part = threadIdx.x / dn;
	bool pre = dn <= (int)blockDim.x && part < KG;
	// PREP: the block holding the row's own key (key p, the last of its
	// chunk) writes that key, prepared, and its value into the slots.
	bool coh = false;
	if (PREP && n > 0 && j1 == p + 1) {
		coh = true;
		float* kt = (float*)(ridx + chunk);
		rope_head(pr.knew + (long long)t * kw + kh * d, kt, p, pr.freq, pr.fm, nullptr, d, pr.rot, 1, pr.eps);
		__syncthreads();
		int r = r0 + n - 1;
		long long o = (long long)(r >= cap ? r - cap : r) * kw + kh * d;
		for (int i = threadIdx.x; i < d; i += blockDim.x) pr.ks[o + i] = kt[i], pr.vs[o + i] = pr.vnew[(long long)t * kw + kh * d + i];
		__syncthreads();
	}
	float vp[ATTN_VPF][E];
	if (pre) {
		const float* vc = v + kh * d + (threadIdx.x % dn) * E;
#pragma unroll
		for (int u = 0; u < ATTN_VPF; u++) {
			int jj = part + u * KG;
			if (jj < n) {
				int r = r0 + jj;
				ld_kv<E>(vc + (long long)(r >= cap ? r - cap : r) * kw, vp[u], coh);
			}
		}
	}
	const float* qrow = q + (long long)t * heads * d + (long long)kh * G * d;
	if (PREP) {
		static_assert(!PREP || GT > 0, "the prep form is of a group size known at compile time");
		rope_heads<GM, true>(qrow, qs, p, pr.freq, pr.fm, pr.sq ? pr.sq + (long long)kh * G * d : nullptr, d, pr.rot, pr.eps);
	} else {
		for (int i = threadIdx.x; i < G * d; i += blockDim.x) qs[i] = qrow[i];
	}
	for (int jj = threadIdx.x; jj < n; jj += blockDim.x) {
		int r = r0 + jj;
		ridx[jj] = r >= cap ? r - cap : r;
	}
	__syncthreads();
	// Scores: a warp takes KPW keys at a time, each lane E-element vectors
	// of all of them, so every key element is loaded once, all KPW keys'
	// loads are in flight together, and the G·KPW sums are reduced at once.
	for (int ja = warp; ja < n; ja += KPW * nw) {
		const float* kr[KPW];
#pragma unroll
		for (int u = 0; u < KPW; u++) kr[u] = k + (long long)ridx[min(ja + u * nw, n - 1)] * kw + kh * d;
		float pk[KPW][GM];
#pragma unroll
		for (int u = 0; u < KPW; u++)
#pragma unroll
			for (int g = 0; g < GM; g++) pk[u][g] = 0.f;
#pragma unroll 2
		for (int i = lane; i < dn; i += 32) {
			float kv[KPW][E];
#pragma unroll
			for (int u = 0; u < KPW; u++) ld_kv<E>(kr[u] + i * E, kv[u], coh);
#pragma unroll
			for (int g = 0; g < GM; g++) {
				if (g < G) {
					float qv[E];
					lds_v<E>(qs + g * d + i * E, qv);
#pragma unroll
					for (int u = 0; u < KPW; u++)
#pragma unroll
						for (int e = 0; e < E; e++) pk[u][g] = fmaf(qv[e], kv[u][e], pk[u][g]);
				}
			}
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
#pragma unroll
			for (int u = 0; u < KPW; u++)
#pragma unroll
				for (int g = 0; g < GM; g++)
					if (g < G) pk[u][g] += __shfl_xor_sync(0xffffffffu, pk[u][g], o);
		if (lane == 0)
#pragma unroll
			for (int u = 0; u < KPW; u++) {
				int j = ja + u * nw;
				if (j < n)
#pragma unroll
					for (int g = 0; g < GM; g++)
						if (g < G) sc[g * chunk + j] = scale * pk[u][g];
			}
	}
	__syncthreads();
	for (int g = warp; g < G; g += nw) {
		long long idx = ((long long)t * heads + kh * G + g) * S + s;
		float m = NEG_INF;
		for (int jj = lane; jj < n; jj += 32) m = fmaxf(m, sc[g * chunk + jj]);
		m = warp_max(m);
		float l = 0.f;
		for (int jj = lane; jj < n; jj += 32) {
			float e = expf(sc[g * chunk + jj] - m);
			sc[g * chunk + jj] = e;
			l += e;
		}
		l = warp_sum(l);
		if (lane == 0) pm[idx] = m, pl[idx] = l;
	}
	__syncthreads();
	// The weighted values; the parts are then added in shared memory (qs is
	// free by now) in part order.
	float* buf = qs;
	float* out = pacc + (((long long)t * heads + kh * G) * S + s) * d; // head g at + g·S·d
	for (int c = threadIdx.x % dn; c < dn; c += blockDim.x) {
		float acc[GM][E];
#pragma unroll
		for (int g = 0; g < GM; g++)
#pragma unroll
			for (int e = 0; e < E; e++) acc[g][e] = 0.f;
		if (part < KG) {
			int jj = part;
			if (pre) {
#pragma unroll
				for (int u = 0; u < ATTN_VPF; u++, jj += KG)
					if (jj < n)
#pragma unroll
						for (int g = 0; g < GM; g++)
							if (g < G) {
								float w = sc[g * chunk + jj];
#pragma unroll
								for (int e = 0; e < E; e++) acc[g][e] = fmaf(w, vp[u][e], acc[g][e]);
							}
			}
			const float* vc = v + kh * d + c * E;
#pragma unroll 4
			for (; jj < n; jj += KG) {
				float b[E];
				ld_kv<E>(vc + (long long)ridx[jj] * kw, b, coh);
#pragma unroll
				for (int g = 0; g < GM; g++)
					if (g < G) {
						float w = sc[g * chunk + jj];
#pragma unroll
						for (int e = 0; e < E; e++) acc[g][e] = fmaf(w, b[e], acc[g][e]);
					}
			}
		}
		if (KG == 1) {
#pragma unroll
			for (int g = 0; g < GM; g++)
				if (g < G)
#pragma unroll
					for (int e = 0; e < E; e++) out[(long long)g * S * d + c * E + e] = acc[g][e];
			continue;
		}
		// KG > 1: one vector per thread, this loop runs once. The parts go
		// into buf in part order, one part a round.
		for (int r = 0; r < KG; r++) {
			if (part == r)
#pragma unroll
				for (int g = 0; g < GM; g++)
					if (g < G)
#pragma unroll
						for (int e = 0; e < E; e++) {
							float* bp = buf + g * d + c * E + e;
							*bp = (r ? *bp : 0.f) + acc[g][e];
						}
			__syncthreads();
		}
	}
	if (KG > 1)
		for (int x = threadIdx.x; x < G * d; x += blockDim.x) out[(long long)(x / d) * S * d + x % d] = buf[x];
}

// attn_part_<form>: grid (rows, kv heads, S), see attn_part_body. The
// forms: v1, v2, v4, v8 for heads whose dimension is a multiple of 4 (and
// 16-byte aligned buffers) in groups of 1, 2, 4 or 8 query heads per KV
// head; vx for such heads in other groups; s for any heads. Each is its
// own kernel so that each gets the registers it needs (two blocks of 256
// threads fit on a multiprocessor).
#define ATTN_PART_PARAMS                                                                                                      \
	const float *q, const float *k, const float *v, const int *call, int *err, float *pm, float *pl, float *pacc, int rows, \
		int heads, int kvh, int d, int cap, int window, int ring, float scale, int chunk
#define ATTN_PART_ARGS q, k, v, call, err, pm, pl, pacc, rows, heads, kvh, d, cap, window, ring, scale, chunk
extern "C" __global__ void __launch_bounds__(256, 2) attn_part_v1(ATTN_PART_PARAMS) {
	attn_part_body<4, 1>(ATTN_PART_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_part_v2(ATTN_PART_PARAMS) {
	attn_part_body<4, 2>(ATTN_PART_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_part_v4(ATTN_PART_PARAMS) {
	attn_part_body<4, 4>(ATTN_PART_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_part_v8(ATTN_PART_PARAMS) {
	attn_part_body<4, 8>(ATTN_PART_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_part_vx(ATTN_PART_PARAMS) {
	attn_part_body<4, 0>(ATTN_PART_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_part_s(ATTN_PART_PARAMS) {
	attn_part_body<1, 0>(ATTN_PART_ARGS);
}

// attn_prep_<form>: attn_part_v1 .. v8's prep form (PREP: one row of
// qkv_attention_gate), q the raw queries, pr attnPrep's fields.
#define ATTN_PREP_PARAMS                                                                                                          \
	ATTN_PART_PARAMS, const float *knew, const float *vnew, float *ks, float *vs, const double *freq, double fm, const float *sq, int rot, \
		float eps
#define ATTN_PREP_ARGS ATTN_PART_ARGS, attnPrep{knew, vnew, ks, vs, freq, fm, sq, rot, eps}
extern "C" __global__ void __launch_bounds__(256, 2) attn_prep_v1(ATTN_PREP_PARAMS) {
	attn_part_body<4, 1, true>(ATTN_PREP_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_prep_v2(ATTN_PREP_PARAMS) {
	attn_part_body<4, 2, true>(ATTN_PREP_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_prep_v4(ATTN_PREP_PARAMS) {
	attn_part_body<4, 4, true>(ATTN_PREP_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) attn_prep_v8(ATTN_PREP_PARAMS) {
	attn_part_body<4, 8, true>(ATTN_PREP_ARGS);
}

// attn_finish_body: grid (rows, heads, D), dynamic shared memory 2·S + d/D
// floats (the chunks' maxima and sums, then the sum); block z merges the S chunks
// of dimensions [z·d/D, (z+1)·d/D) of its head; rows past the call's rows
// get zeros. With g (and its scale sg) not null, each output is gated:
// attention_gate.
template <int E>
__device__ void attn_finish_body(const float* pm, const float* pl, const float* pacc, float* y, const int* call, int rows, int heads,
                                 int d, int S, const float* g, const float* sg) {
	extern __shared__ float wsh[];
	__shared__ float ml[2];
	int t = blockIdx.x, h = blockIdx.y;
	int dd = d / gridDim.z, i0 = blockIdx.z * dd; // this block's dimensions [i0, i0+dd)
	long long base = ((long long)t * heads + h) * S;
	float* sm = wsh;     // the chunks' maxima, then their weights
	float* sl = wsh + S; // the chunks' sums
	float* buf = wsh + 2 * S;
	// Thread (part, c) sums vector c over every KG-th chunk from its part;
	// its first ATTN_FPF chunks' vectors are loaded first, with the maxima
	// and sums, so the block waits for memory once (rows past
	// the call's load stale partials and never use them).
	int dn = dd / E;
	int KG = dn <= (int)blockDim.x ? min((int)blockDim.x / dn, ATTN_FINISH_SPLIT) : 1;
	int part = threadIdx.x / dn;
	bool pre = dn <= (int)blockDim.x && part < KG;
	float ap[ATTN_FPF][E];
	if (pre) {
		const float* pc = pacc + base * d + i0 + (threadIdx.x % dn) * E;
#pragma unroll
		for (int u = 0; u < ATTN_FPF; u++) {
			int s = part + u * KG;
			if (s < S) ldg_v<E>(pc + (long long)s * d, ap[u]);
		}
	}
	int pos = call[CALL_POS], used = call[CALL_ROWS];
	if (pos < 0 || used < 0 || used > rows) return; // reported by attn_part
	if (used == 0) used = rows;
	float* out = y + ((long long)t * heads + h) * d;
	if (t >= used) {
		for (int i = i0 + threadIdx.x; i < i0 + dd; i += blockDim.x) out[i] = attn_gate(0.f, g, sg, t, h, heads, d, i);
		return;
	}
	for (int s = threadIdx.x; s < S; s += blockDim.x) sm[s] = pm[base + s], sl[s] = pl[base + s];
	__syncthreads();
	// The overall maximum and sum by the first warp, in a fixed order.
	if (threadIdx.x < 32) {
		int lane = threadIdx.x;
		float M = NEG_INF;
		for (int s = lane; s < S; s += 32)
			if (sl[s] > 0.f) M = fmaxf(M, sm[s]);
		M = warp_max(M);
		float L = 0.f;
		for (int s = lane; s < S; s += 32)
			if (sl[s] > 0.f) L += sl[s] * expf(sm[s] - M);
		L = warp_sum(L);
		if (lane == 0) ml[0] = M, ml[1] = L;
	}
	__syncthreads();
	// Each chunk's weight, once: exp(m_s − M) / L, zero for empty chunks.
	for (int s = threadIdx.x; s < S; s += blockDim.x) sm[s] = sl[s] > 0.f ? expf(sm[s] - ml[0]) / ml[1] : 0.f;
	__syncthreads();
	out += i0;
	for (int c = threadIdx.x % dn; c < dn; c += blockDim.x) {
		float acc[E];
#pragma unroll
		for (int e = 0; e < E; e++) acc[e] = 0.f;
		if (part < KG) {
			int s = part;
			if (pre) {
#pragma unroll
				for (int u = 0; u < ATTN_FPF; u++, s += KG)
					if (s < S) {
						float w = sm[s];
#pragma unroll
						for (int e = 0; e < E; e++) acc[e] = fmaf(ap[u][e], w, acc[e]);
					}
			}
#pragma unroll 4
			for (; s < S; s += KG) {
				float w = sm[s];
				if (w == 0.f) continue;
				float a[E];
				ldg_v<E>(pacc + (base + s) * d + i0 + c * E, a);
#pragma unroll
				for (int e = 0; e < E; e++) acc[e] = fmaf(a[e], w, acc[e]);
			}
		}
		if (KG == 1) {
#pragma unroll
			for (int e = 0; e < E; e++) out[c * E + e] = attn_gate(acc[e], g, sg, t, h, heads, d, i0 + c * E + e);
			continue;
		}
		for (int r = 0; r < KG; r++) { // the parts in part order, one a round
			if (part == r)
#pragma unroll
				for (int e = 0; e < E; e++) buf[c * E + e] = (r ? buf[c * E + e] : 0.f) + acc[e];
			__syncthreads();
		}
	}
	if (KG > 1)
		for (int i = threadIdx.x; i < dd; i += blockDim.x) out[i] = attn_gate(buf[i], g, sg, t, h, heads, d, i0 + i);
}

// attn_finish: grid (rows, heads, D), see attn_finish_body; vec: d/D is a
// multiple of 4 and the buffers are 16-byte aligned.
extern "C" __global__ void attn_finish(const float* pm, const float* pl, const float* pacc, float* y, const int* call, int rows,
                                       int heads, int d, int S, const float* g, const float* sg, int vec) {
	pdl_entry();
	if (vec)
		attn_finish_body<4>(pm, pl, pacc, y, call, rows, heads, d, S, g, sg);
	else
		attn_finish_body<1>(pm, pl, pacc, y, call, rows, heads, d, S, g, sg);
}
