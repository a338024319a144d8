#!/usr/bin/python3
"""Emulates one block of flash_wg_body (ops/cuda/kernels/flash_wg.cu) in
numpy and checks it against float64 attention, so that the shared-memory
swizzle, the descriptors' steps and the wgmma fragment layouts are checked
without a card.

The model of the hardware, taken from outside our kernel:
  - wgmma reads a K-major operand of R rows x 16 columns (f16) described
    by (start, SBO, 128-byte swizzle) at byte address
        a = start + (r % 8) * 128 + (r // 8) * SBO + 2 * k
    swizzled as a ^ (((a >> 7) & 7) << 4) (TMA's and wgmma's 128-byte
    swizzle: the 16-byte piece within each 128 bytes XOR bits 7-9);
  - the accumulator and register-A fragments are CUTLASS's CuTe layouts
    CLayout_64xN = ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)) and
    ALayout_64x16 = ((4,8,4),(2,2,2)):((128,1,16),(64,8,512)), mapping
    (thread, value) to m + 64 * n (column-major 64 x N), evaluated here
    literally, not through the kernel's closed forms.

Run: /usr/bin/python3 tools/wgflash_emu.py (numpy); prints the worst error
per case and exits 1 on a mismatch.
"""
import sys

import numpy as np


def cute(shape, stride, coord):
    """Evaluates a CuTe layout of nested (shape, stride) at a nested coord."""
    if isinstance(shape, tuple):
        return sum(cute(s, d, c) for s, d, c in zip(shape, stride, coord))
    assert 0 <= coord < shape
    return coord * stride


def split(i, shape):
    """The nested coordinate of flat index i in shape (colexicographic)."""
    if isinstance(shape, tuple):
        out = []
        for s in shape:
            n = size(s)
            out.append(split(i % n, s))
            i //= n
        return tuple(out)
    return i


def size(shape):
    if isinstance(shape, tuple):
        r = 1
        for s in shape:
            r *= size(s)
        return r
    return shape


def clayout(N):
    return ((4, 8, 4), (2, 2, N // 8)), ((128, 1, 16), (64, 8, 512))


ALAYOUT = ((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512))


def frag_index(layout, t, v):
    """(row, column) of value v of thread t in a column-major 64 x N tile."""
    shape, stride = layout
    i = cute(shape, stride, (split(t, shape[0]), split(v, shape[1])))
    return i % 64, i // 64


# ---- the kernel's closed forms (flash_wg.cu) ----

def kernel_c(t, i):
    """flash_wg.cu's comment: register i of thread t of a 64 x N accumulator."""
    w, l = t // 32, t % 32
    g, q = l // 4, l % 4
    return 16 * w + g + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * q + (i % 2)


def kernel_a(t, j):
    """Half j (0..7: register j // 2, low half first) of thread t's A fragment."""
    w, l = t // 32, t % 32
    g, q = l // 4, l % 4
    reg, half = j // 2, j % 2
    row = 16 * w + g + 8 * (reg % 2)
    col = 2 * q + half + 8 * (reg // 2)
    return row, col


def wg_sw(R, r, c):
    return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7)


def read_operand(smem, start, R):
    """The R x 16 K-major operand wgmma reads at descriptor start (bytes)."""
    assert start % 16 == 0
    sbo = 1024
    out = np.zeros((R, 16))
    for r in range(R):
        for k in range(16):
            a = start + (r % 8) * 128 + (r // 8) * sbo + 2 * k
            a ^= ((a >> 7) & 7) << 4
            assert a % 2 == 0
            out[r, k] = smem[a // 2]
    return out


def f16(x):
    return np.clip(x, -65504, 65504).astype(np.float16).astype(np.float64)


def check_layouts():
    for N in (64, 128, 256):
        lay = clayout(N)
        seen = set()
        for t in range(128):
            for i in range(N // 2):
                got = frag_index(lay, t, i)
                if got != kernel_c(t, i):
                    sys.exit(f"C layout N={N}: thread {t} register {i}: CuTe {got}, kernel {kernel_c(t, i)}")
                seen.add(got)
        assert len(seen) == 64 * N
    for t in range(128):
        for j in range(8):
            got = frag_index(ALAYOUT, t, j)
            if got != kernel_a(t, j):
                sys.exit(f"A layout: thread {t} value {j}: CuTe {got}, kernel {kernel_a(t, j)}")
    # flash_wg packs P's register kk from S's n-tiles 2kk, 2kk+1: half j of
    # A register r is S element (n-tile 2kk + r // 2, e = 2 * (r % 2) + half),
    # which must be the same (row, key - 16kk).
    for t in range(128):
        for j in range(8):
            reg, half = j // 2, j % 2
            n, e = reg // 2, 2 * (reg % 2) + half
            row_s, col_s = kernel_c(t, 4 * n + e)
            if (row_s, col_s) != kernel_a(t, j):
                sys.exit(f"P packing: thread {t} half {j}: S {(row_s, col_s)} vs A {kernel_a(t, j)}")
    print("fragment layouts: the kernel's forms equal CuTe's CLayout_64xN (N = 64, 128, 256) and ALayout_64x16")


def emulate(D, G, rows, pos, window, seed, rb=0):
    """One block (the first KV head, its row block rb counted from the
    chunk's start) of a chunk."""
    rng = np.random.default_rng(seed)
    BN, BM, NT = 64, 128, 256
    heads = G
    PB = BM // G
    used = rows
    jBase = max(0, pos - window + 1) if window > 0 else 0
    nkeys = pos + used
    nk = ((nkeys - jBase) + 2 * 64 - 1) // 64 * 64 + 64
    q = rng.uniform(-1, 1, (rows, heads, D)) * 2
    k = rng.uniform(-1, 1, (nkeys, D)) * 2
    v = rng.uniform(-1, 1, (nkeys, D))
    scale = 1 / np.sqrt(D)
    # kv_half's scratch: key index i is position jBase + i, zeros past the last.
    kh = np.zeros((nk, D))
    vt = np.zeros((D, nk))
    for i in range(nk):
        j = jBase + i
        if j < nkeys:
            kh[i] = f16(k[j])
            vt[:, i] = f16(v[j])
    # fa_block
    r0 = rb * PB
    rEnd = min(used, r0 + PB)
    pFirst, pLast = pos + r0, pos + rEnd - 1
    jLo = max(0, pFirst - window + 1) if window > 0 else 0
    iStart = (jLo - jBase) & ~7
    tiles = (pLast - jBase - iStart) // BN + 1
    # shared memory (elements): Q, two K, two Vt tiles
    KT, VT = BN * D, D * BN
    sQ, sK, sV = 0, BM * D, BM * D + 2 * KT
    smem = np.full(sV + 2 * VT, np.nan)
    for m in range(BM):
        r = r0 + m // G
        for c in range(0, D, 2):
            x = [0.0, 0.0]
            if m < PB * G and r < rEnd:
                x = [q[r, m % G, c], q[r, m % G, c + 1]]
            smem[sQ + wg_sw(BM, m, c)] = f16(np.float64(x[0]))
            smem[sQ + wg_sw(BM, m, c) + 1] = f16(np.float64(x[1]))
    KC, VC = D // 8, BN // 8
    KSTEP, VSTEP = NT // KC, NT // VC

    def load(t, buf):
        load_k(t, buf)
        load_v(t, buf)

    def load_k(t, buf):
        i0 = iStart + t * BN
        for tid in range(NT):
            kKey, kCol = tid // KC, 8 * (tid % KC)
            for kk in range(BN // KSTEP):
                dst = sK + buf * KT + wg_sw(BN, kKey, kCol) + kk * KSTEP * 64
                assert dst == sK + buf * KT + wg_sw(BN, kKey + kk * KSTEP, kCol)
                smem[dst:dst + 8] = kh[i0 + kKey + kk * KSTEP, kCol:kCol + 8]

    def load_v(t, buf):
        i0 = iStart + t * BN
        for tid in range(NT):
            vDim, vKey = tid // VC, 8 * (tid % VC)
            for kk in range(D // VSTEP):
                dst = sV + buf * VT + wg_sw(D, vDim, vKey) + kk * VSTEP * 64
                assert dst == sV + buf * VT + wg_sw(D, vDim + kk * VSTEP, vKey)
                smem[dst:dst + 8] = vt[vDim + kk * VSTEP, i0 + vKey:i0 + vKey + 8]

    def pv(wg, P, vtile):
        """P as A fragments (registers packed from S's n-tiles), then P V."""
        for kk in range(BN // 16):
            Afrag = np.zeros((64, 16))
            for th in range(128):
                for jj in range(8):
                    reg, half = jj // 2, jj % 2
                    n, e = 2 * kk + reg // 2, 2 * (reg % 2) + half
                    r, c = kernel_c(th, 4 * n + e)
                    ar, ac = frag_index(ALAYOUT, th, jj)
                    Afrag[ar, ac] = P[r, c]
            B = read_operand(smem, vtile + kk * 32, D)
            o[64 * wg:64 * wg + 64] += Afrag @ B.T

    sl2 = scale * 1.4426950408889634
    o = np.zeros((BM, D))  # the accumulators, as the fragments map them
    mx = np.full(BM, -1e30)
    lsum = np.zeros(BM)
    m_idx = np.arange(BM)
    prow = np.where((m_idx < PB * G) & (r0 + m_idx // G < rEnd), pos + r0 + m_idx // G, -1)
    lo = prow - window + 1 if window > 0 else np.zeros(BM, dtype=int)
    for t in range(tiles):
        load(t, t & 1)
        kt, vtile = 2 * (sK + (t & 1) * KT), 2 * (sV + (t & 1) * VT)
        j0 = jBase + iStart + t * BN
        for wg in range(2):
            qa = 2 * sQ + wg * 64 * 128
            S = np.zeros((64, BN))
            for kk in range(D // 16):
                A = read_operand(smem, qa + (kk >> 2) * (BM * 128) + (kk & 3) * 32, 64)
                B = read_operand(smem, kt + (kk >> 2) * (BN * 128) + (kk & 3) * 32, BN)
                S += A @ B.T
            # each thread's registers, through the C layout
            rowsS = slice(64 * wg, 64 * wg + 64)
            Sreg = np.zeros((128, BN // 2))
            for th in range(128):
                for i in range(BN // 2):
                    r, c = frag_index(clayout(BN), th, i)
                    Sreg[th, i] = S[r, c]
            # fa_softmax on the rows (mask, max over the row's 4 lanes, exp2)
            Srow = np.zeros((64, BN))
            for th in range(128):
                for i in range(BN // 2):
                    r, c = kernel_c(th, i)
                    Srow[r, c] = Sreg[th, i]
            j = j0 + np.arange(BN)
            P = np.zeros((64, BN))
            cs = np.zeros(64)
            for r in range(64):
                m = 64 * wg + r
                ok = (j >= lo[m]) & (j <= prow[m])
                x = np.where(ok, Srow[r] * sl2, -1e30)
                nm = max(mx[m], x.max())
                cs[r] = 2.0 ** (mx[m] - nm)
                mx[m] = nm
                p = np.where(x <= -1e29, 0.0, 2.0 ** (x - nm))
                lsum[m] = lsum[m] * cs[r] + p.sum()
                P[r] = f16(p)
            o[rowsS] *= cs[:, None]
            pv(wg, P, vtile)
    # reference: float64 attention of the block's rows on the f16 inputs
    worst = 0.0
    for m in range(BM):
        if prow[m] < 0:
            continue
        r, h = r0 + m // G, m % G
        js = np.arange(max(lo[m], 0), prow[m] + 1)
        qs = f16(q[r, h])
        sc = np.array([qs @ f16(k[jj]) for jj in js]) * scale
        w = np.exp(sc - sc.max())
        y = (w / w.sum()) @ f16(v[js])
        got = o[m] / lsum[m]
        e = np.abs(got - y).max() / max(np.abs(y).max(), 1e-30)
        worst = max(worst, e) if np.isfinite(e) else np.inf  # NaN (unwritten shared memory) fails
    return worst, tiles


def main():
    check_layouts()
    bad = False
    for D, G, rows, pos, window, rb in [
        (256, 4, 40, 0, 0, 0),     # causal from position 0, one tile of several row sets
        (256, 4, 64, 100, 0, 1),   # several tiles, the last masked
        (128, 8, 48, 70, 50, 2),   # a window, GQA of 8 (16 positions a block)
        (256, 12, 30, 5, 0, 0),    # a group of 12: rows 120..127 padding
        (128, 1, 128, 0, 0, 0),    # one head a group: 128 positions
        (128, 8, 48, 200, 150, 2), # a window over four tiles
    ]:
        err, tiles = emulate(D, G, rows, pos, window, seed=D + G + rows, rb=rb)
        ok = err < 2e-3
        bad |= not ok
        print(f"wg D={D} G={G} rows={rows} pos={pos} window={window} block={rb}: {tiles} tiles, worst relative error {err:.2e} {'ok' if ok else 'MISMATCH'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
