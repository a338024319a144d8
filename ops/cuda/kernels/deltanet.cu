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
