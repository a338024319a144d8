// Attention over KV slots, flash-decoding style: attn_part computes, for one
// (row, kv head, key chunk), the scores of the group's query heads against
// the chunk's keys, their maximum, the sum of exponentials and the weighted
// sum of values; attn_finish merges the chunks of each (row, head). The
// grid is sized at bind time for the slot's capacity (or window); the key
// range of each row comes from the call record, so one launch shape serves
// every position.

// ATTN_MAX_GROUP is the most query heads per KV head attn_part takes.
#define ATTN_MAX_GROUP 16

// attn_part: grid (rows, kv heads, chunks), dynamic shared memory
// (G*d + G*chunk) floats and chunk ints (the chunk's slot rows). Partials: m, l [rows][heads][S], acc [rows][heads][S][d].
extern "C" __global__ void attn_part(const float* q, const float* k, const float* v, const int* call, int* err, float* pm,
                                     float* pl, float* pacc, int rows, int heads, int kvh, int d, int cap, int window,
                                     int ring, float scale, int chunk) {
	pdl_entry();
	extern __shared__ float sh[];
	int t = blockIdx.x, kh = blockIdx.y, s = blockIdx.z, S = gridDim.z;
	int G = heads / kvh;
	float* qs = sh;
	float* sc = sh + G * d;
	int* ridx = (int*)(sc + G * chunk);
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return;
	if ((!ring || window == 0) && pos + used > cap) {
		if (t == 0 && kh == 0 && s == 0) report(err, ERR_ATTN_CAPACITY, pos + used - 1, cap, 0);
		return;
	}
	if (t >= used) return;
	int p = pos + t;
	int lo = window > 0 ? max(0, p - window + 1) : 0;
	int j0 = lo + s * chunk, j1 = min(p + 1, j0 + chunk);
	int n = j1 - j0;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	long long kw = (long long)kvh * d;
	const float* qrow = q + (long long)t * heads * d + (long long)kh * G * d;
	for (int i = threadIdx.x; i < G * d; i += blockDim.x) qs[i] = qrow[i];
	for (int jj = threadIdx.x; jj < n; jj += blockDim.x) ridx[jj] = ring ? (j0 + jj) % cap : j0 + jj;
	__syncthreads();
	// A warp scores one key against the group's query heads at once: each
	// key element is loaded once, and the G sums are reduced together.
	for (int jj = warp; jj < n; jj += nw) {
		const float* kr = k + (long long)ridx[jj] * kw + kh * d;
		float part[ATTN_MAX_GROUP];
#pragma unroll
		for (int g = 0; g < ATTN_MAX_GROUP; g++) part[g] = 0.f;
#pragma unroll 8
		for (int i = lane; i < d; i += 32) {
			float kv = kr[i];
#pragma unroll
			for (int g = 0; g < ATTN_MAX_GROUP; g++)
				if (g < G) part[g] += qs[g * d + i] * kv;
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
#pragma unroll
			for (int g = 0; g < ATTN_MAX_GROUP; g++)
				if (g < G) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
		if (lane == 0)
#pragma unroll
			for (int g = 0; g < ATTN_MAX_GROUP; g++)
				if (g < G) sc[g * chunk + jj] = scale * part[g];
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
	for (int x = threadIdx.x; x < G * d; x += blockDim.x) {
		int g = x / d, i = x % d;
		float a = 0.f;
		const float* vc = v + kh * d + i;
		for (int jj = 0; jj < n; jj++) a += sc[g * chunk + jj] * vc[(long long)ridx[jj] * kw];
		pacc[(((long long)t * heads + kh * G + g) * S + s) * d + i] = a;
	}
}

// attn_gate is attention_gate's output gate on element a of row t's head
// h, dimension i: a ⊙ sigmoid(g ⊙ s) as the primitives compute it (a when
// g is null: plain attention).
__device__ __forceinline__ float attn_gate(float a, const float* g, const float* sg, int t, int h, int heads, int d, int i) {
	if (!g) return a;
	int c = h * d + i;
	return a * (float)sigmoid_d((double)(g[(long long)t * heads * d + c] * sg[c]));
}

// attn_finish: grid (rows, heads), dynamic shared memory 3·S floats; merges the
// S chunks of each head; rows past the call's rows get zeros. With g (and
// its scale sg) not null, each output is gated: attention_gate.
extern "C" __global__ void attn_finish(const float* pm, const float* pl, const float* pacc, float* y, const int* call, int rows,
                                       int heads, int d, int S, const float* g, const float* sg) {
	pdl_entry();
	extern __shared__ float wsh[];
	int t = blockIdx.x, h = blockIdx.y;
	int pos = call[CALL_POS], used = call[CALL_ROWS];
	if (pos < 0 || used < 0 || used > rows) return; // reported by attn_part
	if (used == 0) used = rows;
	float* out = y + ((long long)t * heads + h) * d;
	if (t >= used) {
		for (int i = threadIdx.x; i < d; i += blockDim.x) out[i] = attn_gate(0.f, g, sg, t, h, heads, d, i);
		return;
	}
	long long base = ((long long)t * heads + h) * S;
	// The chunks' maxima and sums go to shared memory in one parallel pass;
	// every thread then reduces them there (no serial global loads).
	float* sm = wsh + S;
	float* sl = wsh + 2 * S;
	for (int s = threadIdx.x; s < S; s += blockDim.x) sm[s] = pm[base + s], sl[s] = pl[base + s];
	__syncthreads();
	float M = NEG_INF;
	for (int s = 0; s < S; s++)
		if (sl[s] > 0.f) M = fmaxf(M, sm[s]);
	float L = 0.f;
	for (int s = 0; s < S; s++)
		if (sl[s] > 0.f) L += sl[s] * expf(sm[s] - M);
	// Each chunk's weight, once: exp(m_s − M) / L, zero for empty chunks.
	for (int s = threadIdx.x; s < S; s += blockDim.x) wsh[s] = sl[s] > 0.f ? expf(sm[s] - M) / L : 0.f;
	__syncthreads();
	for (int i = threadIdx.x; i < d; i += blockDim.x) {
		float a = 0.f;
		for (int s = 0; s < S; s++) a += pacc[(base + s) * d + i] * wsh[s];
		out[i] = attn_gate(a, g, sg, t, h, heads, d, i);
	}
}
