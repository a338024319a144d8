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
// and starting them first shortens the tail; with hx (attention.go's
// flashGrid) those of every KV head before any lighter one. Q, K, V and the
// probabilities are rounded to f16 (saturating at ±65504; a NaN stays NaN);
// scores, softmax and sums are f32.
//
// Fragment layouts are those of mma.m16n8k16 (row.col): lane = 4·g + t;
// A (16×16): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8,
// 2t+8..); B (16×8): b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); C (16×8):
// c0 c1 (g, 2t and 2t+1), c2 c3 (g+8, 2t and 2t+1).

// FA_PAD is the most keys of a flash tile (BN), which kv_half writes as
// zeros past the chunk's last key.
#define FA_PAD 64

// fa_sat rounds to f16, saturating (a NaN stays NaN).
__device__ __forceinline__ u16 fa_sat(float x) {
	return f32_to_f16(x > 65504.f ? 65504.f : (x < -65504.f ? -65504.f : x));
}

// fa_half2 packs two floats as f16, x in the low half.
__device__ __forceinline__ u32 fa_half2(float x, float y) { return (u32)fa_sat(x) | ((u32)fa_sat(y) << 16); }

// fa_prob2 packs two probabilities (in [0, 1], or NaN) as f16, x in the
// low half, in one instruction: no saturation needed.
__device__ __forceinline__ u32 fa_prob2(float x, float y) {
	u32 r;
	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
	return r;
}

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
// key are zeros up to FA_PAD past it, and not written beyond (a flash block
// reads at most a tile of at most FA_PAD keys past its last position), so
// that an early chunk of a long slot converts only the keys it reads.
template <int D>
__device__ void kv_half_body(const float* k, const float* v, const int* call, int* err, u16* kh, u16* vt, int rows,
                             int kvh, int d, int cap, int window, int ring, int nk) {
	extern __shared__ float vsh[];
	pdl_entry();
	int pos, used, jBase;
	if (!fa_keys(call, rows, err, cap, window, ring, &pos, &used, &jBase)) return;
	int h = blockIdx.y, i0 = blockIdx.x * 32, jEnd = pos + used;
	if (i0 >= jEnd - jBase + FA_PAD) return;
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

// FaBlock is a flash block's share of the chunk: its KV head, the call's
// first position and rows, the scratch's first key position, the group
// size, the positions a block takes, the block's first row of the chunk and the ends of its rows
// among the call's (rEnd) and the chunk's (rLim), its first and last
// positions, and the tiles of BN keys it reads from scratch key iStart (a
// multiple of 8, for 16-byte copies; the keys before its first position's
// window start are masked).
struct FaBlock {
	int hk, pos, used, jBase, G, PB, r0, rEnd, rLim, pFirst, pLast, iStart, tiles;
};

// fa_block sets up the block of BM query rows: with hx, blockIdx.x is the
// KV head and blockIdx.y the block counted from the chunk's end (the card
// starts blocks in the order of their linear index, so every head's
// heaviest blocks, the chunk's last rows, start first); without, the two
// swapped (each head's blocks in a run, heaviest first). It returns false when the block has
// nothing more to do: an error reported, or its rows past the call's
// written as zeros (gated).
__device__ __forceinline__ bool fa_block(FaBlock& b, int BM, int BN, const int* call, int* err, float* y, const float* g,
                                         const float* sg, int rows, int heads, int kvh, int d, int cap, int window,
                                         int ring, int hx) {
	if (!fa_keys(call, rows, err, cap, window, ring, &b.pos, &b.used, &b.jBase)) {
		int p = call[CALL_POS], u = call[CALL_ROWS];
		if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && p >= 0 && u >= 0 && u <= rows)
			report(err, ERR_ATTN_CAPACITY, p + (u == 0 ? rows : u) - 1, cap, 0);
		return false;
	}
	b.G = heads / kvh;
	b.PB = BM / b.G;
	b.hk = hx ? blockIdx.x : blockIdx.y;
	b.r0 = (hx ? gridDim.y - 1 - blockIdx.y : gridDim.x - 1 - blockIdx.x) * b.PB;
	b.rEnd = min(b.used, b.r0 + b.PB);
	b.rLim = min(rows, b.r0 + b.PB);
	if (b.r0 >= b.used) { // rows past the call's: zeros
		long long qw = (long long)heads * d;
		int hk = b.hk, G = b.G;
		for (int i = threadIdx.x; i < (b.rLim - b.r0) * G * d; i += blockDim.x) {
			int r = b.r0 + i / (G * d), h = hk * G + (i / d) % G, c = i % d;
			y[r * qw + (long long)h * d + c] = attn_gate(0.f, g, sg, r, h, heads, d, c);
		}
		return false;
	}
	b.pFirst = b.pos + b.r0;
	b.pLast = b.pos + b.rEnd - 1;
	int jLo = window > 0 ? max(0, b.pFirst - window + 1) : 0;
	b.iStart = (jLo - b.jBase) & ~7;
	b.tiles = (b.pLast - b.jBase - b.iStart) / BN + 1;
	return true;
}

// fa_fill_q writes the block's queries into sQ ([BM][D + 8] f16): row m is
// position r0 + m/G, head hk·G + m%G; rows past the chunk and dimensions
// past d are zeros.
template <int D>
__device__ __forceinline__ void fa_fill_q(u16* sQ, int BM, const FaBlock& b, const float* q, int heads, int d) {
	const int LQ = D + 8;
	long long qw = (long long)heads * d;
	int hk = b.hk;
	for (int i = threadIdx.x; i < BM * (D / 2); i += blockDim.x) {
		int m = i / (D / 2), c = 2 * (i % (D / 2));
		int r = b.r0 + m / b.G;
		float x0 = 0.f, x1 = 0.f;
		if (m < b.PB * b.G && r < b.rEnd) {
			const float* qr = q + r * qw + (long long)(hk * b.G + m % b.G) * d;
			if (c < d) x0 = qr[c];
			if (c + 1 < d) x1 = qr[c + 1];
		}
		*(u32*)(sQ + m * LQ + c) = fa_half2(x0, x1);
	}
}

// FaLoader copies a block's key and Vᵀ tiles from kv_half's scratch into
// shared memory with cp.async, one commit group a tile: K tiles [BN][D + 8]
// and Vᵀ tiles [D][BN + 8] (two buffers of each). Each of the NT threads
// copies fixed 16-byte columns: keys kKey, kKey + KSTEP, ... at column kCol
// of the K tile; dimensions vDim, vDim + VSTEP, ... at keys vKey.. of the Vᵀ
// tile (the loops unroll, the addresses are set up once).
template <int D, int BN, int NT>
struct FaLoader {
	static constexpr int LQ = D + 8, LV = BN + 8, KC = D / 8, VC = BN / 8;
	static constexpr int KSTEP = NT / KC, KPER = BN / KSTEP, VSTEP = NT / VC, VPER = D / VSTEP;
	static_assert(NT % KC == 0 && BN % KSTEP == 0 && NT % VC == 0 && D % VSTEP == 0, "tile copies do not divide evenly");
	const u16 *kSrc, *vSrc;
	u16 *kDst, *vDst;
	int nk, iStart;

	__device__ __forceinline__ FaLoader(const u16* kh, const u16* vt, u16* sK, u16* sV, int hk, int nk_, int iStart_) {
		int tid = threadIdx.x;
		int kKey = tid / KC, kCol = 8 * (tid % KC), vDim = tid / VC, vKey = 8 * (tid % VC);
		nk = nk_, iStart = iStart_;
		kSrc = kh + (long long)hk * nk * D + (long long)kKey * D + kCol;
		vSrc = vt + (long long)hk * D * nk + (long long)vDim * nk + vKey;
		kDst = sK + kKey * LQ + kCol;
		vDst = sV + vDim * LV + vKey;
	}

	// load starts the copies of tile t into buffer buf and commits them.
	__device__ __forceinline__ void load(int t, int buf) const {
		int i0 = iStart + t * BN;
		u16* kd = kDst + buf * BN * LQ;
		const u16* ks = kSrc + (long long)i0 * D;
#pragma unroll
		for (int k = 0; k < KPER; k++) cp_async16(kd + k * KSTEP * LQ, ks + (long long)k * KSTEP * D);
		u16* vd = vDst + buf * D * LV;
		const u16* vs = vSrc + i0;
#pragma unroll
		for (int k = 0; k < VPER; k++) cp_async16(vd + k * VSTEP * LV, vs + (long long)k * VSTEP * nk);
		cp_commit();
	}
};

// fa_put writes elements c and c+1 of row m's output, x0 and x1 already
// divided by the row's sum, gated; nothing for a padding row or a row past
// the chunk, zeros for a row past the call's.
__device__ __forceinline__ void fa_put(float* y, const float* g, const float* sg, const FaBlock& b, int m, int c,
                                       float x0, float x1, int heads, int d) {
	int r = b.r0 + m / b.G;
	if (m >= b.PB * b.G || r >= b.rLim) return;
	bool live = r < b.rEnd;
	int h = b.hk * b.G + m % b.G;
	float* yr = y + r * ((long long)heads * d) + (long long)h * d;
	if (c < d) yr[c] = attn_gate(live ? x0 : 0.f, g, sg, r, h, heads, d, c);
	if (c + 1 < d) yr[c + 1] = attn_gate(live ? x1 : 0.f, g, sg, r, h, heads, d, c + 1);
}

// fa_frag_a loads the A fragments of MT m-tiles (16 rows × 16 of a [m][k]
// tile of row stride ld: p is this lane's address of the first, rows
// lane%16, columns 8·(lane/16)).
template <int MT>
__device__ __forceinline__ void fa_frag_a(const u16* p, int ld, u32 (&a)[MT][4]) {
#pragma unroll
	for (int i = 0; i < MT; i++) fa_ldsm4(p + 16 * i * ld, a[i][0], a[i][1], a[i][2], a[i][3]);
}

// fa_frag_b loads the B fragments of NT n-tiles (NT even; 8 × 16 each of a
// [n][k] tile of row stride ld: p is this lane's address of the first pair,
// rows lane%8 + 8·(lane/16), columns 8·((lane/8)%2)).
template <int NT>
__device__ __forceinline__ void fa_frag_b(const u16* p, int ld, u32 (&b)[NT][2]) {
#pragma unroll
	for (int n = 0; n < NT; n += 2) fa_ldsm4(p + 8 * n * ld, b[n][0], b[n][1], b[n + 1][0], b[n + 1][1]);
}

// fa_softmax folds a tile's scores s (this thread's two rows A and B:
// g and g+8 of its warp's 16, keys jt + 8n + (0, 1) of C fragment n) into
// the rows' running maxima (mx, base 2) and sums (l), leaving s as the
// probabilities and c the factors by which the output so far must be
// scaled. A masked score is -1e30, whose exponential is taken as 0. A
// tile every row sees whole (at or before the block's first position,
// inside every row's window) needs no mask: most tiles of a long prompt.
// Row X sees keys loX ≤ j ≤ pX (none for a padding row, pX = -1).
template <int BN>
__device__ __forceinline__ void fa_softmax(float (&s)[BN / 8][4], bool whole, int jt, int loA, int pA, int loB, int pB,
                                           float sl2, float& mxA, float& mxB, float& lA, float& lB, float& cA, float& cB) {
	float tA = -1e30f, tB = -1e30f;
	if (whole) {
#pragma unroll
		for (int n = 0; n < BN / 8; n++) {
			s[n][0] *= sl2, s[n][1] *= sl2, s[n][2] *= sl2, s[n][3] *= sl2;
			tA = fmaxf(tA, fmaxf(s[n][0], s[n][1]));
			tB = fmaxf(tB, fmaxf(s[n][2], s[n][3]));
		}
	} else {
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
	cA = exp2f(mxA - nA), cB = exp2f(mxB - nB);
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
}

// fa_rescale applies the softmax's correction to the output's N n-tiles,
// skipped by the whole warp while no row's maximum moved (most tiles, once
// the first have been seen).
template <int N>
__device__ __forceinline__ void fa_rescale(float (&o)[N][4], float cA, float cB) {
	if (__any_sync(0xffffffffu, cA != 1.f || cB != 1.f)) {
#pragma unroll
		for (int n = 0; n < N; n++) o[n][0] *= cA, o[n][1] *= cA, o[n][2] *= cB, o[n][3] *= cB;
	}
}

// fa_finish divides the output's N n-tiles (columns c0 + 8n, +1 of rows mA
// and mB) by the rows' sums, spread over the four lanes of a row, and
// writes them gated.
template <int N>
__device__ __forceinline__ void fa_finish(const float (&o)[N][4], float lA, float lB, float* y, const float* g,
                                          const float* sg, const FaBlock& b, int mA, int mB, int c0, int heads, int d) {
	lA += __shfl_xor_sync(0xffffffffu, lA, 1);
	lA += __shfl_xor_sync(0xffffffffu, lA, 2);
	lB += __shfl_xor_sync(0xffffffffu, lB, 1);
	lB += __shfl_xor_sync(0xffffffffu, lB, 2);
	float iA = lA > 0.f ? 1.f / lA : 0.f, iB = lB > 0.f ? 1.f / lB : 0.f;
#pragma unroll
	for (int n = 0; n < N; n++) {
		int c = c0 + 8 * n;
		fa_put(y, g, sg, b, mA, c, o[n][0] * iA, o[n][1] * iA, heads, d);
		fa_put(y, g, sg, b, mB, c, o[n][2] * iB, o[n][3] * iB, heads, d);
	}
}

// flash_body: grid (kv heads, ⌈rows / ⌊16·W/G⌋⌉) with hx, else the two
// swapped (fa_block), W warps, dynamic shared
// memory flashShared (Go) bytes. D is the padded head dimension (a multiple
// of 16, d ≤ D), BN the keys of a tile (a multiple of 16); kh and vt are
// kv_half's scratch of nk keys (a multiple of 64, with at least BN indices
// to spare past the last key). Each warp takes 16 query rows against every
// key of a tile and every dimension. With PIPE, the fragments of the next
// 16 dimensions of Q Kᵀ, and the next pair of n-tiles of P V, are loaded
// before the products of the current ones (more registers, ldmatrix's
// latency behind the mma).
template <int D, int BN, int W, bool PIPE = false>
__device__ void flash_body(const float* q, const u16* kh, const u16* vt, const int* call, int* err, float* y,
                           const float* g, const float* sg, int rows, int heads, int kvh, int d, int cap, int window,
                           int ring, float scale, int nk, int hx) {
	extern __shared__ u16 fsh[];
	static_assert(BN % 16 == 0 && BN <= FA_PAD, "flash_body: shape");
	const int BM = 16 * W;
	const int LQ = D + 8, LV = BN + 8; // row strides in halves (16 bytes of padding against bank conflicts)
	u16* sQ = fsh;                     // [BM][LQ]
	u16* sK = sQ + BM * LQ;            // two [BN][LQ]
	u16* sV = sK + 2 * BN * LQ;        // two [D][LV], dimension-major
	pdl_entry();
	FaBlock b;
	if (!fa_block(b, BM, BN, call, err, y, g, sg, rows, heads, kvh, d, cap, window, ring, hx)) return;
	int G = b.G, PB = b.PB, pos = b.pos;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
	fa_fill_q<D>(sQ, BM, b, q, heads, d);
	FaLoader<D, BN, 32 * W> ld(kh, vt, sK, sV, b.hk, nk, b.iStart);
	ld.load(0, 0);

	const float L2E = 1.4426950408889634f;
	float sl2 = scale * L2E;
	// This thread's two rows (g and g+8 of its warp's 16) and their positions.
	int mA = warp * 16 + gq, mB = mA + 8;
	int pA = (mA < PB * G && b.r0 + mA / G < b.rEnd) ? pos + b.r0 + mA / G : -1;
	int pB = (mB < PB * G && b.r0 + mB / G < b.rEnd) ? pos + b.r0 + mB / G : -1;
	// The keys each row sees: loX ≤ j ≤ pX (none for a padding row).
	int loA = window > 0 ? pA - window + 1 : 0, loB = window > 0 ? pB - window + 1 : 0;
	float mxA = -1e30f, mxB = -1e30f, lA = 0.f, lB = 0.f;
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

	for (int t = 0; t < b.tiles; t++) {
		if (t + 1 < b.tiles) {
			ld.load(t + 1, (t + 1) & 1);
			cp_wait<1>();
		} else {
			cp_wait<0>();
		}
		__syncthreads(); // this tile (and Q) in shared memory for every warp
		const u16* sk = sK + (t & 1) * BN * LQ;
		const u16* sv = sV + (t & 1) * D * LV;
		int j0 = b.jBase + b.iStart + t * BN;
		// S = Q Kᵀ for the warp's 16 rows and the tile's BN keys.
		float s[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
		// ldmatrix rows: A (16 rows × 16) takes rows lane%16, columns
		// 8·(lane/16); a B pair of n-tiles (16 × 16 of a [n][k] tile) takes
		// rows lane%8 + 8·(lane/16), columns 8·((lane/8)%2).
		const u16* qa = sQ + (warp * 16 + (lane & 15)) * LQ + 8 * (lane >> 4);
		int bRow = (lane & 7) + 8 * (lane >> 4), bCol = 8 * ((lane >> 3) & 1);
		if constexpr (PIPE) {
			u32 fa[2][1][4], fb[2][BN / 8][2];
			fa_frag_a<1>(qa, LQ, fa[0]);
			fa_frag_b<BN / 8>(sk + bRow * LQ + bCol, LQ, fb[0]);
#pragma unroll
			for (int kk = 0; kk < D / 16; kk++) {
				const int c = kk & 1;
				if (kk + 1 < D / 16) {
					fa_frag_a<1>(qa + 16 * (kk + 1), LQ, fa[c ^ 1]);
					fa_frag_b<BN / 8>(sk + bRow * LQ + bCol + 16 * (kk + 1), LQ, fb[c ^ 1]);
				}
#pragma unroll
				for (int n = 0; n < BN / 8; n++)
					fa_mma(s[n], fa[c][0][0], fa[c][0][1], fa[c][0][2], fa[c][0][3], fb[c][n][0], fb[c][n][1]);
			}
		} else {
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
		}
		// Mask, then the online softmax in base 2; the output's correction.
		bool whole = j0 + BN - 1 <= b.pFirst && (window <= 0 || j0 > b.pLast - window);
		float cA, cB;
		fa_softmax<BN>(s, whole, j0 + 2 * tq, loA, pA, loB, pB, sl2, mxA, mxB, lA, lB, cA, cB);
		fa_rescale<D / 8>(o, cA, cB);
		// O += P V: P's C fragments are the A fragments of this product.
		if constexpr (PIPE) {
			// Steps over (16 keys, a pair of n-tiles), each loading the next's.
			constexpr int NP = D / 16, STEPS = (BN / 16) * NP;
			const u16* vp = sv + bRow * LV + bCol;
			u32 pf[BN / 16][4];
#pragma unroll
			for (int kk = 0; kk < BN / 16; kk++) {
				pf[kk][0] = fa_prob2(s[2 * kk][0], s[2 * kk][1]), pf[kk][1] = fa_prob2(s[2 * kk][2], s[2 * kk][3]);
				pf[kk][2] = fa_prob2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pf[kk][3] = fa_prob2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
			}
			u32 fb[2][4];
			fa_ldsm4(vp, fb[0][0], fb[0][1], fb[0][2], fb[0][3]);
#pragma unroll
			for (int st = 0; st < STEPS; st++) {
				const int c = st & 1, kk = st / NP, n = 2 * (st % NP);
				if (st + 1 < STEPS) {
					const int kn = (st + 1) / NP, nn = 2 * ((st + 1) % NP);
					fa_ldsm4(vp + 8 * nn * LV + 16 * kn, fb[c ^ 1][0], fb[c ^ 1][1], fb[c ^ 1][2], fb[c ^ 1][3]);
				}
				fa_mma(o[n], pf[kk][0], pf[kk][1], pf[kk][2], pf[kk][3], fb[c][0], fb[c][1]);
				fa_mma(o[n + 1], pf[kk][0], pf[kk][1], pf[kk][2], pf[kk][3], fb[c][2], fb[c][3]);
			}
		} else {
#pragma unroll
			for (int kk = 0; kk < BN / 16; kk++) {
				u32 a0 = fa_prob2(s[2 * kk][0], s[2 * kk][1]), a1 = fa_prob2(s[2 * kk][2], s[2 * kk][3]);
				u32 a2 = fa_prob2(s[2 * kk + 1][0], s[2 * kk + 1][1]), a3 = fa_prob2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
				for (int n = 0; n < D / 8; n += 2) {
					u32 b0, b1, b2, b3;
					fa_ldsm4(sv + (8 * n + bRow) * LV + 16 * kk + bCol, b0, b1, b2, b3);
					fa_mma(o[n], a0, a1, a2, a3, b0, b1);
					fa_mma(o[n + 1], a0, a1, a2, a3, b2, b3);
				}
			}
		}
		__syncthreads(); // every warp is done with this buffer before it is loaded again
	}
	fa_finish<D / 8>(o, lA, lB, y, g, sg, b, mA, mB, 2 * tq, heads, d);
}

#define KV_HALF_PARAMS                                                                                            \
	const float *k, const float *v, const int *call, int *err, u16 *kh, u16 *vt, int rows, int kvh, int d, int cap, \
	    int window, int ring, int nk
#define KV_HALF_ARGS k, v, call, err, kh, vt, rows, kvh, d, cap, window, ring, nk
#define FLASH_PARAMS                                                                                                \
	const float *q, const u16 *kh, const u16 *vt, const int *call, int *err, float *y, const float *g, const float *sg, \
	    int rows, int heads, int kvh, int d, int cap, int window, int ring, float scale, int nk, int hx
#define FLASH_ARGS q, kh, vt, call, err, y, g, sg, rows, heads, kvh, d, cap, window, ring, scale, nk, hx

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
// The wide variant with fragments loaded a step ahead (the default at 256
// dimensions, attention.go's flashOrder).
extern "C" __global__ void __launch_bounds__(256) flash_widep_d256(FLASH_PARAMS) { flash_body<256, 64, 8, true>(FLASH_ARGS); }

