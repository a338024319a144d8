// reel:arch-suffix a
//
// Flash attention for prompt chunks on Hopper's warpgroup MMA (wgmma,
// sm_90a only: module.go compiles this program for sm_90a on an sm_90 card
// and leaves it out on any other, where attention.go's flashFor falls back
// to flash.cu's kernels). The block's work is flash_body's (flash.cu, whose
// helpers in flash.cuh it shares: the block's rows, kv_half's scratch, the
// masks, the online softmax, the gated epilogue); the products are wgmma's:
// two warpgroups of 4 warps, each taking 64 of the block's 128 query rows.
//
// Per tile of BN = 64 keys, each warpgroup computes S = Q Kᵀ (64 × 64) by
// D/16 wgmma m64n64k16 with Q and K from shared memory (descriptors), folds
// S into the online softmax in registers, and adds P V by BN/16 wgmma
// m64nDk16 (N = D: 256 or 128) with P from registers (f16) and Vᵀ from
// shared memory; f32 accumulators. The tiles come by cp.async, two buffers
// (the next tile's copies in flight while this one is used).
//
// Shared memory holds every operand K-major in the 128-byte swizzle
// (descriptor layout type 1): a tile of R rows × C columns (f16) is C/64
// chunks of R rows × 128 bytes, chunk after chunk, and the 16-byte piece j
// (columns 8j..8j+7 of the chunk) of row r lies at piece j ^ (r % 8) of
// its row (wg_sw). Q is [BM rows][D], K [BN keys][D], Vᵀ [D][BN keys] (so
// that P V's B operand, N = D × K = keys, is K-major too). Every tile
// starts 1024-byte aligned, as the swizzle's address bits require.
//
// Descriptors (PTX ISA "matrix descriptor"; CUTLASS GmmaDescriptor): bits
// 0-13 start address >> 4, 16-29 leading byte offset >> 4 (unused by the
// swizzled K-major layouts: 1), 32-45 stride byte offset >> 4 (1024: from
// one group of 8 rows to the next), 49-51 base offset (0: tiles 1024-byte
// aligned), 62-63 layout (1: 128-byte swizzle). A k-step of 16 columns (32
// bytes) inside a chunk advances the start address by 32 bytes: the
// hardware applies the swizzle to the address it forms (piece 2s + j of
// row r at piece (2s + j) ^ (r % 8)), as CUTLASS's descriptor iterator and
// FlashAttention-3 do.
//
// Fragments (PTX ISA "wgmma .m64nNk16 register fragments"; CUTLASS's
// CLayout_64xN and ALayout_64x16): thread t of the warpgroup is lane
// l = t % 32 of warp w = t / 32 (of 4), g = l / 4, q = l % 4.
//  - D (64 × N, f32), N/2 registers d[i]: row 16w + g + 8·((i / 2) % 2),
//    column 8·(i / 4) + 2q + (i % 2). As float[N/8][4], n-tile n holds
//    (16w + g, 8n + 2q, +1) and (16w + g + 8, 8n + 2q, +1): mma.m16n8's C
//    fragments, a warp to 16 rows, so flash.cuh's fa_softmax, fa_rescale
//    and fa_finish take them as they are.
//  - A (64 × 16, f16) from registers, 4 registers of two halves: a0 (row
//    16w + g, k 2q..2q+1), a1 (row + 8, k 2q..), a2 (row, k 2q+8..), a3
//    (row + 8, k 2q+8..): mma.m16n8k16's A, so the probabilities of keys
//    16s..16s+15 are n-tiles 2s and 2s+1 of S, packed as flash_body packs
//    them.
// tools/wgflash_emu.py checks this mapping, the swizzle and the descriptor
// steps against a float64 product.

typedef unsigned long long u64;

// wg_sw is the element index of (row r, column c) of a tile of R rows in
// the 128-byte swizzle (c a multiple of 2: a pair stays in its piece).
template <int R>
__device__ __forceinline__ int wg_sw(int r, int c) {
	return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

// WgSwizzled is flash_wg's shared-memory layout for flash.cuh's fa_fill_q
// and FaLoader: Q [BM][D], K tiles [BN][D], Vᵀ tiles [D][BN], each in the
// 128-byte swizzle; rows 8 apart are 64 elements apart in a chunk.
template <int D, int BN, int BM>
struct WgSwizzled {
	static constexpr int KT = BN * D, VT = D * BN, KS = 64, VS = 64, STEP = 8;
	static_assert(BN == 64, "a Vᵀ row of a tile is one 128-byte swizzle row");
	__device__ __forceinline__ static int q(int m, int c) { return wg_sw<BM>(m, c); }
	__device__ __forceinline__ static int k(int key, int c) { return wg_sw<BN>(key, c); }
	__device__ __forceinline__ static int v(int dim, int key) { return wg_sw<D>(dim, key); }
};

// wg_desc is the descriptor of a K-major operand in the 128-byte swizzle
// whose first row starts at shared address a (bytes).
__device__ __forceinline__ u64 wg_desc(u32 a) {
	return (u64)((a & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

// wg_arrive orders this thread's register and shared-memory accesses
// before the wgmma that follow (wgmma.fence: needed before the first, and
// whenever their accumulators or A registers were written by other
// instructions).
__device__ __forceinline__ void wg_arrive() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// wg_commit closes a group of wgmma; wg_wait<N> waits until at most N
// groups of this warpgroup are pending.
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
	asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// wg_proxy_fence makes this thread's writes to shared memory (st.shared of
// Q, completed cp.async copies) visible to the async proxy that wgmma
// reads shared memory through; a barrier then publishes them to the block.
__device__ __forceinline__ void wg_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// wg_hold ties the accumulators to this point (CUTLASS's
// warpgroup_fence_operand): after a wg_wait, the compiler may not read
// them earlier (the asm that issued the wgmma already "wrote" them);
// before a wg_arrive, it may not leave writes to them (zeroing, the
// softmax's rescale) until after it, where wgmma.fence would not order
// them before the wgmma.
template <int N>
__device__ __forceinline__ void wg_hold(float (&x)[N][4]) {
#pragma unroll
	for (int n = 0; n < N; n++)
		asm volatile("" : "+f"(x[n][0]), "+f"(x[n][1]), "+f"(x[n][2]), "+f"(x[n][3])::"memory");
}

// wg_hold_a ties A fragments to this point likewise: they are written
// before the wg_arrive that precedes the wgmma reading them.
template <int N>
__device__ __forceinline__ void wg_hold_a(u32 (&a)[N][4]) {
#pragma unroll
	for (int n = 0; n < N; n++) asm volatile("" : "+r"(a[n][0]), "+r"(a[n][1]), "+r"(a[n][2]), "+r"(a[n][3])::"memory");
}

// The accumulators' operand lists: x[n][0..3] of n-tiles n0.., as "+f".
#define WG_ACC2(x, n) \
	"+f"(x[n][0]), "+f"(x[n][1]), "+f"(x[n][2]), "+f"(x[n][3]), "+f"(x[n + 1][0]), "+f"(x[n + 1][1]), "+f"(x[n + 1][2]), "+f"(x[n + 1][3])
#define WG_ACC8(x, n) WG_ACC2(x, n), WG_ACC2(x, n + 2), WG_ACC2(x, n + 4), WG_ACC2(x, n + 6)
#define WG_ACC16(x, n) WG_ACC8(x, n), WG_ACC8(x, n + 8)
#define WG_ACC32(x, n) WG_ACC16(x, n), WG_ACC16(x, n + 16)

// The accumulators' registers in the instruction: 32, 64 or 128.
#define WG_D32 \
	"{" \
	"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
	"}"
#define WG_D64 \
	"{" \
	"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
	"%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
	"%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
	"}"
#define WG_D128 \
	"{" \
	"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
	"%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
	"%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
	"%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
	"%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
	"%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
	"%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
	"}"

// wg_qk adds A·B to s (64 × 64, f32): A (64 × 16) and B (64 keys × 16,
// i.e. Bᵀ) K-major in shared memory by descriptors da and db.
__device__ __forceinline__ void wg_qk(float (&s)[8][4], u64 da, u64 db) {
	asm volatile(
	    "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
	    : WG_ACC8(s, 0)
	    : "l"(da), "l"(db), "r"(1));
}

// wg_pv adds P·V to o (64 × D, f32, D = 128 or 256): P (64 × 16, f16) in
// registers a (the A fragment), Vᵀ (D × 16 keys) K-major in shared memory
// by descriptor db.
template <int D>
__device__ __forceinline__ void wg_pv(float (&o)[D / 8][4], const u32 (&a)[4], u64 db) {
	if constexpr (D == 256) {
		asm volatile(
		    "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
		    "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " WG_D128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
		    : WG_ACC32(o, 0)
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
	} else {
		static_assert(D == 128, "wg_pv: 128 or 256 dimensions");
		asm volatile(
		    "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
		    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WG_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
		    : WG_ACC16(o, 0)
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
	}
}

// wg_align1024 rounds a pointer into shared memory up to 1024 bytes (the
// launch asks for 1024 bytes more than the tiles).
__device__ __forceinline__ u16* wg_align1024(u16* p) {
	u32 a = smem_addr(p);
	return p + (((1024 - (a & 1023)) & 1023) >> 1);
}

// wg_qk_tile issues S = Q Kᵀ of a warpgroup's 64 rows and a tile's BN
// keys (after the caller's wg_arrive) and commits it: step kk takes
// columns 16kk.. of chunk kk/4 (32 bytes a step inside a chunk of BM or BN
// rows of 128 bytes); qa and kt are the shared addresses (bytes) of the
// warpgroup's first Q row and of the K tile.
template <int D, int BM, int BN>
__device__ __forceinline__ void wg_qk_tile(float (&s)[BN / 8][4], u32 qa, u32 kt) {
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++)
		wg_qk(s, wg_desc(qa + (kk >> 2) * (BM * 128) + (kk & 3) * 32), wg_desc(kt + (kk >> 2) * (BN * 128) + (kk & 3) * 32));
	wg_commit();
}

// wg_pv_tile issues O += P V of a tile (after the caller's wg_arrive) and
// commits it: keys 16kk.. are P's registers p[kk], 32 bytes into each Vᵀ
// row of the tile at shared address vtile.
template <int D, int BN>
__device__ __forceinline__ void wg_pv_tile(float (&o)[D / 8][4], const u32 (&p)[BN / 16][4], u32 vtile) {
#pragma unroll
	for (int kk = 0; kk < BN / 16; kk++) wg_pv<D>(o, p[kk], wg_desc(vtile + kk * 32));
	wg_commit();
}

// wg_pack packs a tile's probabilities as P's A fragments: keys 16kk.. are
// n-tiles 2kk and 2kk+1 of S.
template <int BN>
__device__ __forceinline__ void wg_pack(u32 (&p)[BN / 16][4], const float (&s)[BN / 8][4]) {
#pragma unroll
	for (int kk = 0; kk < BN / 16; kk++) {
		p[kk][0] = fa_prob2(s[2 * kk][0], s[2 * kk][1]), p[kk][1] = fa_prob2(s[2 * kk][2], s[2 * kk][3]);
		p[kk][2] = fa_prob2(s[2 * kk + 1][0], s[2 * kk + 1][1]), p[kk][3] = fa_prob2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
	}
}

// flash_wg_body: grid and parameters as flash_body's (fa_block), 256
// threads (two warpgroups), dynamic shared memory flashKernel.shared (Go):
// 1024 bytes of alignment, Q (BM × D), then two K and two Vᵀ tiles, f16.
//
// Each tile is loaded whole a step ahead, and a warpgroup's S = Q Kᵀ,
// softmax and P V follow one another. FlashAttention-3's intra-warpgroup
// overlap (P V of tile t-1 on the tensor cores while tile t's softmax runs,
// K loaded a tile ahead and V half a tile) measured no faster on the H200
// (session 6, TestFlashSweep: 127.8/93.8/107.9 TFLOP/s against 129.4/
// 95.2/109.8 at Dory 4B's shapes) and was removed.
template <int D>
__device__ void flash_wg_body(const float* q, const u16* kh, const u16* vt, const int* call, int* err, float* y,
                              const float* g, const float* sg, int rows, int heads, int kvh, int d, int cap, int window,
                              int ring, float scale, int nk, int hx) {
	constexpr int BN = 64, BM = 128, NT = 256;
	using L = WgSwizzled<D, BN, BM>;
	static_assert(D % 64 == 0 && BN <= FA_PAD, "flash_wg_body: shape");
	extern __shared__ u16 wsh[];
	u16* sQ = wg_align1024(wsh); // [BM][D]
	u16* sK = sQ + BM * D;       // two [BN][D]
	u16* sV = sK + 2 * L::KT;    // two [D][BN]
	pdl_entry();
	FaBlock b;
	if (!fa_block(b, BM, BN, call, err, y, g, sg, rows, heads, kvh, d, cap, window, ring, hx)) return;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
	fa_fill_q<D, L>(sQ, BM, b, q, heads, d);
	FaLoader<D, BN, NT, L> ld(kh, vt, sK, sV, b.hk, nk, b.iStart);
	ld.load(0, 0);

	float sl2 = scale * 1.4426950408889634f;
	// This thread's two rows (g and g+8 of its warp's 16: warpgroup
	// warp/4 takes rows 64·(warp/4).., its warp w%4 rows 16·(w%4)..), their
	// positions and the keys they see.
	int mA = warp * 16 + gq, mB = mA + 8, pA, pB, loA, loB;
	fa_rows(b, mA, mB, window, pA, pB, loA, loB);
	float mxA = -1e30f, mxB = -1e30f, lA = 0.f, lB = 0.f;
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
	u32 p[BN / 16][4]; // P's A fragments
	// Shared addresses (bytes) of this warpgroup's 64 rows of Q, and of the
	// tiles' first buffers.
	const u32 qa = smem_addr(sQ) + (warp >> 2) * 64 * 128, ka = smem_addr(sK), va = smem_addr(sV);

	for (int t = 0; t < b.tiles; t++) {
		if (t + 1 < b.tiles) {
			ld.load(t + 1, (t + 1) & 1);
			cp_wait<1>();
		} else {
			cp_wait<0>();
		}
		wg_proxy_fence();
		__syncthreads(); // this tile (and Q) in shared memory for every warpgroup
		const u32 kt = ka + (t & 1) * (L::KT * 2);
		int j0 = b.jBase + b.iStart + t * BN;
		float s[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
		wg_hold<BN / 8>(s);
		wg_arrive();
		wg_qk_tile<D, BM, BN>(s, qa, kt);
		wg_wait<0>();
		wg_hold<BN / 8>(s);
		// Mask, then the online softmax in base 2; the output's correction.
		bool whole = j0 + BN - 1 <= b.pFirst && (window <= 0 || j0 > b.pLast - window);
		float cA, cB;
		fa_softmax<BN>(s, whole, j0 + 2 * tq, loA, pA, loB, pB, sl2, mxA, mxB, lA, lB, cA, cB);
		fa_rescale<D / 8>(o, cA, cB);
		wg_pack<BN>(p, s);
		wg_hold_a<BN / 16>(p);
		wg_hold<D / 8>(o);
		wg_arrive();
		wg_pv_tile<D, BN>(o, p, va + (t & 1) * (L::VT * 2));
		wg_wait<0>();
		wg_hold_a<BN / 16>(p);
		wg_hold<D / 8>(o);
		__syncthreads(); // both warpgroups are done with this buffer before it is loaded again
	}
	fa_finish<D / 8>(o, lA, lB, y, g, sg, b, mA, mB, 2 * tq, heads, d);
}

extern "C" __global__ void __launch_bounds__(256, 1) flash_wg_d128(FLASH_PARAMS) { flash_wg_body<128>(FLASH_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 1) flash_wg_d256(FLASH_PARAMS) { flash_wg_body<256>(FLASH_ARGS); }
