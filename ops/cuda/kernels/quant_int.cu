// One-row quantized products with x staged once per block in a narrow
// form (quant.go's qmvxPlan takes them for one decode row whose codes are
// read as 16-byte vectors and whose staged x fits shared memory, unless
// PrecisionExact or REEL_QMV_STAGED=0): the split-K fused forms of
// quant_fused.cu (qmvf_impl) with a cheaper inner loop. qmvi_* (4-bit and
// i8 codes) multiply in integers, qmvh_f8 (FP8 codes) in f16.
//
// Why: the f32 kernels spend about 3.4 instructions a 4-bit code (a lop3
// and an fma to decode it, an fma to multiply it, x's loads) and about 3 an
// FP8 code (its cvt to f16, a cvt to f32, an fma), so that their products
// are bound by issue, not by memory, and run slower than their bf16 twins
// of two to four times the bytes. Here a code takes about one instruction.
//
// The integers (qmvi): vector v of x (the inputs one 16-byte vector of
// codes multiplies: 32 for 4-bit codes, 16 for i8), of largest magnitude m
// in [2^(e-127), 2^(e-126)) (e its exponent field), is q_i = rint(x_i ·
// 2^(140-e)), |q_i| <= 2^14, so that x_i = q_i · 2^(e-140) within 2^-15 of
// m. A 4-bit code c (its nibble) times 16 as a signed byte is 16·(c - 8)
// ((nibble in the high half of a byte) xor 0x80: one lop3; the low nibbles
// shifted up first); an i8 code is its byte. dp2a adds two 16-bit times
// 8-bit products into an int32, so a vector's sum T = Σ code_i·q_i is exact
// (|T| <= 2^26), and the vector adds T · s · 2^(e-140) (2^(e-144) for the
// 16·(c - 8) of 4-bit codes) to the f32 sum, s its weight scale: T rounds
// to f32 at 2^-24 of itself, the scales multiply exactly. Against the f32
// kernels the only loss is x's rounding to 15 bits of its vector's largest
// magnitude (an NMSE near 1e-9 on random data, beside q4's own 1e-2). A
// vector whose m is below 2^-114 counts as zero.
//
// The halves (qmvh): vector v of x (16 inputs) times 2^(126-e) (its
// largest magnitude in [1/2, 1)) rounded to f16 (11 bits, 2^-12 of m at
// worst), the FP8 codes made f16 exactly (cvt.rn.f16x2.e4m3x2), and a
// vector's 16 products summed by fma.rn.f16x2 into two halves of 8 each
// (at most 8·448 in magnitude), which are added in f32 and times s ·
// 2^(e-126): an NMSE near 1e-7, as the prompt products' rounding of x to
// 16 bits in PrecisionAuto (PrecisionExact keeps f32).
//
// In both, an m that is infinite or NaN (max.NaN keeps NaN), or for qmvh at
// least 2^126, makes the vector's scale infinite, so the outputs of a
// non-finite x are not finite.
//
// Staging (qmvx_stage): a thread takes 8 inputs of a vector (4 threads
// a vector of 32, 2 of 16); a vector's narrow x is stored as the pairs the
// dp2a or fma take (16 bytes a word of 4-bit codes, 8 of i8 or FP8),
// lane-interleaved as qmvs_stage lays f32 x out (word j of vector v at
// ((v/32)·4 + j)·32 + v mod 32), its scale beside, and for QF_NRM its Σx²
// (f32, in a fixed order: every block gets the same bits). Every block
// stages all of x, so the launch takes few blocks of many warps
// (qmvxPlan), each looping over blocks of units.
//
// The slerp forms (qmvsg*, qmvssw*: quant_slerp_matmul and
// quant_slerp_matmul_swiglu of one row) stage h' = slerp(x, y, α) in place
// of x: every block first sums, over x, y and α, the five terms whose sums
// give h' = cp·(1 - α) ⊙ x + cq·α ⊙ y (qmvx_slerp_coef: in f64, in a fixed
// order, so every block gets the same bits), then stages h' as it would
// stage x, and block 0 writes h' (the next residual's x). The slerp costs
// the product one block reduction and two more reads of its input, in
// place of a launch of its own.
//
// Everything else is qmvf_impl's: units of MF features (QF_SEG up to
// QF_SEGS weights, QF_SW gate and up rows, QF_NRM one weight of
// l2-normalized rows), S warps a unit splitting K in chunks of 32 vectors,
// QMVX_LOADS code loads a lane in flight, the first asked of L2 before
// pdl_entry (and with QMVX_EARLY loaded then: codes and scales are
// written by uploads, never by the kernel before a product, as qmvr_*
// takes them), sums reduced per warp, then in warp order: the same bits on
// every run.

// QMVX_MAXWARPS is the most warps a qmvx block holds (its reductions'
// shared arrays, and the kernels' launch bounds: 1024 threads of the
// four-feature forms ask for more registers than an SM has).
#define QMVX_MAXWARPS 16

// QMVX_EARLY loads a lane's first batch of codes and scales before
// pdl_entry (1), or after it (0: REEL_CUDA_DEFINES=-DQMVX_EARLY=0, for
// comparing).
#ifndef QMVX_EARLY
#define QMVX_EARLY 1
#endif

// QMVX_LOADS is the 16-byte code loads each lane of a staged product
// issues per iteration, over all the features of its unit (QMV_LOADS
// unless set: REEL_CUDA_DEFINES=-DQMVX_LOADS=8 for a sweep).
#ifndef QMVX_LOADS
#define QMVX_LOADS QMV_LOADS
#endif

// qmvx_dp2a adds to c the products of a's two 16-bit halves (signed) with
// bytes 0 and 1 (lo) or 2 and 3 (hi) of b (signed).
__device__ __forceinline__ int qmvx_dp2a_lo(u32 a, u32 b, int c) {
	int d;
	asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

__device__ __forceinline__ int qmvx_dp2a_hi(u32 a, u32 b, int c) {
	int d;
	asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

// qmvx_max is the larger of a and b, NaN if either is.
__device__ __forceinline__ float qmvx_max(float a, float b) {
#if __CUDA_ARCH__ >= 800
	float d;
	asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
	return d;
#else
	return a != a || b != b ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}

// qmvx_f16x2 is the f16 pair of a and b (a in the low half), rounded to
// nearest: one cvt on sm_80 and later.
__device__ __forceinline__ u32 qmvx_f16x2(float a, float b) {
#if __CUDA_ARCH__ >= 800
	u32 d;
	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
	return d;
#else
	return (u32)f32_to_f16(a) | ((u32)f32_to_f16(b) << 16);
#endif
}

// QMVX_XW is the 32-bit words of staged x that one word of codes
// multiplies: 8 4-bit codes' inputs as 4 pairs, 4 i8 or FP8 codes' as 2.
#define QMVX_XW(QT) ((QT) == QT_U4 ? 4 : 2)

// qmvx_slerp_coef gives every thread of the block the coefficients of h'
// = slerp(h, y, α) = cp·(1 - α) ⊙ h + cq·α ⊙ y over K inputs: n(h) + α ⊙
// (n(y) - n(h)) is a·u + b·w for u = (1 - α) ⊙ h, w = α ⊙ y, a =
// 1/sqrt(Σh² + eps) and b = 1/sqrt(Σy² + eps), and its squared norm is
// a²Σu² + b²Σw² + 2abΣu·w, so that one block reduction of five sums gives
// cp = a/|t| and cq = b/|t| (|t| = sqrt(that + eps)). K is a multiple of
// 4 and the vectors 16-byte aligned (a staged product's): a thread reads
// 4 inputs of each at a time, all its loads in flight together.
__device__ __forceinline__ void qmvx_slerp_coef(const float* h, const float* y, const float* al, int K, float eps, double* cp, double* cq) {
	__shared__ double scratch[32 * 5];
	double t[5] = {0, 0, 0, 0, 0};
#pragma unroll 2
	for (int i = threadIdx.x; i < K / 4; i += blockDim.x) {
		float4 h4 = __ldg((const float4*)h + i), y4 = __ldg((const float4*)y + i), a4 = __ldg((const float4*)al + i);
		float hs[4] = {h4.x, h4.y, h4.z, h4.w}, ys[4] = {y4.x, y4.y, y4.z, y4.w}, as[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
		for (int e = 0; e < 4; e++) {
			double hv = hs[e], yv = ys[e], av = as[e];
			double u = (1.0 - av) * hv, w = av * yv;
			t[0] += hv * hv, t[1] += yv * yv, t[2] += u * u, t[3] += w * w, t[4] += u * w;
		}
	}
	block_sum_n_d<5>(t, scratch);
	double a = 1.0 / sqrt(t[0] + (double)eps), b = 1.0 / sqrt(t[1] + (double)eps);
	double inv = 1.0 / sqrt(fmax(a * a * t[2] + b * b * t[3] + 2.0 * a * b * t[4], 0.0) + (double)eps);
	*cp = a * inv, *cq = b * inv;
}

// qmvx_slerp_at is element h'_i of qmvx_slerp_coef's coefficients, from
// h_i, y_i and α_i.
__device__ __forceinline__ float qmvx_slerp_at(float h, float y, float al, double cp, double cq) {
	return (float)(cp * ((1.0 - (double)al) * (double)h) + cq * ((double)al * (double)y));
}

// qmvx_stage stages x [K] (V vectors of E inputs) into xs, sx and (nrm) ss
// as the header above lays them out; all the block's threads take part,
// each 8 inputs of a vector (TPV threads a vector): one word of 4-bit
// codes' inputs, two of i8 or FP8 codes'. With SLP it stages h' =
// slerp(x, y, α) of the coefficients cp, cq instead (qmvx_slerp_coef), and
// writes h' to hout when hout is not null.
template <int QT, bool SLP>
__device__ __forceinline__ void qmvx_stage(const float* x, int V, u32* xs, float* sx, float* ss, bool nrm, const float* y, const float* al,
                                           double cp, double cq, float* hout) {
	const unsigned FULL = 0xffffffffu;
	const int E = QT == QT_U4 ? 32 : 16, TPV = E / 8, WPT = 4 / TPV, XW = QMVX_XW(QT);
	int n = TPV * V;
	for (int base = 0; base < n; base += blockDim.x) { // the same trips for every thread: the shuffles need whole warps
		int i = base + threadIdx.x, v = i / TPV, h = i % TPV;
		float e[8];
		long long at = (long long)E * v + 8 * h;
#pragma unroll
		for (int u = 0; u < 2; u++) {
			float4 a = i < n ? __ldg((const float4*)(x + at) + u) : make_float4(0.f, 0.f, 0.f, 0.f);
			if (SLP && i < n) {
				float4 b = __ldg((const float4*)(y + at) + u), c = __ldg((const float4*)(al + at) + u);
				a = make_float4(qmvx_slerp_at(a.x, b.x, c.x, cp, cq), qmvx_slerp_at(a.y, b.y, c.y, cp, cq), qmvx_slerp_at(a.z, b.z, c.z, cp, cq),
				                qmvx_slerp_at(a.w, b.w, c.w, cp, cq));
				if (hout) ((float4*)(hout + at))[u] = a;
			}
			e[4 * u] = a.x, e[4 * u + 1] = a.y, e[4 * u + 2] = a.z, e[4 * u + 3] = a.w;
		}
		float m = 0.f;
#pragma unroll
		for (int k = 0; k < 8; k++) m = qmvx_max(m, fabsf(e[k]));
#pragma unroll
		for (int d = 1; d < TPV; d <<= 1) m = qmvx_max(m, __shfl_xor_sync(FULL, m, d));
		u32 ex = __float_as_uint(m) >> 23; // m >= 0; 255 for inf and NaN
		u32 o[4];                          // the thread's words of staged x: XW a word of codes, WPT words
		float scale;
		if (QT == QT_F8) {
			bool big = ex >= 253u;
			float inv = big ? 0.f : __uint_as_float((253u - ex) << 23);                  // 2^(126-e)
			scale = big ? __int_as_float(0x7f800000) : __uint_as_float((ex + 1u) << 23); // 2^(e-126)
#pragma unroll
			for (int k = 0; k < 4; k++) o[k] = qmvx_f16x2(e[2 * k] * inv, e[2 * k + 1] * inv);
		} else {
			float inv = ex >= 13u ? __uint_as_float((267u - ex) << 23) : 0.f; // 2^(140-e)
			// 2^(e-140), or 2^(e-144) for the codes' 16·(c - 8); inf for inf and NaN.
			scale = __uint_as_float(ex << 23) * (QT == QT_U4 ? 7.62939453125e-06f : 1.220703125e-04f);
			u32 w[8];
#pragma unroll
			for (int k = 0; k < 8; k++) w[k] = __float_as_uint(fmaf(e[k], inv, 12582912.f)); // 1.5·2^23 + q: q in the low 16 bits
			if (QT == QT_U4) {
				o[0] = __byte_perm(w[0], w[2], 0x5410);
				o[1] = __byte_perm(w[4], w[6], 0x5410);
				o[2] = __byte_perm(w[1], w[3], 0x5410);
				o[3] = __byte_perm(w[5], w[7], 0x5410);
			} else {
#pragma unroll
				for (int k = 0; k < 4; k++) o[k] = __byte_perm(w[2 * k], w[2 * k + 1], 0x5410);
			}
		}
		float s2 = 0.f;
		if (nrm) {
#pragma unroll
			for (int k = 0; k < 8; k++) s2 = fmaf(e[k], e[k], s2);
#pragma unroll
			for (int d = 1; d < TPV; d <<= 1) s2 += __shfl_xor_sync(FULL, s2, d);
		}
		if (i < n) {
#pragma unroll
			for (int jj = 0; jj < WPT; jj++) {
				int slot = (((v >> 5) << 2) + h * WPT + jj) * 32 + (v & 31);
				if (XW == 4)
					((uint4*)xs)[slot] = make_uint4(o[0], o[1], o[2], o[3]);
				else
					((uint2*)xs)[slot] = make_uint2(o[2 * jj], o[2 * jj + 1]);
			}
			if (h == 0) {
				sx[v] = scale;
				if (nrm) ss[v] = s2;
			}
		}
	}
}

// qmvx_norm is Σx² of the staged row (ss, V vectors), summed by one warp in
// a fixed order: every lane, every warp and every block gets the same bits.
__device__ __forceinline__ float qmvx_norm(const float* ss, int V) {
	float a = 0.f;
	for (int v = threadIdx.x & 31; v < V; v += 32) a += ss[v];
	return warp_sum(a);
}

// qmvx_dot is one feature's sum over one vector of codes q against the
// staged x words xw (word j's at xw[XW·j ..]), in the units of the
// vector's x scale.
template <int QT>
__device__ __forceinline__ float qmvx_dot(uint4 q, const u32* xw) {
	if (QT == QT_F8) {
		u32 h = 0u;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			u32 cw = vec_word(q, j);
			h = h2_fma(e4m3x2_h2(cw), xw[2 * j], h);
			h = h2_fma(e4m3x2_h2(cw >> 16), xw[2 * j + 1], h);
		}
		return f16_to_f32((u16)(h & 0xffffu)) + f16_to_f32((u16)(h >> 16));
	}
	int t = 0;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		u32 cw = vec_word(q, j);
		if (QT == QT_U4) {
			u32 ev = q_and_xor(cw << 4, 0xf0f0f0f0u, 0x80808080u); // 16·(c − 8): codes 8j, 8j+2, 8j+4, 8j+6
			u32 od = q_and_xor(cw, 0xf0f0f0f0u, 0x80808080u);      // codes 8j+1, 8j+3, 8j+5, 8j+7
			t = qmvx_dp2a_lo(xw[4 * j], ev, t);
			t = qmvx_dp2a_hi(xw[4 * j + 1], ev, t);
			t = qmvx_dp2a_lo(xw[4 * j + 2], od, t);
			t = qmvx_dp2a_hi(xw[4 * j + 3], od, t);
		} else {
			t = qmvx_dp2a_lo(xw[2 * j], cw, t);
			t = qmvx_dp2a_hi(xw[2 * j + 1], cw, t);
		}
	}
	return (float)t;
}

// qmvx_batch adds a lane's batch of codes (qmvf_load's q and sv from chunk
// c0, U chunks S apart) times the staged x to its sums acc[i] of feature i.
template <int QT, int MF, int U>
__device__ __forceinline__ void qmvx_batch(uint4 (*q)[MF], float (*sv)[MF], const u32* xs, const float* sx, int V, int c0, int S,
                                           float (*acc)[1]) {
	const int XW = QMVX_XW(QT);
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int c = c0 + S * u, v = (c << 5) + lane;
		if (v >= V) continue;
		u32 xw[4 * XW];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int slot = ((c << 2) + j) * 32 + lane;
			if constexpr (XW == 4) {
				uint4 a = ((const uint4*)xs)[slot];
				xw[4 * j] = a.x, xw[4 * j + 1] = a.y, xw[4 * j + 2] = a.z, xw[4 * j + 3] = a.w;
			} else {
				uint2 a = ((const uint2*)xs)[slot];
				xw[2 * j] = a.x, xw[2 * j + 1] = a.y;
			}
		}
		float xsc = sx[v];
#pragma unroll
		for (int i = 0; i < MF; i++) acc[i][0] = fmaf(qmvx_dot<QT>(q[u][i], xw), sv[u][i] * xsc, acc[i][0]);
	}
}

// qmvx_impl: MF the features a unit (2 for QF_SW: gate, up), FORM QF_SEG,
// QF_SW or QF_NRM; one row (R is 1), K a multiple of the vector's codes.
// SLP, the slerp forms (QF_SEG or QF_SW), stage h' = slerp(x, y, α) (y,
// α and h' [K], 16-byte aligned; eps the slerp's) in place of x.
template <int QT, int MF, int FORM, bool SLP = false>
__device__ __forceinline__ void qmvx_impl(QMVF_PARAMS, const float* y = nullptr, const float* al = nullptr, float* hout = nullptr) {
	static_assert(!SLP || FORM != QF_NRM, "the slerp forms are not normalized");
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	const int U = QMVX_LOADS / MF > 0 ? QMVX_LOADS / MF : 1;
	const bool NRM = FORM == QF_NRM;
	__shared__ float red[QMVX_MAXWARPS * MF];
	__shared__ float nred[NRM ? QMVX_MAXWARPS : 1];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = nw / S, g = warp / S, p = warp - g * S;
	int V = K / E, C = (V + 31) >> 5, units = FORM == QF_SW ? NF : (NF + MF - 1) / MF;
	u32* xs = (u32*)qmvs_xs;
	float* sx = (float*)(xs + C * 128 * QMVX_XW(QT));
	float* ssv = sx + C * 32;
	const char* wr[MF];
	const void* sp[MF];
	bool ok[MF];
	long long srow[MF];
	qmvf_rows<MF, FORM>(QMVF_ARGS, units, blockIdx.x * G + g, wr, sp, ok, srow);
	mv_prefetch<MF>(wr, ok, V, p, S, 2 * U);
	// With QMVX_EARLY the first batch of codes and scales is loaded before
	// the wait on the previous kernel, in flight while x is staged.
	uint4 q[U][MF];
	float sv[U][MF];
	if (QMVX_EARLY) qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, p, S, q, sv);
	pdl_entry();
	double cp = 0, cq = 0;
	if (SLP) qmvx_slerp_coef(x, y, al, K, eps, &cp, &cq);
	qmvx_stage<QT, SLP>(x, V, xs, sx, ssv, NRM, y, al, cp, cq, SLP && blockIdx.x == 0 ? hout : nullptr);
	__syncthreads();
	float ss[1] = {0.f}; // QF_NRM: the row's Σx², in lane 0 of a unit's first warp (qmvf_out sums a group's warps)
	if (NRM) {
		float n2 = qmvx_norm(ssv, V);
		ss[0] = lane == 0 && p == 0 ? n2 : 0.f;
	}
	for (int b = blockIdx.x; b < NB; b += gridDim.x) {
		int unit = b * G + g;
		qmvf_rows<MF, FORM>(QMVF_ARGS, units, unit, wr, sp, ok, srow);
		float acc[MF][1];
#pragma unroll
		for (int i = 0; i < MF; i++) acc[i][0] = 0.f;
		for (int c0 = unit < units ? p : C; c0 < C; c0 += S * U) {
			if (!QMVX_EARLY || b != blockIdx.x || c0 != p) qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
			qmvx_batch<QT, MF, U>(q, sv, xs, sx, V, c0, S, acc);
		}
		qmvf_out<MF, 1, FORM>(QMVF_ARGS, b, G, acc, ss, red, nred);
	}
}

// QMVX_PLAIN is qmvx_impl's QF_SEG over one weight, from qmvs_*'s
// arguments: its codes, scales and output as segment 0, ending at N.
#define QMVX_PLAIN(QT, MF) \
	qmvx_impl<QT, MF, QF_SEG>(x, stride, st, sc, br, bc, R, K, N, S, NB, w, w, w, w, s, s, s, s, y, y, y, y, N, N, N, nullptr, nullptr, 0.f)

// The instances the Go side launches (qmvxKernelNames in quant.go), with
// their split-K siblings' arguments (xsm is not used: x is always staged):
// <form><kind>_<codes>_f<MF>, the forms qmv (plain), qmvg, qmvn and qmvsw
// (no _f: two features), the kinds i (integers: u4, i8) and h (halves: f8).
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvi_u4_f1(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_U4, 1); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvi_u4_f2(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_U4, 2); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvi_u4_f4(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_U4, 4); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgi_u4_f1(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 1, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgi_u4_f2(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 2, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgi_u4_f4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 4, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvni_u4_f1(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 1, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvni_u4_f2(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 2, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvni_u4_f4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 4, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvswi_u4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_U4, 2, QF_SW>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvi_i8_f1(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_I8, 1); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvi_i8_f2(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_I8, 2); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvi_i8_f4(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_I8, 4); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgi_i8_f1(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 1, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgi_i8_f2(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 2, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgi_i8_f4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 4, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvni_i8_f1(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 1, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvni_i8_f2(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 2, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvni_i8_f4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 4, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvswi_i8(QMVF_PARAMS, int xsm) { qmvx_impl<QT_I8, 2, QF_SW>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvh_f8_f1(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_F8, 1); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvh_f8_f2(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_F8, 2); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvh_f8_f4(QMVS_PARAMS, int xsm) { QMVX_PLAIN(QT_F8, 4); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgh_f8_f1(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 1, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgh_f8_f2(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 2, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvgh_f8_f4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 4, QF_SEG>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvnh_f8_f1(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 1, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvnh_f8_f2(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 2, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvnh_f8_f4(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 4, QF_NRM>(QMVF_ARGS); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvswh_f8(QMVF_PARAMS, int xsm) { qmvx_impl<QT_F8, 2, QF_SW>(QMVF_ARGS); }

// The slerp forms (quant_fused.go's qfuseLaunch with a slerp): qmvsg<kind>_<codes>_f<MF> and qmvssw<kind>_<codes>.
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgi_u4_f1(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_U4, 1, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgi_u4_f2(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_U4, 2, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgi_u4_f4(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_U4, 4, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsswi_u4(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_U4, 2, QF_SW, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgi_i8_f1(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_I8, 1, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgi_i8_f2(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_I8, 2, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgi_i8_f4(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_I8, 4, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsswi_i8(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_I8, 2, QF_SW, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgh_f8_f1(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_F8, 1, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgh_f8_f2(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_F8, 2, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsgh_f8_f4(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_F8, 4, QF_SEG, true>(QMVF_ARGS, y, al, hout); }
extern "C" __global__ void __launch_bounds__(QMVX_MAXWARPS * 32) qmvsswh_f8(QMVF_PARAMS, int xsm, const float* y, const float* al, float* hout) { qmvx_impl<QT_F8, 2, QF_SW, true>(QMVF_ARGS, y, al, hout); }
