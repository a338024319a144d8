// Decode attention in one launch (its own program: a card that refuses it
// leaves attention.cu's attn_part and attn_finish, which the binder then
// takes).
//
// attn_dec_g<G>: decode attention in one launch (attn_part and attn_finish
// in one kernel), for heads of d = 4·k ≤ 256 dimensions (16-byte aligned
// buffers) in groups of G = 1, 2, 4 or 8 query heads per KV head. Grid
// (rows, kv heads, S), 256 threads. Block (t, kh, s) scores chunk s of row
// t's keys as attn_part does and writes its partial (each head's maximum,
// sum of exponentials and weighted sum of values); the last block of a
// group of fan chunks to finish (a counter per group, atomics) merges the
// group's partials into a group partial, and the last group to finish
// merges the groups into y, gated (attention_gate) when g is not null.
// With fan ≥ S there is one group, merged straight into y. Every merge
// adds its partials in their order, whichever block does it, so a result
// is the same bit for bit on every run. The last block resets its counter,
// so the counters are zero again for the next launch (the binder zeroes
// them once).
//
// Partials: (row t, kv head kh) owns S + NG of them (NG = ⌈S/fan⌉: the S
// chunks', then the NG groups'), partial P at pm[P·G + g], pl[P·G + g],
// pacc[(P·G + g)·d ..]; counters cnt[(t·kvh + kh)·(NG + 1) + ...]: NG of
// the groups, then one of the groups' merges.
//
// Dynamic shared memory (floats): max(G·d + G·chunk, KG·G·d, 2·np·G + 2·G)
// where KG = min(256/(d/4), ADEC_MAX_SPLIT) (the value sum's parts) and np
// = max(min(fan, S), NG) (a merge's partials); the binder computes the same.
//
// The time of a decode block is memory latency: before the wait on the
// previous kernel it asks for its keys' and values' lines in L2; after it,
// each thread issues its first ADEC_VPF value vectors and each warp its
// first KPW keys before the queries are read, so the block waits for
// memory about once at the lengths of a decode chunk.

// ADEC_VL is the key vectors (float4) each lane of a warp holds of one key:
// heads of up to 32·4·ADEC_VL = 256 dimensions.
#define ADEC_VL 2
// ADEC_VPF is the value vectors a thread loads at once.
#define ADEC_VPF 8
// ADEC_MB is the partials' vectors a merging thread loads at once.
#define ADEC_MB 8
// ADEC_MAX_SPLIT is the most parts a block's sum over values is split into
// (attention.cu's ATTN_MAX_SPLIT).
#define ADEC_MAX_SPLIT 8

__device__ __forceinline__ float4 adec_ldg(const float* p) { return __ldg((const float4*)p); }

// adec_ldcg reads a partial another block of this launch wrote: from L2,
// past the (incoherent) L1.
__device__ __forceinline__ float4 adec_ldcg(const float* p) { return __ldcg((const float4*)p); }

__device__ __forceinline__ float4 adec_zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }

// adec_fma is a + w·b, element by element.
__device__ __forceinline__ float4 adec_fma(float w, float4 b, float4 a) {
	a.x = fmaf(w, b.x, a.x), a.y = fmaf(w, b.y, a.y), a.z = fmaf(w, b.z, a.z), a.w = fmaf(w, b.w, a.w);
	return a;
}

// adec_dot is s + q·k, in element order.
__device__ __forceinline__ float adec_dot(float4 q, float4 k, float s) {
	s = fmaf(q.x, k.x, s);
	s = fmaf(q.y, k.y, s);
	s = fmaf(q.z, k.z, s);
	return fmaf(q.w, k.w, s);
}

// adec_gate is attn_gate's a ⊙ sigmoid(g ⊙ s) of one element.
__device__ __forceinline__ float adec_gate(float a, float g, float s) { return a * (float)sigmoid_d((double)(g * s)); }

// adec_row is the slot row of key jj of a chunk whose first key is at row
// r0 (jj ≥ 0; a ring's rows wrap at cap).
__device__ __forceinline__ long long adec_row(int r0, int jj, int cap) {
	int r = r0 + jj;
	return r >= cap ? r - cap : r;
}

// adec_load_k loads into kr the lane's vectors of the warp's KPW keys from
// key ja (every nw-th key: ja, ja + nw, ...), zeros past the chunk's n keys
// and the head's dn vectors. kc is the lane's first element of the kv head.
template <int KPW>
__device__ __forceinline__ void adec_load_k(float4 (&kr)[KPW][ADEC_VL], const float* kc, int ja, int nw, int n, int r0, int cap,
                                            long long kw, int lane, int dn) {
#pragma unroll
	for (int u = 0; u < KPW; u++) {
		int j = ja + u * nw;
		const float* kp = kc + adec_row(r0, max(0, min(j, n - 1)), cap) * kw;
#pragma unroll
		for (int x = 0; x < ADEC_VL; x++)
			kr[u][x] = j < n && lane + 32 * x < dn ? adec_ldg(kp + 128 * x) : adec_zero();
	}
}

// adec_load_v loads into vp the thread's value vectors (vc: its vector of
// the kv head) of keys j, j + KG, ... (ADEC_VPF of them, those below n).
__device__ __forceinline__ void adec_load_v(float4 (&vp)[ADEC_VPF], const float* vc, int j, int KG, int n, int r0, int cap, long long kw) {
#pragma unroll
	for (int u = 0; u < ADEC_VPF; u++) {
		int jj = j + u * KG;
		if (jj < n) vp[u] = adec_ldg(vc + adec_row(r0, jj, cap) * kw);
	}
}

// adec_sel is c ? a : b as one selp: a conditional of two array elements
// in C may become a load from a selected address, which keeps the array in
// local memory.
__device__ __forceinline__ float adec_sel(int c, float a, float b) {
	float r;
	asm("{ .reg .pred p; setp.ne.s32 p, %3, 0; selp.f32 %0, %1, %2, p; }" : "=f"(r) : "f"(a), "f"(b), "r"(c));
	return r;
}

// adec_tsum sums each of v's NV values (NV a power of two, at most 32)
// over the warp, transposed: each of the first log2 NV butterfly steps
// halves the values a lane keeps (a lane with the step's bit set keeps the
// upper half), the rest add the one left, so NV + log2(32/NV) − 1 shuffles
// instead of 5·NV. Lane L gets the sum of value L / (32/NV); the order of
// the additions is fixed.
template <int NV>
__device__ __forceinline__ float adec_tsum(float (&v)[NV], int lane) {
	const int LOG = NV >= 32 ? 5 : NV >= 16 ? 4 : NV >= 8 ? 3 : NV >= 4 ? 2 : NV >= 2 ? 1 : 0;
#pragma unroll
	for (int step = 0; step < LOG; step++) {
		const int h = NV >> (step + 1), o = 16 >> step;
		int up = lane & o;
#pragma unroll
		for (int i = 0; i < h; i++) {
			float send = adec_sel(up, v[i], v[i + h]);
			float keep = adec_sel(up, v[i + h], v[i]);
			v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
		}
	}
	float r = v[0];
#pragma unroll
	for (int o = 16 >> LOG; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
	return r;
}

// adec_arrive counts the block's arrival at counter c of a group of size
// blocks, once the block's partial is written: true in the group's last
// block, which resets the counter and may read the group's partials. Every
// thread calls it; flag is shared.
__device__ __forceinline__ bool adec_arrive(int* c, int size, int* flag) {
	__threadfence(); // this thread's partial, before the count
	__syncthreads();
	if (threadIdx.x == 0) {
		int last = atomicAdd(c, 1) == size - 1;
		if (last) {
			atomicExch(c, 0);
			__threadfence(); // the count, before the others' partials are read
		}
		*flag = last;
	}
	__syncthreads();
	return *flag != 0;
}

// adec_merge merges np partials of G heads from partial p0, in their
// order: with y null into partial po (the overall maximum, sum and
// unnormalized sums), else into y's row t, heads h0 .. h0 + G − 1, divided
// by the sum and gated by g and sg when g is not null. Every thread calls
// it; ws is shared scratch of 2·np·G + 2·G floats.
template <int G>
__device__ void adec_merge(float* pm, float* pl, float* pacc, long long p0, int np, long long po, int d, float* ws, float* y,
                           const float* g, const float* sg, int t, int h0, int heads) {
	int dn = d >> 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	float* wm = ws;          // the partials' maxima, then their weights: [np][G]
	float* wl = ws + np * G; // their sums
	float* ml = wl + np * G; // each head's overall maximum, then sum
	// The thread's first vectors of the first ADEC_MB partials go out with
	// the maxima and sums.
	float4 pre[ADEC_MB];
	{
		int x = threadIdx.x;
		if (x < G * dn) {
			int gg = x / dn;
			const float* src = pacc + (p0 * G + gg) * d + (x - gg * dn) * 4;
#pragma unroll
			for (int u = 0; u < ADEC_MB; u++)
				if (u < np) pre[u] = adec_ldcg(src + (long long)u * G * d);
		}
	}
	for (int i = threadIdx.x; i < np * G; i += blockDim.x) wm[i] = __ldcg(pm + p0 * G + i), wl[i] = __ldcg(pl + p0 * G + i);
	__syncthreads();
	for (int gg = warp; gg < G; gg += nw) {
		float M = NEG_INF;
		for (int i = lane; i < np; i += 32)
			if (wl[i * G + gg] > 0.f) M = fmaxf(M, wm[i * G + gg]);
		M = warp_max(M);
		float L = 0.f;
		for (int i = lane; i < np; i += 32)
			if (wl[i * G + gg] > 0.f) L += wl[i * G + gg] * expf(wm[i * G + gg] - M);
		L = warp_sum(L);
		// Each partial's weight exp(m − M), over L into y; zero for a
		// partial of no keys.
		for (int i = lane; i < np; i += 32) {
			float w = wl[i * G + gg] > 0.f ? expf(wm[i * G + gg] - M) : 0.f;
			wm[i * G + gg] = y ? w / L : w;
		}
		if (lane == 0) ml[gg] = M, ml[G + gg] = L;
	}
	__syncthreads();
	for (int x = threadIdx.x; x < G * dn; x += blockDim.x) {
		int gg = x / dn, i = (x - gg * dn) * 4;
		const float* src = pacc + (p0 * G + gg) * d + i;
		float4 a = adec_zero();
		for (int i0 = 0; i0 < np; i0 += ADEC_MB) {
			float4 b[ADEC_MB];
			if (i0 > 0 || x != (int)threadIdx.x) {
#pragma unroll
				for (int u = 0; u < ADEC_MB; u++)
					if (i0 + u < np) b[u] = adec_ldcg(src + (long long)(i0 + u) * G * d);
			} else {
#pragma unroll
				for (int u = 0; u < ADEC_MB; u++) b[u] = pre[u];
			}
#pragma unroll
			for (int u = 0; u < ADEC_MB; u++)
				if (i0 + u < np) a = adec_fma(wm[(i0 + u) * G + gg], b[u], a);
		}
		if (!y) {
			*(float4*)(pacc + (po * G + gg) * d + i) = a;
			continue;
		}
		int h = h0 + gg;
		if (g) {
			float4 gv = __ldg((const float4*)(g + ((long long)t * heads + h) * d + i));
			float4 sv = __ldg((const float4*)(sg + (long long)h * d + i));
			a.x = adec_gate(a.x, gv.x, sv.x), a.y = adec_gate(a.y, gv.y, sv.y);
			a.z = adec_gate(a.z, gv.z, sv.z), a.w = adec_gate(a.w, gv.w, sv.w);
		}
		*(float4*)(y + ((long long)t * heads + h) * d + i) = a;
	}
	if (!y && threadIdx.x < G) pm[po * G + threadIdx.x] = ml[threadIdx.x], pl[po * G + threadIdx.x] = ml[G + threadIdx.x];
}

template <int G>
__device__ void attn_dec_body(const float* q, const float* k, const float* v, const int* call, int* err, float* pm, float* pl,
                              float* pacc, int* cnt, float* y, const float* g, const float* sg, int rows, int heads, int kvh, int d,
                              int cap, int window, int ring, float scale, int chunk, int fan) {
	extern __shared__ float4 adec_sh[];
	__shared__ int last;
	float* sh = (float*)adec_sh;
	const int KPW = G <= 4 ? 4 : 2; // keys a warp scores at once
	int t = blockIdx.x, kh = blockIdx.y, s = blockIdx.z, S = gridDim.z;
	int pos = 0, used = 0, n = 0, r0 = 0;
	bool okc = read_call(call, rows, err, &pos, &used); // the host wrote the call record before the launch
	bool over = okc && (!ring || window == 0) && pos + used > cap;
	if (okc && !over && t < used) {
		// This chunk's keys (row t's split evenly over the S chunks),
		// and their lines asked for before the wait.
		int p = pos + t;
		int lo = window > 0 ? max(0, p - window + 1) : 0;
		int per = (p - lo + S) / S; // ceil((p − lo + 1)/S) ≤ chunk
		int j0 = lo + s * per;
		n = max(0, min(p + 1, j0 + per) - j0);
		r0 = ring ? j0 % cap : j0; // the slot row of key j0
		int lines = (d + 31) / 32;
		for (int x = threadIdx.x; x < n * lines; x += blockDim.x) {
			long long o = adec_row(r0, x / lines, cap) * kvh * d + kh * d + (x % lines) * 32;
			prefetch_l2(k + o);
			prefetch_l2(v + o);
		}
	}
	pdl_entry();
	if (!okc) return;
	if (over) {
		if (t == 0 && kh == 0 && s == 0) report(err, ERR_ATTN_CAPACITY, pos + used - 1, cap, 0);
		return;
	}
	if (t >= used) { // a row past the call's: zeros (gated), from the first chunk's block
		if (s == 0)
			for (int i = threadIdx.x; i < G * d; i += blockDim.x) {
				int h = kh * G + i / d;
				y[((long long)t * heads + h) * d + i % d] = attn_gate(0.f, g, sg, t, h, heads, d, i % d);
			}
		return;
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int dn = d >> 2;
	long long kw = (long long)kvh * d;
	// Values: thread (part, c) sums vector c of every KG-th key from its
	// part; its first ADEC_VPF vectors are loaded first, then each warp's
	// first keys, then the queries.
	int KG = min((int)blockDim.x / dn, ADEC_MAX_SPLIT);
	int part = threadIdx.x / dn, c = threadIdx.x - part * dn;
	const float* vc = v + kh * d + c * 4;
	float4 vp[ADEC_VPF];
	if (part < KG) adec_load_v(vp, vc, part, KG, n, r0, cap, kw);
	const float* kc = k + kh * d + lane * 4;
	float4 kr[KPW][ADEC_VL];
	adec_load_k<KPW>(kr, kc, warp, nw, n, r0, cap, kw, lane, dn);
	const float4* q4 = (const float4*)(q + (long long)t * heads * d + (long long)kh * G * d);
	float4* qs = adec_sh; // [G][dn]
	for (int i = threadIdx.x; i < G * dn; i += blockDim.x) qs[i] = q4[i];
	__syncthreads();
	// Scores: a warp takes KPW keys at a time, each lane ADEC_VL vectors of
	// each, and reduces the G·KPW sums at once.
	float* sc = sh + G * d; // [G][chunk]
	for (int ja = warp; ja < n; ja += KPW * nw) {
		if (ja != warp) adec_load_k<KPW>(kr, kc, ja, nw, n, r0, cap, kw, lane, dn);
		float pk[KPW * G]; // key u's score of head gg at u·G + gg
#pragma unroll
		for (int i = 0; i < KPW * G; i++) pk[i] = 0.f;
#pragma unroll
		for (int x = 0; x < ADEC_VL; x++)
			if (lane + 32 * x < dn)
#pragma unroll
				for (int gg = 0; gg < G; gg++) {
					float4 qv = qs[gg * dn + lane + 32 * x];
#pragma unroll
					for (int u = 0; u < KPW; u++) pk[u * G + gg] = adec_dot(qv, kr[u][x], pk[u * G + gg]);
				}
		float sum = adec_tsum<KPW * G>(pk, lane);
		const int LPV = 32 / (KPW * G); // lanes that hold each sum
		int i = lane / LPV, j = ja + i / G * nw;
		if (lane % LPV == 0 && j < n) sc[i % G * chunk + j] = scale * sum;
	}
	__syncthreads();
	int NG = (S + fan - 1) / fan;
	long long pb = ((long long)t * kvh + kh) * (S + NG); // this (row, kv head)'s first partial
	long long P = pb + s;
	for (int gg = warp; gg < G; gg += nw) {
		float m = NEG_INF;
		for (int jj = lane; jj < n; jj += 32) m = fmaxf(m, sc[gg * chunk + jj]);
		m = warp_max(m);
		float l = 0.f;
		for (int jj = lane; jj < n; jj += 32) {
			float e = expf(sc[gg * chunk + jj] - m);
			sc[gg * chunk + jj] = e;
			l += e;
		}
		l = warp_sum(l);
		if (lane == 0) pm[P * G + gg] = m, pl[P * G + gg] = l; // an empty chunk: −∞ and 0
	}
	__syncthreads();
	float4 acc[G];
#pragma unroll
	for (int gg = 0; gg < G; gg++) acc[gg] = adec_zero();
	if (part < KG)
		for (int j = part; j < n; j += ADEC_VPF * KG) {
			if (j != part) adec_load_v(vp, vc, j, KG, n, r0, cap, kw);
#pragma unroll
			for (int u = 0; u < ADEC_VPF; u++) {
				int jj = j + u * KG;
				if (jj < n)
#pragma unroll
					for (int gg = 0; gg < G; gg++) acc[gg] = adec_fma(sc[gg * chunk + jj], vp[u], acc[gg]);
			}
		}
	__syncthreads(); // the queries and scores are read no more
	float4* buf = adec_sh; // [KG][G][dn]: each part's sums, added in part order
	if (part < KG)
#pragma unroll
		for (int gg = 0; gg < G; gg++) buf[(part * G + gg) * dn + c] = acc[gg];
	__syncthreads();
	float4* out = (float4*)(pacc + P * G * d);
	for (int x = threadIdx.x; x < G * dn; x += blockDim.x) {
		float4 a = buf[x];
		for (int r = 1; r < KG; r++) {
			float4 b = buf[r * G * dn + x];
			a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
		}
		out[x] = a;
	}
	// The merges: the last chunk of a group to finish merges the group,
	// the last group (or, with one group, that chunk) merges into y.
	int grp = s / fan, s0 = grp * fan, s1 = min(S, s0 + fan);
	int* cb = cnt + ((long long)t * kvh + kh) * (NG + 1);
	if (!adec_arrive(cb + grp, s1 - s0, &last)) return;
	if (NG == 1) {
		adec_merge<G>(pm, pl, pacc, pb + s0, s1 - s0, 0, d, sh, y, g, sg, t, kh * G, heads);
		return;
	}
	adec_merge<G>(pm, pl, pacc, pb + s0, s1 - s0, pb + S + grp, d, sh, nullptr, g, sg, t, kh * G, heads);
	if (!adec_arrive(cb + NG, NG, &last)) return;
	adec_merge<G>(pm, pl, pacc, pb + S, NG, 0, d, sh, y, g, sg, t, kh * G, heads);
}

#define ATTN_DEC_PARAMS                                                                                                           \
	const float *q, const float *k, const float *v, const int *call, int *err, float *pm, float *pl, float *pacc, int *cnt,     \
		float *y, const float *g, const float *sg, int rows, int heads, int kvh, int d, int cap, int window, int ring, float scale, \
		int chunk, int fan
#define ATTN_DEC_ARGS q, k, v, call, err, pm, pl, pacc, cnt, y, g, sg, rows, heads, kvh, d, cap, window, ring, scale, chunk, fan
extern "C" __global__ void __launch_bounds__(256, 2) attn_dec_g1(ATTN_DEC_PARAMS) { attn_dec_body<1>(ATTN_DEC_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 2) attn_dec_g2(ATTN_DEC_PARAMS) { attn_dec_body<2>(ATTN_DEC_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 2) attn_dec_g4(ATTN_DEC_PARAMS) { attn_dec_body<4>(ATTN_DEC_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 2) attn_dec_g8(ATTN_DEC_PARAMS) { attn_dec_body<8>(ATTN_DEC_ARGS); }
