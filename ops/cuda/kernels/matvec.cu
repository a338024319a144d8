// Matrix products. mv_*: 1..MV_MAXR rows of x against up to MV_SEGS
// weights stored [N_s, K], bandwidth bound, in one launch: the weights'
// rows form one virtual matrix (segment s holds virtual features
// [e_{s-1}, e_s)), each feature's sums going to its own weight's output.
// mvsw_*: the same for a gate and an up weight of F rows each, a warp
// computing gate row j and up row j together and writing
// silu(g·sg[j])·(u·su[j]) (matmul_swiglu) directly. mvn_*: mv_* of
// l2-normalized rows (norm_matmul, one weight): each group also sums x² over
// the x it reads for its unit, which is the whole row (in f32, by fma: the
// conversions an f64 sum needs would cost more than the stream), and scales
// its sums by 1/sqrt(Σx² + eps); every group adds the same terms in the same
// order, so every feature of a row gets the same norm.
//
// Work: a block of W warps (blockDim.x = 32·W) holds W/S groups of S
// warps; a group computes one unit (MF consecutive rows of the virtual
// matrix, or a gate/up pair) and its S warps split K, each streaming every
// S-th chunk of 32 16-byte vectors of the unit's rows, MV_LOADS loads per
// lane in flight (ld.global.nc.L1::no_allocate; x is read through L1). Few
// loads a lane keep registers low, so that the whole grid of a decode
// shape is resident at once (one wave): on the H200 that beat deeper
// unrolling with fewer warps (matmul.go's mvPlan).
// Lane sums are reduced per warp by shuffles, then the S warps' sums are
// added in warp order through shared memory: no atomics, so results are
// the same bit for bit on every run.
// matmul_tiled: a plain shared-memory tiled product for more rows when
// cuBLAS is not used.

// The kernels' parameters: x [R, K]; NF virtual features (mv) or gate/up
// rows (mvsw); S warps per unit; pf the chunks (32 vectors of each of the
// unit's rows) each warp asks L2 for before it waits on the previous
// kernel (at least its first two batches: matmul.go's mvPrefetch); vec:
// 16-byte loads allowed (bit 1),
// and the weights loaded ones, never written by a kernel (bit 2); the segments'
// weights w0..w3, outputs y0..y3 and ends e0..e2 (the last ends at NF;
// unused ends are NF); sg, su the swiglu scales (mvsw only).
#define MV_PARAMS                                                                                                  \
	const float *__restrict__ x, int R, int K, int NF, int S, int pf, int vec, const void *w0, const void *w1, const void *w2, \
		const void *w3, float *y0, float *y1, float *y2, float *y3, int e0, int e1, int e2, const float *sg, const float *su
#define MV_ARGS x, R, K, NF, S, pf, vec, w0, w1, w2, w3, y0, y1, y2, y3, e0, e1, e2, sg, su

// MV_EARLY loads a lane's first batch of weight vectors before pdl_entry
// (1), or after it (0: REEL_CUDA_DEFINES=-DMV_EARLY=0, for comparing).
#ifndef MV_EARLY
#define MV_EARLY 1
#endif

// mv_load loads a lane's batch of weight vectors: for u < U, vector
// ((c0 + S·u)·32 + lane) of each row wr[i] into q[u][i], zeros where the
// row is not a feature (ok) or the vector is past the row's V.
template <int MF, int U>
__device__ __forceinline__ void mv_load(const char* const* wr, const bool* ok, int V, int c0, int S, uint4 (*q)[MF]) {
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int v = ((c0 + S * u) << 5) + lane;
#pragma unroll
		for (int i = 0; i < MF; i++) q[u][i] = ok[i] && v < V ? ld_stream((const uint4*)wr[i] + v) : make_uint4(0u, 0u, 0u, 0u);
	}
}

// mv_impl: RB is the row bucket (R <= RB), MF the features per unit, SW the
// swiglu form (MF = 2: gate, up), NRM the normalized form (eps its
// epsilon). Grid: ceil(units / (W/S)) blocks. It starts with pdl_entry,
// after prefetching the first weights (and with MV_EARLY loading the
// first batch of them).
template <int WT, int RB, int MF, bool SW, bool NRM>
__device__ __forceinline__ void mv_impl(MV_PARAMS, float eps) {
	const int E = WT == WT_F32 ? 4 : 8;  // elements per 16-byte vector
	const int ES = WT == WT_F32 ? 4 : 2; // bytes per element
	const int U = MV_LOADS / MF > 0 ? MV_LOADS / MF : 1;
	__shared__ float red[MV_MAXWARPS * MF * RB];
	__shared__ float nred[NRM ? MV_MAXWARPS * RB : 1];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = nw / S, g = warp / S, p = warp - g * S;
	int unit = blockIdx.x * G + g;
	int units = SW ? NF : (NF + MF - 1) / MF;
	// The unit's weight rows.
	const char* wr[MF];
	bool ok[MF];
#pragma unroll
	for (int i = 0; i < MF; i++) {
		int f = SW ? unit : unit * MF + i;
		const void* w = SW ? (i == 0 ? w0 : w1) : w0;
		int row = f;
		if (!SW) {
			int s = (f >= e0) + (f >= e1) + (f >= e2);
			w = s == 0 ? w0 : s == 1 ? w1 : s == 2 ? w2 : w3;
			row = f - (s == 0 ? 0 : s == 1 ? e0 : s == 2 ? e1 : e2);
		}
		ok[i] = unit < units && f < NF;
		wr[i] = (const char*)w + (long long)(ok[i] ? row : 0) * K * ES;
	}
	// The lines of this warp's first pf chunks of weight vectors (at least
	// two batches), asked for before waiting on the previous kernel, so
	// that memory works while the kernels before it wait on theirs; and
	// with MV_EARLY and vec's bit 2 (every weight is a loaded one: written
	// by uploads, never by the kernel before a product) the first batch
	// loaded into registers then too.
	uint4 q[U][MF];
	if (vec) {
		mv_prefetch<MF>(wr, ok, K / E, p, S, max(pf, 2 * U));
		if (MV_EARLY && (vec & 2)) mv_load<MF, U>(wr, ok, K / E, p, S, q);
	}
	pdl_entry();
	float acc[MF][RB];
	float ss[RB]; // NRM: Σx² of the x this lane read
#pragma unroll
	for (int r = 0; r < RB; r++) ss[r] = 0.f;
#pragma unroll
	for (int i = 0; i < MF; i++)
#pragma unroll
		for (int r = 0; r < RB; r++) acc[i][r] = 0.f;
	if (vec) {
		int V = K / E, C = (V + 31) >> 5;
		for (int c0 = p; c0 < C; c0 += S * U) {
			if (!(MV_EARLY && (vec & 2)) || c0 != p) mv_load<MF, U>(wr, ok, V, c0, S, q);
#pragma unroll
			for (int u = 0; u < U; u++) {
				int v = ((c0 + S * u) << 5) + lane;
				if (v < V) {
#pragma unroll
					for (int r = 0; r < RB; r++) {
						if (r < R) {
							float xv[8];
							mv_x<WT>(x + (long long)r * K + v * E, xv);
							if (NRM)
#pragma unroll
								for (int e = 0; e < E; e++) ss[r] = fmaf(xv[e], xv[e], ss[r]);
#pragma unroll
							for (int i = 0; i < MF; i++) acc[i][r] = mv_fma<WT>(q[u][i], xv, acc[i][r]);
						}
					}
				}
			}
		}
	} else {
		for (int k = p * 32 + lane; k < K; k += 32 * S) {
			float wv[MF];
#pragma unroll
			for (int i = 0; i < MF; i++) wv[i] = ok[i] ? load_w(wr[i], WT, k) : 0.f;
#pragma unroll
			for (int r = 0; r < RB; r++) {
				if (r < R) {
					float xv = x[(long long)r * K + k];
					if (NRM) ss[r] = fmaf(xv, xv, ss[r]);
#pragma unroll
					for (int i = 0; i < MF; i++) acc[i][r] += xv * wv[i];
				}
			}
		}
	}
	// Per warp, then the group's S warps in order.
	mv_warp_sums<MF, RB>(&acc[0][0], R, red);
	if (NRM) mv_warp_sums<1, RB>(ss, R, nred);
	__syncthreads();
	int outs = G * (SW ? 1 : MF) * RB;
	for (int t = threadIdx.x; t < outs; t += blockDim.x) {
		int r = t % RB, gi = t / RB;
		if (r >= R) continue;
		mv_put<MF, RB, SW, NRM>(red, nred, blockIdx.x, G, S, gi, r, NF, y0, y1, y2, y3, e0, e1, e2, sg, su, eps);
	}
}

// The instances the Go side launches (mvKernelNames in matmul.go):
// mv_<type>_r<RB>_f<MF>, mvsw_<type>_r<RB> and mvn_<type>_r<RB>_f<MF>.
extern "C" __global__ void mv_f32_r1_f1(MV_PARAMS) { mv_impl<WT_F32, 1, 1, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f32_r1_f2(MV_PARAMS) { mv_impl<WT_F32, 1, 2, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f32_r8_f1(MV_PARAMS) { mv_impl<WT_F32, 8, 1, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f32_r8_f2(MV_PARAMS) { mv_impl<WT_F32, 8, 2, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_bf16_r1_f1(MV_PARAMS) { mv_impl<WT_BF16, 1, 1, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_bf16_r1_f2(MV_PARAMS) { mv_impl<WT_BF16, 1, 2, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_bf16_r8_f1(MV_PARAMS) { mv_impl<WT_BF16, 8, 1, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_bf16_r8_f2(MV_PARAMS) { mv_impl<WT_BF16, 8, 2, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f16_r1_f1(MV_PARAMS) { mv_impl<WT_F16, 1, 1, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f16_r1_f2(MV_PARAMS) { mv_impl<WT_F16, 1, 2, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f16_r8_f1(MV_PARAMS) { mv_impl<WT_F16, 8, 1, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mv_f16_r8_f2(MV_PARAMS) { mv_impl<WT_F16, 8, 2, false, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvsw_f32_r1(MV_PARAMS) { mv_impl<WT_F32, 1, 2, true, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvsw_f32_r8(MV_PARAMS) { mv_impl<WT_F32, 8, 2, true, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvsw_bf16_r1(MV_PARAMS) { mv_impl<WT_BF16, 1, 2, true, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvsw_bf16_r8(MV_PARAMS) { mv_impl<WT_BF16, 8, 2, true, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvsw_f16_r1(MV_PARAMS) { mv_impl<WT_F16, 1, 2, true, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvsw_f16_r8(MV_PARAMS) { mv_impl<WT_F16, 8, 2, true, false>(MV_ARGS, 0.f); }
extern "C" __global__ void mvn_f32_r1_f1(MV_PARAMS, float eps) { mv_impl<WT_F32, 1, 1, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f32_r1_f2(MV_PARAMS, float eps) { mv_impl<WT_F32, 1, 2, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f32_r8_f1(MV_PARAMS, float eps) { mv_impl<WT_F32, 8, 1, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f32_r8_f2(MV_PARAMS, float eps) { mv_impl<WT_F32, 8, 2, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_bf16_r1_f1(MV_PARAMS, float eps) { mv_impl<WT_BF16, 1, 1, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_bf16_r1_f2(MV_PARAMS, float eps) { mv_impl<WT_BF16, 1, 2, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_bf16_r8_f1(MV_PARAMS, float eps) { mv_impl<WT_BF16, 8, 1, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_bf16_r8_f2(MV_PARAMS, float eps) { mv_impl<WT_BF16, 8, 2, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f16_r1_f1(MV_PARAMS, float eps) { mv_impl<WT_F16, 1, 1, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f16_r1_f2(MV_PARAMS, float eps) { mv_impl<WT_F16, 1, 2, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f16_r8_f1(MV_PARAMS, float eps) { mv_impl<WT_F16, 8, 1, false, true>(MV_ARGS, eps); }
extern "C" __global__ void mvn_f16_r8_f2(MV_PARAMS, float eps) { mv_impl<WT_F16, 8, 2, false, true>(MV_ARGS, eps); }

#define TILE 16

// matmul_tiled: grid (ceil(N/16), ceil(R/16)), block (16, 16).
extern "C" __global__ void matmul_tiled(const float* x, const void* w, int wt, float* y, int R, int N, int K) {
	pdl_entry();
	__shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1];
	int tx = threadIdx.x, ty = threadIdx.y;
	int n = blockIdx.x * TILE + tx, r = blockIdx.y * TILE + ty;
	int wn = blockIdx.x * TILE + ty;
	float acc = 0.f;
	for (int k0 = 0; k0 < K; k0 += TILE) {
		int kk = k0 + tx;
		xs[ty][tx] = (r < R && kk < K) ? x[(long long)r * K + kk] : 0.f;
		ws[ty][tx] = (wn < N && kk < K) ? load_w(w, wt, (long long)wn * K + kk) : 0.f;
		__syncthreads();
#pragma unroll
		for (int i = 0; i < TILE; i++) acc += xs[ty][i] * ws[tx][i];
		__syncthreads();
	}
	if (r < R && n < N) y[(long long)r * N + n] = acc;
}
