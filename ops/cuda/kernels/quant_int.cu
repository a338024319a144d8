// One-row products with 4-bit codes by integer dot products (quant.go's
// qmviPlan takes them for one decode row of q4 codes where x fits shared
// memory, unless PrecisionExact or REEL_QMV_INT=0): the split-K fused
// forms of quant_fused.cu (qmvf_impl) with their inner loop in integers.
//
// Why: the f32 kernels spend about 3.4 instructions a code (a lop3 and an
// fma to decode it, an fma to multiply it, x's loads), so that a q4 product
// is bound by issue, not by memory, and runs slower than its bf16 twin of
// four times the bytes. Here x is quantized once per block to 16-bit
// integers, a power-of-two scale for each of its vectors of 32 inputs (the
// inputs one 16-byte vector of codes multiplies), and a code takes a third
// of an instruction of decoding and half a dp2a (two 16-bit times 8-bit
// products added into an int32): about an instruction a code in all.
//
// The arithmetic: vector v of x, of largest magnitude m in [2^(e-127),
// 2^(e-126)) (e its exponent field), is q_i = rint(x_i · 2^(140-e)), |q_i|
// <= 2^14, so that x_i = q_i · 2^(e-140) within 2^-15 of m. A code c (its
// nibble) times 16 as a signed byte is 16·(c - 8) ((nibble in the high half
// of a byte) xor 0x80: one lop3; the low nibbles shifted up first), so
// that a vector's sum T = Σ 16·(c_i - 8)·q_i is exact in an int32 (|T| <=
// 2^26), and the vector adds T · s · 2^(e-144) to the f32 sum, s its
// weight scale: T rounds to f32 at 2^-24 of itself, the scales multiply
// exactly. Against the f32 kernels the only loss is x's rounding to 15
// bits of its vector's largest magnitude (an NMSE near 1e-9 on random
// data, beside q4's own 1e-2). A vector whose m is below 2^-114 counts as
// zero; an m that is infinite or NaN (max.NaN keeps NaN) makes the scale
// infinite, so the outputs of a non-finite x are not finite.
//
// Staging (qmvi_stage): four threads a vector, 8 inputs each; a vector's
// q_i are stored as the pairs the dp2a take, 16 bytes for each of its
// four 32-bit words of codes, lane-interleaved as qmvs_stage lays f32 x
// out (word j of vector v at ((v/32)·4 + j)·32 + v mod 32), its scale
// 2^(e-144) beside, and for QF_NRM its Σx² (f32, in a fixed order: every
// block gets the same bits). Every block stages all of x, so the launch
// takes few blocks of many warps (qmviPlan), each looping over blocks of
// units.
//
// Everything else is qmvf_impl's: units of MF features (QF_SEG up to
// QF_SEGS weights, QF_SW gate and up rows, QF_NRM one weight of
// l2-normalized rows), S warps a unit splitting K in chunks of 32 vectors,
// QMV_LOADS code loads a lane in flight, the first asked of L2 before
// pdl_entry, sums reduced per warp, then in warp order: the same bits on
// every run.

// QMVI_MAXWARPS is the most warps a qmvi block holds (its reductions'
// shared arrays, and the kernels' launch bounds: 1024 threads of the
// four-feature forms ask for more registers than an SM has).
#define QMVI_MAXWARPS 16

// qmvi_dp2a adds to c the products of a's two 16-bit halves (signed) with
// bytes 0 and 1 (lo) or 2 and 3 (hi) of b (signed).
__device__ __forceinline__ int qmvi_dp2a_lo(u32 a, u32 b, int c) {
	int d;
	asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

__device__ __forceinline__ int qmvi_dp2a_hi(u32 a, u32 b, int c) {
	int d;
	asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// qmvi_max is the larger of a and b, NaN if either is.
__device__ __forceinline__ float qmvi_max(float a, float b) {
#if __CUDA_ARCH__ >= 800
	float d;
	asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
	return d;
#else
	return a != a || b != b ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}

// qmvi_stage quantizes x [K] (V vectors of 32) into xs, sx and (nrm) ss as
// the header above lays them out; all the block's threads take part.
__device__ __forceinline__ void qmvi_stage(const float* x, int V, uint4* xs, float* sx, float* ss, bool nrm) {
	const unsigned FULL = 0xffffffffu;
	int n = 4 * V;
	for (int base = 0; base < n; base += blockDim.x) { // the same trips for every thread: the shuffles need whole warps
		int i = base + threadIdx.x, v = i >> 2, j = i & 3;
		float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
		if (i < n) {
			const float4* p = (const float4*)(x + 32 * (long long)v + 8 * j);
			a = __ldg(p), b = __ldg(p + 1);
		}
		float e[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
		float m = 0.f;
#pragma unroll
		for (int k = 0; k < 8; k++) m = qmvi_max(m, fabsf(e[k]));
		m = qmvi_max(m, __shfl_xor_sync(FULL, m, 1));
		m = qmvi_max(m, __shfl_xor_sync(FULL, m, 2));
		u32 ex = __float_as_uint(m) >> 23; // m >= 0; 255 for inf and NaN
		float inv = ex >= 13u ? __uint_as_float((267u - ex) << 23) : 0.f;
		float scale = __uint_as_float(ex << 23) * 7.62939453125e-06f; // times 2^-17: 2^(e-144); inf for inf and NaN
		u32 w[8];
#pragma unroll
		for (int k = 0; k < 8; k++) w[k] = __float_as_uint(fmaf(e[k], inv, 12582912.f)); // 1.5·2^23 + q: q in the low 16 bits
		uint4 o;
		o.x = __byte_perm(w[0], w[2], 0x5410);
		o.y = __byte_perm(w[4], w[6], 0x5410);
		o.z = __byte_perm(w[1], w[3], 0x5410);
		o.w = __byte_perm(w[5], w[7], 0x5410);
		float s2 = 0.f;
		if (nrm) {
#pragma unroll
			for (int k = 0; k < 8; k++) s2 = fmaf(e[k], e[k], s2);
			s2 += __shfl_xor_sync(FULL, s2, 1);
			s2 += __shfl_xor_sync(FULL, s2, 2);
		}
		if (i < n) {
			xs[(((v >> 5) << 2) + j) * 32 + (v & 31)] = o;
			if (j == 0) {
				sx[v] = scale;
				if (nrm) ss[v] = s2;
			}
		}
	}
}

// qmvi_norm is Σx² of the staged row (ss, V vectors), summed by one warp in
// a fixed order: every lane, every warp and every block gets the same bits.
__device__ __forceinline__ float qmvi_norm(const float* ss, int V) {
	float a = 0.f;
	for (int v = threadIdx.x & 31; v < V; v += 32) a += ss[v];
	return warp_sum(a);
}

// qmvi_batch adds a lane's batch of codes (qmvf_load's q and sv from chunk
// c0, U chunks S apart) times the staged x to its sums acc[i] of feature i.
template <int MF, int U>
__device__ __forceinline__ void qmvi_batch(uint4 (*q)[MF], float (*sv)[MF], const uint4* xs, const float* sx, int V, int c0, int S,
                                           float (*acc)[1]) {
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int c = c0 + S * u, v = (c << 5) + lane;
		if (v >= V) continue;
		uint4 xw[4];
#pragma unroll
		for (int j = 0; j < 4; j++) xw[j] = xs[((c << 2) + j) * 32 + lane];
		float xsc = sx[v];
#pragma unroll
		for (int i = 0; i < MF; i++) {
			int t = 0;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				u32 cw = vec_word(q[u][i], j);
				u32 ev = q_and_xor(cw << 4, 0xf0f0f0f0u, 0x80808080u); // 16·(c − 8): codes 8j, 8j+2, 8j+4, 8j+6
				u32 od = q_and_xor(cw, 0xf0f0f0f0u, 0x80808080u);      // codes 8j+1, 8j+3, 8j+5, 8j+7
				t = qmvi_dp2a_lo(xw[j].x, ev, t);
				t = qmvi_dp2a_hi(xw[j].y, ev, t);
				t = qmvi_dp2a_lo(xw[j].z, od, t);
				t = qmvi_dp2a_hi(xw[j].w, od, t);
			}
			acc[i][0] = fmaf((float)t, sv[u][i] * xsc, acc[i][0]);
		}
	}
}

// qmvi_impl: MF the features a unit (2 for QF_SW: gate, up), FORM QF_SEG,
// QF_SW or QF_NRM; one row (R is 1), K a multiple of 32.
template <int MF, int FORM>
__device__ __forceinline__ void qmvi_impl(QMVF_PARAMS) {
	const int E = 32; // codes a 16-byte vector
	const int U = QMV_LOADS / MF > 0 ? QMV_LOADS / MF : 1;
	const bool NRM = FORM == QF_NRM;
	__shared__ float red[QMVI_MAXWARPS * MF];
	__shared__ float nred[NRM ? QMVI_MAXWARPS : 1];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = nw / S, g = warp / S, p = warp - g * S;
	int V = K / E, C = (V + 31) >> 5, units = FORM == QF_SW ? NF : (NF + MF - 1) / MF;
	uint4* xs = (uint4*)qmvs_xs;
	float* sx = (float*)(xs + C * 128);
	float* ssv = sx + C * 32;
	const char* wr[MF];
	const void* sp[MF];
	bool ok[MF];
	long long srow[MF];
	qmvf_rows<MF, FORM>(QMVF_ARGS, units, blockIdx.x * G + g, wr, sp, ok, srow);
	mv_prefetch<MF, 2 * U>(wr, ok, V, p, S);
	pdl_entry();
	qmvi_stage(x, V, xs, sx, ssv, NRM);
	__syncthreads();
	float ss[1] = {0.f}; // QF_NRM: the row's Σx², in lane 0 of a unit's first warp (qmvf_out sums a group's warps)
	if (NRM) {
		float n2 = qmvi_norm(ssv, V);
		ss[0] = lane == 0 && p == 0 ? n2 : 0.f;
	}
	for (int b = blockIdx.x; b < NB; b += gridDim.x) {
		int unit = b * G + g;
		qmvf_rows<MF, FORM>(QMVF_ARGS, units, unit, wr, sp, ok, srow);
		float acc[MF][1];
#pragma unroll
		for (int i = 0; i < MF; i++) acc[i][0] = 0.f;
		for (int c0 = unit < units ? p : C; c0 < C; c0 += S * U) {
			uint4 q[U][MF];
			float sv[U][MF];
			qmvf_load<QT_U4, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
			qmvi_batch<MF, U>(q, sv, xs, sx, V, c0, S, acc);
		}
		qmvf_out<MF, 1, FORM>(QMVF_ARGS, b, G, acc, ss, red, nred);
	}
}

// QMVI_PLAIN is qmvi_impl's QF_SEG over one weight, from qmvs_*'s
// arguments: its codes, scales and output as segment 0, ending at N.
#define QMVI_PLAIN(MF) \
	qmvi_impl<MF, QF_SEG>(x, stride, st, sc, br, bc, R, K, N, S, NB, w, w, w, w, s, s, s, s, y, y, y, y, N, N, N, nullptr, nullptr, 0.f)

// The instances the Go side launches (qmviKernelNames in quant.go), with
// their split-K siblings' arguments (xsm is not used: x is always staged).
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvi_u4_f1(QMVS_PARAMS, int xsm) { QMVI_PLAIN(1); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvi_u4_f2(QMVS_PARAMS, int xsm) { QMVI_PLAIN(2); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvi_u4_f4(QMVS_PARAMS, int xsm) { QMVI_PLAIN(4); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvgi_u4_f1(QMVF_PARAMS, int xsm) { qmvi_impl<1, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvgi_u4_f2(QMVF_PARAMS, int xsm) { qmvi_impl<2, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvgi_u4_f4(QMVF_PARAMS, int xsm) { qmvi_impl<4, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvni_u4_f1(QMVF_PARAMS, int xsm) { qmvi_impl<1, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvni_u4_f2(QMVF_PARAMS, int xsm) { qmvi_impl<2, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvni_u4_f4(QMVF_PARAMS, int xsm) { qmvi_impl<4, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVI_MAXWARPS * 32) qmvswi_u4(QMVF_PARAMS, int xsm) { qmvi_impl<2, QF_SW>(QMVF_ARGS); }
