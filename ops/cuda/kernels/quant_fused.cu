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

// qmvf_impl: RB is the row bucket (R <= RB), MF the features a unit (2 for
// QF_SW: gate, up), XS x staged in shared memory, FORM QF_SEG, QF_SW or
// QF_NRM.
template <int QT, int RB, int MF, bool XS, int FORM>
__device__ __forceinline__ void qmvf_impl(QMVF_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
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
	mv_prefetch<MF>(wr, ok, V, p, S, 2 * U);
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
		qmvf_zero<MF, RB>(acc, ss);
		for (int c0 = unit < units ? p : C; c0 < C; c0 += S * U) {
			uint4 q[U][MF];
			float sv[U][MF];
			qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
			qmvf_batch<QT, RB, MF, XS, NRM, U>(q, sv, x, R, K, V, C, c0, S, acc, ss);
		}
		qmvf_out<MF, RB, FORM>(QMVF_ARGS, b, G, acc, ss, red, nred);
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
