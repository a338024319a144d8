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
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
	fa_fill_q<D, FaPadded<D, BN>>(sQ, BM, b, q, heads, d);
	FaLoader<D, BN, 32 * W, FaPadded<D, BN>> ld(kh, vt, sK, sV, b.hk, nk, b.iStart);
	ld.load(0, 0);

	const float L2E = 1.4426950408889634f;
	float sl2 = scale * L2E;
	// This thread's two rows (g and g+8 of its warp's 16), their positions
	// and the keys they see.
	int mA = warp * 16 + gq, mB = mA + 8, pA, pB, loA, loB;
	fa_rows(b, mA, mB, window, pA, pB, loA, loB);
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

