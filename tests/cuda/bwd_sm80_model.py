#!/usr/bin/env python3
"""A lane-level model of the CUDA backward's main kernel (src/cuda/kernels/bwd_sm80.cuh) and
its row stats / dQ store (src/cuda/bwd_aux.cu), for f16, to check its fragment layouts, shared
addresses and block ranges without a GPU: shared memory as bytes with the swizzled cp.async
copies, ldmatrix (x4, .trans) and mma.sync m16n8k16 by their PTX definitions, and the kernel's
per-lane address formulas, loops and masks transcribed from the C++ (names as there). Each
case runs a small problem through the model of an instance-shaped configuration and compares
dQ, dK and dV with a float64 backward (rel_err ~2e-4 expected: f16 operands).
Keep it in step with the kernel when the kernel's addressing changes. Not part of CI
(about a minute):
  python3 tests/cuda/bwd_sm80_model.py [case name substrings...]
"""
import numpy as np, math, itertools, sys

LOG2E = 1.4426950408889634

class Cfg:
    def __init__(s, hd, bm, bn, warps, stages, dqm, dsplit):
        s.hd, s.bm, s.bn, s.warps, s.stages, s.dqm, s.dsplit = hd, bm, bn, warps, stages, dqm, dsplit
        s.threads = warps * 32
        s.out = hd // dsplit
        s.row = (hd * 2 + 127) // 128 * 128
        s.kKS = hd * 2 // 32
        lim = 32 if s.out > 64 else 64
        s.subm = bm if bm < lim else lim
        s.kMF = s.subm // 8; s.kQK = s.subm // 16; s.kOF = s.out // 8
        s.outbytes = s.out * 2
        s.dsrow = bm * 2 + 16
        s.dqwn = warps // dqm
        s.dqrows = bm // dqm; s.dqmi = s.dqrows // 16
        s.dqcols = s.out // s.dqwn; s.dqnf = s.dqcols // 8
        s.kKK = bn // 16
        s.tilekv = bn * s.row; s.tileq = bm * s.row
        s.offK = 0; s.offV = s.tilekv; s.offQ = 2 * s.tilekv
        s.offDo = s.offQ + stages * s.tileq
        s.offDs = s.offDo + stages * s.tileq
        s.offStat = s.offDs + bn * s.dsrow
        s.smem = s.offStat + stages * bm * 8
        assert bn == 16 * warps and bm % s.subm == 0 and bm <= s.threads
        assert warps % dqm == 0 and s.dqrows % 16 == 0 and s.dqcols % 16 == 0
        assert s.kOF % 2 == 0

# ---- memory primitives
class Smem:
    def __init__(s, n): s.b = np.zeros(n, dtype=np.uint8); s.written = np.zeros(n, dtype=bool)
    def write16(s, addr, vals8):  # 8 halves
        assert addr % 16 == 0
        s.b[addr:addr+16] = np.frombuffer(np.asarray(vals8, dtype=np.float16).tobytes(), dtype=np.uint8)
    def read_row8(s, addr):
        assert addr % 16 == 0, addr
        return np.frombuffer(s.b[addr:addr+16].tobytes(), dtype=np.float16).astype(np.float32)
    def w32(s, addr, u32bytes):
        assert addr % 4 == 0
        s.b[addr:addr+4] = u32bytes
    def wbytes(s, addr, bs): s.b[addr:addr+len(bs)] = np.frombuffer(bs, dtype=np.uint8)
    def rf2(s, addr): return np.frombuffer(s.b[addr:addr+8].tobytes(), dtype=np.float32)

def swz(row, chunk, rowbytes): return row * rowbytes + ((chunk ^ (row & 7)) * 16)

def load_tile(sm, base, mat, nrows_tile, hd, rowbytes, rows_valid, cols_valid):
    # mat: 2d float16 array (rows >= rows_valid), zero-fill beyond
    chunks = hd // 8
    for r in range(nrows_tile):
        for c in range(chunks):
            ok = r < rows_valid and c * 8 < cols_valid
            vals = mat[r, c*8:c*8+8] if ok else np.zeros(8, np.float16)
            sm.write16(base + swz(r, c, rowbytes), vals)

def ldmatrix_x4(sm, addrs, trans=False):
    # addrs[32]; returns regs[32][4] as pairs (float32 x2)
    mats = []
    for i in range(4):
        m = np.stack([sm.read_row8(addrs[8*i + j]) for j in range(8)])  # 8x8
        mats.append(m)
    regs = np.zeros((32, 4, 2), np.float32)
    for l in range(32):
        g, t = l // 4, l % 4
        for i in range(4):
            m = mats[i]
            if trans: regs[l, i] = (m[2*t, g], m[2*t+1, g])
            else: regs[l, i] = (m[g, 2*t], m[g, 2*t+1])
    return regs

def mma(d, a, b0, b1):
    # d: [32][4]; a: [32][4][2]; b0,b1: [32][2]
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        A[g, 2*t:2*t+2] = a[l, 0]; A[g+8, 2*t:2*t+2] = a[l, 1]
        A[g, 2*t+8:2*t+10] = a[l, 2]; A[g+8, 2*t+8:2*t+10] = a[l, 3]
        B[2*t:2*t+2, g] = b0[l]; B[2*t+8:2*t+10, g] = b1[l]
    C = A @ B
    for l in range(32):
        g, t = l // 4, l % 4
        d[l] += np.array([C[g, 2*t], C[g, 2*t+1], C[g+8, 2*t], C[g+8, 2*t+1]], np.float32)

def pack2(x, y): return np.array([np.float16(x), np.float16(y)], np.float32)

def p_operand(x, pk):  # x: [32][kMF][4] -> a [32][4][2]
    a = np.zeros((32, 4, 2), np.float32)
    for l in range(32):
        a[l, 0] = pack2(x[l, 2*pk, 0], x[l, 2*pk, 1])
        a[l, 1] = pack2(x[l, 2*pk, 2], x[l, 2*pk, 3])
        a[l, 2] = pack2(x[l, 2*pk+1, 0], x[l, 2*pk+1, 1])
        a[l, 3] = pack2(x[l, 2*pk+1, 2], x[l, 2*pk+1, 3])
    return a

# ---- per-warp tile bases (BwdSm80Tiles::init, VOperand::init)
class Tiles:
    def __init__(s, c, warp, dh):
        s.trbase = np.zeros((32, 4), np.int64); s.b_row = np.zeros((32, 4), np.int64)
        s.ds_a = np.zeros(32, np.int64); s.ds_st = np.zeros(32, np.int64)
        nk = min(c.dqnf // 2, 4)
        s.k_tr = np.zeros((32, nk), np.int64)
        wm, wn = warp % c.dqm, warp // c.dqm
        c0 = (dh * c.out + wn * c.dqcols) // 8
        for lane in range(32):
            r7, cq, ck = lane % 8, lane // 16, (lane // 8) % 2
            for j in range(4):
                s.b_row[lane, j] = (r7 + cq * 8) * c.row + (((2 * j + ck) ^ r7) * 16)
                s.trbase[lane, j] = (r7 + ck * 8) * c.row + (((2 * j + cq) ^ r7) * 16)
            s.ds_a[lane] = c.offDs + (r7 + 8 * cq) * c.dsrow + (wm * c.dqrows // 8 + ck) * 16
            s.ds_st[lane] = c.offDs + (warp * 16 + lane // 4) * c.dsrow + 4 * (lane % 4)
            for j in range(nk):
                s.k_tr[lane, j] = c.offK + (r7 + ck * 8) * c.row + (((c0 + 2 * j + cq) ^ r7) * 16)
    def tr_load(s, sm, c, off, pk, df):
        return ldmatrix_x4(sm, s.trbase[:, (df // 2) % 4] + off + pk * 16 * c.row + (df // 8) * 128, trans=True)

def bwd_scores(c, sm, tl, a_off, b_off):
    acc = np.zeros((32, c.kMF, 4), np.float32)
    for ks in range(c.kKS):
        a = ldmatrix_x4(sm, tl.trbase[:, ks % 4] + a_off + (ks // 4) * 128)
        for nf in range(0, c.kMF, 2):
            b = ldmatrix_x4(sm, tl.b_row[:, ks % 4] + b_off + nf * 8 * c.row + (ks // 4) * 128)
            mma(acc[:, nf], a, b[:, 0], b[:, 1])
            mma(acc[:, nf + 1], a, b[:, 2], b[:, 3])
    return acc

def bwd_accumulate(c, sm, tl, acc, x, b_off, store, c0):
    for pk in range(c.kQK):
        a = p_operand(x, pk)
        if store:
            for l in range(32):
                for i in range(4):
                    addr = tl.ds_st[l] + 8 * (i % 2) * c.dsrow + (c0 + 2 * pk + i // 2) * 16
                    sm.w32(addr, np.frombuffer(a[l, i].astype(np.float16).tobytes(), np.uint8))
        for df in range(0, c.kOF, 2):
            b = tl.tr_load(sm, c, b_off, pk, df)
            mma(acc[:, df], a, b[:, 0], b[:, 1])
            mma(acc[:, df + 1], a, b[:, 2], b[:, 3])

def mask_transposed(x, band, sq, row0, col0):
    left, right, offset, sk = band
    for l in range(32):
        g, t = l // 4, l % 4
        for half in range(2):
            j = row0 + g + 8 * half; i0 = col0 + 2 * t
            lo = -(1 << 30) if right < 0 else j - offset - right - i0
            hi = (sq - 1 if left < 0 else min(sq - 1, j - offset + left)) - i0
            if j >= sk: lo = 1 << 30
            for nf in range(x.shape[1]):
                for e in range(2):
                    cc = nf * 8 + e
                    if cc < lo or cc > hi: x[l, nf, 2 * half + e] = 0.0

def bwd_block(c, sm, tls, dk, dv, kst, scale_log2, band, sq, n0, m0, full, dh):
    qoff = c.offQ + kst * c.tileq; dooff = c.offDo + kst * c.tileq
    for sub in range(c.bm // c.subm):
        q0 = sub * c.subm
        q_rows = qoff + q0 * c.row; do_rows = dooff + q0 * c.row
        for warp in range(c.warps):
            tl = tls[warp]; warp_rows = warp * 16 * c.row
            x = bwd_scores(c, sm, tl, c.offK + warp_rows, q_rows)
            for l in range(32):
                t = l % 4
                for nf in range(c.kMF):
                    r0 = sm.rf2(c.offStat + (kst * c.bm + q0 + 2 * t + 8 * nf) * 8)
                    r1 = sm.rf2(c.offStat + (kst * c.bm + q0 + 2 * t + 8 * nf + 1) * 8)
                    x[l, nf, 0] = 2.0 ** (x[l, nf, 0] * scale_log2 - r0[0])
                    x[l, nf, 1] = 2.0 ** (x[l, nf, 1] * scale_log2 - r1[0])
                    x[l, nf, 2] = 2.0 ** (x[l, nf, 2] * scale_log2 - r0[0])
                    x[l, nf, 3] = 2.0 ** (x[l, nf, 3] * scale_log2 - r1[0])
            if not full: mask_transposed(x, band, sq, n0 + warp * 16, m0 + q0)
            bwd_accumulate(c, sm, tl, dv[warp], x, do_rows + dh * c.outbytes, False, 0)
            dp = bwd_scores(c, sm, tl, c.offV + warp_rows, do_rows)
            for l in range(32):
                t = l % 4
                for nf in range(c.kMF):
                    d0 = sm.rf2(c.offStat + (kst * c.bm + q0 + 2 * t + 8 * nf) * 8)[1]
                    d1 = sm.rf2(c.offStat + (kst * c.bm + q0 + 2 * t + 8 * nf + 1) * 8)[1]
                    x[l, nf, 0] *= dp[l, nf, 0] - d0; x[l, nf, 1] *= dp[l, nf, 1] - d1
                    x[l, nf, 2] *= dp[l, nf, 2] - d0; x[l, nf, 3] *= dp[l, nf, 3] - d1
            bwd_accumulate(c, sm, tl, dk[warp], x, q_rows + dh * c.outbytes, True, q0 // 8)

def bwd_dq(c, sm, tls, dq_acc, dq_base, m0, sq, dh):
    for warp in range(c.warps):
        tl = tls[warp]
        acc = np.zeros((32, c.dqmi, c.dqnf, 4), np.float32)
        for ks in range(c.kKK):
            a = [ldmatrix_x4(sm, tl.ds_a + ks * 16 * c.dsrow + mi * 32, trans=True) for mi in range(c.dqmi)]
            for nf in range(0, c.dqnf, 2):
                b = ldmatrix_x4(sm, tl.k_tr[:, (nf // 2) % 4] + (nf // 8) * 128 + ks * 16 * c.row, trans=True)
                for mi in range(c.dqmi):
                    mma(acc[:, mi, nf], a[mi], b[:, 0], b[:, 1])
                    mma(acc[:, mi, nf + 1], a[mi], b[:, 2], b[:, 3])
        wm, wn = warp % c.dqm, warp // c.dqm
        for l in range(32):
            g, t = l // 4, l % 4
            row0 = m0 + wm * c.dqrows + g
            col = dh * c.out + wn * c.dqcols + 2 * t
            for mi in range(c.dqmi):
                for half in range(2):
                    row = row0 + 16 * mi + 8 * half
                    if row >= sq: continue
                    for nf in range(c.dqnf):
                        idx = dq_base + row * c.hd + col + 8 * nf
                        dq_acc[idx] += acc[l, mi, nf, 2 * half]; dq_acc[idx + 1] += acc[l, mi, nf, 2 * half + 1]

def run_cta(c, P, hk, b, cta_x):
    dh, cta = cta_x % c.dsplit, cta_x // c.dsplit
    seq = P['seq'](b)
    bb, q_row0, k_row0, sq, sk = seq
    left, right = P['wl'], P['wr']
    band = (left, right, sk - sq, sk)
    sm = Smem(c.smem)
    tls = [Tiles(c, w, dh) for w in range(c.warps)]
    dq_slice = cta * P['dq_split']
    h0 = hk * P['group']; h_end = h0 + P['group']
    def load_q(h, m0, st):
        Q = P['q'][bb, q_row0 + m0:, h, :]; DO = P['do'][bb, q_row0 + m0:, h, :]
        load_tile(sm, c.offQ + st * c.tileq, pad_rows(Q, c.bm), c.bm, c.hd, c.row, sq - m0, P['d'])
        load_tile(sm, c.offDo + st * c.tileq, pad_rows(DO, c.bm), c.bm, c.hd, c.row, sq - m0, P['dv'])
        for tid in range(c.bm):
            ok = m0 + tid < sq
            v = P['rowstat'][(bb * P['H'] + h) * P['rows_q'] + q_row0 + m0 + tid] if ok else np.zeros(2, np.float32)
            sm.wbytes(c.offStat + (st * c.bm + tid) * 8, np.asarray(v, np.float32).tobytes())
    n = cta
    while n * c.bn < sk:
        n0 = n * c.bn; n_last = min(n0 + c.bn, sk) - 1
        q_lo = 0 if right < 0 else max(0, n0 - band[2] - right)
        q_hi = sq if left < 0 else min(sq, n_last - band[2] + left + 1)
        m_lo = q_lo // c.bm
        m_hi = (q_hi + c.bm - 1) // c.bm if q_hi > q_lo else m_lo
        dk = np.zeros((c.warps, 32, c.kOF, 4), np.float32); dv = np.zeros_like(dk)
        if m_hi > m_lo:
            K = P['k'][bb, k_row0 + n0:, hk, :]; V = P['v'][bb, k_row0 + n0:, hk, :]
            load_tile(sm, c.offK, pad_rows(K, c.bn), c.bn, c.hd, c.row, sk - n0, P['d'])
            load_tile(sm, c.offV, pad_rows(V, c.bn), c.bn, c.hd, c.row, sk - n0, P['dv'])
            load_q(h0, m_lo * c.bm, 0)
        buf = 0; h = h0; mb = m_lo
        while m_hi > m_lo and h < h_end:
            m0 = mb * c.bm; st = buf if c.stages == 2 else 0
            last_m = mb + 1 == m_hi
            h_next = h + 1 if last_m else h; mb_next = m_lo if last_m else mb + 1
            more = h_next < h_end
            # (A)
            snap = sm.b.copy()
            if c.stages == 2 and more: load_q(h_next, mb_next * c.bm, buf ^ 1)
            full = (m0 + c.bm <= sq and n0 + c.bn <= sk and (right < 0 or n0 + c.bn - 1 - band[2] - right <= m0)
                    and (left < 0 or n0 - band[2] + left >= m0 + c.bm - 1))
            bwd_block(c, sm, tls, dk, dv, st, P['scale_log2'], band, sq, n0, m0, full, dh)
            # (B)
            if c.stages == 1 and more: load_q(h_next, mb_next * c.bm, 0)
            dq_base = dq_slice + ((bb * P['H'] + h) * P['rows_q'] + q_row0) * c.hd
            bwd_dq(c, sm, tls, P['dq_acc'], dq_base, m0, sq, dh)
            h, mb = h_next, mb_next; buf ^= 1
        # store rows
        for warp in range(c.warps):
            for l in range(32):
                g, t = l // 4, l % 4
                row0 = n0 + warp * 16 + g; col0 = dh * c.out + 2 * t
                for half in range(2):
                    row = row0 + 8 * half
                    if row >= sk: continue
                    for df in range(c.kOF):
                        col = col0 + df * 8
                        if col < P['d']:
                            P['dk_out'][bb, k_row0 + row, hk, col:col+2] = dk[warp, l, df, 2*half:2*half+2] * P['scale']
                        if col < P['dv']:
                            P['dv_out'][bb, k_row0 + row, hk, col:col+2] = dv[warp, l, df, 2*half:2*half+2]
        n += P['key_ctas']

def pad_rows(m, rows):
    if m.shape[0] >= rows: return m
    z = np.zeros((rows, m.shape[1]), m.dtype); z[:m.shape[0]] = m; return z

def reference(q, k, v, do, scale, wl, wr, causal, seqs, group):
    # float64; per sequence (bb, q0, k0, sq, sk)
    dq = np.zeros(q.shape); dk = np.zeros(k.shape); dv = np.zeros(v.shape)
    lse_all = np.full((q.shape[0], q.shape[2], q.shape[1]), -np.inf); o_all = np.zeros(do.shape)
    for (bb, q0, k0, sq, sk) in seqs:
        off = sk - sq
        right = (0 if wr < 0 else min(wr, 0)) if causal else wr
        for h in range(q.shape[2]):
            hk = h // group
            Q = q[bb, q0:q0+sq, h].astype(np.float64); K = k[bb, k0:k0+sk, hk].astype(np.float64)
            V = v[bb, k0:k0+sk, hk].astype(np.float64); DO = do[bb, q0:q0+sq, h].astype(np.float64)
            S = scale * Q @ K.T
            i = np.arange(sq)[:, None]; j = np.arange(sk)[None, :]
            vis = np.ones((sq, sk), bool)
            if wl >= 0: vis &= j >= i + off - wl
            if right >= 0: vis &= j <= i + off + right
            S = np.where(vis, S, -np.inf)
            m = S.max(axis=1, initial=-np.inf)
            ms = np.where(np.isinf(m), 0, m)
            E = np.exp(S - ms[:, None]); l = E.sum(1)
            P = np.where(l[:, None] > 0, E / np.where(l > 0, l, 1)[:, None], 0)
            lse = np.where(l > 0, ms + np.log(np.where(l > 0, l, 1)), -np.inf)
            O = P @ V
            lse_all[bb, h, q0:q0+sq] = lse; o_all[bb, q0:q0+sq, h] = O
            dP = DO @ V.T; D = (DO * O).sum(1)
            dS = P * (dP - D[:, None])
            dq[bb, q0:q0+sq, h] += scale * dS @ K
            dk[bb, k0:k0+sk, hk] += scale * dS.T @ Q
            dv[bb, k0:k0+sk, hk] += P.T @ DO
    return dq, dk, dv, lse_all, o_all

def run(c, B, Sq, Sk, H, Hkv, D, Dv, causal=False, wl=-1, wr=-1, scale=None, cu_q=None, cu_k=None, det=False, seed=0):
    rng = np.random.default_rng(seed)
    scale = 1 / math.sqrt(D) if scale is None else scale
    q = rng.uniform(-2, 2, (B, Sq, H, D)).astype(np.float16)
    k = rng.uniform(-2, 2, (B, Sk, Hkv, D)).astype(np.float16)
    v = rng.uniform(-1, 1, (B, Sk, Hkv, Dv)).astype(np.float16)
    do = rng.uniform(-1, 1, (B, Sq, H, Dv)).astype(np.float16)
    if cu_q is not None:
        seqs = [(0, cu_q[i], cu_k[i], cu_q[i+1] - cu_q[i], cu_k[i+1] - cu_k[i]) for i in range(len(cu_q) - 1)]
        nbatch = len(cu_q) - 1; maxsq = max(s[3] for s in seqs); maxsk = max(s[4] for s in seqs)
    else:
        seqs = [(b, 0, 0, Sq, Sk) for b in range(B)]; nbatch = B; maxsq, maxsk = Sq, Sk
    group = H // Hkv
    ref_dq, ref_dk, ref_dv, lse, o = reference(q, k, v, do, scale, wl, wr, causal, seqs, group)
    o16 = o.astype(np.float16)
    # window folding as fwd_params: causal -> right = min(wr, 0) or 0
    right = (0 if wr < 0 else min(wr, 0)) if causal else wr
    rows_q = Sq; nb = 1 if cu_q is not None else B
    # prepare (bwd_row_stats)
    rowstat = np.zeros((nb * H * rows_q, 2), np.float32)
    for bb in range(nb):
        for h in range(H):
            for r in range(rows_q):
                D_ = float((o16[bb, r, h].astype(np.float32) * do[bb, r, h].astype(np.float32)).sum())
                l_ = lse[bb, h, r]
                rowstat[(bb * H + h) * rows_q + r] = (np.inf if l_ == -np.inf else np.float32(l_) * np.float32(LOG2E), D_)
    key_blocks = (maxsk + c.bn - 1) // c.bn
    splits = 1; key_ctas = key_blocks; dq_split = 0
    slice_n = nb * H * rows_q * c.hd
    if det:
        splits = max(1, min(key_blocks, 3)); key_ctas = splits if key_blocks > 0 else 0; dq_split = slice_n
    P = dict(q=q, k=k, v=v, do=do, d=D, dv=Dv, H=H, group=group, rows_q=rows_q, rowstat=rowstat,
             dq_acc=np.zeros(splits * slice_n, np.float32), dq_split=dq_split, key_ctas=key_ctas,
             wl=wl, wr=right, scale=scale, scale_log2=np.float32(scale * LOG2E),
             dk_out=np.full(k.shape[:3] + (D,), np.nan, np.float32), dv_out=np.full(v.shape, np.nan, np.float32))
    P['seq'] = lambda b: seqs[b]
    for b in range(nbatch):
        for hk in range(Hkv):
            for x in range(key_ctas * c.dsplit):
                run_cta(c, P, hk, b, x)
    dq = np.zeros(q.shape, np.float32)
    for bb in range(nb):
        for h in range(H):
            for r in range(rows_q):
                base = ((bb * H + h) * rows_q + r) * c.hd
                s_ = sum(P['dq_acc'][sp * slice_n + base: sp * slice_n + base + D] for sp in range(splits))
                dq[bb, r, h] = s_ * scale
    dk, dv = P['dk_out'], P['dv_out']
    if cu_q is not None:  # rows past the last sequence: zero (bwd_zero_tail)
        dk[:, cu_k[-1]:] = 0; dv[:, cu_k[-1]:] = 0
    def rel(a, r):
        n = np.linalg.norm(r); e = np.linalg.norm(np.nan_to_num(a, nan=1e9) - r)
        return e / n if n > 0 else e
    return rel(dq, ref_dq), rel(dk, ref_dk), rel(dv, ref_dv)


CASES = [
  # instance-shaped configs (hd, bm, bn, warps, stages, dqm, dsplit) with small problems
  ("hd64 128x128 w8 causal sq>sk gqa2", Cfg(64,128,128,8,2,4,1), dict(B=1,Sq=150,Sk=100,H=2,Hkv=1,D=64,Dv=64,causal=True)),
  ("hd64 64x128 w8 window sq<sk", Cfg(64,64,128,8,2,2,1), dict(B=1,Sq=70,Sk=200,H=1,Hkv=1,D=64,Dv=64,wl=30,wr=5)),
  ("hd96 64x128 w8 d80 dv48 neg scale", Cfg(96,64,128,8,2,4,1), dict(B=1,Sq=77,Sk=130,H=1,Hkv=1,D=80,Dv=48,scale=-0.3)),
  ("hd96 32x64 w4 causal", Cfg(96,32,64,4,2,2,1), dict(B=2,Sq=40,Sk=70,H=1,Hkv=1,D=96,Dv=96,causal=True)),
  ("hd128 64x128 w8 causal", Cfg(128,64,128,8,2,2,1), dict(B=1,Sq=130,Sk=130,H=1,Hkv=1,D=128,Dv=128,causal=True)),
  ("hd128 32x64 w4 varlen", Cfg(128,32,64,4,2,1,1), dict(B=1,Sq=100,Sk=120,H=2,Hkv=1,D=128,Dv=128,causal=True,cu_q=[0,0,30,30,90],cu_k=[0,20,20,20,110])),
  ("hd128 64x128 w8 det", Cfg(128,64,128,8,2,2,1), dict(B=1,Sq=70,Sk=300,H=1,Hkv=1,D=128,Dv=128,det=True)),
  ("hd256 32x128 w8 c2", Cfg(256,32,128,8,2,2,2), dict(B=1,Sq=40,Sk=140,H=1,Hkv=1,D=256,Dv=256,causal=True)),
  ("hd256 32x64 w4 c2 det", Cfg(256,32,64,4,2,1,2), dict(B=1,Sq=33,Sk=150,H=1,Hkv=1,D=256,Dv=256,det=True)),
  ("hd256 16x32 w2 c2", Cfg(256,16,32,2,2,1,2), dict(B=1,Sq=20,Sk=40,H=1,Hkv=1,D=256,Dv=256,wl=5,wr=3)),
  ("hd64 s1 stage1 gqa", Cfg(64,64,64,4,1,2,1), dict(B=1,Sq=100,Sk=70,H=4,Hkv=2,D=64,Dv=64)),
]


def main():
    sel = sys.argv[1:]
    bad = 0
    for name, c, kw in CASES:
        if sel and not any(s in name for s in sel):
            continue
        r = run(c, **kw)
        ok = all(x < 2e-3 for x in r)
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {name}: dq {r[0]:.2e} dk {r[1]:.2e} dv {r[2]:.2e}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
