// bwd_sm80: the attention backward's main kernel on mma.sync tensor cores (sm80, sm86,
// sm89, and sm90 as a fallback), f16/bf16 storage (m16n8k16, fp32 accumulation).
// FlashAttention-2's backward (Dao 2023, Algorithm 2), laid out transposed: one CTA owns
// kBlockN keys of one (sequence, KV head) and keeps their dK and dV in registers while it
// walks the query blocks that see them, for each query head of the KV head's group (GQA:
// the group's sums stay in the CTA). Each of its kWarps warps owns 16 of the keys. Per
// query block of kBlockM rows (Q, dO in shared memory, double-buffered by cp.async):
//
//   S^T  = K Q^T                 16 keys x kBlockM queries per warp; fp32 accumulators
//   P^T  = 2^(S^T c - lse log2 e)  c = scale log2 e; 0 where masked or lse = -inf
//   dV  += P^T dO                P^T's accumulators are the A operand as they are
//   dP^T = V dO^T
//   dS^T = P^T (dP^T - D)        D = rowsum(dO O) per query (bwd_aux.cu, before)
//   dK  += dS^T Q                dS^T again in registers; also stored (16-bit) to smem
//   dQ  += dS K                  dS by ldmatrix.trans of the stored dS^T; per query block
//                                the warps' fp32 sums are added to the dQ workspace
//                                (RED.ADD; bwd_aux.cu scales, sums splits and converts)
//
// Laying S out with keys as rows keeps P^T in registers (no shared-memory round trip for
// dV += P^T dO); only dS^T is stored, for dQ. Two barriers per query block: (A) the block's
// Q / dO / lse / D have landed and every warp is done with the previous block's dQ (so
// dS^T may be rewritten); (B) dS^T is complete. The epilogue writes scale dK and dV.
// kDSplit > 1 (head dim 256): kDSplit CTAs share a key block, each producing dK, dV and dQ
// for kHeadDim / kDSplit of the columns (S^T and dP^T are recomputed by each): the
// accumulators of a full 256-column head would not fit the registers.
// kQSplit = 2 (head dim 64): the warps pair up over the queries instead, each warp 32 keys
// (two 16-key fragments) and one half of every query block: each Q / dO operand read from
// shared memory then feeds two fragments' MMAs (with dP^T in two parts for the registers,
// S^T .. dK take 56 ldmatrix per warp and 128 MMAs against 72: with dQ's, 0.82x per key
// block), at the cost of dK / dV partial sums held twice, added through shared memory once
// per key block.
// Deterministic mode is the same kernel with p.dq_split > 0: a CTA walks the key blocks
// cta, cta + key_ctas, ... and adds into its own dQ slice, so every fp32 sum runs in one
// fixed order (same thread, program order); the slices are summed in order afterwards.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cmath>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/kernels/bwd_params.hpp"
#include "cuda/parts/bwd_rows.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/tile_load.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim, int kBlockMQ, int kBlockN, int kWarps, int kStages, int kDqWarpsAlongM, int kDSplit,
          int kQSplitN = 1>
struct BwdSm80Traits {
  static constexpr int kThreads = kWarps * 32, kBlockM = kBlockMQ;
  // kQSplit warps per key fragment group, each a 1 / kQSplit share of every query block's
  // queries (kWarpM of them); a warp's keys: kKF fragments of 16.
  static constexpr int kQSplit = kQSplitN, kKF = kQSplitN, kWarpM = kBlockM / kQSplitN;
  static constexpr int kDim = kHeadDim;                // columns of S^T's and dP^T's sums, of a dQ sum row
  static constexpr int kOutDim = kHeadDim / kDSplit;  // columns of dK, dV, dQ per CTA
  static constexpr int kRowBytes = SwizzledTile<kHeadDim, T>::kRowBytes;
  static constexpr int kKS = kHeadDim * int(sizeof(T)) / 32;  // 16-element k-steps of S^T, dP^T
  // The query block is worked in sub-steps of kSubM queries from S^T to dK (register budget:
  // S^T's and dP^T's fp32 fragments take kSubM registers per thread, dK's and dV's kOutDim;
  // the B operands of S^T and dP^T are read once per sub-step, K's and V's fragments once per
  // sub-step too).
  static constexpr int kSubCap = kQSplit > 1 || kOutDim > 64 ? 32 : 64;
  static constexpr int kSubM = kWarpM < kSubCap ? kWarpM : kSubCap;
  static constexpr int kMF = kSubM / 8;                        // 8-query fragments of S^T
  static constexpr int kQK = kSubM / 16;                       // query k-steps of dV, dK
  static constexpr int kOF = kOutDim / 8;                      // 8-column fragments of dK, dV
  static constexpr int kOutBytes = kOutDim * int(sizeof(T));   // bytes from one column split to the next
  // dS^T rows: kBlockM 16-bit queries per key and 16 bytes of padding, so that the eight rows
  // of one ldmatrix (and the stores of eight keys' rows) fall in eight different 16-byte bank
  // groups; a padding rather than a swizzle keeps every address a lane base plus an immediate.
  static constexpr int kDsRowBytes = kBlockM * int(sizeof(T)) + 16;
  // dQ += dS K: the warps tile [kBlockM x kOutDim] as kDqWarpsM x kDqWarpsN.
  static constexpr int kDqWarpsM = kDqWarpsAlongM, kDqWarpsN = kWarps / kDqWarpsM;
  static constexpr int kDqRows = kBlockM / kDqWarpsM, kDqMI = kDqRows / 16;
  static constexpr int kDqCols = kOutDim / kDqWarpsN, kDqNF = kDqCols / 8;
  static constexpr int kKK = kBlockN / 16;  // key k-steps of dQ
  // Shared memory (bytes): K, V; kStages Q and dO tiles; dS^T; kStages blocks of row stats
  // (float2 {lse log2 e, D} per query, BwdParams::rowstat); the query loop's BwdLoopCtl.
  static constexpr int kTileKV = kBlockN * kRowBytes, kTileQ = kBlockM * kRowBytes;
  static constexpr int kOffK = 0, kOffV = kTileKV, kOffQ = 2 * kTileKV;
  static constexpr int kOffDo = kOffQ + kStages * kTileQ;
  static constexpr int kOffDs = kOffDo + kStages * kTileQ;
  static constexpr int kOffStat = kOffDs + kBlockN * kDsRowBytes;
  static constexpr int kOffCtl = kOffStat + kStages * kBlockM * 8;  // BwdLoopCtl
  static constexpr int kSmem = kOffCtl + 48;

  static_assert(kSmem == bwd_sm80_smem(kHeadDim, kBlockM, kBlockN, kStages, int(sizeof(T))), "the registry's size");
  static_assert(kBlockN == 16 * kWarps, "each warp owns 16 keys (kQSplit 2: 32 keys, half the queries)");
  static_assert(kQSplit == 1 || (kQSplit == 2 && kDSplit == 1 && kWarps % 2 == 0), "query split by warp pairs");
  static_assert(kWarpM % kSubM == 0 && kSubM % 16 == 0 && kBlockM <= kThreads,
                "whole query k-steps; one thread stages each query row");
  static_assert(kStages == 1 || kStages == 2, "Q / dO single or double buffered");
  static_assert(kWarps % kDqWarpsM == 0 && kDqRows % 16 == 0 && kDqCols % 16 == 0, "dQ warp tiles");
  static_assert(kHeadDim % kDSplit == 0 && kOF % 2 == 0 && (kDSplit == 1 || kOutBytes % 128 == 0),
                "column splits start on a swizzle group");
};

// The query loop's scalars in shared memory, written by thread 0 before the loop's first
// barrier and read after each barrier where needed: kept in registers across the loop, they
// were spilled (its S^T .. dK phase needs nearly all 255 registers).
struct BwdLoopCtl {
  int64_t bb, q_row0, k_row0;  // the sequence's batch entry, first query and key rows (SeqInfo)
  int m_lo, m_hi;              // the query blocks that see the key block (QueryBlocks)
  int n;                       // the key block
  // 0, added to tid where the tile copies derive their per-thread offsets: read from shared
  // memory after a barrier, it keeps ptxas from hoisting those offsets out of the loops (and
  // keeping them, spilled, across the query loop).
  int zero;
};
static_assert(sizeof(BwdLoopCtl) <= 48, "kOffCtl's room");

// One CTA's shared-memory addresses and per-lane fragment bases (absolute shared addresses).
template <typename Tr, typename T>
struct BwdSm80Tiles {
  uint32_t base;      // shared memory start
  uint32_t b_row[4];  // B of S^T / dP^T: query rows of Q / dO as [n][k] (add the tile's offset)
  // Lane bases of one 16x16 block (row r7 + 8 ck, chunk 2 j + cq: VOperand's roles), for
  // B of dV and dK ([k][n] tiles by ldmatrix.trans; add the tile's offset) and A of S^T / dP^T
  // (rows of K / V by ldmatrix; add the tile's offset and the warp's 16 rows). (B of S^T
  // could be read from these too, b0 / b1 of two fragments interleaved, but the MMA takes b0,
  // b1 as a register pair: moves.)
  VOperand<T, Tr::kRowBytes> tr;
  uint32_t ds_st;                 // dS^T stores: this lane's key row g, word t (of the warp's first fragment)

  __device__ __forceinline__ void init(uint32_t smem, int warp, int lane, int dh) {
    base = smem;
    // ldmatrix lane roles as in fwd_sm80.cuh: lane = row r7 (+ 8) of one 8x8 matrix; the
    // swizzled chunk of logical chunk c of a row is c ^ (row % 8) = c ^ r7.
    const int r7 = lane % 8, cq = lane / 16, ck = (lane / 8) % 2;
#pragma unroll
    for (int j = 0; j < 4; ++j) b_row[j] = smem + (r7 + cq * 8) * Tr::kRowBytes + (((2 * j + ck) ^ r7) * 16);
    tr.init(smem, lane);
    ds_st = smem + Tr::kOffDs + (warp / Tr::kQSplit * 16 * Tr::kKF + lane / 4) * Tr::kDsRowBytes + 4 * (lane % 4);
  }
};

// Lane bases of dQ += dS K, for the warp's tile of rows wm kDqRows.., columns dh kOutDim +
// wn kDqCols... (Made where dQ is computed: kept across the query loop, they took registers
// that the S^T .. dK phase needs.)
template <typename Tr>
struct BwdDqOperands {
  // A: dS^T is stored [key][query]; matrix i = lane / 8 of A k-step ks is keys 16 ks + 8 (i /
  // 2).., queries (fragment start) + 8 (i % 2)..; .trans hands each lane A's (query, key pair).
  uint32_t ds_a;
  // B: K as [key][column] like V in the forward's P V (VOperand), from the warp's first
  // column chunk c0; fragment pair nf adds (nf / 8) swizzle groups of 128 bytes.
  uint32_t k_tr[Tr::kDqNF / 2 < 4 ? Tr::kDqNF / 2 : 4];

  __device__ __forceinline__ BwdDqOperands(uint32_t smem, int warp, int lane, int dh) {
    const int r7 = lane % 8, cq = lane / 16, ck = (lane / 8) % 2;
    const int wm = warp % Tr::kDqWarpsM, wn = warp / Tr::kDqWarpsM;
    ds_a = smem + Tr::kOffDs + (r7 + 8 * cq) * Tr::kDsRowBytes + (wm * Tr::kDqRows / 8 + ck) * 16;
    const int c0 = (dh * Tr::kOutDim + wn * Tr::kDqCols) / 8;
#pragma unroll
    for (int j = 0; j < int(sizeof(k_tr) / sizeof(k_tr[0])); ++j)
      k_tr[j] = smem + Tr::kOffK + (r7 + ck * 8) * Tr::kRowBytes + (((c0 + 2 * j + cq) ^ r7) * 16);
  }
};

// acc = A B^T over the head dim: A the warp's kKF x 16 rows at a_off (K or V, offset by the
// warp's rows), B^T the kSubM rows at b_off (Q or dO, offset by the sub-step). acc[kf][nf]:
// key fragment kf, 8 queries (kNF of them: the sub-step's, or fewer).
template <typename Tr, typename Op, int kNF = Tr::kMF, typename Tiles>
__device__ __forceinline__ void bwd_scores(float (&acc)[Tr::kKF][kNF][4], const Tiles& s, uint32_t a_off,
                                           uint32_t b_off) {
#pragma unroll
  for (int kf = 0; kf < Tr::kKF; ++kf)
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf) acc[kf][nf][0] = acc[kf][nf][1] = acc[kf][nf][2] = acc[kf][nf][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < Tr::kKS; ++ks) {
    uint32_t a[Tr::kKF][4];
#pragma unroll
    for (int kf = 0; kf < Tr::kKF; ++kf)
      ptx::ldmatrix_x4(a[kf], s.tr.base[ks % 4] + a_off + kf * 16 * Tr::kRowBytes + (ks / 4) * 128);
#pragma unroll
    for (int nf = 0; nf < kNF; nf += 2) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, s.b_row[ks % 4] + b_off + nf * 8 * Tr::kRowBytes + (ks / 4) * 128);
#pragma unroll
      for (int kf = 0; kf < Tr::kKF; ++kf) {
        Op::mma(acc[kf][nf], a[kf], b[0], b[1]);
        Op::mma(acc[kf][nf + 1], a[kf], b[2], b[3]);
      }
    }
  }
}

// acc += X^T-fragments (fp32 accumulators of S^T's layout, rows = the warp's keys) times the
// [query][column] rows at b_off (dO or Q, from the sub-step's first query and this CTA's first
// column). When kStoreDs, the packed 16-bit A operands (= dS^T) are also stored to the dS^T
// tile, from query chunk c0 (the sub-step's first query / 8).
template <typename Tr, typename Op, bool kStoreDs, typename Tiles>
__device__ __forceinline__ void bwd_accumulate(float (&acc)[Tr::kKF][Tr::kOF][4], const float (&x)[Tr::kKF][Tr::kMF][4],
                                               const Tiles& s, uint32_t b_off, int c0) {
#pragma unroll
  for (int pk = 0; pk < Tr::kQK; ++pk) {
    uint32_t a[Tr::kKF][4];
#pragma unroll
    for (int kf = 0; kf < Tr::kKF; ++kf) {
      Op::p_operand(a[kf], x[kf], pk);
      if constexpr (kStoreDs) {
        // a[0] / a[1]: keys g / g + 8, queries 16 pk + 2t..; a[2] / a[3]: queries 16 pk + 8 + 2t..
#pragma unroll
        for (int i = 0; i < 4; ++i)
          ptx::sts32(s.ds_st + (16 * kf + 8 * (i % 2)) * Tr::kDsRowBytes + (c0 + 2 * pk + i / 2) * 16, a[kf][i]);
      }
    }
#pragma unroll
    for (int df = 0; df < Tr::kOF; df += 2) {
      uint32_t b[4];
      s.tr.load(b, b_off, pk, df);
#pragma unroll
      for (int kf = 0; kf < Tr::kKF; ++kf) {
        Op::mma(acc[kf][df], a[kf], b[0], b[1]);
        Op::mma(acc[kf][df + 1], a[kf], b[2], b[3]);
      }
    }
  }
}

// dQ of query block m0 (head h) += dS K for this CTA's keys: the warp's [kDqRows x kDqCols]
// tile from the stored dS^T and K, added to dq (the slice's row 0 of this (sequence, head);
// rows of kHeadDim floats) for rows < sq. The lane's row and column offsets are derived from
// tid here (tid + BwdLoopCtl::zero: kept across the query loop, they cost registers).
template <typename Tr, typename Op>
__device__ __forceinline__ void bwd_dq(uint32_t smem, float* dq, int m0, int sq, int tid, int dh) {
  const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  const BwdDqOperands<Tr> s(smem, warp, tid % 32, dh);
  float acc[Tr::kDqMI][Tr::kDqNF][4];
#pragma unroll
  for (int mi = 0; mi < Tr::kDqMI; ++mi)
#pragma unroll
    for (int nf = 0; nf < Tr::kDqNF; ++nf) acc[mi][nf][0] = acc[mi][nf][1] = acc[mi][nf][2] = acc[mi][nf][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < Tr::kKK; ++ks) {
    uint32_t a[Tr::kDqMI][4];
#pragma unroll
    for (int mi = 0; mi < Tr::kDqMI; ++mi) ptx::ldmatrix_x4_trans(a[mi], s.ds_a + ks * 16 * Tr::kDsRowBytes + mi * 32);
#pragma unroll
    for (int nf = 0; nf < Tr::kDqNF; nf += 2) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, s.k_tr[(nf / 2) % 4] + (nf / 8) * 128 + ks * 16 * Tr::kRowBytes);
#pragma unroll
      for (int mi = 0; mi < Tr::kDqMI; ++mi) {
        Op::mma(acc[mi][nf], a[mi], b[0], b[1]);
        Op::mma(acc[mi][nf + 1], a[mi], b[2], b[3]);
      }
    }
  }
  const int wm = warp % Tr::kDqWarpsM, wn = warp / Tr::kDqWarpsM;
  const int row0 = m0 + wm * Tr::kDqRows + g;
  dq += int64_t(row0) * Tr::kDim + dh * Tr::kOutDim + wn * Tr::kDqCols + 2 * t;
#pragma unroll
  for (int mi = 0; mi < Tr::kDqMI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (row0 + 16 * mi + 8 * half >= sq) continue;
      float* dst = dq + (16 * mi + 8 * half) * Tr::kDim;
#pragma unroll
      for (int nf = 0; nf < Tr::kDqNF; ++nf) red_add2(dst + 8 * nf, acc[mi][nf][2 * half], acc[mi][nf][2 * half + 1]);
    }
}

// One query block (m0, in stage kSt) against this CTA's keys (n0..): S^T .. dK in sub-steps of
// kSubM queries, leaving dS^T in shared memory for dQ. `full`: no element of the block is
// masked (else mask_transposed). The warp's keys: kKF fragments from warp_rows (K / V row
// bytes) = key n0 + key0; its queries: kWarpM from q_half of the block.
template <int kSt, typename Tr, typename Op, typename Tiles>
__device__ __forceinline__ void bwd_block(float (&dk)[Tr::kKF][Tr::kOF][4], float (&dv)[Tr::kKF][Tr::kOF][4],
                                          const Tiles& s, unsigned char* smem, float scale_log2, const Band32& band,
                                          int sq, int n0, int m0, bool full, uint32_t warp_rows, int key0, int q_half,
                                          int g, int t, int dh) {
  constexpr int kMF = Tr::kMF, kKF = Tr::kKF;
  constexpr uint32_t kQOff = Tr::kOffQ + kSt * Tr::kTileQ, kDoOff = Tr::kOffDo + kSt * Tr::kTileQ;
#pragma unroll
  for (int sub = 0; sub < Tr::kWarpM / Tr::kSubM; ++sub) {
    const int q0 = q_half + sub * Tr::kSubM;  // the sub-step's first query in the block
    const uint32_t q_rows = kQOff + q0 * Tr::kRowBytes, do_rows = kDoOff + q0 * Tr::kRowBytes;
    const float2* stat = reinterpret_cast<const float2*>(smem + Tr::kOffStat) + kSt * Tr::kBlockM + q0 + 2 * t;

    // S^T, then P^T = 2^(S^T c - lse log2 e), masked where the block is cut.
    float x[kKF][kMF][4];
    bwd_scores<Tr, Op>(x, s, Tr::kOffK + warp_rows, q_rows);
#pragma unroll
    for (int kf = 0; kf < kKF; ++kf)
#pragma unroll
      for (int nf = 0; nf < kMF; ++nf) {
        const float2 r0 = stat[8 * nf], r1 = stat[8 * nf + 1];  // queries 8 nf + 2t, + 1
        x[kf][nf][0] = ptx::exp2_fast(fmaf(x[kf][nf][0], scale_log2, -r0.x));
        x[kf][nf][1] = ptx::exp2_fast(fmaf(x[kf][nf][1], scale_log2, -r1.x));
        x[kf][nf][2] = ptx::exp2_fast(fmaf(x[kf][nf][2], scale_log2, -r0.x));
        x[kf][nf][3] = ptx::exp2_fast(fmaf(x[kf][nf][3], scale_log2, -r1.x));
      }
    if (!full)
#pragma unroll
      for (int kf = 0; kf < kKF; ++kf) mask_transposed<kMF>(x[kf], band, sq, n0 + key0 + 16 * kf + g, m0 + q0, t);

    bwd_accumulate<Tr, Op, false>(dv, x, s, do_rows + dh * Tr::kOutBytes, 0);

    // dS^T = P^T (dP^T - D), in place of P^T; dP^T in kDpParts query parts (kQSplit 2: two
    // of 16 queries, whose fp32 sums beside dK's, dV's and P^T's fit the registers).
    constexpr int kDpParts = Tr::kQSplit > 1 ? 2 : 1, kDpNF = kMF / kDpParts;
#pragma unroll
    for (int part = 0; part < kDpParts; ++part) {
      float dp[kKF][kDpNF][4];
      bwd_scores<Tr, Op, kDpNF>(dp, s, Tr::kOffV + warp_rows, do_rows + part * kDpNF * 8 * Tr::kRowBytes);
#pragma unroll
      for (int kf = 0; kf < kKF; ++kf)
#pragma unroll
        for (int j = 0; j < kDpNF; ++j) {
          const int nf = part * kDpNF + j;
          const float d0 = stat[8 * nf].y, d1 = stat[8 * nf + 1].y;
          x[kf][nf][0] *= dp[kf][j][0] - d0;
          x[kf][nf][1] *= dp[kf][j][1] - d1;
          x[kf][nf][2] *= dp[kf][j][2] - d0;
          x[kf][nf][3] *= dp[kf][j][3] - d1;
        }
    }
    bwd_accumulate<Tr, Op, true>(dk, x, s, q_rows + dh * Tr::kOutBytes, q0 / 8);
  }
}

// kQSplit 2, after a key block's query loop: each warp pair's dK and dV partial sums added
// into the first warp's registers. The second warp writes its fragments over the tiles (free
// once every warp's dQ is done), lane-major, so that the first warp's lanes read back their
// own elements.
template <typename Tr>
__device__ __forceinline__ void bwd_pair_sum(float (&dk)[Tr::kKF][Tr::kOF][4], float (&dv)[Tr::kKF][Tr::kOF][4],
                                             unsigned char* smem, int pair, int second, int lane) {
  constexpr int kFloats = Tr::kKF * Tr::kOF * 4;  // per lane and tensor
  float4* buf = reinterpret_cast<float4*>(smem) + pair * 2 * kFloats / 4 * 32;
  static_assert(Tr::kKF * Tr::kOF * 4 * 2 * 4 * 32 * (Tr::kThreads / 64) <= Tr::kOffCtl,
                "the pairs' partial sums fit the tiles (K, V, Q, dO, dS^T)");
  __syncthreads();  // every warp is past its dQ (no tile is read after the loop)
  if (second) {
#pragma unroll
    for (int kf = 0; kf < Tr::kKF; ++kf)
#pragma unroll
      for (int of = 0; of < Tr::kOF; ++of) {
        const int i = kf * Tr::kOF + of;
        buf[i * 32 + lane] = make_float4(dk[kf][of][0], dk[kf][of][1], dk[kf][of][2], dk[kf][of][3]);
        buf[(kFloats / 4 + i) * 32 + lane] = make_float4(dv[kf][of][0], dv[kf][of][1], dv[kf][of][2], dv[kf][of][3]);
      }
  }
  __syncthreads();
  if (!second) {
#pragma unroll
    for (int kf = 0; kf < Tr::kKF; ++kf)
#pragma unroll
      for (int of = 0; of < Tr::kOF; ++of) {
        const int i = kf * Tr::kOF + of;
        const float4 a = buf[i * 32 + lane], b = buf[(kFloats / 4 + i) * 32 + lane];
        dk[kf][of][0] += a.x, dk[kf][of][1] += a.y, dk[kf][of][2] += a.z, dk[kf][of][3] += a.w;
        dv[kf][of][0] += b.x, dv[kf][of][1] += b.y, dv[kf][of][2] += b.z, dv[kf][of][3] += b.w;
      }
  }
}

// The kernel's body: one CTA's key blocks.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kDqWarpsM, int kDSplit,
          int kQSplit>
__device__ __forceinline__ void bwd_sm80_cta(const BwdParams& p) {
  using Tr = BwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kDqWarpsM, kDSplit, kQSplit>;
  using Op = MmaOps<T>;
  constexpr int kOF = Tr::kOF, kKF = Tr::kKF;

  extern __shared__ __align__(128) unsigned char smem[];
  const int hk = blockIdx.y, b = blockIdx.z;
  const int dh = int(blockIdx.x) % kDSplit, cta = int(blockIdx.x) / kDSplit;
  const SeqInfo seq = seq_info(p.f, b);
  const Band32 band{p.f.window_left, p.f.window_right, seq.sk - seq.sq, seq.sk};
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  BwdSm80Tiles<Tr, T> s;
  s.init(ptx::smem_addr(smem), warp, lane, dh);
  // This warp's keys (kKF fragments from key0) and queries (from q_half of each block).
  const int key0 = warp / kQSplit * 16 * kKF, q_half = warp % kQSplit * Tr::kWarpM;
  const uint32_t warp_rows = key0 * Tr::kRowBytes;
  float* const dq_slice = p.dq_acc + int64_t(cta) * p.dq_split;  // dq_split 0: one shared slice
  const int h0 = hk * p.f.group, h_end = h0 + p.f.group;

  // Q, dO and the row stats of query block m0 of head h into stage st (one commit group).
  // Rows past Sq are zero-filled; their stats too, which the mask covers (the block is cut).
  auto load_q = [&](const BwdLoopCtl& c, int h, int m0, int st) {
    const int64_t row = c.q_row0 + m0;
    const T* gq = static_cast<const T*>(p.f.q) + c.bb * p.f.q_sb + row * p.f.q_ss + h * p.f.q_sh;
    const T* gdo = static_cast<const T*>(p.dout) + c.bb * p.do_sb + row * p.do_ss + h * p.do_sh;
    const int me = tid + c.zero, rows = seq.sq - m0;
    load_tile<kBlockM, kHeadDim, Tr::kThreads>(s.base + Tr::kOffQ + st * Tr::kTileQ, gq, p.f.q_ss, rows, p.f.d, me);
    load_tile<kBlockM, kHeadDim, Tr::kThreads>(s.base + Tr::kOffDo + st * Tr::kTileQ, gdo, p.do_ss, rows, p.f.dv, me);
    if (me < kBlockM) {
      const bool ok = m0 + me < seq.sq;
      const float2* src = ok ? p.rowstat + (c.bb * p.f.heads + h) * p.rows_q + row + me : p.rowstat;
      ptx::cp_async_8(s.base + Tr::kOffStat + (st * kBlockM + me) * 8, src, ok);
    }
    ptx::cp_async_commit();
  };

  BwdLoopCtl* const ctl_s = reinterpret_cast<BwdLoopCtl*>(smem + Tr::kOffCtl);
  if (tid == 0) {  // the sequence's rows once (seq's 64-bit fields are dead after this)
    ctl_s->bb = seq.bb;
    ctl_s->q_row0 = seq.q_row0;
    ctl_s->k_row0 = seq.k_row0;
    ctl_s->zero = 0;
  }
  for (int n = cta; n * kBlockN < seq.sk;) {
    if (tid == 0) {
      const QueryBlocks qb = query_blocks<kBlockM, kBlockN>(band, seq.sq, n * kBlockN);
      ctl_s->m_lo = qb.lo;
      ctl_s->m_hi = qb.hi;
      ctl_s->n = n;
    }
    __syncthreads();  // ctl written (the previous key block's readers are past its last barrier)
    const BwdLoopCtl ctl = *reinterpret_cast<const BwdLoopCtl*>(smem + Tr::kOffCtl);
    const int n0 = ctl.n * kBlockN, m_lo = ctl.m_lo, m_hi = ctl.m_hi;
    const bool any = m_hi > m_lo && h0 < h_end;  // (a group of no query heads sees nothing)
    if (any) {
      const int64_t row = ctl.k_row0 + n0;
      const T* gk = static_cast<const T*>(p.f.k) + ctl.bb * p.f.k_sb + row * p.f.k_ss + hk * p.f.k_sh;
      const T* gv = static_cast<const T*>(p.f.v) + ctl.bb * p.f.v_sb + row * p.f.v_ss + hk * p.f.v_sh;
      const int me = tid + ctl.zero;
      load_tile<kBlockN, kHeadDim, Tr::kThreads>(s.base + Tr::kOffK, gk, p.f.k_ss, seq.sk - n0, p.f.d, me);
      load_tile<kBlockN, kHeadDim, Tr::kThreads>(s.base + Tr::kOffV, gv, p.f.v_ss, seq.sk - n0, p.f.dv, me);
      load_q(ctl, h0, m_lo * kBlockM, 0);  // one commit group: K, V and the first query block
    }
    // dK, dV: zeroed after the copies are issued, so that their 2 kOF x 4 registers are not
    // live beside the copies' addresses (the prologue spilled otherwise).
    float dk[kKF][kOF][4], dv[kKF][kOF][4];
#pragma unroll
    for (int kf = 0; kf < kKF; ++kf)
#pragma unroll
      for (int i = 0; i < kOF; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[kf][i][e] = dv[kf][i][e] = 0.f;
    // (query head, query block) pairs, head-major; `buf` alternates with each pair.
    int buf = 0;
    for (int h = any ? h0 : h_end, mb = m_lo; h < h_end; buf ^= 1) {
      const int m0 = mb * kBlockM, st = kStages == 2 ? buf : 0;
      ptx::cp_async_wait<0>();
      __syncthreads();  // (A)
      const BwdLoopCtl c = *reinterpret_cast<const BwdLoopCtl*>(smem + Tr::kOffCtl);
      const bool last_m = mb + 1 == c.m_hi;
      const int h_next = last_m ? h + 1 : h, mb_next = last_m ? c.m_lo : mb + 1;
      const bool more = h_next < h_end;
      if (kStages == 2 && more) load_q(c, h_next, mb_next * kBlockM, buf ^ 1);
      const bool full = tile_unmasked<kBlockM, kBlockN>(band, seq.sq, m0, n0);
      // The stage is a template argument (two copies of the block's code when double
      // buffered), so that every shared address is a lane base plus an immediate.
      if (st == 0)
        bwd_block<0, Tr, Op>(dk, dv, s, smem, p.f.scale_log2, band, seq.sq, n0, m0, full, warp_rows, key0, q_half, g,
                             t, dh);
      else
        bwd_block<kStages - 1, Tr, Op>(dk, dv, s, smem, p.f.scale_log2, band, seq.sq, n0, m0, full, warp_rows, key0,
                                       q_half, g, t, dh);
      __syncthreads();  // (B)
      const BwdLoopCtl c2 = *reinterpret_cast<const BwdLoopCtl*>(smem + Tr::kOffCtl);
      if (kStages == 1 && more) load_q(c2, h_next, mb_next * kBlockM, 0);
      float* dq = dq_slice + ((c2.bb * p.f.heads + h) * p.rows_q + c2.q_row0) * kHeadDim;
      bwd_dq<Tr, Op>(s.base, dq, m0, seq.sq, tid + c2.zero, dh);
      h = h_next;
      mb = mb_next;
    }

    if constexpr (kQSplit > 1) bwd_pair_sum<Tr>(dk, dv, smem, warp / kQSplit, warp % kQSplit, lane);
    // (ctl re-read past the barriers; the lane's offsets from tid + zero: hoisted to the
    // kernel's start, they were kept, spilled, across the loops)
    const BwdLoopCtl c = *reinterpret_cast<const BwdLoopCtl*>(smem + Tr::kOffCtl);
    const int me = tid + c.zero;
    if (kQSplit == 1 || me / 32 % kQSplit == 0) {  // (kQSplit 2: the pair's first warp holds the sums)
      const int row0 = c.n * kBlockN + me / 32 / kQSplit * 16 * kKF + me % 32 / 4;
      const int col0 = dh * Tr::kOutDim + 2 * (me % 4);
      T* gdk = static_cast<T*>(p.dk) + c.bb * p.dk_sb + c.k_row0 * p.dk_ss + hk * p.dk_sh;
      T* gdv = static_cast<T*>(p.dv) + c.bb * p.dv_sb + c.k_row0 * p.dv_ss + hk * p.dv_sh;
#pragma unroll
      for (int kf = 0; kf < kKF; ++kf) {
        bwd_store_rows<T, kOF>(dk[kf], gdk, p.dk_ss, row0 + 16 * kf, seq.sk, col0, p.f.d, p.scale);
        bwd_store_rows<T, kOF>(dv[kf], gdv, p.dv_ss, row0 + 16 * kf, seq.sk, col0, p.f.dv, 1.f);
      }
    }
    n = c.n + p.key_ctas;
    __syncthreads();  // the next key block's loads overwrite K, V, dS^T and ctl
  }
}

// The most dynamic shared memory a block may opt in to on the architecture being compiled:
// sm80 / sm87 163 KiB, sm86 / sm89 99 KiB, sm90 and later 227 KiB (0 in host code).
#if defined(__CUDA_ARCH__)
constexpr int kArchSmemOptin = __CUDA_ARCH__ >= 900                           ? 232448
                               : __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870 ? 166912
                                                                              : 101376;
#else
constexpr int kArchSmemOptin = 0;
#endif

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks, int kDqWarpsM,
          int kDSplit, int kQSplit>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) bwd_sm80_kernel(const BwdParams p) {
  using Tr = BwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kDqWarpsM, kDSplit, kQSplit>;
  // An instance whose shared memory this architecture cannot give a block never runs on it
  // (the backend checks the device's opt-in before any launch): no code for it there.
  if constexpr (Tr::kSmem > kArchSmemOptin) {
    __trap();
  } else {
    bwd_sm80_cta<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kDqWarpsM, kDSplit, kQSplit>(p);
  }
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks, int kDqWarpsM,
          int kDSplit, int kQSplit = 1>
cudaError_t launch_bwd_sm80(const BwdParams& p, cudaStream_t stream) {
  using Tr = BwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kDqWarpsM, kDSplit, kQSplit>;
  auto kernel = bwd_sm80_kernel<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks, kDqWarpsM, kDSplit, kQSplit>;
  static std::atomic<uint64_t> smem_done{0};
  const cudaError_t e = opt_in_smem_once(kernel, Tr::kSmem, smem_done);
  if (e != cudaSuccess) return e;
  const dim3 grid(p.key_ctas * kDSplit, p.kv_heads, p.f.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
