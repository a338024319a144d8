// Decode products with quantized weights on the tensor cores (quant_matmul,
// 1..8 rows; quantmma.go's qmmaPlan chooses them): qmma_<codes>_n<NS>, codes
// f8 (e4m3), i8 or u4 as quant.cu states them, NS sets of two rows of x
// (rows <= 2·NS).
//
// The weight is mma.sync m16n8k16's A operand (16 features by 16 inputs),
// dequantized in registers to f16 exactly (every code is an f16): u4 by
// the magic-number trick of FasterTransformer (a nibble masked into the
// mantissa of 1024 with lop3, two codes a half2 in about two
// instructions), i8 by prmt into the mantissa of 1024, e4m3 by
// cvt.rn.f16x2.e4m3x2. x is the B operand (n = 8), split hi + lo in f16
// (two mmas, accumulating in f32) after scaling each row by a power of two
// that puts its largest magnitude in [2^14, 2^15): about 22 bits of every
// activation are kept, whatever its range, and the power of two is undone
// exactly on the result.
//
// Layout: lane = 4·g + t. A warp computes a tile of 16 features (g and
// g + 8) over its steps of K (KS = 4·E codes, E the codes of a 16-byte
// vector): in a step, lane t of row g reads the row's 16-byte vector t
// (ld.global.nc.L1::no_allocate; the quad reads 64 contiguous bytes of
// each of its rows), and each word of it feeds the lane's k slots of one
// (i8, e4m3) or two (u4) mmas; the order of the k slots inside an mma is
// free as long as x's B fragment follows it, so no permutation of the
// codes is needed. A lane's vector lies in one scale group (bc is a
// multiple of E), but a step's four lanes read four groups, so the group
// scales are applied in f32 to the step's partial sums, per group: x's B
// column c carries only the slots of lane c mod 4 (the x row 2·set +
// c / 4), so that D column c is the partial sum of one lane's group, which
// is multiplied by that group's scale (f32, the stored scale exactly) and
// added to the f32 accumulator. Two x rows a set, so 1..2 rows cost one
// hi/lo pair of mmas a k16 step, 3..4 two pairs, 5..8 four.
//
// x is staged per block in shared memory (qmma_xs) as the B fragments, in
// the order the lanes read them: for x row r, step st, slice j (4 codes,
// one mma's k slots of a lane) and lane t, 16 bytes {hi P0, hi P1, lo P0,
// lo P1} at r·(T·E + 4) + st·E + 4·j + t (16-byte units; the 4 of padding
// puts consecutive rows in other banks): the eight lanes that carry x read
// 64 consecutive bytes of each of two rows; the others read nothing and
// keep zeros.
//
// Split-K: a block of W warps holds W/S tiles of S warps; a tile's warps
// take its steps in turn (warp p: p, p + S, ...), QMMA_LOADS steps of
// codes and scales in flight per lane and the next batch loaded while one
// is multiplied; their sums are added in warp order through shared memory:
// no atomics, the same bits on every run. The first code lines are asked
// of L2 before pdl_entry.

#ifndef QMMA_LOADS
#define QMMA_LOADS 2
#endif
#define QMMA_MAXWARPS 16
#define QMMA_MAXR 8

// qmma_prmt is prmt.b32 (__byte_perm): bytes of a (0..3) and b (4..7)
// picked by the nibbles of sel.
__device__ __forceinline__ u32 qmma_prmt(u32 a, u32 b, u32 sel) {
	u32 d;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
	return d;
}

__device__ __forceinline__ u32 qmma_hsub(u32 a, u32 b) {
	u32 d;
	asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
	return d;
}

// qmma_mma adds a · b to c (m16n8k16, f16 in, f32 accumulation); not
// volatile, so that the compiler may schedule it.
__device__ __forceinline__ void qmma_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// qmma_dec gives the f16 pairs of one 32-bit word of codes, exactly: u4
// (8 codes e0..e7, low nibble first) p = (e0,e4), (e1,e5), (e2,e6),
// (e3,e7): nibbles 0 and 4 masked into the mantissa of 1024 are 1024 + c,
// less 1032 is c − 8; nibbles 1 and 5 land at 16·c, times 1/16 less 72 is
// c − 8. i8 (4 codes) p = (e0,e1), (e2,e3): the bytes with their sign bit
// flipped (c + 128) placed by prmt under 0x64 are 1024 + 128 + c, less 1152.
// e4m3 p = (e0,e1), (e2,e3) by cvt (sm_89 and later; else through f32).
template <int QT>
__device__ __forceinline__ void qmma_dec(u32 u, u32* p) {
	if (QT == QT_U4) {
		const u32 LO = 0x000f000fu, HI = 0x00f000f0u, EX = 0x64006400u;
		u32 s = u >> 8;
		p[0] = qmma_hsub(q_and_or(u, LO, EX), 0x64086408u);
		p[1] = h2_fma(q_and_or(u, HI, EX), 0x2c002c00u, 0xd480d480u);
		p[2] = qmma_hsub(q_and_or(s, LO, EX), 0x64086408u);
		p[3] = h2_fma(q_and_or(s, HI, EX), 0x2c002c00u, 0xd480d480u);
	} else if (QT == QT_I8) {
		u32 v = u ^ 0x80808080u;
		p[0] = qmma_hsub(qmma_prmt(v, 0x64646464u, 0x4140u), 0x64806480u);
		p[1] = qmma_hsub(qmma_prmt(v, 0x64646464u, 0x4342u), 0x64806480u);
	} else {
		p[0] = e4m3x2_h2(u);
		p[1] = e4m3x2_h2(u >> 16);
	}
}

// qmma_slice gives the four codes (P0 lo, P0 hi, P1 lo, P1 hi) of slice s of
// a row (s: the row's 4-code groups in the order qmma_dec's pairs take
// them: u4 word s/2, pairs 2·(s mod 2) and 2·(s mod 2) + 1; else 4s..4s+3,
// as i8 and e4m3 words give them).
template <bool U4>
__device__ __forceinline__ void qmma_slice(int s, int* k) {
	if (U4) {
		int b = 8 * (s >> 1) + 2 * (s & 1);
		k[0] = b, k[1] = b + 4, k[2] = b + 1, k[3] = b + 5;
	} else {
		k[0] = 4 * s, k[1] = 4 * s + 1, k[2] = 4 * s + 2, k[3] = 4 * s + 3;
	}
}

// qmma_xs is the dynamic shared memory of the qmma kernels: x's B
// fragments (see above).
extern __shared__ uint4 qmma_xs[];

// qmma_split splits a and b into f16 hi and lo parts (a = hi + lo to
// about 22 bits), packed two a word.
__device__ __forceinline__ void qmma_split(float a, float b, u32* hi, u32* lo) {
	u16 ha = f32_to_f16(a), hb = f32_to_f16(b);
	u16 la = f32_to_f16(a - f16_to_f32(ha)), lb = f32_to_f16(b - f16_to_f32(hb));
	*hi = (u32)ha | ((u32)hb << 16), *lo = (u32)la | ((u32)lb << 16);
}

// qmma_stage fills qmma_xs with rows 0..R-1 of x [R, K] (T steps of E
// slices a row, rs 16-byte units a row), split hi + lo in f16 after
// scaling each row by 2^e_r (e_r from its largest magnitude, through
// emax), and sets unscale[r] = 2^-e_r. Slices past K are zero.
template <int E, bool U4>
__device__ __forceinline__ void qmma_stage(const float* x, int R, int K, int T, int rs, float* unscale, int* emax) {
	int lane = threadIdx.x & 31;
	if (threadIdx.x < QMMA_MAXR) emax[threadIdx.x] = 0;
	__syncthreads();
	for (int r = 0; r < R; r++) {
		int m = 0; // the largest |x| as its bits (non-negative: ordered as ints)
		for (int k = threadIdx.x; k < K; k += blockDim.x) m = max(m, __float_as_int(x[(long long)r * K + k]) & 0x7fffffff);
		for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
		if (lane == 0) atomicMax(emax + r, m);
	}
	__syncthreads();
	int npos = T * E;
	for (int i = threadIdx.x; i < R * npos; i += blockDim.x) {
		int r = i / npos, pos = i - r * npos;
		// The power of two: the largest magnitude m·2^(E-127), E its
		// biased exponent (1 for subnormals and 0), times 2^(141-E) lies
		// in [2^14, 2^15); at most 2^100 so that 2^-e stays normal.
		int be = max(1, (int)(emax[r] >> 23));
		int e = min(100, 141 - be);
		float sc = __uint_as_float((u32)(127 + e) << 23);
		if (pos == 0) unscale[r] = __uint_as_float((u32)(127 - e) << 23);
		int st = pos / E, w = pos - st * E, j = w >> 2, t = w & 3;
		int s = st * E + t * (E / 4) + j;
		int k[4];
		qmma_slice<U4>(s, k);
		u32 hi[2] = {0u, 0u}, lo[2] = {0u, 0u};
		if (k[0] < K) {
#pragma unroll
			for (int h = 0; h < 2; h++)
				qmma_split(x[(long long)r * K + k[2 * h]] * sc, x[(long long)r * K + k[2 * h + 1]] * sc, &hi[h], &lo[h]);
		}
		qmma_xs[r * rs + pos] = make_uint4(hi[0], hi[1], lo[0], lo[1]);
	}
}

#define QMMA_PARAMS                                                                                                         \
	const float *__restrict__ x, const unsigned char *__restrict__ w, long long stride, const void *__restrict__ s, int st, \
		int sc, int br, int gs, float *__restrict__ y, int R, int K, int N, int S
#define QMMA_ARGS x, w, stride, s, st, sc, br, gs, y, R, K, N, S

// qmma_load reads one step's codes (rows f0 and f1 of the lane: vector
// 4·step + t) and the four scales its D columns take (rows f0 and f1,
// the groups of lanes ta and tb: vector v lies in group v >> gs, a group
// being 2^gs vectors), zeros outside the weight.
template <int E>
__device__ __forceinline__ void qmma_load(const uint4* w0, const uint4* w1, bool ok0, bool ok1, const void* s, int st,
                                          long long s0, long long s1, int gs, int K, int T, int step, int t, int ta,
                                          int tb, uint4* q, float* sv) {
	const uint4 z = make_uint4(0u, 0u, 0u, 0u);
	int kc = step * 4 * E;
	bool in = step < T && kc + t * E < K;
	q[0] = in && ok0 ? ld_stream(w0 + 4 * step + t) : z;
	q[1] = in && ok1 ? ld_stream(w1 + 4 * step + t) : z;
	int ka = kc + ta * E, kb = kc + tb * E;
	bool ia = step < T && ka < K, ib = step < T && kb < K;
	int ga = (4 * step + ta) >> gs, gb = (4 * step + tb) >> gs;
	sv[0] = ia && ok0 ? load_w(s, st, s0 + ga) : 0.f;
	sv[2] = ia && ok1 ? load_w(s, st, s1 + ga) : 0.f;
	if (gs > 0) {
		// ta is even and tb = ta + 1: one group (a lane past K meets
		// zero x, so its column is 0 whatever its scale).
		sv[1] = sv[0], sv[3] = sv[2];
	} else {
		sv[1] = ib && ok0 ? load_w(s, st, s0 + gb) : 0.f;
		sv[3] = ib && ok1 ? load_w(s, st, s1 + gb) : 0.f;
	}
}

// qmma_impl: NS sets of two x rows (R <= 2·NS); scale groups of 2^gs
// vectors along K (quant.cu's bc = 2^gs·E). Grid: ceil(tiles / (W/S))
// blocks of W warps; dynamic shared memory R·(T·E + 4)·16 bytes.
template <int QT, int NS>
__device__ __forceinline__ void qmma_impl(QMMA_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16;   // codes a 16-byte vector
	const int J = E / 4;                     // slices (mmas) a vector
	const int U = QMMA_LOADS;                // steps a batch
	__shared__ float red[QMMA_MAXWARPS * 2 * NS * 16];
	__shared__ float unscale[QMMA_MAXR];
	__shared__ int emax[QMMA_MAXR];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int g = lane >> 2, t = lane & 3;
	int G = nw / S, gi = warp / S, p = warp - gi * S;
	int tile = blockIdx.x * G + gi, tiles = (N + 15) >> 4;
	int T = (K + 4 * E - 1) / (4 * E), rs = T * E + 4;
	int f0 = tile * 16 + g, f1 = f0 + 8;
	bool ok0 = tile < tiles && f0 < N, ok1 = tile < tiles && f1 < N;
	const uint4* w0 = (const uint4*)(w + (long long)(ok0 ? f0 : 0) * stride);
	const uint4* w1 = (const uint4*)(w + (long long)(ok1 ? f1 : 0) * stride);
	long long s0 = (long long)((ok0 ? f0 : 0) / br) * sc, s1 = (long long)((ok1 ? f1 : 0) / br) * sc;
	// D columns 2t and 2t + 1: the groups of lanes ta and tb, x row
	// 2·set + t/2.
	int ta = (2 * t) & 3, tb = ta + 1;
	if (t == 0) {
#pragma unroll
		for (int u = 0; u < 2 * U; u++) {
			int step = p + S * u;
			if (step < T) {
				if (ok0) prefetch_l2(w0 + 4 * step);
				if (ok1) prefetch_l2(w1 + 4 * step);
			}
		}
	}
	pdl_entry();
	uint4 q[U][2];
	float sv[U][4];
#pragma unroll
	for (int u = 0; u < U; u++)
		qmma_load<E>(w0, w1, ok0, ok1, s, st, s0, s1, gs, K, T, p + S * u, t, ta, tb, q[u], sv[u]);
	qmma_stage<E, QT == QT_U4>(x, R, K, T, rs, unscale, emax);
	__syncthreads();
	// The B fragments this lane reads: lanes with t = g mod 4 carry x row
	// 2·set + g/4 (the others keep zeros).
	const uint4* bp[NS];
	bool bact[NS];
#pragma unroll
	for (int j = 0; j < NS; j++) {
		int r = 2 * j + (g >> 2);
		bact[j] = t == (g & 3) && r < R;
		bp[j] = qmma_xs + min(r, R - 1) * rs + t;
	}
	float acc[NS][4];
	uint4 bv[NS]; // zero in the lanes that carry no x, which never load it
#pragma unroll
	for (int j = 0; j < NS; j++) {
		bv[j] = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
		for (int i = 0; i < 4; i++) acc[j][i] = 0.f;
	}
	for (int b0 = tile < tiles ? p : T; b0 < T; b0 += S * U) {
		uint4 qn[U][2];
		float svn[U][4];
#pragma unroll
		for (int u = 0; u < U; u++)
			qmma_load<E>(w0, w1, ok0, ok1, s, st, s0, s1, gs, K, T, b0 + S * (U + u), t, ta, tb, qn[u], svn[u]);
#pragma unroll
		for (int u = 0; u < U; u++) {
			int step = b0 + S * u;
			if (step >= T) break;
			float d[NS][4];
#pragma unroll
			for (int j = 0; j < NS; j++)
#pragma unroll
				for (int i = 0; i < 4; i++) d[j][i] = 0.f;
#pragma unroll
			for (int wd = 0; wd < 4; wd++) {
				u32 pa[4], pb[4];
				qmma_dec<QT>(vec_word(q[u][0], wd), pa);
				qmma_dec<QT>(vec_word(q[u][1], wd), pb);
#pragma unroll
				for (int m = 0; m < J / 4; m++) {
					int sl = wd * (J / 4) + m;
#pragma unroll
					for (int j = 0; j < NS; j++) {
						if (2 * j >= R) continue;
						if (bact[j]) bv[j] = bp[j][step * E + 4 * sl];
						qmma_mma(d[j], pa[2 * m], pb[2 * m], pa[2 * m + 1], pb[2 * m + 1], bv[j].x, bv[j].y);
						qmma_mma(d[j], pa[2 * m], pb[2 * m], pa[2 * m + 1], pb[2 * m + 1], bv[j].z, bv[j].w);
					}
				}
			}
#pragma unroll
			for (int j = 0; j < NS; j++)
#pragma unroll
				for (int i = 0; i < 4; i++) acc[j][i] = fmaf(d[j][i], sv[u][i], acc[j][i]);
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			q[u][0] = qn[u][0], q[u][1] = qn[u][1];
#pragma unroll
			for (int i = 0; i < 4; i++) sv[u][i] = svn[u][i];
		}
	}
	// Lane t holds, for x row 2·set + t/2, the sums of lanes ta and tb's
	// groups; lane t ^ 1 the other two.
#pragma unroll
	for (int j = 0; j < NS; j++) {
		float v0 = acc[j][0] + acc[j][1], v1 = acc[j][2] + acc[j][3];
		v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
		v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
		if ((t & 1) == 0) {
			int r = 2 * j + (t >> 1);
			red[(warp * 2 * NS + r) * 16 + g] = v0;
			red[(warp * 2 * NS + r) * 16 + g + 8] = v1;
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < G * 2 * NS * 16; i += blockDim.x) {
		int fl = i & 15, r = (i >> 4) % (2 * NS), gg = (i >> 4) / (2 * NS);
		int f = (blockIdx.x * G + gg) * 16 + fl;
		if (r >= R || f >= N) continue;
		float a = 0.f;
		for (int q2 = 0; q2 < S; q2++) a += red[((gg * S + q2) * 2 * NS + r) * 16 + fl];
		y[(long long)r * N + f] = a * unscale[r];
	}
}

// The instances the Go side launches (qmmaKernelNames in quantmma.go):
// qmma_<codes>_n<NS>, bounded to QMMA_MAXWARPS warps a block (at most 128
// registers a thread, so that every tuning's block can launch).
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_f8_n1(QMMA_PARAMS) { qmma_impl<QT_F8, 1>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_f8_n2(QMMA_PARAMS) { qmma_impl<QT_F8, 2>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_f8_n4(QMMA_PARAMS) { qmma_impl<QT_F8, 4>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_i8_n1(QMMA_PARAMS) { qmma_impl<QT_I8, 1>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_i8_n2(QMMA_PARAMS) { qmma_impl<QT_I8, 2>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_i8_n4(QMMA_PARAMS) { qmma_impl<QT_I8, 4>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_u4_n1(QMMA_PARAMS) { qmma_impl<QT_U4, 1>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_u4_n2(QMMA_PARAMS) { qmma_impl<QT_U4, 2>(QMMA_ARGS); }
extern "C" __global__ void __launch_bounds__(QMMA_MAXWARPS * 32) qmma_u4_n4(QMMA_PARAMS) { qmma_impl<QT_U4, 4>(QMMA_ARGS); }
