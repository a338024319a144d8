// Shared by the quantized products (quant.cu, quant_fused.cu,
// quant_prompt.cu, quantmma.cu, random.cu's codes): the formats' codes,
// their decoding, and the split-K matvec's staging and rows.

#define QT_F8 0
#define QT_I8 1
#define QT_U4 2

// e4m3_q is a float8_e4m3fn pattern's value / 256, exactly: its sign,
// exponent and mantissa moved into an f16's places are an f16 whose value
// is the e4m3 value times 2^-8, for normals (the exponent biases differ by
// 8) and subnormals alike. The NaN pattern (S.1111.111) stays NaN.
__device__ __forceinline__ float e4m3_q(u32 b) {
	u32 m = b & 0x7fu;
	float f = f16_to_f32((u16)(((b & 0x80u) << 8) | (m << 7)));
	return m == 0x7fu ? __int_as_float(0x7fc00000) : f;
}

// Q_SCALE is what a code's value as the q functions give it is short of:
// 256 for FP8 (e4m3_q), 1 for the integers.
#define Q_SCALE(QT) ((QT) == QT_F8 ? 256.f : 1.f)

// q_scale reads element i of a table of block scales of type st (WT_F32,
// WT_BF16 or WT_F16, the same for every lane) as f32 without a branch, so
// that a lane's scale loads issue back to back with its code loads: one
// 4-byte load of the aligned word that holds the element (a 16-bit table
// need be 2-byte aligned only; the word never leaves the table's page),
// its half picked after.
__device__ __forceinline__ float q_scale(const void* s, int st, long long i) {
	unsigned long long a = (unsigned long long)s + (unsigned long long)(i << (st == WT_F32 ? 2 : 1));
	u32 w = __ldg((const unsigned int*)(a & ~3ull));
	u32 h = (a & 2) ? w >> 16 : w & 0xffffu;
	return st == WT_F32 ? __uint_as_float(w) : st == WT_BF16 ? __uint_as_float(h << 16) : f16_to_f32((u16)h);
}

// q_vshift is log2 of the 16-byte code vectors (E codes each) in a scale
// block of bc columns, a power of two and a multiple of E (quant.go's
// qmvPlan takes the vector kernels only then): vector v's scale is column
// v >> q_vshift of its row's.
template <int E>
__device__ __forceinline__ int q_vshift(int bc) { return __ffs(bc) - 1 - (E == 32 ? 5 : 4); }

// q_word decodes the codes of one 32-bit word: 4 FP8 or i8 codes, or 8
// 4-bit codes, in element order, as q_at does (FP8 over 256), by
// int-to-float conversions: for the old one-warp kernel (q_row); the
// others decode by q_dec, below, without a conversion instruction.
template <int QT>
__device__ __forceinline__ void q_word(u32 u, float* c) {
	if (QT == QT_U4) {
#pragma unroll
		for (int i = 0; i < 8; i++) c[i] = (float)((int)((u >> (4 * i)) & 15u) - 8);
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			u32 b = (u >> (8 * i)) & 0xffu;
			c[i] = QT == QT_F8 ? e4m3_q(b) : (float)(int)(signed char)b;
		}
	}
}

// q_at decodes code k of a row of codes.
template <int QT>
__device__ __forceinline__ float q_at(const unsigned char* row, int k) {
	if (QT == QT_U4) return (float)((int)((row[k >> 1] >> (4 * (k & 1))) & 15) - 8);
	if (QT == QT_F8) return e4m3_q(row[k]);
	return (float)(int)(signed char)row[k];
}

// q_deq is code k of a row of codes as its value (q_at times Q_SCALE).
template <int QT>
__device__ __forceinline__ float q_deq(const unsigned char* row, int k) {
	return q_at<QT>(row, k) * Q_SCALE(QT);
}

#define QMV_PARAMS                                                                                                    \
	const float *__restrict__ x, const unsigned char *__restrict__ w, long long stride, const void *s, int st, int sc, \
		int br, int bc, float *__restrict__ y, int R, int K, int N, int vec

#define QMV_ARGS x, w, stride, s, st, sc, br, bc, y, R, K, N, vec

// q_row adds to acc[r] (r < R <= RB) one lane's share of the dot product
// of a row of K codes wr, whose scales start at element srow of the table
// s, with row r of x [R, K]: with vec, every 32nd of the row's 16-byte
// vectors (their codes times x summed, then times the vector's scale);
// else every 32nd element. The lanes' sums are the caller's to reduce.
template <int QT, int RB>
__device__ __forceinline__ void q_row(const unsigned char* wr, const void* s, int st, long long srow, int bc, const float* x, int R,
                                      int K, int vec, int lane, float* acc) {
	const int E = QT == QT_U4 ? 32 : 16; // codes per 16-byte vector
	if (vec) {
		int V = K / E;
		for (int v = lane; v < V; v += 32) {
			uint4 q = ld_stream((const uint4*)wr + v);
			float sv = load_w(s, st, srow + (long long)(v * E) / bc);
			float c[E];
			q_word<QT>(q.x, c);
			q_word<QT>(q.y, c + E / 4);
			q_word<QT>(q.z, c + E / 2);
			q_word<QT>(q.w, c + 3 * E / 4);
#pragma unroll
			for (int r = 0; r < RB; r++) {
				if (r < R) {
					const float4* xr = (const float4*)(x + (long long)r * K + (long long)v * E);
					float part = 0.f;
#pragma unroll
					for (int j = 0; j < E / 4; j++) {
						float4 a = __ldg(xr + j);
						part = fmaf(c[4 * j], a.x, part);
						part = fmaf(c[4 * j + 1], a.y, part);
						part = fmaf(c[4 * j + 2], a.z, part);
						part = fmaf(c[4 * j + 3], a.w, part);
					}
					acc[r] = fmaf(part, sv, acc[r]);
				}
			}
		}
	} else {
		for (int k = lane; k < K; k += 32) {
			float wv = q_at<QT>(wr, k) * load_w(s, st, srow + k / bc);
#pragma unroll
			for (int r = 0; r < RB; r++)
				if (r < R) acc[r] = fmaf(x[(long long)r * K + k], wv, acc[r]);
		}
	}
}

template <int QT, int RB>
__device__ __forceinline__ void qmv_impl(QMV_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16; // codes per 16-byte vector
	int lane = threadIdx.x & 31;
	int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const unsigned char* wr = w + (long long)(n < N ? n : 0) * stride;
	if (vec && n < N && (lane & 7) == 0 && lane * E < K) prefetch_l2((const uint4*)wr + lane);
	pdl_entry();
	if (n >= N) return;
	float acc[RB];
#pragma unroll
	for (int r = 0; r < RB; r++) acc[r] = 0.f;
	q_row<QT, RB>(wr, s, st, (long long)(n / br) * sc, bc, x, R, K, vec, lane, acc);
#pragma unroll
	for (int r = 0; r < RB; r++) {
		float t = warp_sum(acc[r]);
		if (lane == 0 && r < R) y[(long long)r * N + n] = t * Q_SCALE(QT);
	}
}

// QMV_LOADS is the 16-byte code loads each lane issues per iteration, over
// all the features of its unit (quant.go's qmvLoads).
#ifndef QMV_LOADS
#define QMV_LOADS 4
#endif

// q_and_or is (a & m) | c and q_and_xor (a & m) ^ c, each one lop3: masking
// a code and setting 2^23's exponent written as C, with both constants
// immediates, take the compiler two instructions (a lop3 holds one).
__device__ __forceinline__ u32 q_and_or(u32 a, u32 m, u32 c) {
	u32 r;
	asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(m), "r"(c));
	return r;
}

__device__ __forceinline__ u32 q_and_xor(u32 a, u32 m, u32 c) {
	u32 r;
	asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(r) : "r"(a), "r"(m), "r"(c));
	return r;
}

// q4_dec gives the 8 4-bit codes of u (low nibble first) as their values
// c - 8: nibble i masked in place into the mantissa of 2^23 (nibbles 0..4
// of u, 5..7 of u >> 12, so that every nibble lies in bits 0..19 at place
// p) is the float 2^23 + c·16^p, and times 16^-p less 2^23·16^-p + 8 that
// is c - 8, exactly (one rounding of an exact result).
__device__ __forceinline__ void q4_dec(u32 u, float* c) {
	u32 hi = u >> 12;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		const int p = i < 5 ? i : i - 3;
		const float m = 1.f / (float)(1 << (4 * p));
		u32 b = q_and_or(i < 5 ? u : hi, 0xfu << (4 * p), 0x4b000000u);
		c[i] = fmaf(__uint_as_float(b), m, -(8388608.f * m + 8.f));
	}
}

// i8_dec gives the 4 i8 codes of u as their values: byte j with its sign
// bit flipped (the code plus 128) masked in place into the mantissa of 2^23
// (bytes 0 and 1 of u, 2 and 3 of u >> 16, at place p = j mod 2) is the
// float 2^23 + (c + 128)·256^p, and times 256^-p less 2^23·256^-p + 128 that
// is c, exactly.
__device__ __forceinline__ void i8_dec(u32 u, float* c) {
	u32 hi = u >> 16;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const int p = j & 1;
		const float m = p ? 1.f / 256.f : 1.f;
		u32 b = q_and_xor(j < 2 ? u : hi, 0xffu << (8 * p), (0x80u << (8 * p)) | 0x4b000000u);
		c[j] = fmaf(__uint_as_float(b), m, -(8388608.f * m + 128.f));
	}
}

// e4m3x2_h2 is the f16 pair of the two FP8 codes in the low 16 bits of b
// (the low byte's in the low half), exactly (every e4m3 value is an f16;
// NaN stays NaN): one cvt.rn.f16x2.e4m3x2 on sm_89 and later, else
// through e4m3_q.
__device__ __forceinline__ u32 e4m3x2_h2(u32 b) {
#if __CUDA_ARCH__ >= 890
	u32 d;
	asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"((u16)(b & 0xffffu)));
	return d;
#else
	return (u32)f32_to_f16(e4m3_q(b & 0xffu) * 256.f) | ((u32)f32_to_f16(e4m3_q((b >> 8) & 0xffu) * 256.f) << 16);
#endif
}

// h2_fma is fma.rn.f16x2: a · b + c, two halves at once.
__device__ __forceinline__ u32 h2_fma(u32 a, u32 b, u32 c) {
	u32 d;
	asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// f8_dec gives the 4 FP8 codes of u as their values (exact in f16, so
// exact in f32; NaN stays NaN): by cvt.rn.f16x2.e4m3x2 (low byte to the low
// half) on sm_89 and later, else e4m3_q times 256.
__device__ __forceinline__ void f8_dec(u32 u, float* c) {
#if __CUDA_ARCH__ >= 890
	u32 lo = e4m3x2_h2(u), hi = e4m3x2_h2(u >> 16);
	c[0] = f16_to_f32((u16)(lo & 0xffffu));
	c[1] = f16_to_f32((u16)(lo >> 16));
	c[2] = f16_to_f32((u16)(hi & 0xffffu));
	c[3] = f16_to_f32((u16)(hi >> 16));
#else
#pragma unroll
	for (int j = 0; j < 4; j++) c[j] = e4m3_q((u >> (8 * j)) & 0xffu) * 256.f;
#endif
}

// q_dec gives the codes of one 32-bit word (8 4-bit codes, or 4 FP8 or i8
// codes) as their values, in element order.
template <int QT>
__device__ __forceinline__ void q_dec(u32 u, float* c) {
	if (QT == QT_U4)
		q4_dec(u, c);
	else if (QT == QT_I8)
		i8_dec(u, c);
	else
		f8_dec(u, c);
}

// vec_word is word j (0..3, compile-time) of a 16-byte vector.
__device__ __forceinline__ u32 vec_word(uint4 q, int j) { return j == 0 ? q.x : j == 1 ? q.y : j == 2 ? q.z : q.w; }

// qmvs_stage copies x [R, K] (E codes a vector, V = K/E vectors a row in C
// chunks of 32) to xs lane-interleaved: float4 t of vector v of row r goes
// to ((r·C + v/32)·E/4 + t)·32 + v mod 32, so that the 32 lanes reading
// float4 t of their vectors of one chunk read consecutive 16-byte words.
// The threads take the slots of xs in order, so that a warp's stores are
// 512 consecutive bytes (no bank conflicts; taking x in order instead put
// 8 or 4 of a warp's stores on each bank: 18-way conflicts measured by
// Nsight Compute), its reads of x (in L2) 16 bytes every E·4; four loads
// are in flight before their stores. Slots of vectors past V are left.
template <int E>
__device__ __forceinline__ void qmvs_stage(const float* x, int R, int K, int C, float4* xs) {
	const int T = E / 4, TS = E == 32 ? 3 : 2; // float4s a vector, log2
	int K4 = K / 4, V = K / E, n = R * C * T * 32;
	const float4* x4 = (const float4*)x;
	for (int i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
		float4 a[4];
		int slot[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int i = i0 + j * blockDim.x, l = i & 31, t = (i >> 5) & (T - 1), rc = i >> (5 + TS);
			int r = rc / C, v = ((rc - r * C) << 5) + l;
			slot[j] = i < n && v < V ? i : -1;
			if (slot[j] >= 0) a[j] = __ldg(x4 + (long long)r * K4 + v * T + t);
		}
#pragma unroll
		for (int j = 0; j < 4; j++)
			if (slot[j] >= 0) xs[slot[j]] = a[j];
	}
}

// qmvs_xs is the dynamic shared memory of the qmvs kernels: x as
// qmvs_stage lays it out.
extern __shared__ float4 qmvs_xs[];

// qmvs_rows sets, for the MF features of unit u (of units), their rows of
// codes wr, whether they are features (ok; else wr is row 0) and where
// their scales start (srow).
template <int MF>
__device__ __forceinline__ void qmvs_rows(const unsigned char* w, long long stride, int sc, int br, int N, int units, int u,
                                          const char** wr, bool* ok, long long* srow) {
#pragma unroll
	for (int i = 0; i < MF; i++) {
		int f = u * MF + i;
		ok[i] = u < units && f < N;
		f = ok[i] ? f : 0;
		wr[i] = (const char*)w + (long long)f * stride;
		srow[i] = (long long)(f / br) * sc;
	}
}

// The fused forms' parameters, rows, loads, sums and outputs
// (quant_fused.cu's qmvf_impl), and the plain product built on them
// (qmvs_impl).

#define QF_SEGS 4

// The forms of qmvf_impl.
#define QF_SEG 0
#define QF_SW 1
#define QF_NRM 2

#define QMVF_PARAMS                                                                                                               \
	const float *__restrict__ x, long long stride, int st, int sc, int br, int bc, int R, int K, int NF, int S, int NB,        \
		const unsigned char *w0, const unsigned char *w1, const unsigned char *w2, const unsigned char *w3, const void *s0,     \
		const void *s1, const void *s2, const void *s3, float *y0, float *y1, float *y2, float *y3, int e0, int e1, int e2, \
		const float *sg, const float *su, float eps
#define QMVF_ARGS x, stride, st, sc, br, bc, R, K, NF, S, NB, w0, w1, w2, w3, s0, s1, s2, s3, y0, y1, y2, y3, e0, e1, e2, sg, su, eps

// qmvf_rows sets, for the MF features of unit u (of units), their rows of
// codes wr, their scale tables sp, whether they are features (ok; else
// row 0 of their weight) and where their scales start (srow).
template <int MF, int FORM>
__device__ __forceinline__ void qmvf_rows(QMVF_PARAMS, int units, int u, const char** wr, const void** sp, bool* ok, long long* srow) {
#pragma unroll
	for (int i = 0; i < MF; i++) {
		const unsigned char* w;
		const void* s;
		int row;
		if (FORM == QF_SW) {
			ok[i] = u < units;
			w = i == 0 ? w0 : w1;
			s = i == 0 ? s0 : s1;
			row = ok[i] ? u : 0;
		} else {
			int f = u * MF + i;
			ok[i] = u < units && f < NF;
			f = ok[i] ? f : 0;
			int g = (f >= e0) + (f >= e1) + (f >= e2);
			w = g == 0 ? w0 : g == 1 ? w1 : g == 2 ? w2 : w3;
			s = g == 0 ? s0 : g == 1 ? s1 : g == 2 ? s2 : s3;
			row = f - (g == 0 ? 0 : g == 1 ? e0 : g == 2 ? e1 : e2);
		}
		wr[i] = (const char*)w + (long long)row * stride;
		sp[i] = s;
		srow[i] = (long long)(row / br) * sc;
	}
}

// qmvf_zero clears a unit's sums acc and (QF_NRM) Σx² ss.
template <int MF, int RB>
__device__ __forceinline__ void qmvf_zero(float (*acc)[RB], float* ss) {
#pragma unroll
	for (int r = 0; r < RB; r++) ss[r] = 0.f;
#pragma unroll
	for (int i = 0; i < MF; i++)
#pragma unroll
		for (int r = 0; r < RB; r++) acc[i][r] = 0.f;
}

// qmvf_load loads a lane's batch of codes and their scales: for u < U,
// vector ((c0 + S·u)·32 + lane) of each row wr[i] into q[u][i] and its
// scale into sv[u][i], zeros where the row is not a feature (ok) or the
// vector is past the row (V vectors): every load of the batch is issued
// before any is used.
template <int QT, int MF, int U>
__device__ __forceinline__ void qmvf_load(const char* const* wr, const void* const* sp, const bool* ok, const long long* srow, int st,
                                          int bc, int V, int c0, int S, uint4 (*q)[MF], float (*sv)[MF]) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	int lane = threadIdx.x & 31, vs = q_vshift<E>(bc);
#pragma unroll
	for (int u = 0; u < U; u++) {
		int v = ((c0 + S * u) << 5) + lane;
#pragma unroll
		for (int i = 0; i < MF; i++) {
			bool in = ok[i] && v < V;
			q[u][i] = in ? ld_stream((const uint4*)wr[i] + v) : make_uint4(0u, 0u, 0u, 0u);
			sv[u][i] = in ? q_scale(sp[i], st, srow[i] + (v >> vs)) : 0.f;
		}
	}
}

// qmvf_batch adds a lane's batch (qmvf_load's q and sv from chunk c0, U
// chunks S apart) to its sums acc[i][r] of feature i and row r (R rows of
// x [R, K], staged in qmvs_xs when XS), and with NRM Σx² of the x it
// reads to ss[r]: a vector's codes are decoded once for all the rows
// (q_dec), their products with x summed over the vector, then times the
// vector's scale.
template <int QT, int RB, int MF, bool XS, bool NRM, int U>
__device__ __forceinline__ void qmvf_batch(uint4 (*q)[MF], float (*sv)[MF], const float* x, int R, int K, int V, int C,
                                           int c0, int S, float (*acc)[RB], float* ss) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	const int CW = E / 4;                // codes a 32-bit word
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int c = c0 + S * u, v = (c << 5) + lane;
		if (v >= V) continue;
		float part[MF][RB];
#pragma unroll
		for (int i = 0; i < MF; i++)
#pragma unroll
			for (int r = 0; r < RB; r++) part[i][r] = 0.f;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			float cv[MF][CW];
#pragma unroll
			for (int i = 0; i < MF; i++) q_dec<QT>(vec_word(q[u][i], j), cv[i]);
#pragma unroll
			for (int r = 0; r < RB; r++) {
				if (r >= R) continue;
				float xv[CW];
#pragma unroll
				for (int h = 0; h < CW / 4; h++) {
					int t = j * (CW / 4) + h;
					float4 a = XS ? qmvs_xs[((r * C + c) * (E / 4) + t) * 32 + lane]
					              : __ldg((const float4*)(x + (long long)r * K + (long long)v * E) + t);
					xv[4 * h] = a.x, xv[4 * h + 1] = a.y, xv[4 * h + 2] = a.z, xv[4 * h + 3] = a.w;
				}
				if (NRM)
#pragma unroll
					for (int e = 0; e < CW; e++) ss[r] = fmaf(xv[e], xv[e], ss[r]);
#pragma unroll
				for (int i = 0; i < MF; i++)
#pragma unroll
					for (int e = 0; e < CW; e++) part[i][r] = fmaf(cv[i][e], xv[e], part[i][r]);
			}
		}
#pragma unroll
		for (int i = 0; i < MF; i++)
#pragma unroll
			for (int r = 0; r < RB; r++) acc[i][r] = fmaf(part[i][r], sv[u][i], acc[i][r]);
	}
}

#define QMVS_PARAMS                                                                                                         \
	const float *__restrict__ x, const unsigned char *__restrict__ w, long long stride, const void *__restrict__ s, int st, \
		int sc, int br, int bc, float *__restrict__ y, int R, int K, int N, int S, int NB

#define QMVS_ARGS x, w, stride, s, st, sc, br, bc, y, R, K, N, S, NB

// qmvs_impl: RB is the row bucket (R <= RB), MF the features a unit, XS
// x staged in shared memory (qmvs_xs, R·C·32·E floats).
template <int QT, int RB, int MF, bool XS>
__device__ __forceinline__ void qmvs_impl(QMVS_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	const int CW = E / 4;                // codes a 32-bit word
	const int U = QMV_LOADS / MF > 0 ? QMV_LOADS / MF : 1;
	__shared__ float red[MV_MAXWARPS * MF * RB];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = nw / S, g = warp / S, p = warp - g * S;
	int V = K / E, C = (V + 31) >> 5, units = (N + MF - 1) / MF;
	const char* wr[MF];
	bool ok[MF];
	long long srow[MF];
	qmvs_rows<MF>(w, stride, sc, br, N, units, blockIdx.x * G + g, wr, ok, srow);
	mv_prefetch<MF>(wr, ok, V, p, S, 2 * U);
	pdl_entry();
	if (XS) {
		qmvs_stage<E>(x, R, K, C, qmvs_xs);
		__syncthreads();
	}
	for (int b = blockIdx.x; b < NB; b += gridDim.x) {
		int unit = b * G + g;
		qmvs_rows<MF>(w, stride, sc, br, N, units, unit, wr, ok, srow);
		float acc[MF][RB];
#pragma unroll
		for (int i = 0; i < MF; i++)
#pragma unroll
			for (int r = 0; r < RB; r++) acc[i][r] = 0.f;
		const void* sp[MF];
#pragma unroll
		for (int i = 0; i < MF; i++) sp[i] = s;
		for (int c0 = unit < units ? p : C; c0 < C; c0 += S * U) {
			uint4 q[U][MF];
			float sv[U][MF], ss[RB];
			qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
			qmvf_batch<QT, RB, MF, XS, false, U>(q, sv, x, R, K, V, C, c0, S, acc, ss);
		}
		mv_warp_sums<MF, RB>(&acc[0][0], R, red);
		__syncthreads();
		for (int t = threadIdx.x; t < G * MF * RB; t += blockDim.x) {
			int r = t % RB, gi = t / RB, i = gi % MF, gg = gi / MF;
			int f = (b * G + gg) * MF + i;
			if (r < R && f < N) y[(long long)r * N + f] = mv_group_sum(red, gg, S, MF, RB, i, r);
		}
		__syncthreads(); // red is the next block's
	}
}

// qmvs_run takes x staged in shared memory when xsm is set (the launch's
// dynamic shared memory holds it), else x read through L1.
template <int QT, int RB, int MF>
__device__ __forceinline__ void qmvs_run(QMVS_PARAMS, int xsm) {
	if (xsm)
		qmvs_impl<QT, RB, MF, true>(QMVS_ARGS);
	else
		qmvs_impl<QT, RB, MF, false>(QMVS_ARGS);
}

// qmvf_out reduces the sums of block b of units (G groups of S warps; acc
// and ss a lane's, as qmvf_batch leaves them) over each warp, then over the
// group's warps in warp order (the same bits on every run), and writes
// them: segment outputs, silu(g·sg[j])·(u·su[j]) for QF_SW, divided by
// sqrt(Σx² + eps) for QF_NRM. It syncs the block before and after.
template <int MF, int RB, int FORM>
__device__ __forceinline__ void qmvf_out(QMVF_PARAMS, int b, int G, float (*acc)[RB], const float* ss, float* red, float* nred) {
	const bool NRM = FORM == QF_NRM;
	mv_warp_sums<MF, RB>(&acc[0][0], R, red);
	if (NRM) mv_warp_sums<1, RB>(ss, R, nred);
	__syncthreads();
	int outs = G * (FORM == QF_SW ? 1 : MF) * RB;
	for (int t = threadIdx.x; t < outs; t += blockDim.x) {
		int r = t % RB, gi = t / RB;
		if (r >= R) continue;
		mv_put<MF, RB, FORM == QF_SW, NRM>(red, nred, b, G, S, gi, r, NF, y0, y1, y2, y3, e0, e1, e2, sg, su, eps);
	}
	__syncthreads(); // red is the next block's
}

#define QMOE_PARAMS                                                                                                                 \
	const float *__restrict__ x, const unsigned char *__restrict__ w, long long stride, const void *s, int st, int sr, int sc, int br, \
		int bc, const int *ids, float *__restrict__ y, int units, int K, int E, int nOut, int nIn, int perUnit, int vec, int *err

#define QMOE_ARGS x, w, stride, s, st, sr, sc, br, bc, ids, y, units, K, E, nOut, nIn, perUnit, vec, err

// qmoe_warp_impl: warp g of the grid computes y[u, f] = W_ids[u][f] · x_u
// for u = g / nOut, f = g mod nOut, as moe_expert_warp. An id outside
// [0, E) is reported and its outputs are zero.
template <int QT>
__device__ __forceinline__ void qmoe_warp_impl(QMOE_PARAMS) {
	pdl_entry();
	int lane = threadIdx.x & 31, u, f, id;
	float* yo;
	const float* xu;
	if (!moe_warp_unit(x, ids, y, units, K, E, nOut, nIn, perUnit, err, &u, &f, &id, &yo, &xu)) return;
	float acc = 0.f;
	q_row<QT, 1>(w + ((long long)id * nOut + f) * stride, s, st, ((long long)id * sr + f / br) * sc, bc, xu, 1, nIn, vec, lane, &acc);
	acc = warp_sum(acc);
	if (lane == 0) *yo = acc * Q_SCALE(QT);
}

// qmoe_wl reads element (n, k) of quantized expert e for moe_tile.
template <int QT>
struct qmoe_wl {
	const unsigned char* w;
	long long stride;
	const void* s;
	int st, sr, sc, br, bc, nOut;
	__device__ float operator()(int e, int n, int k) const {
		const unsigned char* row = w + ((long long)e * nOut + n) * stride;
		return q_deq<QT>(row, k) * load_w(s, st, ((long long)e * sr + n / br) * sc + k / bc);
	}
};

#define QMOE_TILE_PARAMS                                                                                                               \
	const float *x, const unsigned char *w, long long stride, const void *s, int st, int sr, int sc, int br, int bc, const int *offs, \
		const int *list, float *y, int K, int nOut, int nIn, int perUnit

#define QMOE_TILE(QT) moe_tile(x, qmoe_wl<QT>{w, stride, s, st, sr, sc, br, bc, nOut}, offs, list, y, K, nOut, nIn, perUnit)
