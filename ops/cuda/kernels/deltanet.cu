// Gated DeltaNet kernels (ops/deltanet.go): split, causal_conv,
// gdn_prep, gdn_gates, gdn_scan and gated_rmsnorm. The arithmetic follows
// the CPU kernels (ops/cpu/deltanet.go): f32 products and sums where the CPU
// computes in f32, f64 for sums of squares, activations and gates where it
// computes in f64. Every name here starts with gdn_.
//
// This group reports no error codes of its own (its range is 20 to 29): the
// only data-dependent errors are a bad call record, which read_call reports.

// Activation codes (the Go side's gdnAct).
#define GDN_ACT_IDENTITY 0
#define GDN_ACT_SILU 1
#define GDN_ACT_SIGMOID 2

// gdn_act applies activation act in f64, as the CPU's activationFunc does.
__device__ __forceinline__ double gdn_act(int act, double x) {
	if (act == GDN_ACT_SILU) return silu_d(x);
	if (act == GDN_ACT_SIGMOID) return sigmoid_d(x);
	return x;
}

// gdn_split: each row of x is repetitions of [part 0 | part 1 | ...] of per
// elements in all; part p of repetition rep (the row's repetitions counted
// on across rows: rep = row·heads + head) goes to ys[p] at rep·width_p.
// offs holds the parts' prefix offsets (nparts + 1 of them, offs[nparts] =
// per). Grid-stride over the n elements of x (1-D grid, any block size):
// reads and writes are both contiguous within a part.
extern "C" __global__ void gdn_split(const float* x, const unsigned long long* ys, const int* offs, int nparts, int per, long long n) {
	pdl_entry();
	GRID_STRIDE(i, n) {
		long long rep = i / per;
		int cc = (int)(i - rep * per);
		int p = 0;
		while (p + 1 < nparts && cc >= offs[p + 1]) p++;
		int lo = offs[p];
		((float*)ys[p])[rep * (offs[p + 1] - lo) + (cc - lo)] = x[i];
	}
}

// gdn_causal_conv: the causal depthwise convolution of x[rows, c] with
// w[c, k] (type wt) over the history ring[(k−1)·dil, c], then the ring
// update. Grid (channel blocks, row chunks of chunk rows), 1-D blocks: one
// thread per (channel, chunk) computes the chunk's rows in order. Row t at
// position p = pos + t sums w[ch, tap]·x̃(p − (k−1−tap)·dil) over the taps
// in tap order, in f32 as the CPU does: x̃(j) is x's row j − pos for
// j ≥ pos, the ring's row j mod R for 0 ≤ j < pos, and no term for j < 0.
// Rows t ≥ used are 0. Since chunk ≥ R, only chunk 0 reads the ring, so its
// threads, after their rows, write the ring rows of the call's last R
// positions for their channel: no other thread reads or writes them.
extern "C" __global__ void gdn_causal_conv(const float* x, const void* w, int wt, float* ring, const int* call, int* err, float* y,
                                           int rows, int c, int k, int dil, int act, int chunk) {
	pdl_entry();
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return;
	int ch = blockIdx.x * blockDim.x + threadIdx.x;
	if (ch >= c) return;
	long long r = (long long)(k - 1) * dil;
	int t0 = blockIdx.y * chunk, t1 = min(rows, t0 + chunk);
	for (int t = t0; t < t1; t++) {
		long long o = (long long)t * c + ch;
		if (t >= used) {
			y[o] = 0.f;
			continue;
		}
		long long p = (long long)pos + t;
		float acc = 0.f;
		for (int tap = 0; tap < k; tap++) {
			long long j = p - (long long)(k - 1 - tap) * dil;
			float s;
			if (j >= pos)
				s = x[(j - pos) * c + ch];
			else if (j >= 0)
				s = ring[(j % r) * c + ch];
			else
				continue;
			acc += load_w(w, wt, (long long)ch * k + tap) * s;
		}
		y[o] = act == GDN_ACT_IDENTITY ? acc : (float)gdn_act(act, (double)acc);
	}
	if (blockIdx.y != 0) return;
	long long end = (long long)pos + used;
	for (long long j = max((long long)pos, end - r); j < end; j++) ring[(j % r) * c + ch] = x[(j - pos) * c + ch];
}

// gdn_prep: mix[rows, 2·nk·dk + vd] = [q | k | v] into q̂, k̂ and v. Grid
// (rows, 2·nk + value chunks), 1-D blocks (a multiple of 32 threads): block
// y < nk normalizes query head y (then multiplies it by scale in f32, as
// the CPU does), nk ≤ y < 2·nk key head y − nk, each with its sum of squares
// in f64; the rest copy vspan elements each of the row's v.
extern "C" __global__ void gdn_prep(const float* mix, float* q, float* k, float* v, int nk, int dk, int vd, float eps, float scale,
                                    int vspan) {
	pdl_entry();
	__shared__ double scratch[32];
	long long t = blockIdx.x;
	long long kd = (long long)nk * dk;
	const float* m = mix + t * (2 * kd + vd);
	int yb = blockIdx.y;
	if (yb >= 2 * nk) {
		long long lo = (long long)(yb - 2 * nk) * vspan, hi = min(lo + vspan, (long long)vd);
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) v[t * vd + i] = m[2 * kd + i];
		return;
	}
	bool isk = yb >= nk;
	int h = isk ? yb - nk : yb;
	const float* src = m + (isk ? kd : 0) + (long long)h * dk;
	float* dst = (isk ? k : q) + t * kd + (long long)h * dk;
	double ss = 0;
	for (int i = threadIdx.x; i < dk; i += blockDim.x) {
		double a = src[i];
		ss += a * a;
	}
	ss = block_sum_d(ss, scratch);
	double inv = 1.0 / sqrt(ss + (double)eps);
	for (int i = threadIdx.x; i < dk; i += blockDim.x) {
		float val = (float)((double)src[i] * inv);
		if (!isk) val *= scale;
		dst[i] = val;
	}
}

// gdn_softplus is log(1 + eˣ), x itself past 20 (as torch and the CPU).
__device__ __forceinline__ double gdn_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

// gdn_gates: g = −exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b) in
// f64, over n = rows·nv elements (A_log and dt_bias weights of nv, types
// wa and wd). Grid-stride, 1-D.
extern "C" __global__ void gdn_gates(const float* a, const float* b, const void* alog, int wa, const void* dtb, int wd, float* g, float* beta,
                                     long long n, int nv) {
	pdl_entry();
	GRID_STRIDE(i, n) {
		int j = (int)(i % nv);
		double al = (double)load_w(alog, wa, j), db = (double)load_w(dtb, wd, j);
		g[i] = (float)(-exp(al) * gdn_softplus((double)a[i] + db));
		beta[i] = (float)sigmoid_d((double)b[i]);
	}
}

// GDN_SCAN_RP is the most state rows one gdn_scan thread keeps in registers.
#define GDN_SCAN_RP 16
// gdn_scan's largest block is 512 threads, its launch bound (written as a
// number: TestKernelTable matches the declaration literally).

// gdn_group_sum sums v over the lanes of a warp that share a column (lanes
// cw apart, cw a power of two dividing 32); every such lane gets the same
// total.
__device__ __forceinline__ float gdn_group_sum(float v, int cw) {
	for (int off = 16; off >= cw; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

// gdn_scan: the gated delta rule over the call's rows, writing S[nv, dk, dv].
// The columns of a head's state evolve independently, so grid (column
// tiles of cw, value heads nv) splits each head's state over blocks: a
// decode step (one row) runs on many blocks. A block (a multiple of 32
// threads, at most 512) is groups = blockDim/cw groups of cw
// threads; thread (grp, c) keeps the state rows grp + u·groups (u <
// GDN_SCAN_RP) of column tile·cw + c in registers for the whole call. The
// rows are processed in order, staged tc at a time in shared memory (k̂, q̂
// of the head's key head, the tile's v, decay exp(g) in f64 rounded to f32
// as the CPU does, beta). Per row: S ← decay·S; m = Sᵀk̂ (a warp shuffle
// over the groups of a warp, then the warps' sums in order through shared
// memory); S ← S + k̂ (beta (v − m)); o = Sᵀq̂ likewise. Two barriers a row
// (the two reductions use separate buffers). S starts as zero when the
// position is 0; rows t ≥ used of o are 0.
// Shared memory (floats): 2·tc·dk + tc·cw + 2·tc + 2·(blockDim/32)·cw.
extern "C" __global__ void __launch_bounds__(512) gdn_scan(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                                           float* S, const int* call, int* err, float* o, int rows, int nk, int nv, int dk,
                                                           int dv, int cw, int tc) {
	pdl_entry();
	extern __shared__ float gdn_smem[];
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return;
	int nw = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int c = threadIdx.x % cw, grp = threadIdx.x / cw, groups = blockDim.x / cw;
	int j = blockIdx.y, col0 = blockIdx.x * cw, col = col0 + c;
	int kh = j / (nv / nk);
	bool active = col < dv;
	long long kd = (long long)nk * dk, vd = (long long)nv * dv;
	float* sh = S + (long long)j * dk * dv;
	float* sk = gdn_smem;
	float* sq = sk + tc * dk;
	float* sv = sq + tc * dk;
	float* sd = sv + tc * cw;
	float* sb = sd + tc;
	float* red = sb + tc;
	float s[GDN_SCAN_RP];
#pragma unroll
	for (int u = 0; u < GDN_SCAN_RP; u++) {
		int r = grp + u * groups;
		s[u] = active && r < dk && pos != 0 ? sh[(long long)r * dv + col] : 0.f;
	}
	for (int t0 = 0; t0 < used; t0 += tc) {
		int nt = min(tc, used - t0);
		for (int i = threadIdx.x; i < nt * dk; i += blockDim.x) {
			int tt = i / dk, r = i - tt * dk;
			long long src = (t0 + tt) * kd + (long long)kh * dk + r;
			sk[i] = k[src];
			sq[i] = q[src];
		}
		for (int i = threadIdx.x; i < nt * cw; i += blockDim.x) {
			int tt = i / cw, cl = col0 + i - tt * cw;
			sv[i] = cl < dv ? v[(t0 + tt) * vd + (long long)j * dv + cl] : 0.f;
		}
		if ((int)threadIdx.x < nt) {
			long long gi = (long long)(t0 + threadIdx.x) * nv + j;
			sd[threadIdx.x] = (float)exp((double)g[gi]);
			sb[threadIdx.x] = beta[gi];
		}
		__syncthreads();
		for (int tt = 0; tt < nt; tt++) {
			const float* kt = sk + tt * dk;
			const float* qt = sq + tt * dk;
			float dec = sd[tt];
			float pm = 0.f;
#pragma unroll
			for (int u = 0; u < GDN_SCAN_RP; u++) {
				int r = grp + u * groups;
				if (r < dk) {
					s[u] *= dec;
					pm += kt[r] * s[u];
				}
			}
			pm = gdn_group_sum(pm, cw);
			if (lane < cw) red[w * cw + lane] = pm;
			__syncthreads();
			float m = 0.f;
			for (int i = 0; i < nw; i++) m += red[i * cw + c];
			float delta = sb[tt] * (sv[tt * cw + c] - m);
			float po = 0.f;
#pragma unroll
			for (int u = 0; u < GDN_SCAN_RP; u++) {
				int r = grp + u * groups;
				if (r < dk) {
					s[u] += kt[r] * delta;
					po += qt[r] * s[u];
				}
			}
			po = gdn_group_sum(po, cw);
			if (lane < cw) red[(nw + w) * cw + lane] = po;
			__syncthreads();
			if ((int)threadIdx.x < cw && active) {
				float ov = 0.f;
				for (int i = 0; i < nw; i++) ov += red[(nw + i) * cw + c];
				o[(t0 + tt) * vd + (long long)j * dv + col] = ov;
			}
		}
	}
	if (active) {
#pragma unroll
		for (int u = 0; u < GDN_SCAN_RP; u++) {
			int r = grp + u * groups;
			if (r < dk) sh[(long long)r * dv + col] = s[u];
		}
	}
	for (long long i = threadIdx.x; i < (long long)(rows - used) * cw; i += blockDim.x) {
		long long t = used + i / cw;
		int cl = col0 + (int)(i % cw);
		if (cl < dv) o[t * vd + (long long)j * dv + cl] = 0.f;
	}
}

// ---- gdn_scan over many rows: the chunked (WY) form ----
//
// The gated delta rule in chunks of GDN_CK rows, as flash-linear-attention's
// chunk_gated_delta_rule, in f32 throughout (the cumulative log-decays in
// f64); the Go side's optest.scanChunked is the same arithmetic in the same
// order. Per value head j, a chunk of L rows entering with state S₀, with
// γ_t = Σ_{s≤t} g_s from the chunk's first row and Γ_ti = exp(γ_t − γ_i):
//
//	A_ti = β_t (k̂_t·k̂_i) Γ_ti (i < t), T = (I + A)⁻¹ (unit lower triangular)
//	P_ti = (q̂_t·k̂_i) Γ_ti (i ≤ t)
//	X_t  = β_t (v_t − e^{γ_t} S₀ᵀk̂_t), U = T X
//	o_t  = e^{γ_t} S₀ᵀq̂_t + Σ_{i≤t} P_ti U_i
//	S    = e^{γ_{L−1}} S₀ + Σ_i k̂_i (Γ_{L−1,i} U_i)ᵀ
//
// gdn_chunk_prep makes T, P and the decays of every (chunk, head) at once;
// gdn_chunk_scan then runs the chunks in order, one block per (column tile
// of the state, head). Every decay factor is at most 1.

// GDN_CK is the rows of a chunk.
#define GDN_CK 64
// GDN_CK_WS is the floats of a (chunk, head)'s workspace: Tt[C][C] (Tt[i][t]
// = T_ti), Pt[C][C] (Pt[i][t] = P_ti), eg[C] = e^{γ_t}, ek[C] = Γ_{L−1,t};
// all zero outside the chunk's rows and above the diagonal.
#define GDN_CK_WS (2 * GDN_CK * GDN_CK + 2 * GDN_CK)
// GDN_CK_COLS is the state columns of a gdn_chunk_scan block (a warp's lanes).
#define GDN_CK_COLS 32
// GDN_CK_RP is the most state rows a gdn_chunk_scan thread updates: 4 at a
// time, 8 warps, so key dims up to 8·GDN_CK_RP = 128.
#define GDN_CK_RP 16

// gdn_chunk_prep: grid (chunks of the rows, value heads nv), 256 threads.
// Block (c, j) with the chunk's first row c0 = c·GDN_CK < used (others
// return) stages its key head's k̂ and q̂ rows (stride dk + 1), the
// cumulative log-decays in f64 (summed in row order), then writes P and the
// decays, builds A where q̂ was, and solves for T column by column: thread
// i, for t = i+1 .. L−1, T_ti = −Σ_{m=i}^{t−1} A_tm T_mi (no barrier: the
// columns are independent). The workspace of (c, j) starts at
// ws + (c·nv + j)·GDN_CK_WS.
// Shared memory (floats): 2·GDN_CK (the f64 γ) + GDN_CK + GDN_CK·(dk+1) +
// max(GDN_CK·(dk+1), 2·GDN_CK·(GDN_CK+1)).
extern "C" __global__ void __launch_bounds__(256) gdn_chunk_prep(const float* q, const float* k, const float* g, const float* beta,
                                                                 const int* call, int* err, float* ws, int rows, int nk, int nv, int dk) {
	pdl_entry();
	extern __shared__ float gdn_smem[];
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return;
	int c0 = blockIdx.x * GDN_CK, j = blockIdx.y;
	if (c0 >= used) return;
	int L = min(GDN_CK, used - c0);
	int kh = j / (nv / nk), ks = dk + 1, as = GDN_CK + 1;
	long long kd = (long long)nk * dk;
	double* sg = (double*)gdn_smem;
	float* sb = gdn_smem + 2 * GDN_CK;
	float* sk = sb + GDN_CK;
	float* sq = sk + GDN_CK * ks;  // q̂, then A [C][C+1] and T [C][C+1]
	float* sa = sq;
	float* st = sq + GDN_CK * as;
	float* out = ws + ((long long)blockIdx.x * nv + j) * GDN_CK_WS;
	for (int i = threadIdx.x; i < L * dk; i += blockDim.x) {
		int t = i / dk, r = i - t * dk;
		long long src = (c0 + t) * kd + (long long)kh * dk + r;
		sk[t * ks + r] = k[src];
		sq[t * ks + r] = q[src];
	}
	if (threadIdx.x == 0) {
		double acc = 0;
		for (int t = 0; t < L; t++) {
			acc += (double)g[(long long)(c0 + t) * nv + j];
			sg[t] = acc;
		}
	}
	if ((int)threadIdx.x < L) sb[threadIdx.x] = beta[(long long)(c0 + threadIdx.x) * nv + j];
	__syncthreads();
	if ((int)threadIdx.x < GDN_CK) {
		int t = threadIdx.x;
		out[2 * GDN_CK * GDN_CK + t] = t < L ? (float)exp(sg[t]) : 0.f;
		out[2 * GDN_CK * GDN_CK + GDN_CK + t] = t < L ? (float)exp(sg[L - 1] - sg[t]) : 0.f;
	}
	// Pt[i][t]: lanes take consecutive t (q̂ rows an odd stride apart).
	for (int e = threadIdx.x; e < GDN_CK * GDN_CK; e += blockDim.x) {
		int i = e / GDN_CK, t = e - i * GDN_CK;
		float p = 0.f;
		if (i <= t && t < L) {
			const float* qt = sq + t * ks;
			const float* ki = sk + i * ks;
			float d = 0.f;
			for (int r = 0; r < dk; r++) d += qt[r] * ki[r];
			p = d * (float)exp(sg[t] - sg[i]);
		}
		out[GDN_CK * GDN_CK + e] = p;
	}
	__syncthreads();
	for (int e = threadIdx.x; e < GDN_CK * GDN_CK; e += blockDim.x) {
		int t = e / GDN_CK, i = e - t * GDN_CK;
		float a = 0.f;
		if (i < t && t < L) {
			const float* kt = sk + t * ks;
			const float* ki = sk + i * ks;
			float d = 0.f;
			for (int r = 0; r < dk; r++) d += kt[r] * ki[r];
			a = sb[t] * d * (float)exp(sg[t] - sg[i]);
		}
		sa[t * as + i] = a;
	}
	__syncthreads();
	if ((int)threadIdx.x < L) {
		int i = threadIdx.x;
		st[i * as + i] = 1.f;
		for (int t = i + 1; t < L; t++) {
			float sum = 0.f;
			for (int m = i; m < t; m++) sum += sa[t * as + m] * st[m * as + i];
			st[t * as + i] = -sum;
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < GDN_CK * GDN_CK; e += blockDim.x) {
		int i = e / GDN_CK, t = e - i * GDN_CK;
		out[e] = i <= t && t < L ? st[t * as + i] : 0.f;
	}
}

// gdn_chunk_scan: grid (column tiles of GDN_CK_COLS, value heads nv), 256
// threads: lane c owns column tile·GDN_CK_COLS + c, warp w the chunk's rows
// 8w .. 8w+7. The tile of S (dk rows padded to dkp, a multiple of 4, with
// zeros) stays in shared memory from the first chunk to the last (zero when
// the position is 0). Per chunk (the workspace of gdn_chunk_prep):
//  1. stage k̂ and q̂ [C][dkp] (zero rows past the chunk); Y = K S₀ and
//     Z = Q S₀ in registers (the k̂, q̂ rows read as float4 broadcasts);
//  2. Tt and Pt [C][C] replace q̂; X = β (v − e^γ Y) to shared; U = T X;
//  3. o = e^γ Z + P U, written;
//  4. S = e^{γ_{L−1}} S + Kᵀ (Γ_{L−1,·} U), each thread 4 rows at a time of
//     its column, rows 4(w + 8u) .. +3.
// Rows t ≥ used of o are 0. Shared memory (floats): dkp·GDN_CK_COLS +
// GDN_CK·dkp + max(GDN_CK·dkp, 2·GDN_CK²) + 2·GDN_CK·GDN_CK_COLS + 3·GDN_CK.
extern "C" __global__ void __launch_bounds__(256) gdn_chunk_scan(const float* q, const float* k, const float* v, const float* beta,
                                                                 const float* ws, float* S, const int* call, int* err, float* o,
                                                                 int rows, int nk, int nv, int dk, int dv) {
	pdl_entry();
	extern __shared__ float gdn_smem[];
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return;
	int dkp = (dk + 3) & ~3;
	int w = threadIdx.x >> 5, c = threadIdx.x & 31, t0 = 8 * w;
	int j = blockIdx.y, col0 = blockIdx.x * GDN_CK_COLS, col = col0 + c;
	bool active = col < dv;
	int kh = j / (nv / nk);
	long long kd = (long long)nk * dk, vd = (long long)nv * dv;
	float* sh = S + (long long)j * dk * dv;
	float* ss = gdn_smem;                   // S [dkp][COLS]
	float* sk = ss + dkp * GDN_CK_COLS;     // k̂ [C][dkp]
	float* sr = sk + GDN_CK * dkp;          // q̂ [C][dkp], then Tt, Pt [C][C]
	float* sx = sr + max(GDN_CK * dkp, 2 * GDN_CK * GDN_CK);  // X [C][COLS]
	float* su = sx + GDN_CK * GDN_CK_COLS;  // U [C][COLS]
	float* sb = su + GDN_CK * GDN_CK_COLS;  // β, e^γ, Γ_{L−1,·} [C]
	float* seg = sb + GDN_CK;
	float* sek = seg + GDN_CK;
	for (int i = threadIdx.x; i < dkp * GDN_CK_COLS; i += blockDim.x) {
		int r = i / GDN_CK_COLS, cl = col0 + i % GDN_CK_COLS;
		ss[i] = pos != 0 && r < dk && cl < dv ? sh[(long long)r * dv + cl] : 0.f;
	}
	for (int c0 = 0; c0 < used; c0 += GDN_CK) {
		int L = min(GDN_CK, used - c0);
		const float* wsc = ws + ((long long)(c0 / GDN_CK) * nv + j) * GDN_CK_WS;
		for (int i = threadIdx.x; i < GDN_CK * dkp; i += blockDim.x) {
			int t = i / dkp, r = i - t * dkp;
			bool in = t < L && r < dk;
			long long src = (c0 + t) * kd + (long long)kh * dk + r;
			sk[i] = in ? k[src] : 0.f;
			sr[i] = in ? q[src] : 0.f;
		}
		if ((int)threadIdx.x < GDN_CK) {
			int t = threadIdx.x;
			sb[t] = t < L ? beta[(long long)(c0 + t) * nv + j] : 0.f;
			seg[t] = wsc[2 * GDN_CK * GDN_CK + t];
			sek[t] = wsc[2 * GDN_CK * GDN_CK + GDN_CK + t];
		}
		__syncthreads();
		// 1. Y = K S₀, Z = Q S₀ for rows t0 .. t0+7.
		float y[8], z[8];
#pragma unroll
		for (int a = 0; a < 8; a++) y[a] = z[a] = 0.f;
		for (int r = 0; r < dkp; r += 4) {
			float s0 = ss[r * GDN_CK_COLS + c], s1 = ss[(r + 1) * GDN_CK_COLS + c];
			float s2 = ss[(r + 2) * GDN_CK_COLS + c], s3 = ss[(r + 3) * GDN_CK_COLS + c];
#pragma unroll
			for (int a = 0; a < 8; a++) {
				float4 kv = *(const float4*)(sk + (t0 + a) * dkp + r);
				float4 qv = *(const float4*)(sr + (t0 + a) * dkp + r);
				y[a] += kv.x * s0;
				y[a] += kv.y * s1;
				y[a] += kv.z * s2;
				y[a] += kv.w * s3;
				z[a] += qv.x * s0;
				z[a] += qv.y * s1;
				z[a] += qv.z * s2;
				z[a] += qv.w * s3;
			}
		}
		__syncthreads();
		// 2. T and P over q̂; X, then U = T X (T is zero above the diagonal).
		for (int i = threadIdx.x; i < 2 * GDN_CK * GDN_CK / 4; i += blockDim.x)
			((float4*)sr)[i] = ((const float4*)wsc)[i];
#pragma unroll
		for (int a = 0; a < 8; a++) {
			int t = t0 + a;
			float x = 0.f;
			if (t < L && active) x = sb[t] * (v[(long long)(c0 + t) * vd + (long long)j * dv + col] - seg[t] * y[a]);
			sx[t * GDN_CK_COLS + c] = x;
		}
		__syncthreads();
		int iend = min(L, t0 + 8);
		float u[8];
#pragma unroll
		for (int a = 0; a < 8; a++) u[a] = 0.f;
		for (int i = 0; i < iend; i++) {
			float xv = sx[i * GDN_CK_COLS + c];
			float4 ta = *(const float4*)(sr + i * GDN_CK + t0), tb = *(const float4*)(sr + i * GDN_CK + t0 + 4);
			u[0] += ta.x * xv;
			u[1] += ta.y * xv;
			u[2] += ta.z * xv;
			u[3] += ta.w * xv;
			u[4] += tb.x * xv;
			u[5] += tb.y * xv;
			u[6] += tb.z * xv;
			u[7] += tb.w * xv;
		}
#pragma unroll
		for (int a = 0; a < 8; a++) su[(t0 + a) * GDN_CK_COLS + c] = u[a];
		__syncthreads();
		// 3. o = e^γ Z + P U.
		const float* sp = sr + GDN_CK * GDN_CK;
#pragma unroll
		for (int a = 0; a < 8; a++) z[a] *= seg[t0 + a];
		for (int i = 0; i < iend; i++) {
			float uv = su[i * GDN_CK_COLS + c];
			float4 pa = *(const float4*)(sp + i * GDN_CK + t0), pb = *(const float4*)(sp + i * GDN_CK + t0 + 4);
			z[0] += pa.x * uv;
			z[1] += pa.y * uv;
			z[2] += pa.z * uv;
			z[3] += pa.w * uv;
			z[4] += pb.x * uv;
			z[5] += pb.y * uv;
			z[6] += pb.z * uv;
			z[7] += pb.w * uv;
		}
		if (active) {
#pragma unroll
			for (int a = 0; a < 8; a++)
				if (t0 + a < L) o[(long long)(c0 + t0 + a) * vd + (long long)j * dv + col] = z[a];
		}
		// 4. S = e^{γ_{L−1}} S + Kᵀ (Γ_{L−1,·} U); only this thread touches
		// its rows of its column until the next chunk's first step.
		float eL = seg[L - 1];
		float acc[GDN_CK_RP];
#pragma unroll
		for (int b = 0; b < GDN_CK_RP / 4; b++) {
			int r = 4 * (w + 8 * b);
#pragma unroll
			for (int e = 0; e < 4; e++) acc[4 * b + e] = r < dkp ? eL * ss[(r + e) * GDN_CK_COLS + c] : 0.f;
		}
		for (int t = 0; t < L; t++) {
			float ue = su[t * GDN_CK_COLS + c] * sek[t];
#pragma unroll
			for (int b = 0; b < GDN_CK_RP / 4; b++) {
				int r = 4 * (w + 8 * b);
				if (r < dkp) {
					float4 kv = *(const float4*)(sk + t * dkp + r);
					acc[4 * b] += kv.x * ue;
					acc[4 * b + 1] += kv.y * ue;
					acc[4 * b + 2] += kv.z * ue;
					acc[4 * b + 3] += kv.w * ue;
				}
			}
		}
#pragma unroll
		for (int b = 0; b < GDN_CK_RP / 4; b++) {
			int r = 4 * (w + 8 * b);
			if (r < dkp) {
#pragma unroll
				for (int e = 0; e < 4; e++) ss[(r + e) * GDN_CK_COLS + c] = acc[4 * b + e];
			}
		}
		__syncthreads();
	}
	for (int i = threadIdx.x; i < dkp * GDN_CK_COLS; i += blockDim.x) {
		int r = i / GDN_CK_COLS, cl = col0 + i % GDN_CK_COLS;
		if (r < dk && cl < dv) sh[(long long)r * dv + cl] = ss[i];
	}
	for (long long i = threadIdx.x; i < (long long)(rows - used) * GDN_CK_COLS; i += blockDim.x) {
		long long t = used + i / GDN_CK_COLS;
		int cl = col0 + (int)(i % GDN_CK_COLS);
		if (cl < dv) o[t * vd + (long long)j * dv + cl] = 0.f;
	}
}

// gdn_gated_norm: gated_rmsnorm, y = w ⊙ o / sqrt(mean o² + eps) ⊙ act(z)
// over runs of g elements (w of g, type wt), in f64 as the CPU. One block
// per run (a multiple of 32 threads); y may be o's buffer (each thread
// writes only the elements it read).
extern "C" __global__ void gdn_gated_norm(const float* o, const float* z, const void* w, int wt, float* y, int g, float eps, int act) {
	pdl_entry();
	__shared__ double scratch[32];
	long long base = (long long)blockIdx.x * g;
	double ss = 0;
	for (int i = threadIdx.x; i < g; i += blockDim.x) {
		double a = o[base + i];
		ss += a * a;
	}
	ss = block_sum_d(ss, scratch);
	double inv = 1.0 / sqrt(ss / g + (double)eps);
	for (int i = threadIdx.x; i < g; i += blockDim.x) {
		double val = (double)load_w(w, wt, i) * (double)o[base + i] * inv * gdn_act(act, (double)z[base + i]);
		y[base + i] = (float)val;
	}
}
