// The products of the sm90 backward's 64-key warpgroups (bwd_sm90.cuh): the tile's shape, S^T
// and dP^T from shared memory, dV and dK from registers, dS^T's store, and dQ = dS K into an
// fp32 tile in the workspace's swizzle (see bwd_sm90.cuh for the data flow).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/bwd_sizes.hpp"
#include "cuda/parts/bwd_rows.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda {

// The shape of a bwd_sm90 tile (64-key warpgroups, kBlockM queries per step); the kernel's
// shared-memory layout is BwdSm90Traits' (bwd_sm90.cuh).
template <typename T, int kHeadDim_, int kBlockM_, int kBlockN_>
struct BwdSm90Shape {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kWGs = kBlockN / 64;  // consumer warpgroups: 64 keys each
  static constexpr int kColElems = 128 / int(sizeof(T));  // elements per 128-byte column block
  static constexpr int kColBlocks = kHeadDim / kColElems;
  static constexpr int kKS = kHeadDim / 16;   // k-steps of S^T, dP^T (over the head dim)
  static constexpr int kPK = kBlockM / 16;    // k-steps of dV, dK (over the queries)
  static constexpr int kKK = kBlockN / 16;    // k-steps of dQ (over the keys)
  static constexpr int kMF = kBlockM / 8;     // 8-query fragments of S^T
  static constexpr int kOF = kHeadDim / 8;    // 8-column fragments of dK, dV
  static constexpr int kDqCols = kHeadDim / kWGs;  // dQ columns per warpgroup
  static constexpr int kDqN = kDqCols < 64 ? kDqCols : 64;  // dQ's wgmma N (passes of kDqN columns)
  // K in the 64-byte swizzle (column blocks of [kBlockN rows][64 bytes]) where a warpgroup's dQ
  // columns are half a 128-byte column block (hd64 on two warpgroups): dQ's B operand, K read
  // MN-major with N = 32, is then one whole 64-byte atom. V, Q and dO keep the 128-byte swizzle.
  static constexpr bool kKSw64 = kDqCols * int(sizeof(T)) == 64;
  static constexpr int kKRow = kKSw64 ? 64 : 128;  // bytes per row of a K column block
  static constexpr int kTileKV = kBlockN * kHeadDim * int(sizeof(T));
  static constexpr int kTileQ = kBlockM * kHeadDim * int(sizeof(T));
  static constexpr int kTileDs = kBlockN * kBlockM * int(sizeof(T));
  static constexpr int kTileDq = kBlockM * kHeadDim * 4;

  static_assert(kHeadDim % kColElems == 0, "whole 128-byte column blocks");
  static_assert(kBlockM * int(sizeof(T)) == 128, "dS^T: one 128-byte column block of queries (wgmma's M = 64)");
  static_assert(kBlockN % 64 == 0 && (kDqCols % kColElems == 0 || kKSw64), "dQ: whole column blocks (atoms) per warpgroup");
};

// acc = X Y^T over the head dim for this warpgroup's 64 keys: X's rows at descriptor d_x (K for
// S^T, V for dP^T), Y the query block's tile at shared address y (Q, dO), both K-major: k-step
// ks reads 32 bytes of column block ks / 4 (X in the 64-byte swizzle, kXSw64: of its column
// block ks / 2). One commit group.
template <class Tr, typename T, bool kXSw64 = false>
__device__ __forceinline__ void bwd90_scores(float (&acc)[Tr::kMF][4], uint64_t d_x, uint32_t y) {
  const uint64_t d_y = ptx::desc_sw128(y, 16, 1024);
  ptx::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::kKS; ++ks) {
    const uint32_t cb = ks / 4, kb = (ks % 4) * 32;
    const uint32_t xo = kXSw64 ? (ks / 2) * Tr::kBlockN * 64 + (ks % 2) * 32 : cb * Tr::kBlockN * 128 + kb;
    const uint64_t a = ptx::desc_add(d_x, xo);
    const uint64_t b = ptx::desc_add(d_y, cb * Tr::kBlockM * 128 + kb);
    if (ks == 0)
      ptx::wgmma_ss_zero<Tr::kBlockM, T>(acc, a, b);
    else
      ptx::wgmma_ss<Tr::kBlockM, T>(acc, a, b, 1);
  }
  ptx::wgmma_commit();
}

// acc += X^T B over the query block: X^T's A operands (P^T or dS^T, from registers) and B the
// block's dO or Q tile at shared address `tile`, read N-major. One commit group.
template <class Tr, typename T>
__device__ __forceinline__ void bwd90_accumulate(float (&acc)[Tr::kOF][4], const uint32_t (&a)[Tr::kPK][4],
                                                 uint32_t tile) {
  const uint64_t d = ptx::desc_sw128(tile, Tr::kBlockM * 128, 1024);
  ptx::wgmma_fence();
#pragma unroll
  for (int pk = 0; pk < Tr::kPK; ++pk) ptx::wgmma_rs_bt<Tr::kHeadDim, T>(acc, a[pk], ptx::desc_add(d, pk * 16 * 128), 1);
  ptx::wgmma_commit();
}

// dS^T's A operands from its fp32 fragments, also stored to the dS^T tile ([key][query],
// swizzled) for dQ: `row` is this lane's first key row's address plus 4 t (its keys are that
// row and the one 8 below; both are g modulo 8).
template <class Tr, class Op>
__device__ __forceinline__ void bwd90_store_ds(uint32_t (&da)[Tr::kPK][4], const float (&ds)[Tr::kMF][4],
                                               uint32_t row, int g) {
#pragma unroll
  for (int pk = 0; pk < Tr::kPK; ++pk) {
    Op::p_operand(da[pk], ds, pk);
    // da[pk][0] / [1]: keys g / g + 8, queries 16 pk + 2t..; [2] / [3]: queries 16 pk + 8 + 2t..
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int chunk = 2 * pk + i / 2;
      ptx::sts32(row + 8 * (i % 2) * 128 + ((chunk ^ g) * 16), da[pk][i]);
    }
  }
}

// dQ (this warpgroup's kDqCols columns) = dS K from the dS^T tile and K (both MN-major),
// kDqN columns (one column block, or 64-byte atom, of K) per pass, stored to the block's dQ
// tile: fp32 rows of
// kHeadDim as the workspace has them, 16-byte chunk c of a row at c ^ key (the workspace
// row's % 8, the same for this lane's two rows): a warp's stores then fill whole bank rows.
// `row` is the address of this lane's first row's first chunk (unswizzled: the warpgroup's
// first column / 4 + t / 2) plus 8 (t % 2) bytes; as rows are 128-byte aligned, XOR-ing that
// address with key << 4 swizzles the chunk (bits 4..6). The first pass's wait also
// completes dV's and dK's MMAs, whose registers (their A operands and accumulators) stay live
// up to it; `in_flight` runs before that wait, while the products run.
template <class Tr, typename T, class InFlight>
__device__ __forceinline__ void bwd90_dq(uint32_t row, uint32_t key, uint64_t d_ds, uint64_t d_kn,
                                         uint32_t (&pa)[Tr::kPK][4], uint32_t (&da)[Tr::kPK][4],
                                         float (&dk)[Tr::kOF][4], float (&dv)[Tr::kOF][4], const InFlight& in_flight) {
  constexpr int kNF = Tr::kDqN / 8;
#pragma unroll
  for (int pass = 0; pass < Tr::kDqCols / Tr::kDqN; ++pass) {
    float acc[kNF][4];
#pragma unroll
    for (int i = 0; i < kNF; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::kKK; ++kk)
      ptx::wgmma_ss_tt<Tr::kDqN, T>(acc, ptx::desc_add(d_ds, kk * 16 * 128),
                                    ptx::desc_add(d_kn, (pass * Tr::kBlockN + kk * 16) * Tr::kKRow), 1);
    ptx::wgmma_commit();
    if (pass == 0) in_flight();
    ptx::wgmma_wait<0>();
    if (pass == 0) {
      ptx::fence_regs(pa);
      ptx::fence_regs(da);
      ptx::fence_regs(dk);
      ptx::fence_regs(dv);
    }
    ptx::fence_regs(acc);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
        ptx::sts64((row + half * 8 * Tr::kHeadDim * 4 + pass * Tr::kDqN * 4 + nf * 32) ^ (key << 4),
                   make_uint2(__float_as_uint(acc[nf][2 * half]), __float_as_uint(acc[nf][2 * half + 1])));
  }
}

// One query block's products up to dK, for this warpgroup's 64 keys (key position `key_pos`):
// S^T and dP^T (K, V at descriptors d_k, d_v; the block's Q, dO tiles at shared q, d_o);
// P^T = 2^(S^T c - lse log2 e), masked where the block is cut (!full), as dV's A operands pa;
// dV += P^T dO; dS^T = P^T (dP^T - D) as dK's A operands da, also stored to the dS^T tile
// (`ds_row`: bwd90_store_ds's row); dK += dS^T Q. `stat`: the block's row stats from this
// lane's first query (2 t). dV's and dK's products are left in flight. kPFromOperands: dS^T
// from P^T as rounded to T for dV's operands instead of its fp32 values, which then need no
// registers while dP^T's product runs.
template <class Tr, typename T, bool kPFromOperands = false>
__device__ __forceinline__ void bwd90_block(uint32_t (&pa)[Tr::kPK][4], uint32_t (&da)[Tr::kPK][4],
                                            float (&dk)[Tr::kOF][4], float (&dv)[Tr::kOF][4], uint64_t d_k,
                                            uint64_t d_v, uint32_t q, uint32_t d_o, const float2* stat,
                                            float scale_log2, bool full, const Band32& band, int sq, int key_pos,
                                            int m0, int t, uint32_t ds_row, int g) {
  using Op = MmaOps<T>;
  constexpr int kMF = Tr::kMF;
  float s[kMF][4], dp[kMF][4];
  bwd90_scores<Tr, T, Tr::kKSw64>(s, d_k, q);
  bwd90_scores<Tr, T>(dp, d_v, d_o);
  ptx::wgmma_wait<1>();  // S^T
  ptx::fence_regs(s);
#pragma unroll
  for (int nf = 0; nf < kMF; ++nf) {
    const float2 r0 = stat[8 * nf], r1 = stat[8 * nf + 1];  // queries 8 nf + 2t, + 1
    s[nf][0] = ptx::exp2_fast(fmaf(s[nf][0], scale_log2, -r0.x));
    s[nf][1] = ptx::exp2_fast(fmaf(s[nf][1], scale_log2, -r1.x));
    s[nf][2] = ptx::exp2_fast(fmaf(s[nf][2], scale_log2, -r0.x));
    s[nf][3] = ptx::exp2_fast(fmaf(s[nf][3], scale_log2, -r1.x));
  }
  if (!full) mask_transposed<kMF>(s, band, sq, key_pos, m0, t);
#pragma unroll
  for (int pk = 0; pk < Tr::kPK; ++pk) Op::p_operand(pa[pk], s, pk);
  bwd90_accumulate<Tr, T>(dv, pa, d_o);
  ptx::wgmma_wait<1>();  // dP^T (dV's group may still run)
  ptx::fence_regs(dp);
  if constexpr (kPFromOperands) {  // (P^T as rounded for dV: s's registers free while dP^T runs)
#pragma unroll
    for (int pk = 0; pk < Tr::kPK; ++pk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 v = ptx::unpack2<T>(pa[pk][i]);  // p_operand's layout
        s[2 * pk + i / 2][2 * (i % 2)] = v.x;
        s[2 * pk + i / 2][2 * (i % 2) + 1] = v.y;
      }
  }
#pragma unroll
  for (int nf = 0; nf < kMF; ++nf) {
    const float d0 = stat[8 * nf].y, d1 = stat[8 * nf + 1].y;
    s[nf][0] *= dp[nf][0] - d0;
    s[nf][1] *= dp[nf][1] - d1;
    s[nf][2] *= dp[nf][2] - d0;
    s[nf][3] *= dp[nf][3] - d1;
  }
  bwd90_store_ds<Tr, Op>(da, s, ds_row, g);
  bwd90_accumulate<Tr, T>(dk, da, q);
}

}  // namespace flashcore::cuda
