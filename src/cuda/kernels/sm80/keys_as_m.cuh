// The key loop of the key-split KV-cache kernel over an e4m3 cache (kvc_sm80.cuh), with the
// keys as the MMA's M: S^T = K Q^T and O^T += V^T P^T on m16n8k16, the packed query rows as
// N (8 per fragment, kNQ fragments). Decode packs 1-8 rows per CTA (the query heads of a KV
// head), so a 16-row M wasted half to most of every MMA and softmax instruction on rows that
// hold nothing; with 8-row N fragments the waste is at most half, and a warp's 16 keys of a
// tile are one M fragment.
//
// Per warp and tile (its kKeys = 16 keys):
// - K's A fragments come straight from the e4m3 ring: lane (g, t) reads its 4 kKS bytes of
//   key rows g and g + 8 (kKS = D / 16 k-steps) and widens them in registers. The bytes are
//   taken in storage order: word j of lane t's run (bytes 4 (kKS t + j) + e) is k-step j's
//   elements e = 0, 1 (k = 2t, 2t + 1) and 2, 3 (k = 2t + 8, 2t + 9). So the head dim is
//   permuted inside the MMA, and Q^T's B fragments, held in registers for the whole loop,
//   take Q's elements at the same storage positions: the dot product over d is unchanged.
//   No K widening through shared memory, no K ldmatrix.
// - The softmax runs down S^T's columns: lane (g, t) holds keys g, g + 8 of query columns
//   2t, 2t + 1; a column's max is three xor-shuffles (4, 8, 16) across g. The update is
//   OnlineSoftmax::update's per column (parts/softmax.cuh: softmax_move_max,
//   softmax_next_l).
// - P^T as the B operand of O^T += V^T P^T: the packed P^T fragment (key g, queries 2t,
//   2t + 1) is an 8x8 tile of the standard layout, and movmatrix.trans turns it into
//   (keys 2t, 2t + 1, query g), the B layout. V^T's A fragments are the ldmatrix.trans
//   fragments of the widened 16-bit V rows (VOperand's four 8x8 tiles, reordered).
// - At the end (to_rows) each warp's O^T, m and l go through shared memory into the row
//   layout of the other key-split warps (16 rows: lane rows g, g + 8; l summed over the
//   warp's keys as OnlineSoftmax::finish leaves it), so the merge, the repair and the
//   epilogue are the 16-bit path's.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/kernels/sm80/load.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/softmax.cuh"

namespace flashcore::cuda::sm80 {

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <typename T, int kHeadDim, int kNQ>
struct KeysAsM {
  using Op = MmaOps<T>;
  using QTile = SwizzledTile<kHeadDim, T>;
  using KTile = SwizzledTile<kHeadDim, __nv_fp8_e4m3>;
  static constexpr int kKS = kHeadDim / 16;  // k-steps of S^T; also O^T's 16-row (d) fragments
  static constexpr int kDF = kHeadDim / 8;   // the row layout's 8-column fragments
  static_assert(kHeadDim % 32 == 0, "whole 8-byte words of e4m3 per lane");
  // Bytes of to_rows' scratch per warp: O [16 rows][kHeadDim] fp32, then m and l of 16 rows.
  static constexpr int kScratch = 16 * kHeadDim * 4 + 2 * 16 * 4;

  // Q^T's B fragments (storage-order d, above): in registers for one N fragment; for two at
  // hd128 they would spill (168 registers at 3 CTAs per SM), so those are read per tile.
  static constexpr bool kQInRegs = kNQ * kKS <= 8;
  uint32_t qb[kQInRegs ? kNQ : 1][kQInRegs ? kKS : 1][2];
  uint32_t sq;  // the Q tile's shared address (not kQInRegs: q_frag reads it per tile)
  float o[kKS][kNQ][4];      // O^T: d 16 f + g (+8 for [2], [3]), query 8 nq + 2t (+1 for [1], [3])
  float m[kNQ][2], l[kNQ][2];

  // Q's B fragment pair of k-step j, rows [8 nq, 8 nq + 8) of the 16-row Q tile at sQ.
  __device__ __forceinline__ static uint2 q_frag(uint32_t sQ, int nq, int j, int lane) {
    const int byte = 8 * (kKS * (lane % 4) + j);  // elements 4 (kKS t + j) .. + 3, 16-bit
    return ptx::lds64(sQ + QTile::offset(8 * nq + lane / 4, byte >> 4) + (byte & 15));
  }

  // Q (landed at sQ) and an empty state.
  __device__ __forceinline__ void init(uint32_t sQ, int lane) {
    sq = sQ;
    if constexpr (kQInRegs) {
#pragma unroll
      for (int nq = 0; nq < kNQ; ++nq)
#pragma unroll
        for (int j = 0; j < kKS; ++j) {
          const uint2 w = q_frag(sQ, nq, j, lane);
          qb[nq][j][0] = w.x;
          qb[nq][j][1] = w.y;
        }
    }
#pragma unroll
    for (int f = 0; f < kKS; ++f)
#pragma unroll
      for (int nq = 0; nq < kNQ; ++nq) o[f][nq][0] = o[f][nq][1] = o[f][nq][2] = o[f][nq][3] = 0.f;
#pragma unroll
    for (int nq = 0; nq < kNQ; ++nq) m[nq][0] = m[nq][1] = -INFINITY, l[nq][0] = l[nq][1] = 0.f;
  }

  // S^T of the warp's 16 keys (e4m3 rows 0..15 at ring address sk, KTile layout), read in
  // runs of kRun k-steps (one 16- or 8-byte load per key row and run).
  __device__ __forceinline__ void qk(float (&s)[kNQ][4], uint32_t sk, int lane) const {
    const int g = lane / 4, t = lane % 4;
    constexpr int kRun = kKS % 4 == 0 ? 4 : 2;
#pragma unroll
    for (int nq = 0; nq < kNQ; ++nq) s[nq][0] = s[nq][1] = s[nq][2] = s[nq][3] = 0.f;
#pragma unroll
    for (int j0 = 0; j0 < kKS; j0 += kRun) {
      const int byte = 4 * (kKS * t + j0);
      uint32_t w[2][kRun];  // lane t's words j0 .. j0 + kRun - 1 of key rows g and g + 8
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t at = sk + KTile::offset(g + 8 * h, byte >> 4) + (byte & 15);
        if constexpr (kRun == 4) {
          const uint4 v = ptx::lds128(at);
          w[h][0] = v.x, w[h][1] = v.y, w[h][2] = v.z, w[h][3] = v.w;
        } else {
          const uint2 v = ptx::lds64(at);
          w[h][0] = v.x, w[h][1] = v.y;
        }
      }
#pragma unroll
      for (int jj = 0; jj < kRun; ++jj) {
        const int j = j0 + jj;
        const uint32_t a[4] = {widen_e4m3x2<T>(w[0][jj] & 0xffffu), widen_e4m3x2<T>(w[1][jj] & 0xffffu),
                               widen_e4m3x2<T>(w[0][jj] >> 16), widen_e4m3x2<T>(w[1][jj] >> 16)};
#pragma unroll
        for (int nq = 0; nq < kNQ; ++nq) {
          if constexpr (kQInRegs) {
            Op::mma(s[nq], a, qb[nq][j][0], qb[nq][j][1]);
          } else {
            const uint2 b = q_frag(sq, nq, j, lane);
            Op::mma(s[nq], a, b.x, b.y);
          }
        }
      }
    }
  }

  // mask_scores' rule for S^T: s[nq][c] is key col0 + g + 8 (c / 2) of packed row row0 +
  // 8 nq + 2t + c % 2 (query row >> shift). Only where the band or Sk cuts the tile.
  __device__ __forceinline__ static void mask(float (&s)[kNQ][4], bool full, float scale_log2, const Band32& band,
                                              int row0, int col0, int lane, int shift) {
    if (full && scale_log2 > 0.f) return;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nq = 0; nq < kNQ; ++nq)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int i = (row0 + 8 * nq + 2 * t + c % 2) >> shift, j = col0 + g + 8 * (c / 2);
        const bool hidden = !full && (j >= band.sk || (band.left >= 0 && j < i + band.offset - band.left) ||
                                      (band.right >= 0 && j > i + band.offset + band.right));
        float x = s[nq][c];
        if (!(scale_log2 > 0.f)) x *= scale_log2;
        s[nq][c] = hidden ? -INFINITY : x;
      }
  }

  // The online softmax down the columns (OnlineSoftmax::update's rule per query column), O^T
  // rescaled, then O^T += V^T P^T with V's 16-bit rows of the warp's keys (vop, stage_off).
  __device__ __forceinline__ void softmax_pv(float (&s)[kNQ][4], float e, const VOperand<T, QTile::kRowBytes>& vop,
                                             uint32_t stage_off) {
    float corr[kNQ][2];
    bool moved = false;
#pragma unroll
    for (int nq = 0; nq < kNQ; ++nq)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float mx = fmaxf(s[nq][c], s[nq][c + 2]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float base = softmax_move_max(m[nq][c], mx * e, corr[nq][c]);
        moved |= corr[nq][c] != 1.f;
        const float p0 = ptx::exp2_fast(fmaf(s[nq][c], e, -base));
        const float p1 = ptx::exp2_fast(fmaf(s[nq][c + 2], e, -base));
        s[nq][c] = p0;
        s[nq][c + 2] = p1;
        l[nq][c] = softmax_next_l(l[nq][c], corr[nq][c], p0 + p1, base);
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int f = 0; f < kKS; ++f)
#pragma unroll
        for (int nq = 0; nq < kNQ; ++nq) {
          o[f][nq][0] *= corr[nq][0];
          o[f][nq][1] *= corr[nq][1];
          o[f][nq][2] *= corr[nq][0];
          o[f][nq][3] *= corr[nq][1];
        }
    }
    uint32_t b[kNQ][2];
#pragma unroll
    for (int nq = 0; nq < kNQ; ++nq) {
      b[nq][0] = movmatrix_trans(ptx::pack2<T>(s[nq][0], s[nq][1]));  // keys 2t, 2t + 1 of query g
      b[nq][1] = movmatrix_trans(ptx::pack2<T>(s[nq][2], s[nq][3]));  // keys 2t + 8, 2t + 9
    }
#pragma unroll
    for (int f = 0; f < kKS; ++f) {
      uint32_t bv[4];
      vop.load(bv, stage_off, 0, 2 * f);
      const uint32_t a[4] = {bv[0], bv[2], bv[1], bv[3]};  // (d g, keys 2t..), (d g + 8, ..), (d g, keys 2t + 8..), ..
#pragma unroll
      for (int nq = 0; nq < kNQ; ++nq) Op::mma(o[f][nq], a, b[nq][0], b[nq][1]);
    }
  }

  // The row layout of the 16-bit key-split warps: acc[0][df][i] = O[row g + 8 (i / 2)][8 df +
  // 2t + i % 2], m_out / l_out of rows g, g + 8 (l summed over the warp's keys); rows past
  // 8 kNQ empty (m -inf, l 0, O 0). scratch: this warp's kScratch bytes of shared memory.
  __device__ __forceinline__ void to_rows(float (&acc)[1][kDF][4], float (&m_out)[2], float (&l_out)[2],
                                          float* scratch, int lane) {
    const int g = lane / 4, t = lane % 4;
    float* so = scratch;
    float* sm = scratch + 16 * kHeadDim;
#pragma unroll
    for (int nq = 0; nq < kNQ; ++nq)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float x = l[nq][c];
        x += __shfl_xor_sync(0xffffffffu, x, 4);
        x += __shfl_xor_sync(0xffffffffu, x, 8);
        x += __shfl_xor_sync(0xffffffffu, x, 16);
        if (g == 0) {
          sm[8 * nq + 2 * t + c] = m[nq][c];
          sm[16 + 8 * nq + 2 * t + c] = x;
        }
      }
#pragma unroll
    for (int f = 0; f < kKS; ++f)
#pragma unroll
      for (int nq = 0; nq < kNQ; ++nq)
#pragma unroll
        for (int c = 0; c < 4; ++c) so[(8 * nq + 2 * t + c % 2) * kHeadDim + 16 * f + g + 8 * (c / 2)] = o[f][nq][c];
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = g + 8 * half;
      const bool live = r < 8 * kNQ;
      m_out[half] = live ? sm[r] : -INFINITY;
      l_out[half] = live ? sm[16 + r] : 0.f;
#pragma unroll
      for (int df = 0; df < kDF; ++df)
#pragma unroll
        for (int e = 0; e < 2; ++e) acc[0][df][2 * half + e] = live ? so[r * kHeadDim + 8 * df + 2 * t + e] : 0.f;
    }
  }
};

}  // namespace flashcore::cuda::sm80
