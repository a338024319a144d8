// QSA sparse attention (ops/sparseattn.go): qsa_block_keys (the
// indexer's block keys and its raw key slot), qsa_select (block scores and
// their top-k: qsa_scores then qsa_topk), qsa_attention (GQA attention over
// the selected key blocks and the trailing keys) and gate_merge.
//
// Every per-run value (the position of row 0, the rows used) comes from the
// call record; sums that the CPU reference takes in f64 are f64 here, and
// every reduction runs in a fixed order, so a result is the same on every
// run.

// Error codes of this file (60..69); the Go side (sparseattn.go, qsaKernelErr)
// words them.
#define QSA_ERR_SLOT_CAPACITY 60 // qsa_block_keys: a = last position, b = slot rows
#define QSA_ERR_KEYS_CAPACITY 61 // qsa_block_keys: a = block, b = block key rows
#define QSA_ERR_RING_SHORT 62    // qsa_block_keys: a = ring rows, b = earlier keys of the block, c = block
#define QSA_ERR_SEL_CAPACITY 63  // qsa_select: a = row, b = position, c = blocks seen, d = block key rows
#define QSA_ERR_SEL_NAN 64       // qsa_select: a = row, b = block
#define QSA_ERR_ATTN_CAPACITY 65 // qsa_attention: a = last position, b = slot rows
#define QSA_ERR_ATTN_SEL 66      // qsa_attention: a = row, b = position, c = entry, d = its block id, e = blocks seen

// QSA_SC_PER_CTA is the blocks whose scores one qsa_scores block computes.
#define QSA_SC_PER_CTA 64

// ---------------------------------------------------------------- qsa_block_keys

// qsa_bk_check reads the call record and checks a qsa_block_keys run as the
// CPU does, in its order: the slot's capacity (linear), the block keys'
// capacity, and that a ring still holds the earlier keys of the first block
// the call completes. It returns false, after reporting, when the run must
// not happen. Both qsa_block_keys kernels call it, so an error stops both.
__device__ __forceinline__ bool qsa_bk_check(const int* call, int rows, int cr, int slotCap, int keyCap, int ring, int* err, int* pos,
                                             int* used) {
	if (!read_call(call, rows, err, pos, used)) return false;
	long long p0 = *pos, last = p0 + *used - 1;
	if (!ring && last >= slotCap) {
		report(err, QSA_ERR_SLOT_CAPACITY, (int)last, slotCap, 0);
		return false;
	}
	long long b0 = p0 / cr, b1 = (p0 + *used) / cr;
	if (b1 > keyCap) {
		report(err, QSA_ERR_KEYS_CAPACITY, (int)(b1 - 1), keyCap, 0);
		return false;
	}
	if (ring && b1 > b0 && p0 - b0 * cr > slotCap) {
		report(err, QSA_ERR_RING_SHORT, slotCap, (int)(p0 - b0 * cr), (int)b0);
		return false;
	}
	return true;
}

// qsa_block_keys: grid (⌈rows/cr⌉: the most blocks a call of rows rows can
// complete), block a multiple of 32 threads, dynamic shared memory d
// floats. Block i writes block key b = ⌊pos/cr⌋ + i when the call completes
// it (b < ⌊(pos + used)/cr⌋): the f64 mean of its cr raw keys (from kraw
// for positions of the call, else from the slot, ring row j mod slotCap),
// rounded to f32, RMS-normed with w (f64, eps) and rotated at position
// b·cr (rope_head). The slot is written afterwards by qsa_block_keys_slot.
extern "C" __global__ void qsa_block_keys(const float* kraw, const void* w, int wt, const float* slot, float* keys, const int* call,
                                          int* err, const double* freq, double m, int rows, int d, int rot, int cr, float eps,
                                          int slotCap, int keyCap, int ring) {
	pdl_entry();
	extern __shared__ float qsa_bk_sh[];
	__shared__ double scratch[32];
	int pos, used;
	if (!qsa_bk_check(call, rows, cr, slotCap, keyCap, ring, err, &pos, &used)) return;
	long long b = (long long)pos / cr + blockIdx.x;
	if (b >= ((long long)pos + used) / cr) return;
	float* kb = qsa_bk_sh;
	double ss = 0;
	for (int c = threadIdx.x; c < d; c += blockDim.x) {
		double m = 0;
		for (int i = 0; i < cr; i++) {
			long long j = b * cr + i;
			const float* src;
			if (j >= pos) src = kraw + (j - pos) * d;
			else src = slot + (ring ? j % slotCap : j) * d;
			m += (double)src[c];
		}
		float x = (float)(m / (double)cr);
		kb[c] = x;
		ss += (double)x * (double)x;
	}
	ss = block_sum_d(ss, scratch);
	double inv = 1.0 / sqrt(ss / (double)d + (double)eps);
	for (int c = threadIdx.x; c < d; c += blockDim.x) kb[c] = (float)((double)kb[c] * inv * (double)load_w(w, wt, c));
	__syncthreads();
	rope_head(kb, keys + b * d, (int)(b * cr), freq, m, 0, d, rot, 0, 0.f);
}

// qsa_block_keys_slot: grid (rows), block a multiple of 32 threads. Block r
// copies raw key row r into the slot as kv_write does (ring row
// (pos + r) mod slotCap; a padding row, or a ring row a later row of the
// call overwrites, is skipped), after qsa_block_keys read the slot.
extern "C" __global__ void qsa_block_keys_slot(const float* kraw, float* slot, const int* call, int* err, int rows, int d, int cr,
                                               int slotCap, int keyCap, int ring) {
	pdl_entry();
	int pos, used;
	if (!qsa_bk_check(call, rows, cr, slotCap, keyCap, ring, err, &pos, &used)) return;
	long long s = kv_row(blockIdx.x, pos, used, slotCap, ring);
	if (s < 0) return;
	const float* src = kraw + (long long)blockIdx.x * d;
	float* dst = slot + s * d;
	for (int c = threadIdx.x; c < d; c += blockDim.x) dst[c] = src[c];
}

// ---------------------------------------------------------------- qsa_select

// qsa_blocks_seen is ⌊(p + 1)/cr⌋, the complete blocks position p sees.
__device__ __forceinline__ long long qsa_blocks_seen(long long p, int cr) { return (p + 1) / cr; }

// qsa_scores: grid (⌈keyCap/QSA_SC_PER_CTA⌉, R), 256 threads. It scores
// for row t = r0 + blockIdx.y (rows t < used whose nb = ⌊(p+1)/cr⌋
// complete blocks exceed keep) blocks blockIdx.x·QSA_SC_PER_CTA .. + 63
// below nb: σ_b = f32(Σ_h ReLU(qi_h · keys[b]) / sqrt(d)), each dot an f32
// warp sum (lanes over d, then warp_sum: the same order for every block, so
// equal keys give equal scores), the heads summed in f64; a NaN passes the
// ReLU. One warp per block b; scores go to sc[(t − r0)·keyCap + b]. A row
// whose nb exceeds keyCap is reported.
extern "C" __global__ void qsa_scores(const float* qi, const float* keys, float* sc, const int* call, int* err, int rows, int r0,
                                      int heads, int d, int cr, int keep, int keyCap) {
	pdl_entry();
	int t = r0 + blockIdx.y, pos, used;
	if (t >= rows || !read_call(call, rows, err, &pos, &used) || t >= used) return;
	long long p = (long long)pos + t, nb = qsa_blocks_seen(p, cr);
	if (nb <= keep) return;
	if (nb > keyCap) {
		if (blockIdx.x == 0 && threadIdx.x == 0) report5(err, QSA_ERR_SEL_CAPACITY, t, (int)p, (int)nb, keyCap, 0);
		return;
	}
	long long b0 = (long long)blockIdx.x * QSA_SC_PER_CTA, b1 = min(nb, b0 + QSA_SC_PER_CTA);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const float* qr = qi + (long long)t * heads * d;
	float* out = sc + (long long)blockIdx.y * keyCap;
	double inv = 1.0 / sqrt((double)d);
	for (long long b = b0 + warp; b < b1; b += nw) {
		const float* kb = keys + b * d;
		double s = 0;
		for (int h = 0; h < heads; h++) {
			const float* qh = qr + (long long)h * d;
			float x = 0.f;
			for (int c = lane; c < d; c += 32) x += qh[c] * kb[c];
			x = warp_sum(x);
			if (!(x <= 0.f)) s += (double)x; // ReLU, letting a NaN through to be reported
		}
		if (lane == 0) out[b] = (float)(s * inv);
	}
}

// qsa_order_key maps a score to an unsigned key of the same order (−0 as
// +0, since the two compare equal). Scores are never NaN here.
__device__ __forceinline__ u32 qsa_order_key(float f) {
	u32 u = f == 0.f ? 0u : __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// qsa_topk: grid (R), blockDim a multiple of 32 (at most 1024). Block i
// writes the selection of row t = r0 + i: all −1 for t ≥ used; blocks
// 0 .. nb−1 then −1 when nb ≤ keep; else the keep best blocks of the row's
// scores (qsa_scores) under the order (score descending, block ascending),
// listed ascending, which is the CPU's heap top-k followed by a sort. A NaN
// score is reported (its smallest block).
//
// The keep-th best score T is found by a radix select over the scores'
// order keys, 8 bits a pass from the top (shared histograms, integer
// atomics, so exact): after it, every block above T is kept, and of the
// blocks equal to T the first (by index) k. A last pass writes the kept
// blocks in index order, a tile of blockDim blocks at a time, each block's
// place being the kept blocks before it (warp ballots, then warp totals).
extern "C" __global__ void qsa_topk(const float* sc, int* sel, const int* call, int* err, int rows, int r0, int cr, int keep,
                                    int keyCap) {
	pdl_entry();
	__shared__ int hist[256];
	__shared__ int sh_nan, sh_digit, sh_k;
	__shared__ int wcnt[2][32];
	int t = r0 + blockIdx.x, pos, used;
	if (t >= rows || !read_call(call, rows, err, &pos, &used)) return;
	int* row = sel + (long long)t * keep;
	if (t >= used) {
		for (int i = threadIdx.x; i < keep; i += blockDim.x) row[i] = -1;
		return;
	}
	long long p = (long long)pos + t, nbl = qsa_blocks_seen(p, cr);
	if (nbl <= keep) {
		for (int i = threadIdx.x; i < keep; i += blockDim.x) row[i] = i < nbl ? i : -1;
		return;
	}
	if (nbl > keyCap) {
		if (threadIdx.x == 0) report5(err, QSA_ERR_SEL_CAPACITY, t, (int)p, (int)nbl, keyCap, 0);
		return;
	}
	int nb = (int)nbl;
	const float* s = sc + (long long)blockIdx.x * keyCap;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (threadIdx.x == 0) sh_nan = nb;
	u32 prefix = 0, mask = 0;
	int k = keep; // the rank, from the top, of T among the blocks that match prefix under mask
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
		__syncthreads();
		int first_nan = nb;
		for (int b = threadIdx.x; b < nb; b += blockDim.x) {
			float f = s[b];
			if (f != f) {
				first_nan = min(first_nan, b);
				continue;
			}
			u32 u = qsa_order_key(f);
			if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1);
		}
		if (shift == 24) {
			if (first_nan < nb) atomicMin(&sh_nan, first_nan);
			__syncthreads();
			if (sh_nan < nb) {
				if (threadIdx.x == 0) report5(err, QSA_ERR_SEL_NAN, t, sh_nan, 0, 0, 0);
				return;
			}
		} else {
			__syncthreads();
		}
		if (warp == 0) {
			// lane l holds bins 255 − 8l down to 248 − 8l; an inclusive scan
			// over lanes counts the blocks in the bins above each lane's
			int c[8], sum = 0;
#pragma unroll
			for (int i = 0; i < 8; i++) c[i] = hist[255 - 8 * lane - i], sum += c[i];
			int inc = sum;
			for (int o = 1; o < 32; o <<= 1) {
				int y = __shfl_up_sync(0xffffffffu, inc, o);
				if (lane >= o) inc += y;
			}
			int cum = inc - sum;
			if (cum < k && inc >= k) {
#pragma unroll
				for (int i = 0; i < 8; i++) {
					if (cum < k && cum + c[i] >= k) sh_digit = 255 - 8 * lane - i, sh_k = k - cum;
					cum += c[i];
				}
			}
		}
		__syncthreads();
		prefix |= (u32)sh_digit << shift;
		mask |= 255u << shift;
		k = sh_k;
	}
	// prefix is T's key; k blocks equal to T are kept, keep − k above it.
	int base = 0, seen = 0;
	unsigned below = (1u << lane) - 1u;
	for (int tile = 0; tile < nb; tile += blockDim.x) {
		int b = tile + threadIdx.x;
		u32 u = b < nb ? qsa_order_key(s[b]) : 0u;
		bool gt = b < nb && u > prefix, eq = b < nb && u == prefix;
		unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
		if (lane == 0) wcnt[0][warp] = __popc(bg), wcnt[1][warp] = __popc(be);
		__syncthreads();
		int gb = __popc(bg & below), eb = __popc(be & below), gtot = 0, etot = 0;
		for (int i = 0; i < nw; i++) {
			if (i < warp) gb += wcnt[0][i], eb += wcnt[1][i];
			gtot += wcnt[0][i], etot += wcnt[1][i];
		}
		int rem = max(k - seen, 0); // ties still to keep
		if (gt || (eq && eb < rem)) row[base + gb + min(eb, rem)] = b;
		base += gtot + min(etot, rem);
		seen += etot;
		__syncthreads();
	}
}

// ---------------------------------------------------------------- qsa_attention

// qsa_key_pos is the position of key j of a row's list: the m selected
// blocks' keys in order (ids in ids), then the trailing positions from
// nb·cr.
__device__ __forceinline__ long long qsa_key_pos(int j, const int* ids, int m, int cr, long long nb) {
	int mk = m * cr;
	if (j < mk) return (long long)ids[j / cr] * cr + j % cr;
	return nb * cr + (j - mk);
}

// What qsa_attn_begin makes of a block's row.
#define QSA_ROW_RUN 0  // attend
#define QSA_ROW_ZERO 1 // a row past the call's: its output is 0
#define QSA_ROW_STOP 2 // the call is bad (reported): write nothing

// qsa_attn_begin reads the call record and checks row t of a qsa_attention
// run, as both qsa_attention kernels do and in this order: the record, the
// rows used (a row t ≥ used is QSA_ROW_ZERO), then the call's last position
// against the slots' capacity cap (reported by the block whose lead is
// set). For QSA_ROW_RUN, *p is the row's position and *nb its complete
// blocks ⌊(p+1)/cr⌋.
__device__ __forceinline__ int qsa_attn_begin(const int* call, int rows, int t, int cap, int cr, bool lead, int* err, long long* p,
                                              long long* nb) {
	int pos, used;
	if (!read_call(call, rows, err, &pos, &used)) return QSA_ROW_STOP;
	if (t >= used) return QSA_ROW_ZERO;
	if ((long long)pos + used - 1 >= cap) {
		if (lead && threadIdx.x == 0) report(err, QSA_ERR_ATTN_CAPACITY, (int)((long long)pos + used - 1), cap, 0);
		return QSA_ROW_STOP;
	}
	*p = (long long)pos + t;
	*nb = qsa_blocks_seen(*p, cr);
	return QSA_ROW_RUN;
}

// qsa_attn_select copies a row's selection sr (keep entries) into ids
// (shared memory) and checks it: ascending block ids below nb, then −1. It
// returns the blocks selected (the entries before the first −1), or −1
// after reporting the first bad entry (row t at position p). Every thread
// of the block calls it; it synchronizes, so shared memory written before
// the call is visible after it.
__device__ int qsa_attn_select(const int* sr, int keep, int t, long long p, long long nb, int* ids, int* err) {
	__shared__ int sh_bad, sh_m;
	if (threadIdx.x == 0) sh_bad = keep, sh_m = keep;
	__syncthreads();
	for (int i = threadIdx.x; i < keep; i += blockDim.x) {
		int b = sr[i], prev = i > 0 ? sr[i - 1] : -1;
		ids[i] = b;
		if (b == -1) atomicMin(&sh_m, i);
		else if (b < 0 || b >= nb || (i > 0 && (prev == -1 || b <= prev))) atomicMin(&sh_bad, i);
	}
	__syncthreads();
	int bad = sh_bad;
	if (bad < keep) {
		if (threadIdx.x == 0) report5(err, QSA_ERR_ATTN_SEL, t, (int)p, bad, ids[bad], (int)nb);
		return -1;
	}
	return sh_m;
}

// qsa_zero writes n zeros from y, the block's threads striding.
__device__ __forceinline__ void qsa_zero(float* y, int n) {
	for (int c = threadIdx.x; c < n; c += blockDim.x) y[c] = 0.f;
}

// qsa_attention: grid (rows, heads), blockDim a multiple of 32 (at most
// 1024), dynamic shared memory keep ints (the row's selection), d floats
// (the query head) and, when gsc is null, maxKeys floats (the scores; else
// they go to gsc[(t·heads + h)·maxKeys ..]). Block (t, h) checks the call's
// positions against the slots' capacity and its row's selection (ascending
// ids below nb = ⌊(p+1)/cr⌋, then −1: the first bad entry is reported),
// then attends query head h (KV head h / (heads/kvh)) over the keys of its
// selected blocks and the trailing positions nb·cr .. p: s_j = scale ·
// q·k_j (f32 warp sums, one warp per key), m = max s_j, e_j = exp(s_j − m)
// (f64, kept as f32), a_j = f32(e_j / Σe) with the sum in f64, and
// out[c] = Σ_j a_j v_j[c] summed in key order by one thread per c. Rows
// t ≥ used are 0. The binder takes it for few rows (decode);
// qsa_attention_rows serves many.
extern "C" __global__ void qsa_attention(const float* q, const float* k, const float* v, const int* sel, const int* call, int* err,
                                         float* y, float* gsc, int rows, int heads, int kvh, int d, int cr, int keep, int cap,
                                         float scale, int maxKeys) {
	pdl_entry();
	extern __shared__ float qsa_attn_sh[];
	__shared__ double scratch[32];
	__shared__ float wmax[32];
	int t = blockIdx.x, h = blockIdx.y;
	long long p, nb;
	int st = qsa_attn_begin(call, rows, t, cap, cr, t == 0 && h == 0, err, &p, &nb);
	if (st == QSA_ROW_STOP) return;
	long long qw = (long long)heads * d;
	float* yh = y + t * qw + (long long)h * d;
	if (st == QSA_ROW_ZERO) {
		qsa_zero(yh, d);
		return;
	}
	int* ids = (int*)qsa_attn_sh;
	float* qs = qsa_attn_sh + keep;
	float* sc = gsc ? gsc + ((long long)t * heads + h) * maxKeys : qs + d;
	const float* qh = q + t * qw + (long long)h * d;
	for (int c = threadIdx.x; c < d; c += blockDim.x) qs[c] = qh[c];
	int m = qsa_attn_select(sel + (long long)t * keep, keep, t, p, nb, ids, err);
	if (m < 0) return;
	int n = m * cr + (int)(p + 1 - nb * cr);
	if (n == 0) {
		qsa_zero(yh, d);
		return;
	}
	long long kw = (long long)kvh * d;
	long long ko = (long long)(h / (heads / kvh)) * d;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	// scores, one warp per key
	for (int j = warp; j < n; j += nw) {
		const float* kr = k + qsa_key_pos(j, ids, m, cr, nb) * kw + ko;
		float x = 0.f;
		for (int c = lane; c < d; c += 32) x += qs[c] * kr[c];
		x = warp_sum(x);
		if (lane == 0) sc[j] = scale * x;
	}
	__syncthreads();
	float mx = NEG_INF;
	for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, sc[j]);
	mx = warp_max(mx);
	if (lane == 0) wmax[warp] = mx;
	__syncthreads();
	mx = wmax[0];
	for (int i = 1; i < nw; i++) mx = fmaxf(mx, wmax[i]);
	double sum = 0;
	for (int j = threadIdx.x; j < n; j += blockDim.x) {
		double e = exp((double)(sc[j] - mx));
		sc[j] = (float)e;
		sum += e;
	}
	sum = block_sum_d(sum, scratch);
	for (int j = threadIdx.x; j < n; j += blockDim.x) sc[j] = (float)((double)sc[j] / sum);
	__syncthreads();
	const float* vh = v + ko;
	for (int c = threadIdx.x; c < d; c += blockDim.x) {
		float acc = 0.f;
		int j = 0;
		for (int i = 0; i < m; i++) {
			long long r0 = (long long)ids[i] * cr;
			for (int u = 0; u < cr; u++, j++) acc += sc[j] * vh[(r0 + u) * kw + c];
		}
		for (long long r = nb * cr; r <= p; r++, j++) acc += sc[j] * vh[r * kw + c];
		yh[c] = acc;
	}
}

// ---------------------------------------------------------------- qsa_attention_rows

// qsa_attention_rows' block size (QSA_RT threads), the keys of one of its
// tiles (QSA_TK: 16 lanes a key, two keys a warp), the query heads one pass
// of its scores holds in registers (QSA_RH) and the most query heads one
// thread accumulates weighted values for (QSA_RA). sparseattn.go mirrors
// QSA_RT, QSA_TK and QSA_RA.
#define QSA_RT 256
#define QSA_TK 16
#define QSA_RH 12
#define QSA_RA 4
static_assert(QSA_RT / 16 == QSA_TK, "qsa_attention_rows' scores take two keys a warp");

// qsa_r4 rounds n up to a multiple of 4 (16 bytes of floats).
__device__ __forceinline__ int qsa_r4(int n) { return (n + 3) & ~3; }

// qsa_ld reads V consecutive floats of src into r (a float4 for V = 4, src
// then 16-byte aligned).
template <int V>
__device__ __forceinline__ void qsa_ld(float* r, const float* src) {
	if (V == 4) {
		float4 x = *(const float4*)src;
		r[0] = x.x, r[1] = x.y, r[2] = x.z, r[3] = x.w;
	} else {
		for (int u = 0; u < V; u++) r[u] = src[u];
	}
}

// qsa_fma adds the dot product of V floats of a (shared memory, read as
// qsa_ld does) and b to acc, in order.
template <int V>
__device__ __forceinline__ float qsa_fma(float acc, const float* a, const float* b) {
	float x[V];
	qsa_ld<V>(x, a);
#pragma unroll
	for (int u = 0; u < V; u++) acc = fmaf(x[u], b[u], acc);
	return acc;
}

// qsa_rows_tile starts loading keys j0 .. j0 + QSA_TK − 1 of a row's list
// (qsa_key_pos order) into ks and vs, rows of d floats: the rows of k and v
// (the KV head's columns, rows kw floats apart), by cp.async 16 bytes at a
// time for V = 4, by plain loads for V = 1; keys from n on are zeros. A
// thread takes the pieces i = tid + QSA_RT·r of V floats (key i / (d/V),
// columns from V·(i mod d/V)): it starts at key jt, piece ct and steps dj
// keys and dc pieces (QSA_RT = dj·(d/V) + dc). The tile is in place after
// cp_commit, cp_wait and __syncthreads.
template <int V>
__device__ __forceinline__ void qsa_rows_tile(float* ks, float* vs, const float* k, const float* v, const int* ids, int m, int cr,
                                              long long nb, long long kw, int j0, int n, int d, int jt, int ct, int dj, int dc) {
	int cv = d / V;
	for (int jj = jt, c = ct; jj < QSA_TK;) {
		int j = j0 + jj, o = jj * d + c * V;
		if (j < n) {
			long long r = qsa_key_pos(j, ids, m, cr, nb) * kw + c * V;
			if (V == 4) {
				cp_async16(ks + o, k + r);
				cp_async16(vs + o, v + r);
			} else {
				for (int u = 0; u < V; u++) ks[o + u] = k[r + u], vs[o + u] = v[r + u];
			}
		} else {
			for (int u = 0; u < V; u++) ks[o + u] = 0.f, vs[o + u] = 0.f;
		}
		jj += dj, c += dc;
		if (c >= cv) jj++, c -= cv;
	}
}

// qsa_rows_body is qsa_attention_rows_v<V>: qsa_attention for many rows.
// Grid (rows, kvh), QSA_RT threads. Block (i, g) takes row t = rows − 1 − i
// (the rows that read the most keys start first) and KV head g with its
// G = heads/kvh query heads, which share the row's selection and keys.
// After qsa_attn_begin and qsa_attn_select (qsa_attention's checks), it
// stages the G query heads in shared memory and streams the row's keys (in
// qsa_key_pos order) through it in tiles of QSA_TK, the K and V rows of
// head g of the next tile loading (qsa_rows_tile) while the current one is
// computed. Per tile:
//   - scores s_hj = scale · q_h·k_j in f32: 16 lanes a key, lane l summing
//     the columns l·V + 16·V·i (V at a time), then a butterfly over the 16;
//   - an online softmax, a half-warp per head: the tile's maximum, the
//     running maximum M_h, α_h = exp(M_old − M_h) (1 where M did not move),
//     p_hj = exp(s_hj − M_h) (f32, 0 past the row's keys) and the running
//     sum L_h = α_h·L_h + Σ_tile p_hj (the tile's sum an f32 butterfly,
//     L in f64);
//   - the weighted value sums acc_hc = α_h·acc_hc + Σ_j p_hj v_jc in key
//     order, a thread per V columns c and up to QSA_RA heads h.
// Then out_hc = acc_hc · f32(1/L_h). Every reduction has a fixed order.
// Rows t ≥ used, and rows of no keys, are 0. V = 4 needs d % 4 == 0 and q,
// k, v and y 16-byte aligned; V = 1 takes any d. The binder also needs
// d/V ≤ QSA_RT and ⌈G / ⌊QSA_RT/(d/V)⌋⌉ ≤ QSA_RA.
//
// Split over key chunks (qsa_attention_split_v<V>, decode rows: pm not
// null), the grid is (rows, kvh, S) and block z takes only keys
// z·per .. z·per + per − 1 of the row's list of n, per = ⌈n/S⌉ rounded up
// to a tile (QSA_TK), so the rows' few blocks become enough to fill the
// card whatever the position. Instead of out it writes the chunk's
// partials as attn_part does, for attn_finish to merge in chunk order:
// pm = M_h, pl = f32(L_h) and pacc = acc_hc (unnormalized) at
// ((t·heads + h)·S + z) (times d for pacc). A chunk of no keys writes
// pm = −inf, pl = 0 and pacc = 0; rows t ≥ used write nothing (the finish
// zeroes them).
//
// Dynamic shared memory (qsaRowsShared in sparseattn.go), each part
// rounded up to 16 bytes: L (G doubles), the selection (keep ints), the
// query heads (G·d floats), two stages of a K and a V tile (4·QSA_TK·d
// floats), p (G·QSA_TK floats), α (G floats) and M (G floats).
template <int V>
__device__ void qsa_rows_body(const float* q, const float* k, const float* v, const int* sel, const int* call, int* err, float* y,
                              int rows, int heads, int kvh, int d, int cr, int keep, int cap, float scale, float* pm, float* pl,
                              float* pacc) {
	extern __shared__ float4 qsa_rows_sh[];
	int t = rows - 1 - (int)blockIdx.x, g = blockIdx.y, G = heads / kvh, tid = threadIdx.x;
	int S = gridDim.z, z = blockIdx.z;
	long long p, nb;
	int st = qsa_attn_begin(call, rows, t, cap, cr, t == 0 && g == 0 && z == 0, err, &p, &nb);
	if (st == QSA_ROW_STOP) return;
	long long qg0 = (long long)t * heads * d + (long long)g * G * d;
	float* yg = y + qg0;
	if (st == QSA_ROW_ZERO) {
		if (!pm) qsa_zero(yg, G * d);
		return;
	}
	double* ls = (double*)qsa_rows_sh;
	int* ids = (int*)((float*)qsa_rows_sh + qsa_r4(2 * G));
	float* qs = (float*)ids + qsa_r4(keep);
	float* kv = qs + qsa_r4(G * d);
	float* ps = kv + 4 * QSA_TK * d;
	float* al = ps + G * QSA_TK;
	float* ms = al + qsa_r4(G);
	for (int i = tid; i < G * d; i += QSA_RT) qs[i] = q[qg0 + i];
	for (int h = tid; h < G; h += QSA_RT) ls[h] = 0, ms[h] = NEG_INF;
	int m = qsa_attn_select(sel + (long long)t * keep, keep, t, p, nb, ids, err);
	if (m < 0) return;
	int n = m * cr + (int)(p + 1 - nb * cr);
	// this block's keys jb .. je − 1 of the row's list
	int jb = 0, je = n;
	if (pm) {
		int per = ((n + S - 1) / S + QSA_TK - 1) / QSA_TK * QSA_TK;
		jb = min(n, z * per), je = min(n, jb + per);
	}
	// the first partial of the group's heads, and the stride between heads
	long long pp = ((long long)t * heads + (long long)g * G) * S + z;
	if (je == jb) {
		if (!pm) {
			qsa_zero(yg, G * d);
			return;
		}
		for (int h = tid; h < G; h += QSA_RT) pm[pp + (long long)h * S] = NEG_INF, pl[pp + (long long)h * S] = 0.f;
		for (int i = tid; i < G * d; i += QSA_RT) pacc[(pp + (long long)(i / d) * S) * d + i % d] = 0.f;
		return;
	}
	long long kw = (long long)kvh * d;
	const float *kg = k + (long long)g * d, *vg = v + (long long)g * d;
	int tiles = (je - jb + QSA_TK - 1) / QSA_TK;
	// scores: key sj of a tile, columns from s·V
	int lane = tid & 31, sj = (tid >> 5) * 2 + (lane >> 4), s = lane & 15;
	// weighted value sums: columns c·V .. c·V + V − 1 of heads hg + i·ht (and
	// the tiles' loads from key hg, piece c, stepping ht keys and hc pieces)
	int cv = d / V, ht = QSA_RT / cv, hc = QSA_RT % cv, c = tid % cv, hg = tid / cv;
	float acc[QSA_RA][V];
#pragma unroll
	for (int i = 0; i < QSA_RA; i++)
#pragma unroll
		for (int u = 0; u < V; u++) acc[i][u] = 0.f;
	qsa_rows_tile<V>(kv, kv + QSA_TK * d, kg, vg, ids, m, cr, nb, kw, jb, je, d, hg, c, ht, hc);
	cp_commit();
	for (int it = 0; it < tiles; it++) {
		float* ks = kv + (it & 1) * 2 * QSA_TK * d;
		float* vs = ks + QSA_TK * d;
		if (it + 1 < tiles) {
			float* kn = kv + ((it + 1) & 1) * 2 * QSA_TK * d;
			qsa_rows_tile<V>(kn, kn + QSA_TK * d, kg, vg, ids, m, cr, nb, kw, jb + (it + 1) * QSA_TK, je, d, hg, c, ht, hc);
		}
		cp_commit();
		cp_wait<1>();
		__syncthreads();
		const float* kr = ks + sj * d;
		for (int h0 = 0; h0 < G; h0 += QSA_RH) {
			float a[QSA_RH];
#pragma unroll
			for (int i = 0; i < QSA_RH; i++) a[i] = 0.f;
			for (int col = s * V; col < d; col += 16 * V) {
				float kk[V];
				qsa_ld<V>(kk, kr + col);
#pragma unroll
				for (int i = 0; i < QSA_RH; i++)
					if (h0 + i < G) a[i] = qsa_fma<V>(a[i], qs + (h0 + i) * d + col, kk);
			}
#pragma unroll
			for (int i = 0; i < QSA_RH; i++) {
				if (h0 + i < G) { // the same for the whole warp
					float x = a[i];
					for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
					if (s == 0) ps[(h0 + i) * QSA_TK + sj] = scale * x;
				}
			}
		}
		__syncthreads();
		int nt = min(QSA_TK, je - jb - it * QSA_TK);
		unsigned half = 0xffffu << (lane & 16);
		for (int i = tid; i < G * QSA_TK; i += QSA_RT) {
			int h = i / QSA_TK, jj = i % QSA_TK;
			float x = jj < nt ? ps[i] : NEG_INF, mx = x;
			for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(half, mx, o));
			float mo = ms[h], mn = fmaxf(mo, mx);
			float e = jj < nt ? expf(x - mn) : 0.f, sum = e;
			for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(half, sum, o);
			ps[i] = e;
			if (jj == 0) {
				float a = mn == mo ? 1.f : expf(mo - mn);
				al[h] = a;
				ms[h] = mn;
				ls[h] = ls[h] * (double)a + (double)sum;
			}
		}
		__syncthreads();
		if (hg < ht) {
#pragma unroll
			for (int i = 0; i < QSA_RA; i++) {
				int h = hg + i * ht;
				if (h < G) {
					float a = al[h];
#pragma unroll
					for (int u = 0; u < V; u++) acc[i][u] *= a;
				}
			}
			for (int jj = 0; jj < nt; jj += 4) { // p and the V rows past nt are 0
				float vv[4][V];
#pragma unroll
				for (int r = 0; r < 4; r++) qsa_ld<V>(vv[r], vs + (jj + r) * d + c * V);
#pragma unroll
				for (int i = 0; i < QSA_RA; i++) {
					int h = hg + i * ht;
					if (h < G) {
						float4 pp = *(const float4*)(ps + h * QSA_TK + jj);
#pragma unroll
						for (int u = 0; u < V; u++)
							acc[i][u] = fmaf(pp.w, vv[3][u], fmaf(pp.z, vv[2][u], fmaf(pp.y, vv[1][u], fmaf(pp.x, vv[0][u], acc[i][u]))));
					}
				}
			}
		}
		__syncthreads();
	}
	if (hg < ht) {
#pragma unroll
		for (int i = 0; i < QSA_RA; i++) {
			int h = hg + i * ht;
			if (h < G) {
				if (pm) {
					long long ph = pp + (long long)h * S;
					float* po = pacc + ph * d + c * V;
#pragma unroll
					for (int u = 0; u < V; u++) po[u] = acc[i][u];
					if (c == 0) pm[ph] = ms[h], pl[ph] = (float)ls[h];
					continue;
				}
				float inv = (float)(1.0 / ls[h]);
				float* yo = yg + (long long)h * d + c * V;
#pragma unroll
				for (int u = 0; u < V; u++) yo[u] = acc[i][u] * inv;
			}
		}
	}
}

// QSA_ROWS_PARAMS are the parameters of the qsa_attention_rows kernels.
#define QSA_ROWS_PARAMS                                                                                                       \
	const float *q, const float *k, const float *v, const int *sel, const int *call, int *err, float *y, int rows, int heads, \
	    int kvh, int d, int cr, int keep, int cap, float scale

// qsa_attention_rows_v4 is qsa_rows_body<4>: K and V by cp.async, 16 bytes
// at a time.
extern "C" __global__ void __launch_bounds__(QSA_RT, 2) qsa_attention_rows_v4(QSA_ROWS_PARAMS) {
	pdl_entry();
	qsa_rows_body<4>(q, k, v, sel, call, err, y, rows, heads, kvh, d, cr, keep, cap, scale, nullptr, nullptr, nullptr);
}

// qsa_attention_rows_v1 is qsa_rows_body<1>: any d, any alignment.
extern "C" __global__ void __launch_bounds__(QSA_RT, 2) qsa_attention_rows_v1(QSA_ROWS_PARAMS) {
	pdl_entry();
	qsa_rows_body<1>(q, k, v, sel, call, err, y, rows, heads, kvh, d, cr, keep, cap, scale, nullptr, nullptr, nullptr);
}

// qsa_attention_split_v4 and _v1 are qsa_rows_body split over key chunks:
// grid (rows, kvh, S), the partials pm, pl (rows·heads·S floats each) and
// pacc (rows·heads·S·d floats, 16-byte aligned for V = 4) for attn_finish
// (y is not written).
extern "C" __global__ void __launch_bounds__(QSA_RT, 2) qsa_attention_split_v4(QSA_ROWS_PARAMS, float* pm, float* pl, float* pacc) {
	pdl_entry();
	qsa_rows_body<4>(q, k, v, sel, call, err, y, rows, heads, kvh, d, cr, keep, cap, scale, pm, pl, pacc);
}

extern "C" __global__ void __launch_bounds__(QSA_RT, 2) qsa_attention_split_v1(QSA_ROWS_PARAMS, float* pm, float* pl, float* pacc) {
	pdl_entry();
	qsa_rows_body<1>(q, k, v, sel, call, err, y, rows, heads, kvh, d, cr, keep, cap, scale, pm, pl, pacc);
}

// ---------------------------------------------------------------- gate_merge

// qsa_gate_merge: o[i] = y[i] · f32(sigmoid(g[i])) (the sigmoid in f64, as
// the CPU's); grid-stride over n elements (grid1). o may be y.
extern "C" __global__ void qsa_gate_merge(const float* y, const float* g, float* o, long long n) {
	pdl_entry();
	GRID_STRIDE(i, n) { o[i] = y[i] * (float)sigmoid_d((double)g[i]); }
}
