// The fused quantized products' decode kernels (ops/quant_fused.go,
// ops/cuda/quant_fused.go): qmvs_* (quant.cu) extended as matvec.cu's mv_*
// is to its fused forms, for 1..RB rows of x [R, K] and codes that can be
// read as 16-byte vectors (quant_fused.go takes the other shapes apart):
//
// qmvg_<codes>_r<RB>_f<MF>: up to QF_SEGS quantized weights of one format
// (quant_grouped_matmul: q/k/v/g), their rows one virtual matrix of NF
// features (segment s holds virtual features [e_{s-1}, e_s), its codes
// w_s, scales s_s and output y_s), units of MF consecutive virtual
// features, a unit's features each reading its own weight's row.
// qmvsw_<codes>_r<RB>: a gate and an up weight of NF rows each
// (quant_matmul_swiglu): unit j is gate row j and up row j, and the group
// writes silu(g·sg[j])·(u·su[j]) as mvsw_* does.
// qmvn_<codes>_r<RB>_f<MF>: qmvg_* of one weight of l2-normalized rows
// (quant_norm_matmul): each group also sums x² over the x it reads for its
// unit, which is the whole row, and divides its sums by sqrt(Σx² + eps);
// every group adds the same terms in the same order, so every feature of
// a row gets the same norm (mvn_*'s way).
//
// Every other part is qmvs_impl's: S warps of a group split K in chunks of
// 32 vectors, QMV_LOADS code loads a lane in flight, the first asked of L2
// before pdl_entry, codes decoded in registers once for all rows (q_dec),
// each vector's sum times its scale, x staged in shared memory with xsm
// (qmvs_stage: the launch's dynamic shared memory holds it), sums reduced
// per warp, then in warp order: the same bits on every run. A block loops
// over the NB blocks of units with a stride of the grid.

#define QF_SEGS 4

// The forms of qmvf_impl.
#define QF_SEG 0
#define QF_SW 1
#define QF_NRM 2

#define QMVF_PARAMS                                                                                                               \
	const float *__restrict__ x, long long stride, int st, int sc, int br, int bc, int R, int K, int NF, int S, int NB,        \
		const unsigned char *w0, const unsigned char *w1, const unsigned char *w2, const unsigned char *w3, const void *s0,     \
		const void *s1, const void *s2, const void *s3, float *y0, float *y1, float *y2, float *y3, int e0, int e1, int e2, \
		const float *sg, const float *su, float eps
#define QMVF_ARGS x, stride, st, sc, br, bc, R, K, NF, S, NB, w0, w1, w2, w3, s0, s1, s2, s3, y0, y1, y2, y3, e0, e1, e2, sg, su, eps

// qmvf_rows sets, for the MF features of unit u (of units), their rows of
// codes wr, their scale tables sp, whether they are features (ok; else
// row 0 of their weight) and where their scales start (srow).
template <int MF, int FORM>
__device__ __forceinline__ void qmvf_rows(QMVF_PARAMS, int units, int u, const char** wr, const void** sp, bool* ok, long long* srow) {
#pragma unroll
	for (int i = 0; i < MF; i++) {
		const unsigned char* w;
		const void* s;
		int row;
		if (FORM == QF_SW) {
			ok[i] = u < units;
			w = i == 0 ? w0 : w1;
			s = i == 0 ? s0 : s1;
			row = ok[i] ? u : 0;
		} else {
			int f = u * MF + i;
			ok[i] = u < units && f < NF;
			f = ok[i] ? f : 0;
			int g = (f >= e0) + (f >= e1) + (f >= e2);
			w = g == 0 ? w0 : g == 1 ? w1 : g == 2 ? w2 : w3;
			s = g == 0 ? s0 : g == 1 ? s1 : g == 2 ? s2 : s3;
			row = f - (g == 0 ? 0 : g == 1 ? e0 : g == 2 ? e1 : e2);
		}
		wr[i] = (const char*)w + (long long)row * stride;
		sp[i] = s;
		srow[i] = (long long)(row / br) * sc;
	}
}

// qmvf_impl: RB is the row bucket (R <= RB), MF the features a unit (2 for
// QF_SW: gate, up), XS x staged in shared memory, FORM QF_SEG, QF_SW or
// QF_NRM.
template <int QT, int RB, int MF, bool XS, int FORM>
__device__ __forceinline__ void qmvf_impl(QMVF_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	const int CW = E / 4;                // codes a 32-bit word
	const int U = QMV_LOADS / MF > 0 ? QMV_LOADS / MF : 1;
	const bool NRM = FORM == QF_NRM;
	__shared__ float red[MV_MAXWARPS * MF * RB];
	__shared__ float nred[NRM ? MV_MAXWARPS * RB : 1];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = nw / S, g = warp / S, p = warp - g * S;
	int V = K / E, C = (V + 31) >> 5, units = FORM == QF_SW ? NF : (NF + MF - 1) / MF;
	const char* wr[MF];
	const void* sp[MF];
	bool ok[MF];
	long long srow[MF];
	qmvf_rows<MF, FORM>(QMVF_ARGS, units, blockIdx.x * G + g, wr, sp, ok, srow);
	mv_prefetch<MF, 2 * U>(wr, ok, V, p, S);
	pdl_entry();
	if (XS) {
		qmvs_stage<E>(x, R, K, C, qmvs_xs);
		__syncthreads();
	}
	for (int b = blockIdx.x; b < NB; b += gridDim.x) {
		int unit = b * G + g;
		qmvf_rows<MF, FORM>(QMVF_ARGS, units, unit, wr, sp, ok, srow);
		float acc[MF][RB];
		float ss[RB]; // QF_NRM: Σx² of the x this lane read
#pragma unroll
		for (int r = 0; r < RB; r++) ss[r] = 0.f;
#pragma unroll
		for (int i = 0; i < MF; i++)
#pragma unroll
			for (int r = 0; r < RB; r++) acc[i][r] = 0.f;
		for (int c0 = unit < units ? p : C; c0 < C; c0 += S * U) {
			uint4 q[U][MF];
			float sv[U][MF];
#pragma unroll
			for (int u = 0; u < U; u++) {
				int v = ((c0 + S * u) << 5) + lane;
#pragma unroll
				for (int i = 0; i < MF; i++) {
					bool in = ok[i] && v < V;
					q[u][i] = in ? ld_stream((const uint4*)wr[i] + v) : make_uint4(0u, 0u, 0u, 0u);
					sv[u][i] = in ? load_w(sp[i], st, srow[i] + (long long)v * E / bc) : 0.f;
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				int c = c0 + S * u, v = (c << 5) + lane;
				if (v >= V) continue;
				float part[MF][RB];
#pragma unroll
				for (int i = 0; i < MF; i++)
#pragma unroll
					for (int r = 0; r < RB; r++) part[i][r] = 0.f;
#pragma unroll
				for (int j = 0; j < 4; j++) {
					float cv[MF][CW];
#pragma unroll
					for (int i = 0; i < MF; i++) q_dec<QT>(vec_word(q[u][i], j), cv[i]);
#pragma unroll
					for (int r = 0; r < RB; r++) {
						if (r >= R) continue;
						float xv[CW];
#pragma unroll
						for (int h = 0; h < CW / 4; h++) {
							int t = j * (CW / 4) + h;
							float4 a = XS ? qmvs_xs[((r * C + c) * (E / 4) + t) * 32 + lane]
							              : __ldg((const float4*)(x + (long long)r * K + (long long)v * E) + t);
							xv[4 * h] = a.x, xv[4 * h + 1] = a.y, xv[4 * h + 2] = a.z, xv[4 * h + 3] = a.w;
						}
						if (NRM)
#pragma unroll
							for (int e = 0; e < CW; e++) ss[r] = fmaf(xv[e], xv[e], ss[r]);
#pragma unroll
						for (int i = 0; i < MF; i++)
#pragma unroll
							for (int e = 0; e < CW; e++) part[i][r] = fmaf(cv[i][e], xv[e], part[i][r]);
					}
				}
#pragma unroll
				for (int i = 0; i < MF; i++)
#pragma unroll
					for (int r = 0; r < RB; r++) acc[i][r] = fmaf(part[i][r], sv[u][i], acc[i][r]);
			}
		}
		mv_warp_sums<MF, RB>(&acc[0][0], R, red);
		if (NRM) mv_warp_sums<1, RB>(ss, R, nred);
		__syncthreads();
		int outs = G * (FORM == QF_SW ? 1 : MF) * RB;
		for (int t = threadIdx.x; t < outs; t += blockDim.x) {
			int r = t % RB, gi = t / RB;
			if (r >= R) continue;
			if (FORM == QF_SW) {
				int j = b * G + gi;
				if (j >= NF) continue;
				float a = mv_group_sum(red, gi, S, MF, RB, 0, r), bu = mv_group_sum(red, gi, S, MF, RB, MF - 1, r);
				y0[(long long)r * NF + j] = (float)silu_d((double)(a * sg[j])) * (bu * su[j]);
			} else {
				int i = gi % MF, gg = gi / MF;
				int f = (b * G + gg) * MF + i;
				if (f >= NF) continue;
				float a = mv_group_sum(red, gg, S, MF, RB, i, r);
				if (NRM) {
					float n2 = mv_group_sum(nred, gg, S, 1, RB, 0, r);
					a = (float)((double)a / sqrt((double)n2 + (double)eps));
				}
				int sg_ = (f >= e0) + (f >= e1) + (f >= e2);
				int lo = sg_ == 0 ? 0 : sg_ == 1 ? e0 : sg_ == 2 ? e1 : e2;
				int hi = sg_ == 0 ? e0 : sg_ == 1 ? e1 : sg_ == 2 ? e2 : NF;
				float* y = sg_ == 0 ? y0 : sg_ == 1 ? y1 : sg_ == 2 ? y2 : y3;
				y[(long long)r * (hi - lo) + (f - lo)] = a;
			}
		}
		__syncthreads(); // red is the next block's
	}
}

// qmvf_run takes x staged in shared memory when xsm is set.
template <int QT, int RB, int MF, int FORM>
__device__ __forceinline__ void qmvf_run(QMVF_PARAMS, int xsm) {
	if (xsm)
		qmvf_impl<QT, RB, MF, true, FORM>(QMVF_ARGS);
	else
		qmvf_impl<QT, RB, MF, false, FORM>(QMVF_ARGS);
}

// The instances the Go side launches (qfuseKernelNames in quant_fused.go):
// qmvg_<codes>_r<RB>_f<MF>, qmvn_<codes>_r<RB>_f<MF> and qmvsw_<codes>_r<RB>.
extern "C" __global__ void qmvg_f8_r1_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_f8_r1_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_f8_r1_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_f8_r1_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_f8_r1_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_f8_r1_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvsw_f8_r1(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 1, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_f8_r8_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_f8_r8_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_f8_r8_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_f8_r8_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_f8_r8_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_f8_r8_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvsw_f8_r8(QMVF_PARAMS, int xsm) { qmvf_run<QT_F8, 8, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_i8_r1_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_i8_r1_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_i8_r1_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_i8_r1_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_i8_r1_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_i8_r1_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvsw_i8_r1(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 1, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_i8_r8_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_i8_r8_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_i8_r8_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_i8_r8_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_i8_r8_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_i8_r8_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvsw_i8_r8(QMVF_PARAMS, int xsm) { qmvf_run<QT_I8, 8, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_u4_r1_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_u4_r1_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_u4_r1_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_u4_r1_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_u4_r1_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_u4_r1_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvsw_u4_r1(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 1, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_u4_r8_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_u4_r8_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvg_u4_r8_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_u4_r8_f1(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_u4_r8_f2(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvn_u4_r8_f4(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvsw_u4_r8(QMVF_PARAMS, int xsm) { qmvf_run<QT_U4, 8, 2, QF_SW>(QMVF_ARGS, xsm); }
