// Fused decode kernels (ops/fused_decode.go). attention_gate runs
// attention.cu's attn_part and attn_finish with its gate, and norm_matmul
// matvec.cu's mvn_* kernels; qkv_prep is here.

// qkv_prep: grid (rows, ⌈(hq + 2·hk)/per⌉), each block per heads of a row
// in turn (per is 1 for decode; a prompt's many rows take several heads a
// block, so that the blocks are fewer and each does more). Heads y < hq are
// query heads, prepared into yq (norm_rope with the optional scale); the
// next hk are key heads, prepared into their slot row (norm_rope_kv); the
// last hk are value heads, copied into theirs (kv_write). Queries and keys
// share the rotary table freq and attention factor m; the slots hold kcap
// and vcap rows.
extern "C" __global__ void qkv_prep(const float* q, const float* k, const float* v, float* yq, float* ks, float* vs, const int* call,
                                    int* err, const double* freq, double m, const float* scale, int rows, int hq, int hk, int hd,
                                    int rot, float eps, int kcap, int vcap, int ring, int per) {
	pdl_entry();
	int r = blockIdx.x, b0 = blockIdx.y * per, b1 = min(hq + 2 * hk, b0 + per);
	long long qw = (long long)hq * hd, kw = (long long)hk * hd;
	int pos, used;
	for (int b = b0; b < b1; b++) {
		if (b < hq) {
			if (!read_call(call, rows, err, &pos, &used)) return;
			long long o = r * qw + (long long)b * hd;
			rope_head(q + o, yq + o, pos + r, freq, m, scale ? scale + (long long)b * hd : 0, hd, rot, 1, eps);
			continue;
		}
		int cap = b < hq + hk ? kcap : vcap;
		if (!kv_check(call, rows, cap, ring, err, &pos, &used)) return;
		long long p = kv_row(r, pos, used, cap, ring);
		if (p < 0) return;
		if (b < hq + hk) {
			long long o = (long long)(b - hq) * hd;
			rope_head(k + r * kw + o, ks + p * kw + o, pos + r, freq, m, 0, hd, rot, 1, eps);
			continue;
		}
		long long o = (long long)(b - hq - hk) * hd;
		const float* src = v + r * kw + o;
		float* dst = vs + p * kw + o;
		for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = src[i];
	}
}
