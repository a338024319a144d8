// Prompt products with quantized weights (quant.go: quant_matmul and
// quant_expert_matmul over more than 8 rows, in PrecisionAuto and
// PrecisionHalf): the codes dequantized into a 16-bit type HT (WT_BF16 or
// WT_F16, quant.go's quantHalf by format) for the tensor cores.
//
// dequant16_<codes>_<HT>: the whole weight [N, K] dequantized into HT in
// scratch for cuBLAS (matmul.go's products): v(n, k) · s[n/br, k/bc], the
// product in f32 then rounded once to HT (to nearest even). With vec (K and
// the blocks' columns whole 16-byte vectors of codes, the rows of codes
// 16-byte aligned) a thread decodes one vector (16 FP8 or i8 codes, 32
// 4-bit codes: one scale; q_dec, no int-to-float conversion, which runs
// at an eighth of the FMA rate) and writes its 16-bit weights as 16-byte stores;
// else a thread an element. Memory bound: codes read once, the 16-bit
// weight written once.
//
// qmoe_mma_<codes>_<HT>: moe_expert_mma (kernels/moe.cu) reading the
// experts' codes through qmoe_w16, which dequantizes each 8 inputs of a row
// into HT as it loads them; activations are rounded to HT as for stored
// 16-bit experts.

// q16_pack2 is moe_pack2 (a and b rounded to HT to nearest even, a in the
// low half) in one instruction on sm_80 and later (cvt.rn.bf16x2.f32 /
// .f16x2.f32 put their first operand in the high half).
template <int HT>
__device__ __forceinline__ u32 q16_pack2(float a, float b) {
#if __CUDA_ARCH__ >= 800
	u32 r;
	if (HT == WT_BF16)
		asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
	else
		asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
	return r;
#else
	return moe_pack2<HT>(a, b);
#endif
}

// q16_pack8 gives c[0..7] times sv rounded to HT, packed in element order
// (the first in the low half).
template <int HT>
__device__ __forceinline__ uint4 q16_pack8(const float* c, float sv) {
	return make_uint4(q16_pack2<HT>(c[0] * sv, c[1] * sv), q16_pack2<HT>(c[2] * sv, c[3] * sv), q16_pack2<HT>(c[4] * sv, c[5] * sv),
	                  q16_pack2<HT>(c[6] * sv, c[7] * sv));
}

template <int QT, int HT>
__device__ __forceinline__ void dequant16(const unsigned char* __restrict__ w, long long stride, const void* s, int st, int sc, int br, int bc,
                                          u16* __restrict__ out, int N, int K, int vec) {
	const int E = QT == QT_U4 ? 32 : 16; // codes per 16-byte vector
	pdl_entry();
	if (vec) {
		long long V = K / E;
		GRID_STRIDE(i, (long long)N * V) {
			int n = (int)(i / V), v = (int)(i - (long long)n * V);
			uint4 q = ld_stream((const uint4*)(w + (long long)n * stride) + v);
			float sv = load_w(s, st, (long long)(n / br) * sc + v * E / bc);
			float c[E];
			q_dec<QT>(q.x, c);
			q_dec<QT>(q.y, c + E / 4);
			q_dec<QT>(q.z, c + E / 2);
			q_dec<QT>(q.w, c + 3 * E / 4);
			uint4* o = (uint4*)(out + (long long)n * K) + (long long)v * (E / 8);
#pragma unroll
			for (int j = 0; j < E / 8; j++) o[j] = q16_pack8<HT>(c + 8 * j, sv);
		}
		return;
	}
	GRID_STRIDE(i, (long long)N * K) {
		int n = (int)(i / K), k = (int)(i - (long long)n * K);
		float v = q_deq<QT>(w + (long long)n * stride, k) * load_w(s, st, (long long)(n / br) * sc + k / bc);
		out[i] = HT == WT_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
	}
}

#define DEQ16_PARAMS                                                                                                                \
	const unsigned char *__restrict__ w, long long stride, const void *s, int st, int sc, int br, int bc, u16 *__restrict__ out, int N, \
		int K, int vec
#define DEQ16_ARGS w, stride, s, st, sc, br, bc, out, N, K, vec

// The instances the Go side launches (quantPromptKernelNames in quant.go).
extern "C" __global__ void dequant16_f8_bf16(DEQ16_PARAMS) { dequant16<QT_F8, WT_BF16>(DEQ16_ARGS); }
extern "C" __global__ void dequant16_f8_f16(DEQ16_PARAMS) { dequant16<QT_F8, WT_F16>(DEQ16_ARGS); }
extern "C" __global__ void dequant16_i8_bf16(DEQ16_PARAMS) { dequant16<QT_I8, WT_BF16>(DEQ16_ARGS); }
extern "C" __global__ void dequant16_i8_f16(DEQ16_PARAMS) { dequant16<QT_I8, WT_F16>(DEQ16_ARGS); }
extern "C" __global__ void dequant16_u4_bf16(DEQ16_PARAMS) { dequant16<QT_U4, WT_BF16>(DEQ16_ARGS); }
extern "C" __global__ void dequant16_u4_f16(DEQ16_PARAMS) { dequant16<QT_U4, WT_F16>(DEQ16_ARGS); }

// qmoe_w16 reads quantized experts (codes w [E, nOut, stride], one scale
// table of sr rows by sc per expert) for moe_expert_mma: row sets the row
// of expert e's feature f (none past nOut), load gives its inputs k .. k+7
// (k a multiple of 8) dequantized in f32 and rounded to HT, zeros past nIn
// or without a row. With vec (nIn and the blocks' columns multiples of 8,
// the codes 8-byte aligned) the 8 codes are one load (8 bytes; 4 for 4-bit
// codes) under one scale; else element by element.
template <int QT, int HT>
struct qmoe_w16 {
	const unsigned char* w;
	long long stride;
	const void* s;
	int st, sr, sc, br, bc, nOut, nIn, vec;
	const unsigned char* p; // the row's codes (null: no row)
	long long srow;         // its first scale in s
	__device__ __forceinline__ void row(int e, int f) {
		p = f < nOut ? w + ((long long)e * nOut + f) * stride : nullptr;
		srow = ((long long)e * sr + f / br) * sc;
	}
	__device__ __forceinline__ uint4 load(int k) const {
		if (!p || k >= nIn) return make_uint4(0u, 0u, 0u, 0u);
		float c[8];
		if (vec) {
			if (QT == QT_U4) {
				q_dec<QT>(*(const u32*)(p + k / 2), c);
			} else {
				uint2 u = *(const uint2*)(p + k);
				q_dec<QT>(u.x, c);
				q_dec<QT>(u.y, c + 4);
			}
			return q16_pack8<HT>(c, load_w(s, st, srow + k / bc));
		}
#pragma unroll
		for (int j = 0; j < 8; j++) c[j] = k + j < nIn ? q_deq<QT>(p, k + j) * load_w(s, st, srow + (k + j) / bc) : 0.f;
		return q16_pack8<HT>(c, 1.f);
	}
};

#define QMOE_MMA_PARAMS                                                                                                                 \
	const float *x, const unsigned char *w, long long stride, const void *s, int st, int sr, int sc, int br, int bc, const int *offs, \
		const int *toffs, const int *tiles, const int *list, float *y, int K, int E, int nOut, int nIn, int perUnit, int vx, int vw
#define QMOE_MMA(QT, HT)                                                                                                                  \
	moe_expert_mma<HT>(x, qmoe_w16<QT, HT>{w, stride, s, st, sr, sc, br, bc, nOut, nIn, vw, nullptr, 0}, offs, toffs, tiles, list, y, K, \
	                   E, nOut, nIn, perUnit, vx)

extern "C" __global__ void __launch_bounds__(256, 2) qmoe_mma_f8_bf16(QMOE_MMA_PARAMS) { QMOE_MMA(QT_F8, WT_BF16); }
extern "C" __global__ void __launch_bounds__(256, 2) qmoe_mma_f8_f16(QMOE_MMA_PARAMS) { QMOE_MMA(QT_F8, WT_F16); }
extern "C" __global__ void __launch_bounds__(256, 2) qmoe_mma_i8_bf16(QMOE_MMA_PARAMS) { QMOE_MMA(QT_I8, WT_BF16); }
extern "C" __global__ void __launch_bounds__(256, 2) qmoe_mma_i8_f16(QMOE_MMA_PARAMS) { QMOE_MMA(QT_I8, WT_F16); }
extern "C" __global__ void __launch_bounds__(256, 2) qmoe_mma_u4_bf16(QMOE_MMA_PARAMS) { QMOE_MMA(QT_U4, WT_BF16); }
extern "C" __global__ void __launch_bounds__(256, 2) qmoe_mma_u4_f16(QMOE_MMA_PARAMS) { QMOE_MMA(QT_U4, WT_F16); }
