// Flash attention for prompt chunks on tensor cores. kv_half first writes
// the keys and values the chunk reads as f16 into scratch (keys row by row,
// values transposed, dimension by dimension, both zero-padded to the
// kernel's D); then each flash block takes its query rows, streams the key
// and value tiles into shared memory with cp.async (two buffers: the next
// tile loads while this one is used), scores them with mma.sync (f16
// inputs, f32 accumulation) and folds them into its output with an online
// softmax, so no row's scores are ever stored whole.
//
// A block's BM = 16·W query rows (W warps, 16 rows each) are (position,
// head) pairs of one KV head's group: ⌊BM / G⌋ positions times the G query
// heads that share the KV head, so each tile is read once for the whole
// group. Blocks run the chunk's last rows first: they have the most keys,
// and starting them first shortens the tail. Q, K, V and the
// probabilities are rounded to f16 (saturating at ±65504; a NaN stays NaN);
// scores, softmax and sums are f32.
//
// Fragment layouts are those of mma.m16n8k16 (row.col): lane = 4·g + t;
// A (16×16): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8,
// 2t+8..); B (16×8): b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); C (16×8):
// c0 c1 (g, 2t and 2t+1), c2 c3 (g+8, 2t and 2t+1).

// fa_sat rounds to f16, saturating (a NaN stays NaN).
__device__ __forceinline__ u16 fa_sat(float x) {
	return f32_to_f16(x > 65504.f ? 65504.f : (x < -65504.f ? -65504.f : x));
}

// fa_half2 packs two floats as f16, x in the low half.
__device__ __forceinline__ u32 fa_half2(float x, float y) { return (u32)fa_sat(x) | ((u32)fa_sat(y) << 16); }

// fa_ldsm4 loads four 8×8 f16 matrices from shared memory (ldmatrix.x4):
// lanes 8j..8j+7 give the row addresses of matrix j, and every lane gets
// elements (lane/4, 2·(lane%4)..+1) of each, one register a matrix.
__device__ __forceinline__ void fa_ldsm4(const u16* p, u32& r0, u32& r1, u32& r2, u32& r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
	             : "r"(smem_addr(p)));
}

__device__ __forceinline__ void fa_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	asm volatile(
	    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// fa_keys gives the first key position of a chunk (its first row's window
// start) and checks the slot's capacity like attn_part (false: nothing to
// do, an error reported by the flash kernel).
__device__ __forceinline__ bool fa_keys(const int* call, int rows, int* err, int cap, int window, int ring, int* pos,
                                        int* used, int* jBase) {
	if (!read_call(call, rows, err, pos, used)) return false;
	if ((!ring || window == 0) && *pos + *used > cap) return false;
	*jBase = window > 0 ? max(0, *pos - window + 1) : 0;
	return true;
}

// kv_half_body: grid (nk / 32, kv heads), 256 threads, dynamic shared
// memory 32·(D+1) floats. Key index i of the scratch is position jBase + i:
// kh [kv heads][nk][D], vt [kv heads][D][nk]; indices past the chunk's last
// key are zeros.
template <int D>
__device__ void kv_half_body(const float* k, const float* v, const int* call, int* err, u16* kh, u16* vt, int rows,
                             int kvh, int d, int cap, int window, int ring, int nk) {
	extern __shared__ float vsh[];
	pdl_entry();
	int pos, used, jBase;
	if (!fa_keys(call, rows, err, cap, window, ring, &pos, &used, &jBase)) return;
	int h = blockIdx.y, i0 = blockIdx.x * 32, jEnd = pos + used;
	long long kw = (long long)kvh * d;
	u16* khh = kh + (long long)h * nk * D;
	for (int i = threadIdx.x; i < 32 * (D / 2); i += blockDim.x) {
		int key = i / (D / 2), c = 2 * (i % (D / 2));
		int j = jBase + i0 + key;
		float k0 = 0.f, k1 = 0.f, v0 = 0.f, v1 = 0.f;
		if (j < jEnd && c < d) {
			long long row = ring ? j % cap : j;
			const float* kr = k + row * kw + (long long)h * d + c;
			const float* vr = v + row * kw + (long long)h * d + c;
			k0 = kr[0], v0 = vr[0];
			if (c + 1 < d) k1 = kr[1], v1 = vr[1];
		}
		*(u32*)(khh + (long long)(i0 + key) * D + c) = fa_half2(k0, k1);
		vsh[key * (D + 1) + c] = v0;
		vsh[key * (D + 1) + c + 1] = v1;
	}
	__syncthreads();
	u16* vth = vt + (long long)h * D * nk + i0;
	for (int i = threadIdx.x; i < D * 32; i += blockDim.x) {
		int c = i / 32, key = i % 32;
		vth[(long long)c * nk + key] = fa_sat(vsh[key * (D + 1) + c]);
	}
}

// flash_body: grid (⌈rows / ⌊16·W/G⌋⌉, kv heads), W warps, dynamic shared
// memory flashShared (Go) bytes. D is the padded head dimension (a multiple
// of 16, d ≤ D), BN the keys of a tile (a multiple of 16); kh and vt are
// kv_half's scratch of nk keys (a multiple of 64, with at least BN indices
// to spare past the last key).
template <int D, int BN, int W>
__device__ void flash_body(const float* q, const u16* kh, const u16* vt, const int* call, int* err, float* y,
                           const float* g, const float* sg, int rows, int heads, int kvh, int d, int cap, int window,
                           int ring, float scale, int nk) {
	extern __shared__ u16 fsh[];
	const int BM = 16 * W;
	const int LQ = D + 8, LV = BN + 8; // row strides in halves (16 bytes of padding against bank conflicts)
	u16* sQ = fsh;                     // [BM][LQ]
	u16* sK = sQ + BM * LQ;            // two [BN][LQ]
	u16* sV = sK + 2 * BN * LQ;        // two [D][LV], dimension-major
	pdl_entry();
	int pos, used, jBase;
	if (!fa_keys(call, rows, err, cap, window, ring, &pos, &used, &jBase)) {
		int p = call[CALL_POS], u = call[CALL_ROWS];
		if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && p >= 0 && u >= 0 && u <= rows)
			report(err, ERR_ATTN_CAPACITY, p + (u == 0 ? rows : u) - 1, cap, 0);
		return;
	}
	int G = heads / kvh, PB = BM / G, hk = blockIdx.y;
	int r0 = (gridDim.x - 1 - blockIdx.x) * PB; // the block's first row of the chunk
	int rEnd = min(used, r0 + PB), rLim = min(rows, r0 + PB);
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
	long long qw = (long long)heads * d;
	if (r0 >= used) { // rows past the call's: zeros
		for (int i = tid; i < (rLim - r0) * G * d; i += blockDim.x) {
			int r = r0 + i / (G * d), h = hk * G + (i / d) % G, c = i % d;
			y[r * qw + (long long)h * d + c] = attn_gate(0.f, g, sg, r, h, heads, d, c);
		}
		return;
	}
	// Q: row m is position r0 + m/G, head hk·G + m%G; rows past the chunk are zeros.
	for (int i = tid; i < BM * (D / 2); i += blockDim.x) {
		int m = i / (D / 2), c = 2 * (i % (D / 2));
		int r = r0 + m / G;
		float x0 = 0.f, x1 = 0.f;
		if (m < PB * G && r < rEnd) {
			const float* qr = q + r * qw + (long long)(hk * G + m % G) * d;
			if (c < d) x0 = qr[c];
			if (c + 1 < d) x1 = qr[c + 1];
		}
		*(u32*)(sQ + m * LQ + c) = fa_half2(x0, x1);
	}
	// The block's keys: from its first position's window start (down to a
	// multiple of 8 of the scratch, for 16-byte copies; the extra keys are
	// masked) to its last position.
	int pFirst = pos + r0, pLast = pos + rEnd - 1;
	int jLo = window > 0 ? max(0, pFirst - window + 1) : 0;
	int iStart = (jLo - jBase) & ~7, tiles = (pLast - jBase - iStart) / BN + 1;
	const u16* khh = kh + (long long)hk * nk * D;
	const u16* vth = vt + (long long)hk * D * nk;
	// Each thread copies fixed 16-byte columns of the tiles: keys kKey,
	// kKey + KSTEP, ... at column kCol of the K tile; dimensions vDim,
	// vDim + VSTEP, ... at keys vKey.. of the Vᵀ tile (the loops unroll, the
	// addresses are set up once).
	constexpr int NT = 32 * W, KC = D / 8, VC = BN / 8;
	constexpr int KSTEP = NT / KC, KPER = BN / KSTEP, VSTEP = NT / VC, VPER = D / VSTEP;
	const int kKey = tid / KC, kCol = 8 * (tid % KC), vDim = tid / VC, vKey = 8 * (tid % VC);
	const u16* kSrc = khh + (long long)kKey * D + kCol;
	const u16* vSrc = vth + (long long)vDim * nk + vKey;
	auto load = [&](int t, int buf) {
		int i0 = iStart + t * BN;
		u16* kd = sK + buf * BN * LQ + kKey * LQ + kCol;
		const u16* ks = kSrc + (long long)i0 * D;
#pragma unroll
		for (int k = 0; k < KPER; k++) cp_async16(kd + k * KSTEP * LQ, ks + (long long)k * KSTEP * D);
		u16* vd = sV + buf * D * LV + vDim * LV + vKey;
		const u16* vs = vSrc + i0;
#pragma unroll
		for (int k = 0; k < VPER; k++) cp_async16(vd + k * VSTEP * LV, vs + (long long)k * VSTEP * nk);
		cp_commit();
	};
	load(0, 0);

	const float L2E = 1.4426950408889634f;
	float sl2 = scale * L2E;
	// This thread's two rows (g and g+8 of its warp's 16) and their positions.
	int mA = warp * 16 + gq, mB = mA + 8;
	int pA = (mA < PB * G && r0 + mA / G < rEnd) ? pos + r0 + mA / G : -1;
	int pB = (mB < PB * G && r0 + mB / G < rEnd) ? pos + r0 + mB / G : -1;
	// The keys each row sees: loX ≤ j ≤ pX (none for a padding row).
	int loA = window > 0 ? pA - window + 1 : 0, loB = window > 0 ? pB - window + 1 : 0;
	float mxA = -1e30f, mxB = -1e30f, lA = 0.f, lB = 0.f;
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

	for (int t = 0; t < tiles; t++) {
		if (t + 1 < tiles) {
			load(t + 1, (t + 1) & 1);
			cp_wait<1>();
		} else {
			cp_wait<0>();
		}
		__syncthreads(); // this tile (and Q) in shared memory for every warp
		const u16* sk = sK + (t & 1) * BN * LQ;
		const u16* sv = sV + (t & 1) * D * LV;
		int j0 = jBase + iStart + t * BN;
		// S = Q Kᵀ for the warp's 16 rows and the tile's BN keys.
		float s[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
		// ldmatrix rows: A (16 rows × 16) takes rows lane%16, columns
		// 8·(lane/16); a B pair of n-tiles (16 × 16 of a [n][k] tile) takes
		// rows lane%8 + 8·(lane/16), columns 8·((lane/8)%2).
		const u16* qa = sQ + (warp * 16 + (lane & 15)) * LQ + 8 * (lane >> 4);
		int bRow = (lane & 7) + 8 * (lane >> 4), bCol = 8 * ((lane >> 3) & 1);
#pragma unroll 4
		for (int kk = 0; kk < D / 16; kk++) {
			u32 a0, a1, a2, a3;
			fa_ldsm4(qa + 16 * kk, a0, a1, a2, a3);
#pragma unroll
			for (int n = 0; n < BN / 8; n += 2) {
				u32 b0, b1, b2, b3;
				fa_ldsm4(sk + (8 * n + bRow) * LQ + 16 * kk + bCol, b0, b1, b2, b3);
				fa_mma(s[n], a0, a1, a2, a3, b0, b1);
				fa_mma(s[n + 1], a0, a1, a2, a3, b2, b3);
			}
		}
		// Mask, then the online softmax in base 2. A masked score is -1e30,
		// whose exponential is taken as 0. A tile every row sees whole (at
		// or before the block's first position, inside every row's window)
		// needs no mask: most tiles of a long prompt.
		float tA = -1e30f, tB = -1e30f;
		bool whole = j0 + BN - 1 <= pFirst && (window <= 0 || j0 > pLast - window);
		if (whole) {
#pragma unroll
			for (int n = 0; n < BN / 8; n++) {
				s[n][0] *= sl2, s[n][1] *= sl2, s[n][2] *= sl2, s[n][3] *= sl2;
				tA = fmaxf(tA, fmaxf(s[n][0], s[n][1]));
				tB = fmaxf(tB, fmaxf(s[n][2], s[n][3]));
			}
		} else {
			int jt = j0 + 2 * tq;
#pragma unroll
			for (int n = 0; n < BN / 8; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int j = jt + 8 * n + (e & 1);
					bool ok = e < 2 ? j >= loA && j <= pA : j >= loB && j <= pB;
					float x = ok ? s[n][e] * sl2 : -1e30f;
					s[n][e] = x;
					if (e < 2) tA = fmaxf(tA, x);
					else tB = fmaxf(tB, x);
				}
		}
		tA = fmaxf(tA, __shfl_xor_sync(0xffffffffu, tA, 1));
		tA = fmaxf(tA, __shfl_xor_sync(0xffffffffu, tA, 2));
		tB = fmaxf(tB, __shfl_xor_sync(0xffffffffu, tB, 1));
		tB = fmaxf(tB, __shfl_xor_sync(0xffffffffu, tB, 2));
		float nA = fmaxf(mxA, tA), nB = fmaxf(mxB, tB);
		float cA = exp2f(mxA - nA), cB = exp2f(mxB - nB);
		mxA = nA, mxB = nB;
		float sumA = 0.f, sumB = 0.f;
#pragma unroll
		for (int n = 0; n < BN / 8; n++) {
			s[n][0] = s[n][0] <= -1e29f ? 0.f : exp2f(s[n][0] - nA);
			s[n][1] = s[n][1] <= -1e29f ? 0.f : exp2f(s[n][1] - nA);
			s[n][2] = s[n][2] <= -1e29f ? 0.f : exp2f(s[n][2] - nB);
			s[n][3] = s[n][3] <= -1e29f ? 0.f : exp2f(s[n][3] - nB);
			sumA += s[n][0] + s[n][1];
			sumB += s[n][2] + s[n][3];
		}
		lA = lA * cA + sumA;
		lB = lB * cB + sumB;
		// The output's correction, skipped by the whole warp while no row's
		// maximum moved (most tiles, once the first have been seen).
		if (__any_sync(0xffffffffu, cA != 1.f || cB != 1.f)) {
#pragma unroll
			for (int n = 0; n < D / 8; n++) o[n][0] *= cA, o[n][1] *= cA, o[n][2] *= cB, o[n][3] *= cB;
		}
		// O += P V: P's C fragments are the A fragments of this product.
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
			u32 a0 = fa_half2(s[2 * kk][0], s[2 * kk][1]), a1 = fa_half2(s[2 * kk][2], s[2 * kk][3]);
			u32 a2 = fa_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]), a3 = fa_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
			for (int n = 0; n < D / 8; n += 2) {
				u32 b0, b1, b2, b3;
				fa_ldsm4(sv + (8 * n + bRow) * LV + 16 * kk + bCol, b0, b1, b2, b3);
				fa_mma(o[n], a0, a1, a2, a3, b0, b1);
				fa_mma(o[n + 1], a0, a1, a2, a3, b2, b3);
			}
		}
		__syncthreads(); // every warp is done with this buffer before it is loaded again
	}
	// The row sums are spread over the four lanes of a row.
	lA += __shfl_xor_sync(0xffffffffu, lA, 1);
	lA += __shfl_xor_sync(0xffffffffu, lA, 2);
	lB += __shfl_xor_sync(0xffffffffu, lB, 1);
	lB += __shfl_xor_sync(0xffffffffu, lB, 2);
#pragma unroll
	for (int half = 0; half < 2; half++) {
		int m = half ? mB : mA;
		int r = r0 + m / G;
		if (m >= PB * G || r >= rLim) continue;
		bool live = r < rEnd;
		float inv = live ? 1.f / (half ? lB : lA) : 0.f;
		int h = hk * G + m % G;
		float* yr = y + r * qw + (long long)h * d;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			int c = 8 * n + 2 * tq;
			float a = live ? o[n][2 * half] * inv : 0.f, b = live ? o[n][2 * half + 1] * inv : 0.f;
			if (c < d) yr[c] = attn_gate(a, g, sg, r, h, heads, d, c);
			if (c + 1 < d) yr[c + 1] = attn_gate(b, g, sg, r, h, heads, d, c + 1);
		}
	}
}

#define KV_HALF_PARAMS                                                                                            \
	const float *k, const float *v, const int *call, int *err, u16 *kh, u16 *vt, int rows, int kvh, int d, int cap, \
	    int window, int ring, int nk
#define KV_HALF_ARGS k, v, call, err, kh, vt, rows, kvh, d, cap, window, ring, nk
#define FLASH_PARAMS                                                                                                \
	const float *q, const u16 *kh, const u16 *vt, const int *call, int *err, float *y, const float *g, const float *sg, \
	    int rows, int heads, int kvh, int d, int cap, int window, int ring, float scale, int nk
#define FLASH_ARGS q, kh, vt, call, err, y, g, sg, rows, heads, kvh, d, cap, window, ring, scale, nk

extern "C" __global__ void __launch_bounds__(256) kv_half_d32(KV_HALF_PARAMS) { kv_half_body<32>(KV_HALF_ARGS); }
extern "C" __global__ void __launch_bounds__(256) kv_half_d64(KV_HALF_PARAMS) { kv_half_body<64>(KV_HALF_ARGS); }
extern "C" __global__ void __launch_bounds__(256) kv_half_d128(KV_HALF_PARAMS) { kv_half_body<128>(KV_HALF_ARGS); }
extern "C" __global__ void __launch_bounds__(256) kv_half_d256(KV_HALF_PARAMS) { kv_half_body<256>(KV_HALF_ARGS); }
extern "C" __global__ void __launch_bounds__(128) flash_d32(FLASH_PARAMS) { flash_body<32, 64, 4>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(128) flash_d64(FLASH_PARAMS) { flash_body<64, 64, 4>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(128) flash_d128(FLASH_PARAMS) { flash_body<128, 64, 4>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(128) flash_d256(FLASH_PARAMS) { flash_body<256, 32, 4>(FLASH_ARGS); }
// The wide variants: 8 warps (128 query rows) and, for 256 dimensions, 64
// keys a tile (one block an SM).
extern "C" __global__ void __launch_bounds__(256) flash_wide_d64(FLASH_PARAMS) { flash_body<64, 64, 8>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(256) flash_wide_d128(FLASH_PARAMS) { flash_body<128, 64, 8>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(256) flash_wide_d256(FLASH_PARAMS) { flash_body<256, 64, 8>(FLASH_ARGS); }
