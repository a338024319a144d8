// Kernels of PLE, the hashed n-gram side input of a layer
// (ops/ngram.go): ple_hash maps each row's n-gram history to table rows
// and keeps the token history, ple_ngram_embed gathers the rows from the
// table's shards, ple_gate gates the value into every stream. The hash uses
// the CPU's integer arithmetic bit for bit: i32 tokens sign-extended to 64
// bits, products and XOR wrapping modulo 2^64 (done unsigned, as Go's int64
// wraps), then a truncating signed % made non-negative.

#define ERR_PLE_ROW 50 // a = token, b = head, c = row id, err[4..5] = the table's rows (low, high word)

// ple_tok is the token at position j: ids[j − pos] from the call's rows
// (j ≥ pos), hist[j mod ctx] from the history (0 ≤ j < pos), eos before
// position 0.
__device__ __forceinline__ int ple_tok(const int* ids, const int* hist, long long pos, int ctx, int eos, long long j) {
	if (j >= pos) return ids[j - pos];
	if (j >= 0) return hist[j % ctx];
	return eos;
}

// ple_hash writes rows[t, h] (nh = (ng − 1)·hp heads) for the t_rows rows of
// the plan, the call's first `used` rows at positions pos + t: with t_s the
// token s steps back (t_0 the token itself; t_s = eos once any token 1..s
// back is eos), mix_o = XOR_{s<o} t_s·mult[s] (64-bit wrapping) for orders
// o = 2..ng, and head h = (o − 2)·hp + i gets (mix_o mod sizes[h],
// non-negative) + offs[h]. Rows past `used` are 0. Then hist keeps the last
// ng − 1 tokens by position (hist[j mod (ng − 1)] = the token at j).
// consts holds mult[ng], sizes[nh], offs[nh] (i64).
// Grid: 1-D grid-stride over rows, one thread per row. Only rows
// t < ng − 1 read hist, and they are all in block 0's first pass (the
// binding keeps ng − 1 ≤ blockDim.x), so block 0 alone writes hist after a
// __syncthreads: no other block reads it.
extern "C" __global__ void ple_hash(const int* ids, int* hist, const int* call, const long long* consts, int* rows,
                                    int* err, int t_rows, int ng, int hp, int eos) {
	pdl_entry();
	int pos, used;
	if (!read_call(call, t_rows, err, &pos, &used)) return;
	int ctx = ng - 1, nh = ctx * hp;
	const long long* mult = consts;
	const long long* sizes = consts + ng;
	const long long* offs = sizes + nh;
	GRID_STRIDE(t, t_rows) {
		int* out = rows + t * nh;
		if (t >= used) {
			for (int h = 0; h < nh; h++) out[h] = 0;
			continue;
		}
		long long p = (long long)pos + t;
		unsigned long long mix = (unsigned long long)(long long)ple_tok(ids, hist, pos, ctx, eos, p) * (unsigned long long)mult[0];
		bool seen = false;
		for (int s = 1; s < ng; s++) {
			int v = ple_tok(ids, hist, pos, ctx, eos, p - s);
			seen = seen || v == eos;
			if (seen) v = eos;
			mix ^= (unsigned long long)(long long)v * (unsigned long long)mult[s];
			long long m = (long long)mix;
			for (int i = 0; i < hp; i++) {
				int h = (s - 1) * hp + i;
				long long r = m % sizes[h];
				if (r < 0) r += sizes[h];
				out[h] = (int)(r + offs[h]);
			}
		}
	}
	if (blockIdx.x != 0) return;
	__syncthreads();
	long long end = (long long)pos + used;
	long long first = end - ctx > pos ? end - ctx : (long long)pos;
	for (long long j = first + threadIdx.x; j < end; j += blockDim.x) hist[j % ctx] = ids[j - pos];
}

// ple_ngram_embed gathers y[k, 0:w] = Table[rows[k]] as f32 for the items
// (token, head) pairs k, Table the shards' rows one after another. tab holds
// (i64) the shards' addresses [nshards], their first table rows
// [nshards + 1] (the last: the table's rows) and their weight types
// [nshards]. A row id outside the table is reported (ERR_PLE_ROW) and its
// output row left as it was.
// Grid: blocks stride over the items; threads over the w columns.
extern "C" __global__ void ple_ngram_embed(const int* rows, const long long* tab, int nshards, float* y, long long items,
                                           int nh, int w, int* err) {
	pdl_entry();
	const long long* starts = tab + nshards;
	const long long* wts = starts + nshards + 1;
	long long total = starts[nshards];
	for (long long k = blockIdx.x; k < items; k += gridDim.x) {
		int id = rows[k];
		if (id < 0 || id >= total) {
			if (threadIdx.x == 0) report5(err, ERR_PLE_ROW, (int)(k / nh), (int)(k % nh), id, (int)(unsigned)(unsigned long long)total, (int)(unsigned)((unsigned long long)total >> 32));
			continue;
		}
		int s = 0;
		while (id >= starts[s + 1]) s++;
		const void* src = (const void*)tab[s];
		int wt = (int)wts[s];
		long long base = (id - starts[s]) * (long long)w;
		float* dst = y + k * w;
		for (int c = threadIdx.x; c < w; c += blockDim.x) dst[c] = load_w(src, wt, base + c);
	}
}

// ple_gate: gv_c = sigmoid(γ_c)·v per stream c of a row, γ_c = kn_c·qn_c /
// sqrt(h) (dot product in f64), then γ_c = sign(γ_c)·sqrt(max(|γ_c|, 1e-6))
// with 0 staying 0, as the CPU computes it. kn, qn, y are [rows, c·h], v is
// [rows, h]. Grid: one block per (row, stream), blockIdx.x = row·c + stream;
// threads over h (a multiple of 32).
extern "C" __global__ void ple_gate(const float* kn, const float* qn, const float* v, float* y, int c, int h) {
	pdl_entry();
	__shared__ double scratch[32];
	long long o = (long long)blockIdx.x * h;
	const float* vr = v + (long long)(blockIdx.x / c) * h;
	double s = 0;
	for (int i = threadIdx.x; i < h; i += blockDim.x) s += (double)kn[o + i] * (double)qn[o + i];
	s = block_sum_d(s, scratch);
	double gam = s * (1.0 / sqrt((double)h));
	double sq = sqrt(fmax(fabs(gam), 1e-6));
	if (gam > 0) gam = sq;
	else if (gam < 0) gam = -sq;
	float gate = (float)sigmoid_d(gam);
	for (int i = threadIdx.x; i < h; i += blockDim.x) y[o + i] = gate * vr[i];
}
