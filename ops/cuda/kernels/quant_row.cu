// The one-row quantized matvecs built for latency (quant.go's qmvPlan,
// where qmvRowDefault or REEL_QMV_ROW=1 takes them), beside the split-K qmvs_*
// (quant.cu) and the fused qmvg_*, qmvsw_*, qmvn_* (quant_fused.cu):
//
// qmvr_<codes>_f<MF>_v<VM>: y = x · Wᵀ for one row of x [1, K] and codes
// that can be read as 16-byte vectors, a warp computing MF whole rows of
// codes: no split over K, no shared memory, no __syncthreads. Lane l takes
// vectors l, l + 32, ... of each of its rows, VM of them at most in one
// batch (fully unrolled, predicated on the row's V vectors; VM 4 or 8, so
// that short rows hold half the registers): every code load (ld_stream)
// and scale load (q_scale) of the batch is issued into registers before
// any is used, the first batch before pdl_entry when QMVR_EARLY (weights
// do not depend on the previous kernel; x does: it is read after the
// wait, through L1). A row of more than 32·VM vectors takes further
// batches, one DRAM round trip each (qmvPlan takes qmvr only where the row
// fits one). Each vector's codes are decoded in
// registers (q_dec), their products with x summed over the vector, then
// times the vector's scale, in qmvf_batch's order; a feature's lane sums
// are reduced by warp_sum (the same bits on every run) and lane 0 writes
// them (mv_put).
// qmvgr_<codes>_f<MF>_v<VM>, qmvnr_<codes>_f<MF>_v<VM>, qmvswr_<codes>_v<VM>:
// the same for
// quant_fused.cu's forms (QF_SEG grouped weights, QF_NRM with the row's
// norm, which every warp sums over the whole row in one order, QF_SW gate
// and up with SwiGLU: MF 2, gate row j and up row j a warp).
//
// Every kernel takes its split-K sibling's arguments (QMVS_PARAMS or
// QMVF_PARAMS, then xsm), so that the Go side launches both alike; S, NB
// and xsm are not used.

// QMVR_VMAX caps VM (tests: a row then takes several batches).
#ifndef QMVR_VMAX
#define QMVR_VMAX 8
#endif

// QMVR_EARLY issues the first batch of code and scale loads before
// pdl_entry (1), or after it (0). Loads before the wait are safe for
// tensors no kernel still running writes: the previous kernel's blocks
// have all passed their own wait when this one starts, so only what the
// previous kernel itself writes could be stale, and weights are written
// by uploads, never by the kernel before a product.
#ifndef QMVR_EARLY
#define QMVR_EARLY 1
#endif

// qmvr_impl: MF the features a warp (2 for QF_SW: gate, up), FORM QF_SEG,
// QF_SW or QF_NRM, VM the vectors a lane holds of each row.
template <int QT, int MF, int FORM, int VM>
__device__ __forceinline__ void qmvr_impl(QMVF_PARAMS) {
	const int E = QT == QT_U4 ? 32 : 16; // codes a 16-byte vector
	const int U = VM < QMVR_VMAX ? VM : QMVR_VMAX;
	const bool NRM = FORM == QF_NRM;
	int lane = threadIdx.x & 31;
	int unit = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	int V = K / E, C = (V + 31) >> 5, units = FORM == QF_SW ? NF : (NF + MF - 1) / MF;
	const char* wr[MF];
	const void* sp[MF];
	bool ok[MF];
	long long srow[MF];
	qmvf_rows<MF, FORM>(QMVF_ARGS, units, unit, wr, sp, ok, srow);
	uint4 q[U][MF];
	float sv[U][MF];
	if (QMVR_EARLY) qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, 0, 1, q, sv);
	pdl_entry();
	if (unit >= units) return; // the whole warp
	if (!QMVR_EARLY) qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, 0, 1, q, sv);
	float acc[MF][1];
	float ss[1]; // QF_NRM: Σx² of the x this lane read
	qmvf_zero<MF, 1>(acc, ss);
	for (int c0 = 0;;) {
		qmvf_batch<QT, 1, MF, false, NRM, U>(q, sv, x, 1, K, V, C, c0, 1, acc, ss);
		c0 += U;
		if (c0 >= C) break;
		qmvf_load<QT, MF, U>(wr, sp, ok, srow, st, bc, V, c0, 1, q, sv);
	}
	// The warp's sums in mv_put's layout for one group of one warp and one
	// row (red[i], nred[0]), unit being the block of units mv_put takes.
	float red[MF], nred[1];
#pragma unroll
	for (int i = 0; i < MF; i++) red[i] = warp_sum(acc[i][0]);
	nred[0] = NRM ? warp_sum(ss[0]) : 0.f;
	if (lane != 0) return;
#pragma unroll
	for (int i = 0; i < (FORM == QF_SW ? 1 : MF); i++)
		mv_put<MF, 1, FORM == QF_SW, NRM>(red, nred, unit, 1, 1, i, 0, NF, y0, y1, y2, y3, e0, e1, e2, sg, su, eps);
}

// QMVR_PLAIN is qmvr_impl's QF_SEG over one weight, from qmvs_*'s
// arguments: its codes, scales and output as segment 0, ending at N.
#define QMVR_PLAIN(QT, MF, VM) \
	qmvr_impl<QT, MF, QF_SEG, VM>(x, stride, st, sc, br, bc, R, K, N, S, NB, w, w, w, w, s, s, s, s, y, y, y, y, N, N, N, nullptr, nullptr, 0.f)

// The instances the Go side launches (qmvrKernelNames in quant.go,
// qfuseKernelNames in quant_fused.go).
extern "C" __global__ void qmvr_f8_f1_v4(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_F8, 1, 4); }
extern "C" __global__ void qmvr_f8_f2_v4(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_F8, 2, 4); }
extern "C" __global__ void qmvr_i8_f1_v4(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_I8, 1, 4); }
extern "C" __global__ void qmvr_i8_f2_v4(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_I8, 2, 4); }
extern "C" __global__ void qmvr_u4_f1_v4(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_U4, 1, 4); }
extern "C" __global__ void qmvr_u4_f2_v4(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_U4, 2, 4); }
extern "C" __global__ void qmvr_f8_f1_v8(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_F8, 1, 8); }
extern "C" __global__ void qmvr_f8_f2_v8(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_F8, 2, 8); }
extern "C" __global__ void qmvr_i8_f1_v8(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_I8, 1, 8); }
extern "C" __global__ void qmvr_i8_f2_v8(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_I8, 2, 8); }
extern "C" __global__ void qmvr_u4_f1_v8(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_U4, 1, 8); }
extern "C" __global__ void qmvr_u4_f2_v8(QMVS_PARAMS, int xsm) { QMVR_PLAIN(QT_U4, 2, 8); }

extern "C" __global__ void qmvgr_f8_f1_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 1, QF_SEG, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_f8_f2_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 2, QF_SEG, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_f8_f1_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 1, QF_NRM, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_f8_f2_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 2, QF_NRM, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvswr_f8_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 2, QF_SW, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_i8_f1_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 1, QF_SEG, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_i8_f2_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 2, QF_SEG, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_i8_f1_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 1, QF_NRM, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_i8_f2_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 2, QF_NRM, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvswr_i8_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 2, QF_SW, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_u4_f1_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 1, QF_SEG, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_u4_f2_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 2, QF_SEG, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_u4_f1_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 1, QF_NRM, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_u4_f2_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 2, QF_NRM, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvswr_u4_v4(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 2, QF_SW, 4>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_f8_f1_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 1, QF_SEG, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_f8_f2_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 2, QF_SEG, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_f8_f1_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 1, QF_NRM, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_f8_f2_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 2, QF_NRM, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvswr_f8_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_F8, 2, QF_SW, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_i8_f1_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 1, QF_SEG, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_i8_f2_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 2, QF_SEG, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_i8_f1_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 1, QF_NRM, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_i8_f2_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 2, QF_NRM, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvswr_i8_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_I8, 2, QF_SW, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_u4_f1_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 1, QF_SEG, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvgr_u4_f2_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 2, QF_SEG, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_u4_f1_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 1, QF_NRM, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvnr_u4_f2_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 2, QF_NRM, 8>(QMVF_ARGS); }
extern "C" __global__ void qmvswr_u4_v8(QMVF_PARAMS, int xsm) { qmvr_impl<QT_U4, 2, QF_SW, 8>(QMVF_ARGS); }
