// Shared by the flash kernels of prompt chunks (flash.cu's mma.sync
// bodies, flash_wg.cu's wgmma one): the block's share of the chunk, its
// queries, the tile loads, the online softmax on the m16n8 accumulator
// layout (which wgmma's m64nN accumulators repeat, a warp to 16 rows) and
// the gated epilogue.

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

// FaPadded is flash_body's shared-memory layout (element indices, f16):
// Q [BM][D + 8], K tiles [BN][D + 8], Vᵀ tiles [D][BN + 8], rows padded by
// 16 bytes against bank conflicts. A layout gives the index of element
// (row, column) of each tile, the column a multiple of 8 (a 16-byte
// chunk's first) or, for q, of 2; the elements of one K and one Vᵀ tile
// (KT, VT); and the rows' strides KS and VS, which hold between rows STEP
// apart (k(key + s, c) = k(key, c) + s·KS for s a multiple of STEP).
template <int D, int BN>
struct FaPadded {
	static constexpr int KT = BN * (D + 8), VT = D * (BN + 8), KS = D + 8, VS = BN + 8, STEP = 1;
	__device__ __forceinline__ static int q(int m, int c) { return m * (D + 8) + c; }
	__device__ __forceinline__ static int k(int key, int c) { return key * KS + c; }
	__device__ __forceinline__ static int v(int dim, int key) { return dim * VS + key; }
};

// fa_rows gives the positions of a thread's rows mA and mB of the block
// (-1 for a padding row or one past the call's) and the first key each
// sees: row X sees keys loX ≤ j ≤ pX.
__device__ __forceinline__ void fa_rows(const FaBlock& b, int mA, int mB, int window, int& pA, int& pB, int& loA, int& loB) {
	pA = (mA < b.PB * b.G && b.r0 + mA / b.G < b.rEnd) ? b.pos + b.r0 + mA / b.G : -1;
	pB = (mB < b.PB * b.G && b.r0 + mB / b.G < b.rEnd) ? b.pos + b.r0 + mB / b.G : -1;
	loA = window > 0 ? pA - window + 1 : 0, loB = window > 0 ? pB - window + 1 : 0;
}

// fa_fill_q writes the block's queries into sQ in layout L: row m is
// position r0 + m/G, head hk·G + m%G; rows past the chunk and dimensions
// past d are zeros.
template <int D, class L>
__device__ __forceinline__ void fa_fill_q(u16* sQ, int BM, const FaBlock& b, const float* q, int heads, int d) {
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
		*(u32*)(sQ + L::q(m, c)) = fa_half2(x0, x1);
	}
}

// FaLoader copies a block's key and Vᵀ tiles from kv_half's scratch into
// shared memory in layout L with cp.async, one commit group a tile: K tiles
// of BN keys × D and Vᵀ tiles of D × BN keys (two buffers of each, KT and
// VT elements apart). Each of the NT threads copies fixed 16-byte columns:
// keys kKey, kKey + KSTEP, ... at column kCol of the K tile; dimensions
// vDim, vDim + VSTEP, ... at keys vKey.. of the Vᵀ tile (the loops unroll,
// the addresses are set up once).
template <int D, int BN, int NT, class L>
struct FaLoader {
	static constexpr int KC = D / 8, VC = BN / 8;
	static constexpr int KSTEP = NT / KC, KPER = BN / KSTEP, VSTEP = NT / VC, VPER = D / VSTEP;
	static_assert(NT % KC == 0 && BN % KSTEP == 0 && NT % VC == 0 && D % VSTEP == 0, "tile copies do not divide evenly");
	static_assert(KSTEP % L::STEP == 0 && VSTEP % L::STEP == 0, "tile copies step across the layout's row groups");
	const u16 *kSrc, *vSrc;
	u16 *kDst, *vDst;
	int nk, iStart;

	__device__ __forceinline__ FaLoader(const u16* kh, const u16* vt, u16* sK, u16* sV, int hk, int nk_, int iStart_) {
		int tid = threadIdx.x;
		int kKey = tid / KC, kCol = 8 * (tid % KC), vDim = tid / VC, vKey = 8 * (tid % VC);
		nk = nk_, iStart = iStart_;
		kSrc = kh + (long long)hk * nk * D + (long long)kKey * D + kCol;
		vSrc = vt + (long long)hk * D * nk + (long long)vDim * nk + vKey;
		kDst = sK + L::k(kKey, kCol);
		vDst = sV + L::v(vDim, vKey);
	}

	// load starts the copies of tile t into buffer buf and commits them.
	__device__ __forceinline__ void load(int t, int buf) const {
		loadK(t, buf);
		loadV(t, buf);
		cp_commit();
	}

	// loadK and loadV start the copies of tile t's keys or Vᵀ into buffer
	// buf, uncommitted.
	__device__ __forceinline__ void loadK(int t, int buf) const {
		u16* kd = kDst + buf * L::KT;
		const u16* ks = kSrc + (long long)(iStart + t * BN) * D;
#pragma unroll
		for (int k = 0; k < KPER; k++) cp_async16(kd + k * KSTEP * L::KS, ks + (long long)k * KSTEP * D);
	}
	__device__ __forceinline__ void loadV(int t, int buf) const {
		u16* vd = vDst + buf * L::VT;
		const u16* vs = vSrc + iStart + t * BN;
#pragma unroll
		for (int k = 0; k < VPER; k++) cp_async16(vd + k * VSTEP * L::VS, vs + (long long)k * VSTEP * nk);
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

// The flash kernels' parameters (attention.go's flash launch).
#define FLASH_PARAMS                                                                                                \
	const float *q, const u16 *kh, const u16 *vt, const int *call, int *err, float *y, const float *g, const float *sg, \
	    int rows, int heads, int kvh, int d, int cap, int window, int ring, float scale, int nk, int hx
#define FLASH_ARGS q, kh, vt, call, err, y, g, sg, rows, heads, kvh, d, cap, window, ring, scale, nk, hx
