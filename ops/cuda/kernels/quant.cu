// Products with quantized weights (quant_matmul, ops/quant.go): codes of
// float8_e4m3fn (FP8 checkpoints as published), i8 or 4-bit (two a byte,
// low nibble first, u meaning u - 8), each times the scale of its block
// (br rows by bc columns; scale (n/br, k/bc) of an [ceil(N/br), sc] table of
// type st: WT_F32, WT_BF16 or WT_F16).
//
// qmv_<codes>_r<RB>: 1..RB rows of x [R, K] against the weight [N, K],
// bandwidth bound, dequantizing on the fly: one warp a feature (a block of
// W warps computes W consecutive features), its lanes streaming the row's
// 16-byte vectors of codes (16 FP8 or i8 codes, 32 4-bit codes) through
// ld_stream; a vector's codes times x are summed, then times the vector's
// scale (vec: every vector lies in one scale block). Without vec (a row not
// 16-byte aligned, a block not a whole number of vectors) the lanes read
// element by element. Sums are reduced per warp by shuffles: no atomics,
// the same bits on every run.
// dequant_f32: the whole weight dequantized to f32 [N, K], for a prompt
// chunk's product by the GEMM path of matmul (matmul.go). In f32 the
// product of a code and its block's scale is exact as the checkpoint means
// it; bf16 rounded it (2^-9 of each weight: 3e-2 in a tiny Qwen3's logits).

// The instances the Go side launches (quantKernels in quant.go).
extern "C" __global__ void qmv_f8_r1(QMV_PARAMS) { qmv_impl<QT_F8, 1>(QMV_ARGS); }
extern "C" __global__ void qmv_f8_r8(QMV_PARAMS) { qmv_impl<QT_F8, 8>(QMV_ARGS); }
extern "C" __global__ void qmv_i8_r1(QMV_PARAMS) { qmv_impl<QT_I8, 1>(QMV_ARGS); }
extern "C" __global__ void qmv_i8_r8(QMV_PARAMS) { qmv_impl<QT_I8, 8>(QMV_ARGS); }
extern "C" __global__ void qmv_u4_r1(QMV_PARAMS) { qmv_impl<QT_U4, 1>(QMV_ARGS); }
extern "C" __global__ void qmv_u4_r8(QMV_PARAMS) { qmv_impl<QT_U4, 8>(QMV_ARGS); }

// qmvs_<codes>_r<RB>_f<MF>: the same product built as matvec.cu's mv_*
// (used when the rows, the blocks and the pointers allow 16-byte code
// vectors; else qmv_*): a block of W warps holds W/S groups of S warps, a
// group computes one unit of MF consecutive features and its S warps split
// K, each streaming every S-th chunk of 32 16-byte vectors of the unit's
// rows, QMV_LOADS loads per lane in flight, the first ones asked of L2
// before pdl_entry (mv_prefetch); lane sums are reduced per warp, then the
// S warps' sums in warp order (mv_warp_sums, mv_group_sum): the same bits
// on every run. A block loops over the blocks of units NB with a stride of
// the grid (one each when the grid is NB blocks).
// A vector's codes are decoded in registers once for all the rows
// (q_dec: integer ops and one fma a code, no conversion instruction but
// FP8's cvt on sm_89 and later), its products with x summed over the
// vector, then times the vector's scale (every vector lies in one scale
// block). The unit's MF features share every x value a lane reads. With
// xsm, x is first copied to shared memory lane-interleaved (qmvs_stage),
// so that a warp's reads of x are whole 512-byte rows of shared memory
// rather than 32 lines of L1 16 bytes each; without it (x too large) x is
// read through L1 as mv_* reads it.

// The instances the Go side launches (qmvsKernelNames in quant.go):
// qmvs_<codes>_r<RB>_f<MF>.
extern "C" __global__ void qmvs_f8_r1_f1(QMVS_PARAMS, int xsm) { qmvs_run<QT_F8, 1, 1>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_f8_r1_f2(QMVS_PARAMS, int xsm) { qmvs_run<QT_F8, 1, 2>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_f8_r1_f4(QMVS_PARAMS, int xsm) { qmvs_run<QT_F8, 1, 4>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_f8_r8_f1(QMVS_PARAMS, int xsm) { qmvs_run<QT_F8, 8, 1>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_f8_r8_f2(QMVS_PARAMS, int xsm) { qmvs_run<QT_F8, 8, 2>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_f8_r8_f4(QMVS_PARAMS, int xsm) { qmvs_run<QT_F8, 8, 4>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_i8_r1_f1(QMVS_PARAMS, int xsm) { qmvs_run<QT_I8, 1, 1>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_i8_r1_f2(QMVS_PARAMS, int xsm) { qmvs_run<QT_I8, 1, 2>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_i8_r1_f4(QMVS_PARAMS, int xsm) { qmvs_run<QT_I8, 1, 4>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_i8_r8_f1(QMVS_PARAMS, int xsm) { qmvs_run<QT_I8, 8, 1>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_i8_r8_f2(QMVS_PARAMS, int xsm) { qmvs_run<QT_I8, 8, 2>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_i8_r8_f4(QMVS_PARAMS, int xsm) { qmvs_run<QT_I8, 8, 4>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_u4_r1_f1(QMVS_PARAMS, int xsm) { qmvs_run<QT_U4, 1, 1>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_u4_r1_f2(QMVS_PARAMS, int xsm) { qmvs_run<QT_U4, 1, 2>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_u4_r1_f4(QMVS_PARAMS, int xsm) { qmvs_run<QT_U4, 1, 4>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_u4_r8_f1(QMVS_PARAMS, int xsm) { qmvs_run<QT_U4, 8, 1>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_u4_r8_f2(QMVS_PARAMS, int xsm) { qmvs_run<QT_U4, 8, 2>(QMVS_ARGS, xsm); }
extern "C" __global__ void qmvs_u4_r8_f4(QMVS_PARAMS, int xsm) { qmvs_run<QT_U4, 8, 4>(QMVS_ARGS, xsm); }

// dequant_f32: out[n, k] = v(n, k) · s[n/br, k/bc] in f32, grid-stride over
// the N·K elements.
extern "C" __global__ void dequant_f32(const unsigned char* w, long long stride, int qt, const void* s, int st, int sc, int br,
                                       int bc, float* out, int N, int K) {
	pdl_entry();
	GRID_STRIDE(i, (long long)N * K) {
		int n = (int)(i / K), k = (int)(i % K);
		const unsigned char* wr = w + (long long)n * stride;
		float c = qt == QT_F8 ? q_deq<QT_F8>(wr, k) : qt == QT_I8 ? q_deq<QT_I8>(wr, k) : q_deq<QT_U4>(wr, k);
		out[i] = c * load_w(s, st, (long long)(n / br) * sc + k / bc);
	}
}

// Quantized experts (quant_expert_matmul): codes w [E, N, stride] and one
// scale table [ceil(N/br), sc] per expert (sr = ceil(N/br) rows each), read
// as quant_matmul's weight. moe.go binds them as expert_matmul: qmoe_warp_*
// for few units (a warp per (unit, feature), the row dot of q_row), else
// moe_expert_group then qmoe_tile_* (moe_tile, kernels/moe.cu, reading the
// codes through qmoe_wl).

extern "C" __global__ void qmoe_warp_f8(QMOE_PARAMS) { qmoe_warp_impl<QT_F8>(QMOE_ARGS); }
extern "C" __global__ void qmoe_warp_i8(QMOE_PARAMS) { qmoe_warp_impl<QT_I8>(QMOE_ARGS); }
extern "C" __global__ void qmoe_warp_u4(QMOE_PARAMS) { qmoe_warp_impl<QT_U4>(QMOE_ARGS); }

extern "C" __global__ void qmoe_tile_f8(QMOE_TILE_PARAMS) {
	pdl_entry();
	QMOE_TILE(QT_F8);
}
extern "C" __global__ void qmoe_tile_i8(QMOE_TILE_PARAMS) {
	pdl_entry();
	QMOE_TILE(QT_I8);
}
extern "C" __global__ void qmoe_tile_u4(QMOE_TILE_PARAMS) {
	pdl_entry();
	QMOE_TILE(QT_U4);
}
