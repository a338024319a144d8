// Products with quantized weights (quant_matmul, ops/quant.go): codes of
// float8_e4m3fn (FP8 checkpoints as published), i8 or 4-bit (two a byte,
// low nibble first, u meaning u - 8), each times the scale of its block
// (br rows by bc columns; scale (n/br, k/bc) of an [ceil(N/br), sc] table of
// type st: WT_F32, WT_BF16 or WT_F16).
//
// qmv_<codes>_r<RB>: 1..RB rows of x [R, K] against the weight [N, K],
// bandwidth bound, dequantizing on the fly: one warp a feature (a block of
// W warps computes W consecutive features), its lanes streaming the row's
// 16-byte vectors of codes (16 FP8 or i8 codes, 32 4-bit codes) through
// ld_stream; a vector's codes times x are summed, then times the vector's
// scale (vec: every vector lies in one scale block). Without vec (a row not
// 16-byte aligned, a block not a whole number of vectors) the lanes read
// element by element. Sums are reduced per warp by shuffles: no atomics,
// the same bits on every run.
// dequant_f32: the whole weight dequantized to f32 [N, K], for a prompt
// chunk's product by the GEMM path of matmul (matmul.go). In f32 the
// product of a code and its block's scale is exact as the checkpoint means
// it; bf16 rounded it (2^-9 of each weight: 3e-2 in a tiny Qwen3's logits).

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

// q_word decodes the codes of one 32-bit word: 4 FP8 or i8 codes, or 8
// 4-bit codes, in element order.
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

// The instances the Go side launches (quantKernels in quant.go).
extern "C" __global__ void qmv_f8_r1(QMV_PARAMS) { qmv_impl<QT_F8, 1>(QMV_ARGS); }
extern "C" __global__ void qmv_f8_r8(QMV_PARAMS) { qmv_impl<QT_F8, 8>(QMV_ARGS); }
extern "C" __global__ void qmv_i8_r1(QMV_PARAMS) { qmv_impl<QT_I8, 1>(QMV_ARGS); }
extern "C" __global__ void qmv_i8_r8(QMV_PARAMS) { qmv_impl<QT_I8, 8>(QMV_ARGS); }
extern "C" __global__ void qmv_u4_r1(QMV_PARAMS) { qmv_impl<QT_U4, 1>(QMV_ARGS); }
extern "C" __global__ void qmv_u4_r8(QMV_PARAMS) { qmv_impl<QT_U4, 8>(QMV_ARGS); }

// dequant_f32: out[n, k] = v(n, k) · s[n/br, k/bc] in f32, grid-stride over
// the N·K elements.
extern "C" __global__ void dequant_f32(const unsigned char* w, long long stride, int qt, const void* s, int st, int sc, int br,
                                       int bc, float* out, int N, int K) {
	pdl_entry();
	GRID_STRIDE(i, (long long)N * K) {
		int n = (int)(i / K), k = (int)(i % K);
		const unsigned char* wr = w + (long long)n * stride;
		float c = qt == QT_F8 ? q_deq<QT_F8>(wr, k) : qt == QT_I8 ? q_deq<QT_I8>(wr, k) : q_deq<QT_U4>(wr, k);
		out[i] = c * load_w(s, st, (long long)(n / br) * sc + k / bc);
	}
}

// Quantized experts (quant_expert_matmul): codes w [E, N, stride] and one
// scale table [ceil(N/br), sc] per expert (sr = ceil(N/br) rows each), read
// as quant_matmul's weight. moe.go binds them as expert_matmul: qmoe_warp_*
// for few units (a warp per (unit, feature), the row dot of q_row), else
// moe_expert_group then qmoe_tile_* (moe_tile, kernels/moe.cu, reading the
// codes through qmoe_wl).

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

extern "C" __global__ void qmoe_warp_f8(QMOE_PARAMS) { qmoe_warp_impl<QT_F8>(QMOE_ARGS); }
extern "C" __global__ void qmoe_warp_i8(QMOE_PARAMS) { qmoe_warp_impl<QT_I8>(QMOE_ARGS); }
extern "C" __global__ void qmoe_warp_u4(QMOE_PARAMS) { qmoe_warp_impl<QT_U4>(QMOE_ARGS); }

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

extern "C" __global__ void qmoe_tile_f8(QMOE_TILE_PARAMS) {
	pdl_entry();
	QMOE_TILE(QT_F8);
}
extern "C" __global__ void qmoe_tile_i8(QMOE_TILE_PARAMS) {
	pdl_entry();
	QMOE_TILE(QT_I8);
}
extern "C" __global__ void qmoe_tile_u4(QMOE_TILE_PARAMS) {
	pdl_entry();
	QMOE_TILE(QT_U4);
}
