// The deep one-row quantized matvecs (quant.go's qmvdPlan, the default for
// one decode row of quant_matmul and the fused quantized products):
// qmvd<form>_<codes>_r1_f<MF> is quant_fused.cu's qmvf_impl (forms qmvdg:
// up to QF_SEGS weights, one for quant_matmul; qmvdn: l2-normalized rows;
// qmvdsw_<codes>_r1: gate and up with the SwiGLU) with more bytes in
// flight and the latency of the first ones hidden:
//
//   - a lane issues QMVD_LOADS 16-byte code loads at once (over the MF
//     features of its unit: QMVD_LOADS/MF chunks of 32 vectors, S apart),
//     and qmvdPlan splits K so that one such batch usually covers the
//     lane's whole share of the row: every load is issued before any
//     decode;
//   - the first batch, codes and scales, is loaded into registers before
//     pdl_entry, while the previous kernel drains, not only asked of L2:
//     weights are never written by the kernels of a plan, so the wait
//     guards nothing they read (x, which the previous kernel writes, is
//     read after it), and the loads overlap the wait and the staging of
//     x;
//   - the next unit's first batch (a block looping over blocks of units)
//     is loaded before the reduction of the last, and a batch's next
//     batch is asked of L2 before its decode.
//
// Sums are reduced as qmvf_impl's (per warp, then the group's warps in
// warp order): the same bits on every run.

// QMVD_LOADS is the 16-byte code loads a lane issues at once, over all the
// features of its unit (quant.go's qmvdLoads).
#ifndef QMVD_LOADS
#define QMVD_LOADS 8
#endif

// qmvd_prefetch asks for the L2 lines of the batch from chunk c0 (U chunks
// S apart) of each row wr[i] that is ok, of V vectors: every eighth lane,
// since eight 16-byte vectors make a line.
template <int MF, int U>
__device__ __forceinline__ void qmvd_prefetch(const char* const* wr, const bool* ok, int V, int c0, int S) {
	int lane = threadIdx.x & 31;
	if (lane & 7) return;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int v = ((c0 + S * u) << 5) + lane;
#pragma unroll
		for (int i = 0; i < MF; i++)
			if (ok[i] && v < V) prefetch_l2((const uint4*)wr[i] + v);
	}
}

// qmvd_impl: RB is the row bucket (R <= RB), MF the features a unit (2 for
// QF_SW), XS x staged in shared memory, FORM QF_SEG, QF_SW or QF_NRM.
template <int QT, int RB, int MF, bool XS, int FORM>
__device__ __forceinline__ void qmvd_impl(QMVF_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	const int U = QMVD_LOADS / MF > 0 ? QMVD_LOADS / MF : 1;
	const bool NRM = FORM == QF_NRM;
	__shared__ float red[MV_MAXWARPS * MF * RB];
	__shared__ float nred[NRM ? MV_MAXWARPS * RB : 1];
	int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = nw / S, g = warp / S, p = warp - g * S;
	int V = K / E, C = (V + 31) >> 5, units = FORM == QF_SW ? NF : (NF + MF - 1) / MF;
	const char* wr[MF];
	const void* sp[MF];
	bool ok[MF];
	long long srow[MF];
	uint4 q[U][MF];
	float sv[U][MF];
	int b = blockIdx.x, unit = b * G + g;
	qmvf_rows<MF, FORM>(QMVF_ARGS, units, unit, wr, sp, ok, srow);
	int c0 = unit < units ? p : C;
	qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
	qmvd_prefetch<MF, U>(wr, ok, V, c0 + S * U, S);
	pdl_entry();
	if (XS) {
		qmvs_stage<E>(x, R, K, C, qmvs_xs);
		__syncthreads();
	}
	while (b < NB) {
		float acc[MF][RB];
		float ss[RB]; // QF_NRM: Σx² of the x this lane read
		qmvf_zero<MF, RB>(acc, ss);
		while (c0 < C) {
			int cn = c0 + S * U;
			qmvd_prefetch<MF, U>(wr, ok, V, cn, S);
			qmvf_batch<QT, RB, MF, XS, NRM, U>(q, sv, x, R, K, V, C, c0, S, acc, ss);
			c0 = cn;
			if (c0 < C) qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
		}
		int bn = b + gridDim.x;
		if (bn < NB) {
			unit = bn * G + g;
			qmvf_rows<MF, FORM>(QMVF_ARGS, units, unit, wr, sp, ok, srow);
			c0 = unit < units ? p : C;
			qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, S, q, sv);
		}
		qmvf_out<MF, RB, FORM>(QMVF_ARGS, b, G, acc, ss, red, nred);
		b = bn;
	}
}

// qmvd_run takes x staged in shared memory when xsm is set (the launch's
// dynamic shared memory holds it), else x read through L1.
template <int QT, int MF, int FORM>
__device__ __forceinline__ void qmvd_run(QMVF_PARAMS, int xsm) {
	if (xsm)
		qmvd_impl<QT, 1, MF, true, FORM>(QMVF_ARGS);
	else
		qmvd_impl<QT, 1, MF, false, FORM>(QMVF_ARGS);
}

// The instances the Go side launches (qmvdKernelNames in quant.go), one row
// each: qmvdg_<codes>_r1_f<MF>, qmvdn_<codes>_r1_f<MF>, qmvdsw_<codes>_r1.
extern "C" __global__ void qmvdg_f8_r1_f1(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_f8_r1_f2(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_f8_r1_f4(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_f8_r1_f1(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_f8_r1_f2(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_f8_r1_f4(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdsw_f8_r1(QMVF_PARAMS, int xsm) { qmvd_run<QT_F8, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_i8_r1_f1(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_i8_r1_f2(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_i8_r1_f4(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_i8_r1_f1(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_i8_r1_f2(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_i8_r1_f4(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdsw_i8_r1(QMVF_PARAMS, int xsm) { qmvd_run<QT_I8, 2, QF_SW>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_u4_r1_f1(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 1, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_u4_r1_f2(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 2, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdg_u4_r1_f4(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 4, QF_SEG>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_u4_r1_f1(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 1, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_u4_r1_f2(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 2, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdn_u4_r1_f4(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 4, QF_NRM>(QMVF_ARGS, xsm); }
extern "C" __global__ void qmvdsw_u4_r1(QMVF_PARAMS, int xsm) { qmvd_run<QT_U4, 2, QF_SW>(QMVF_ARGS, xsm); }
