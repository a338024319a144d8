// Shared by the expert products (moe.cu, and quant.cu's quantized experts,
// which group their units and tile them as these do): error codes, limits,
// the grouping and the tiles.

// Error codes (moe.go's moeKernelErr words them).
#define ERR_MOE_NAN 40 // a = row, b = expert: a NaN router logit
#define ERR_MOE_ID 41  // a = row, b = pick, c = id, err[4] = experts: an expert id outside [0, E)

// moe_expert_warp: warps per block, and 16-byte weight loads each lane has
// in flight.
#define MOE_WARPS 8
#define MOE_LOADS 4

// moe_expert_tile: units and features per tile, inputs per step; 256
// threads compute a 4x4 block of the tile each.
#define MOE_TM 64
#define MOE_TN 64
#define MOE_TK 32

// moe_expert_mma: units (BM) and features (BN) of a block's tile, inputs
// per step (BK), the shared rows' stride in 16-bit elements (BK plus 8: the
// rows of an ldmatrix land in distinct banks, and stay 16-byte aligned),
// and its 256 threads: 8 warps of 2 x 4, each 32 units x 32 features.
#define MOE_MMA_BM 64
#define MOE_MMA_BN 128
#define MOE_MMA_BK 32
#define MOE_MMA_LD (MOE_MMA_BK + 8)
#define MOE_MMA_THREADS 256

// moe_smem is the dynamic shared memory of moe_route and moe_expert_group.
extern __shared__ double moe_smem[];

// moe_row_dot is one warp's dot product of a weight row of n elements of
// type WT with x (n f32), every lane getting the sum, with matvec.cu's
// streaming loads (ld_stream) and element order (mv_x, mv_fma). vec: 16-byte loads
// (row and x 16-byte aligned, n a multiple of the vector's elements); each
// lane streams every 32nd vector, MOE_LOADS in flight, then the lanes' sums
// are added by shuffles.
template <int WT>
__device__ __forceinline__ float moe_row_dot(const void* row, const float* x, int n, int vec, int lane) {
	float acc = 0.f;
	if (vec) {
		const int E = WT == WT_F32 ? 4 : 8; // elements per vector
		int V = n / E;
		const uint4* wv = (const uint4*)row;
		for (int v0 = lane; v0 < V; v0 += 32 * MOE_LOADS) {
			uint4 q[MOE_LOADS];
#pragma unroll
			for (int u = 0; u < MOE_LOADS; u++) {
				int v = v0 + 32 * u;
				q[u] = v < V ? ld_stream(wv + v) : make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
			for (int u = 0; u < MOE_LOADS; u++) {
				int v = v0 + 32 * u;
				if (v < V) {
					float xv[8];
					mv_x<WT>(x + (long long)v * E, xv);
					acc = mv_fma<WT>(q[u], xv, acc);
				}
			}
		}
	} else {
		for (int i = lane; i < n; i += 32) acc = fmaf(x[i], load_w(row, WT, i), acc);
	}
	return warp_sum(acc);
}

// moe_expert_warp: expert_matmul with one warp per (unit, output feature):
// warp g of the grid (MOE_WARPS per block, blockDim.x = 32·MOE_WARPS)
// computes y[u, f] = w[ids[u], f] · x_u for u = g / nOut, f = g mod nOut,
// where x_u is row u of x [units, nIn] (perUnit) or row u / K of x [rows,
// nIn]. A unit's warps read consecutive rows of its expert (the decode
// shape: few units, each streaming its expert's matrix). An id outside
// [0, E) is reported and its outputs are zero.
// moe_warp_unit gives the warp's (unit u, feature f) of a warp-per-output
// expert product, its expert id and output, and its row of x; false when
// the warp has nothing to do: past the grid's outputs, or an id outside
// [0, E), which it reports (once a unit) and whose output it zeroes.
__device__ __forceinline__ bool moe_warp_unit(const float* x, const int* ids, float* y, int units, int K, int E, int nOut, int nIn,
                                              int perUnit, int* err, int* u, int* f, int* id, float** yo, const float** xu) {
	long long g = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (g >= (long long)units * nOut) return false;
	*u = (int)(g / nOut), *f = (int)(g % nOut);
	*id = ids[*u];
	*yo = y + (long long)*u * nOut + *f;
	if (*id < 0 || *id >= E) {
		if ((threadIdx.x & 31) == 0) {
			if (*f == 0) report5(err, ERR_MOE_ID, *u / K, *u % K, *id, E, 0);
			**yo = 0.f;
		}
		return false;
	}
	*xu = x + (long long)(perUnit ? *u : *u / K) * nIn;
	return true;
}

// moe_expert_window, moe_expert_window_glu: expert_matmul and
// expert_matmul_glu of a decode window (2 to 8 rows, up to MOE_WIN_MAXU
// units over up to MOE_WIN_MAXE experts), reading each chosen expert's
// rows once for all of its units (the warp forms read them once a unit).
// Grid (ceil(F / (W·fpw)), min(E, units)), blockDim.x = 32·W (W warps):
// block (b, j) takes the j-th expert, in ascending ids, of those that some
// unit picks (blocks past the last exit), and warp i of it features f =
// (b·fpw + p)·W + i of that expert for p < fpw, one after the other (fpw
// spreads the block's start over more features): its row f (glu: its gate
// row f and up row F + f), streamed once for up to MOE_WIN_MT of the
// expert's units at a time (in unit order; an expert with more units takes
// more passes).
// Each unit's sum is moe_row_dot's, in the same order (lane i takes
// vectors i, i + 32, ... in order, then warp_sum), so a unit gets the bits
// the warp forms give it whatever the window: a window's rows are a 1-row
// token's. Ids outside [0, E) join no expert: the blocks of slot 0 zero
// their outputs and report the first (row, pick), as the warp forms do.
// The weights cannot be prefetched before pdl_entry (the expert comes
// from ids, the previous kernels' output).
#define MOE_WIN_MT 8
#define MOE_WIN_MAXU 256
#define MOE_WIN_MAXE 4096

// moe_win_dots adds a pass's sums: for each of the cnt units c (x rows
// xr[c]), a[c] += w[ra] · x_c and with GLU b[c] += w[rb] · x_c, each
// reduced over the warp (every lane gets them).
template <int WT, bool GLU>
__device__ __forceinline__ void moe_win_dots(const void* ra, const void* rb, const float* const* xr, int cnt, int n, int vec, int lane,
                                             float* a, float* b) {
#pragma unroll
	for (int c = 0; c < MOE_WIN_MT; c++) a[c] = 0.f, b[c] = 0.f;
	if (vec) {
		const int E = WT == WT_F32 ? 4 : 8; // elements per vector
		int V = n / E;
		const uint4* wa = (const uint4*)ra;
		const uint4* wb = (const uint4*)rb;
		for (int v0 = lane; v0 < V; v0 += 32 * MOE_LOADS) {
			uint4 qa[MOE_LOADS], qb[MOE_LOADS];
#pragma unroll
			for (int u = 0; u < MOE_LOADS; u++) {
				int v = v0 + 32 * u;
				qa[u] = v < V ? ld_stream(wa + v) : make_uint4(0u, 0u, 0u, 0u);
				qb[u] = GLU && v < V ? ld_stream(wb + v) : make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
			for (int u = 0; u < MOE_LOADS; u++) {
				int v = v0 + 32 * u;
				if (v < V) {
#pragma unroll
					for (int c = 0; c < MOE_WIN_MT; c++) {
						if (c < cnt) {
							float xv[8];
							mv_x<WT>(xr[c] + (long long)v * E, xv);
							a[c] = mv_fma<WT>(qa[u], xv, a[c]);
							if (GLU) b[c] = mv_fma<WT>(qb[u], xv, b[c]);
						}
					}
				}
			}
		}
	} else {
		for (int i = lane; i < n; i += 32) {
			float wa = load_w(ra, WT, i), wb = GLU ? load_w(rb, WT, i) : 0.f;
#pragma unroll
			for (int c = 0; c < MOE_WIN_MT; c++) {
				if (c < cnt) {
					float xv = xr[c][i];
					a[c] = fmaf(xv, wa, a[c]);
					if (GLU) b[c] = fmaf(xv, wb, b[c]);
				}
			}
		}
	}
#pragma unroll
	for (int c = 0; c < MOE_WIN_MT; c++) {
		if (c < cnt) {
			a[c] = warp_sum(a[c]);
			if (GLU) b[c] = warp_sum(b[c]);
		}
	}
}

// moe_window is both window kernels: GLU selects expert_matmul_glu (the
// experts' rows 2F, y [units, F] of silu(gate)·up, in f64 as
// moe_expert_warp_glu) over expert_matmul (rows F, y [units, F]).
template <bool GLU>
__device__ __forceinline__ void moe_window(const float* x, const void* w, int wt, const int* ids, float* y, int units, int K, int E,
                                           int F, int nIn, int perUnit, int vec, int fpw, int* err) {
	__shared__ unsigned sbits[MOE_WIN_MAXE / 32]; // the experts with units
	__shared__ int su[MOE_WIN_MAXU];              // the slot's units, in unit order
	__shared__ int sexp, scnt;                    // the slot's expert (-1: none) and its units
	pdl_entry();
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	int words = (E + 31) >> 5;
	for (int i = tid; i < words; i += blockDim.x) sbits[i] = 0u;
	__syncthreads();
	for (int u = tid; u < units; u += blockDim.x) {
		int id = ids[u];
		if (id >= 0 && id < E) atomicOr(&sbits[id >> 5], 1u << (id & 31));
	}
	__syncthreads();
	if (warp == 0) {
		// The j-th expert with units: lanes take 32 words at a time, an
		// inclusive scan of their counts finds the word that holds it.
		int j = blockIdx.y, e = -1;
		for (int c = 0; c < words && e < 0; c += 32) {
			unsigned bits = c + lane < words ? sbits[c + lane] : 0u;
			int cnt = __popc(bits), inc = cnt;
			for (int d = 1; d < 32; d <<= 1) {
				int o = __shfl_up_sync(0xffffffffu, inc, d);
				if (lane >= d) inc += o;
			}
			int tot = __shfl_sync(0xffffffffu, inc, 31);
			if (j < tot) {
				int l = __ffs(__ballot_sync(0xffffffffu, j < inc)) - 1; // the lane of the word
				int before = __shfl_sync(0xffffffffu, inc - cnt, l);
				unsigned wb = __shfl_sync(0xffffffffu, bits, l);
				for (int r = j - before; r > 0; r--) wb &= wb - 1; // drop the lower set bits
				e = (c + l) * 32 + __ffs(wb) - 1;
			} else {
				j -= tot;
			}
		}
		// Its units, in unit order.
		int n = 0;
		if (e >= 0)
			for (int c = 0; c < units; c += 32) {
				int u = c + lane;
				bool hit = u < units && ids[u] == e;
				unsigned m = __ballot_sync(0xffffffffu, hit);
				if (hit) su[n + __popc(m & ((1u << lane) - 1u))] = u;
				n += __popc(m);
			}
		if (lane == 0) sexp = e, scnt = n;
	}
	__syncthreads();
	int e = sexp, n = scnt;
	if (e < 0 && blockIdx.y != 0) return;
	long long rows = GLU ? 2LL * F : (long long)F;
	for (int i = 0; i < fpw; i++) {
		int f = (blockIdx.x * fpw + i) * (blockDim.x >> 5) + warp;
		if (f >= F) return;
		long long ga = ((long long)max(e, 0) * rows + f) * nIn, gb = ga + (long long)F * nIn; // the rows' first elements
		for (int c0 = 0; c0 < n; c0 += MOE_WIN_MT) {
			int cnt = min(MOE_WIN_MT, n - c0);
			const float* xr[MOE_WIN_MT];
#pragma unroll
			for (int c = 0; c < MOE_WIN_MT; c++) {
				int u = su[c0 + min(c, cnt - 1)];
				xr[c] = x + (long long)(perUnit ? u : u / K) * nIn;
			}
			float a[MOE_WIN_MT], b[MOE_WIN_MT];
			if (wt == WT_BF16)
				moe_win_dots<WT_BF16, GLU>((const u16*)w + ga, (const u16*)w + gb, xr, cnt, nIn, vec, lane, a, b);
			else if (wt == WT_F16)
				moe_win_dots<WT_F16, GLU>((const u16*)w + ga, (const u16*)w + gb, xr, cnt, nIn, vec, lane, a, b);
			else
				moe_win_dots<WT_F32, GLU>((const float*)w + ga, (const float*)w + gb, xr, cnt, nIn, vec, lane, a, b);
			if (lane == 0) {
#pragma unroll
				for (int c = 0; c < MOE_WIN_MT; c++)
					if (c < cnt) y[(long long)su[c0 + c] * F + f] = GLU ? (float)(silu_d((double)a[c]) * (double)b[c]) : a[c];
			}
		}
		if (blockIdx.y != 0) continue;
		// Slot 0's blocks: the units of bad ids.
		for (int u = lane; u < units; u += 32) {
			int id = ids[u];
			if (id < 0 || id >= E) {
				y[(long long)u * F + f] = 0.f;
				if (f == 0) report5(err, ERR_MOE_ID, u / K, u % K, id, E, 0);
			}
		}
	}
}

#define MOE_WIN_PARAMS \
	const float *x, const void *w, int wt, const int *ids, float *y, int units, int K, int E, int F, int nIn, int perUnit, int vec, int fpw, \
	    int *err

#define MOE_WIN_ARGS x, w, wt, ids, y, units, K, E, F, nIn, perUnit, vec, fpw, err

// moe_tile is the tiled product over units grouped by moe_expert_group,
// the experts' weights read through wl: wl(e, n, k) is element (n, k) of
// expert e in f32 (moe_expert_tile's stored floats, qmoe_tile_*'s
// dequantized codes, kernels/quant.cu). Grid (ceil(nOut / MOE_TN), E), 256
// threads: block (b, e) computes features [b·MOE_TN, (b+1)·MOE_TN) of every
// unit of expert e, MOE_TM units at a time, stepping over the inputs
// MOE_TK at a time through shared tiles of x and w. Thread (ty, tx) =
// (tid / 16, tid mod 16) sums units ty + 16i and features tx + 16j (i, j <
// 4) in input order, in f32.
template <class WL>
__device__ __forceinline__ void moe_tile(const float* x, WL wl, const int* offs, const int* list, float* y, int K, int nOut, int nIn,
                                         int perUnit) {
	__shared__ float xs[MOE_TK][MOE_TM + 1];
	__shared__ float ws[MOE_TK][MOE_TN + 1];
	__shared__ int su[MOE_TM];
	int e = blockIdx.y, n0 = blockIdx.x * MOE_TN;
	int lo = offs[e], hi = offs[e + 1];
	if (lo >= hi) return;
	int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
	for (int m0 = lo; m0 < hi; m0 += MOE_TM) {
		int cnt = min(MOE_TM, hi - m0);
		__syncthreads(); // the previous units are written
		if (tid < MOE_TM) su[tid] = tid < cnt ? list[m0 + tid] : -1;
		__syncthreads();
		float acc[4][4];
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
		for (int k0 = 0; k0 < nIn; k0 += MOE_TK) {
			for (int i = tid; i < MOE_TK * MOE_TM; i += blockDim.x) {
				int m = i / MOE_TK, kk = i % MOE_TK, k = k0 + kk, u = su[m];
				float v = 0.f;
				if (u >= 0 && k < nIn) v = x[(long long)(perUnit ? u : u / K) * nIn + k];
				xs[kk][m] = v;
			}
			for (int i = tid; i < MOE_TK * MOE_TN; i += blockDim.x) {
				int n = i / MOE_TK, kk = i % MOE_TK, k = k0 + kk;
				float v = 0.f;
				if (n0 + n < nOut && k < nIn) v = wl(e, n0 + n, k);
				ws[kk][n] = v;
			}
			__syncthreads();
#pragma unroll 8
			for (int kk = 0; kk < MOE_TK; kk++) {
				float a[4], b[4];
#pragma unroll
				for (int i = 0; i < 4; i++) a[i] = xs[kk][ty + 16 * i], b[i] = ws[kk][tx + 16 * i];
#pragma unroll
				for (int i = 0; i < 4; i++)
#pragma unroll
					for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
			}
			__syncthreads();
		}
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int m = ty + 16 * i;
			if (m >= cnt) continue;
			long long u = su[m];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				int f = n0 + tx + 16 * j;
				if (f < nOut) y[u * nOut + f] = acc[i][j];
			}
		}
	}
}

// moe_wl reads stored float experts w [E, nOut, nIn] of type wt for moe_tile.
struct moe_wl {
	const void* w;
	int wt, nOut, nIn;
	__device__ float operator()(int e, int n, int k) const { return load_w(w, wt, ((long long)e * nOut + n) * nIn + k); }
};

// moe_smem_addr is the shared-window address of p, as ldmatrix takes it.
__device__ __forceinline__ u32 moe_smem_addr(const void* p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

// moe_ldsm4 loads four 8x8 matrices of 16-bit elements from shared memory
// (ldmatrix .x4): lane i gives p, the start of row i mod 8 of matrix i / 8
// (16-byte aligned), and gets in r[j] the elements (i / 4, 2(i mod 4)) and
// (i / 4, 2(i mod 4) + 1) of matrix j, the first in the low half.
__device__ __forceinline__ void moe_ldsm4(u32* r, const u16* p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(moe_smem_addr(p)));
}

// moe_mma adds a · b to c on the tensor cores (mma m16n8k16, f32
// accumulators): a is a 16x16 fragment and b a 16x8 one of the 16-bit type
// WT (bf16 or f16), c the warp's 16x8 f32 fragment.
template <int WT>
__device__ __forceinline__ void moe_mma(float* c, const u32* a, const u32* b) {
	if (WT == WT_BF16)
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
	else
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// moe_pack2 rounds a and b to WT (bf16 or f16, to nearest even) and packs
// them, a in the low half.
template <int WT>
__device__ __forceinline__ u32 moe_pack2(float a, float b) {
	u32 lo = WT == WT_BF16 ? f32_to_bf16(a) : f32_to_f16(a);
	u32 hi = WT == WT_BF16 ? f32_to_bf16(b) : f32_to_f16(b);
	return lo | hi << 16;
}

// moe_load_x reads inputs k .. k+3 of the activation row p (zeros past nIn,
// all zeros without a row); vec: one 16-byte load (p + k 16-byte aligned
// and nIn a multiple of 4).
__device__ __forceinline__ float4 moe_load_x(const float* p, int k, int nIn, int vec) {
	float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
	if (!p || k >= nIn) return v;
	if (vec) return *(const float4*)(p + k);
	v.x = p[k];
	if (k + 1 < nIn) v.y = p[k + 1];
	if (k + 2 < nIn) v.z = p[k + 2];
	if (k + 3 < nIn) v.w = p[k + 3];
	return v;
}

// moe_load_w reads inputs k .. k+7 of the 16-bit weight row p as one vector
// (zeros past nIn, all zeros without a row); vec: one 16-byte load (p + k
// 16-byte aligned and nIn a multiple of 8).
__device__ __forceinline__ uint4 moe_load_w(const u16* p, int k, int nIn, int vec) {
	if (!p || k >= nIn) return make_uint4(0u, 0u, 0u, 0u);
	if (vec) return ld_stream((const uint4*)(p + k));
	u32 h[8];
#pragma unroll
	for (int j = 0; j < 8; j++) h[j] = k + j < nIn ? (u32)p[k + j] : 0u;
	return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
}

// moe_w16 reads stored 16-bit expert rows w [E, nOut, nIn] for
// moe_expert_mma: row sets the row of expert e's feature f (none past
// nOut), load its inputs k .. k+7 (moe_load_w; vec as moe_load_w's).
struct moe_w16 {
	const u16* w;
	int nOut, nIn, vec;
	const u16* p;
	__device__ __forceinline__ void row(int e, int f) { p = f < nOut ? w + ((long long)e * nOut + f) * nIn : nullptr; }
	__device__ __forceinline__ uint4 load(int k) const { return moe_load_w(p, k, nIn, vec); }
};

// moe_expert_mma: expert_matmul over units grouped by moe_expert_group (in
// tiles of MOE_MMA_BM units), weights of the 16-bit type WT read through
// the row reader WL (moe_w16 for stored weights; quant_prompt.cu's
// qmoe_w16 dequantizes codes into WT), on the tensor cores. Grid
// (ceil(nOut / MOE_MMA_BN), the most tiles there can be), MOE_MMA_THREADS
// threads: block (b, t) computes features [b·BN, (b+1)·BN) of the units of
// tile t (blocks past toffs[E] exit), whose expert is tiles[t]. Each step
// of BK inputs is loaded into registers while the tensor cores work on the
// previous one (two shared stages, one barrier a step): the units' x rows
// gathered and rounded once to WT (to nearest even), the expert's weight
// rows as WL gives them. Warp (wm, wn) of 2 x 4 sums
// units wm·32 .. +31 by features wn·32 .. +31 in 2 x 4 mma m16n8k16 tiles, in
// f32, in input order; then writes them to each unit's row of y. The error
// against f32 arithmetic is that of the rounding of x: at most 2^-8 (bf16;
// 2^-11 f16) of Σ|w·x| a feature, an NMSE of about 3e-6 (bf16; 5e-8 f16)
// on random data.
template <int WT, class WL>
__device__ __forceinline__ void moe_expert_mma(const float* x, WL wl, const int* offs, const int* toffs, const int* tiles, const int* list,
                                               float* y, int K, int E, int nOut, int nIn, int perUnit, int vx) {
	const int BM = MOE_MMA_BM, BN = MOE_MMA_BN, BK = MOE_MMA_BK, LD = MOE_MMA_LD;
	// Two stages of the tiles of x [BM][LD] and w [BN][LD], 16-bit
	// elements in uint4 arrays (16-byte aligned rows).
	__shared__ uint4 sa[2 * MOE_MMA_BM * MOE_MMA_LD / 8];
	__shared__ uint4 sb[2 * MOE_MMA_BN * MOE_MMA_LD / 8];
	__shared__ int su[MOE_MMA_BM];
	pdl_entry();
	int t = blockIdx.y;
	if (t >= toffs[E]) return;
	int e = tiles[t];
	int m0 = offs[e] + (t - toffs[e]) * BM;
	int cnt = min(BM, offs[e + 1] - m0);
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	if (tid < BM) su[tid] = tid < cnt ? list[m0 + tid] : -1;
	__syncthreads();
	u16* as = (u16*)sa;
	u16* bs = (u16*)sb;
	int n0 = blockIdx.x * BN;
	// Thread tid loads x rows ar and ar + 32 (4 inputs from ac) and weight
	// rows br and br + 64 (8 inputs from bc) of every step.
	int ar = tid >> 3, ac = (tid & 7) * 4, br = tid >> 2, bc = (tid & 3) * 8;
	const float* xr[2];
	WL wr[2] = {wl, wl};
#pragma unroll
	for (int i = 0; i < 2; i++) {
		int u = su[ar + 32 * i];
		xr[i] = u < 0 ? nullptr : x + (long long)(perUnit ? u : u / K) * nIn;
		wr[i].row(e, n0 + br + 64 * i);
	}
	float4 ra[2];
	uint4 rb[2];
#pragma unroll
	for (int i = 0; i < 2; i++) ra[i] = moe_load_x(xr[i], ac, nIn, vx), rb[i] = wr[i].load(bc);
	float acc[2][4][4];
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int c = 0; c < 4; c++) acc[i][j][c] = 0.f;
	int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
	int steps = (nIn + BK - 1) / BK;
	for (int kt = 0; kt <= steps; kt++) {
		// Store the registers' step kt into stage kt mod 2 (its last readers,
		// step kt - 2's, passed the barrier of step kt - 1), load step kt + 1,
		// then multiply step kt - 1 from the other stage.
		if (kt < steps) {
			int st = kt & 1;
#pragma unroll
			for (int i = 0; i < 2; i++) {
				u32* d = (u32*)(as + (st * BM + ar + 32 * i) * LD + ac);
				d[0] = moe_pack2<WT>(ra[i].x, ra[i].y);
				d[1] = moe_pack2<WT>(ra[i].z, ra[i].w);
				*(uint4*)(bs + (st * BN + br + 64 * i) * LD + bc) = rb[i];
			}
			if (kt + 1 < steps) {
				int k0 = (kt + 1) * BK;
#pragma unroll
				for (int i = 0; i < 2; i++) ra[i] = moe_load_x(xr[i], k0 + ac, nIn, vx), rb[i] = wr[i].load(k0 + bc);
			}
		}
		if (kt > 0) {
			int st = (kt - 1) & 1;
			const u16* a = as + st * BM * LD;
			const u16* b = bs + st * BN * LD;
#pragma unroll
			for (int kk = 0; kk < BK; kk += 16) {
				u32 af[2][4], bf[4][2];
#pragma unroll
				for (int i = 0; i < 2; i++) moe_ldsm4(af[i], a + (wm + 16 * i + (lane & 15)) * LD + kk + (lane >> 4) * 8);
#pragma unroll
				for (int j = 0; j < 2; j++) {
					u32 r[4];
					moe_ldsm4(r, b + (wn + 16 * j + (lane & 7) + (lane >> 4) * 8) * LD + kk + ((lane >> 3) & 1) * 8);
					bf[2 * j][0] = r[0], bf[2 * j][1] = r[1], bf[2 * j + 1][0] = r[2], bf[2 * j + 1][1] = r[3];
				}
#pragma unroll
				for (int i = 0; i < 2; i++)
#pragma unroll
					for (int j = 0; j < 4; j++) moe_mma<WT>(acc[i][j], af[i], bf[j]);
			}
		}
		__syncthreads();
	}
	// Lane (g, q) = (lane / 4, lane mod 4) holds, of each 16x8 tile, units g
	// and g + 8 by features 2q and 2q + 1.
	int g = lane >> 2, q = lane & 3;
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int m = wm + 16 * i + g + 8 * h;
			if (m >= cnt) continue;
			float* yr = y + (long long)su[m] * nOut;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				int f = n0 + wn + 8 * j + 2 * q;
				if (f < nOut) yr[f] = acc[i][j][2 * h];
				if (f + 1 < nOut) yr[f + 1] = acc[i][j][2 * h + 1];
			}
		}
}

#define MOE_MMA_PARAMS                                                                                                            \
	const float *x, const u16 *w, const int *offs, const int *toffs, const int *tiles, const int *list, float *y, int K, int E, \
	    int nOut, int nIn, int perUnit, int vx, int vw

#define MOE_MMA_ARGS x, moe_w16{w, nOut, nIn, vw, nullptr}, offs, toffs, tiles, list, y, K, E, nOut, nIn, perUnit, vx
