// bwd_sm90_wide: the attention backward on Hopper's warpgroup MMA for head dims above 128
// (the hd256 rows), f16/bf16 storage, fp32 accumulation. bwd_sm90.cuh's algorithm, data flow
// and barriers, with one 64-key block's work split between two warpgroups: dK and dV of 64
// keys over 256 columns would take 256 of a thread's registers in one warpgroup.
//
//   S^T  = K Q^T       warpgroup w: the 64 keys x queries [32 w, 32 w + 32) (m64 n32 k16)
//   dP^T = V dO^T      the same with V and dO
//   P^T, dS^T          each warpgroup's 32 queries stored to [key][query] tiles
//   dV  += P^T dO      warpgroup w: columns [128 w, 128 w + 128) (m64 n128 k16, both from
//   dK  += dS^T Q      shared memory: P^T / dS^T K-major, dO / Q read N-major)
//   dQ   = dS K        the same columns (m64 n128, dS^T and K read MN-major)
//
// Shared memory (217 KiB at hd256): K, V, two Q / dO stages, P^T, dS^T and the row stats.
// Tiles are column blocks of [rows][128 bytes] in the 128-byte swizzle. A stage holds
// warpgroup 0's column blocks of Q then of dO, then warpgroup 1's: once a warpgroup's dV and
// dK products are done, nothing reads its half of the block's stage any more (S^T and dP^T,
// which read every column, finished before barrier (B)), so its dQ tile (64 rows of its 128
// columns in fp32, 32 KiB, the workspace's swizzle) is written there, and after the next
// barrier thread 0 adds both tiles to the workspace's two column panels
// (BwdParams::acc_panel) with one bulk reduction each. That stage is the next block's: its
// loads are issued after (B), once thread 0 saw the reductions read it.
// Two barriers per query block: (A) the block's tiles have landed and the previous block is
// done, (B) P^T and dS^T are complete. Loads (TMA for whole query blocks) and deterministic
// mode as bwd_sm90's.
#pragma once

#include <cuda_runtime.h>


#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/bwd_params.hpp"
#include "cuda/kernels/bwd_sizes.hpp"
#include "cuda/kernels/sm90/bwd_dq.cuh"
#include "cuda/kernels/sm90/bwd_load.cuh"
#include "cuda/parts/bwd_rows.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct BwdSm90WideTraits {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kStages = kStages_;
  static constexpr int kThreads = 256;                   // two warpgroups
  // Ordered mode's dQ warpgroup (bwd_sm90.cuh's BwdSm90Traits::kDqWarpgroup): a third
  // warpgroup with 24 registers, the MMA warpgroups 240 of the 168 x 384 the CTA has.
  static constexpr int kOrderedThreads = kThreads + 128;
  static constexpr int kDqRegs = 24, kMmaRegs = 240;
  static constexpr int kColElems = 128 / int(sizeof(T));  // elements per 128-byte column block
  static constexpr int kColBlocks = kHeadDim / kColElems;
  static constexpr int kWgBlocks = kColBlocks / 2;       // column blocks per warpgroup
  static constexpr int kWgCols = kHeadDim / 2;           // dK, dV, dQ columns per warpgroup
  static constexpr int kQw = kBlockM / 2;                // S^T, dP^T queries per warpgroup
  static constexpr int kKS = kHeadDim / 16;              // k-steps of S^T, dP^T
  static constexpr int kPK = kBlockM / 16;               // k-steps of dV, dK (over the queries)
  static constexpr int kKK = kBlockN / 16;               // k-steps of dQ (over the keys)
  static constexpr int kMF = kQw / 8;                    // 8-query fragments of S^T
  static constexpr int kOF = kWgCols / 8;                // 8-column fragments of dK, dV, dQ
  static constexpr int kTileKV = kBlockN * kHeadDim * int(sizeof(T));
  static constexpr int kCb = kBlockM * 128;              // one column block of a query tile
  static constexpr int kWgStage = 2 * kWgBlocks * kCb;   // a warpgroup's Q and dO blocks
  static constexpr int kStage = 2 * kWgStage;
  static constexpr int kTileP = kBlockN * kBlockM * int(sizeof(T));
  // Offsets from the 1024-byte aligned base: K, V, the stages, P^T, dS^T, row stats, pending dQ.
  static constexpr int kOffK = 0, kOffV = kTileKV, kOffStage = 2 * kTileKV;
  static constexpr int kOffP = kOffStage + kStages * kStage, kOffDs = kOffP + kTileP;
  static constexpr int kOffStat = kOffDs + kTileP;
  static constexpr int kOffPending = kOffStat + kStages * kBlockM * 8;
  static constexpr int kOffBar = kOffPending + 64;  // per stage: its Q / dO tiles' TMA loads
  static constexpr int kSmem = kOffBar + 8 * kStages + 1024;

  static_assert(kSmem == bwd_sm90_smem(kHeadDim, kBlockM, kBlockN, kStages, int(sizeof(T))), "the registry's size");
  static_assert(bwd_sm90_wide(kHeadDim) && bwd_sm90_ctas_per_sm(kHeadDim, kBlockN) == 1, "the wide form's rows");
  static_assert(kHeadDim % (2 * kColElems) == 0, "whole column blocks per warpgroup");
  static_assert(kBlockM == 64 && kBlockN == 64 && kStages == 2, "64 x 64 blocks, Q / dO double buffered");
  static_assert(kWgCols * 4 * kBlockM == kWgStage, "a warpgroup's dQ tile fills its half of a stage");
  static_assert(kSmem <= 232448, "shared memory (227 KiB per CTA)");
};

// acc = X Y^T over the head dim for the 64 keys and this warpgroup's kQw queries: X's rows at
// descriptor d_x (K, V: K-major, column block c at c kBlockN 128 bytes), Y's at d_y (Q, dO
// in a stage: column block c at (c / kWgBlocks) kWgStage + (c % kWgBlocks) kCb). One commit
// group.
template <class Tr, typename T>
__device__ __forceinline__ void bwd90w_scores(float (&acc)[Tr::kMF][4], uint64_t d_x, uint64_t d_y) {
  ptx::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::kKS; ++ks) {
    const uint32_t cb = ks / 4, kb = (ks % 4) * 32;
    const uint64_t a = ptx::desc_add(d_x, cb * Tr::kBlockN * 128 + kb);
    const uint64_t b =
        ptx::desc_add(d_y, (cb / Tr::kWgBlocks) * Tr::kWgStage + (cb % Tr::kWgBlocks) * Tr::kCb + kb);
    if (ks == 0)
      ptx::wgmma_ss_zero<Tr::kQw, T>(acc, a, b);
    else
      ptx::wgmma_ss<Tr::kQw, T>(acc, a, b, 1);
  }
  ptx::wgmma_commit();
}

// Stores this lane's fragments of a warpgroup's kQw queries of P^T or dS^T to a [key][query]
// tile (128-byte rows, swizzled) as 16-bit pairs: fragment nf's queries are in chunk
// chunk0 + nf; `row` is the address of the lane's first key row (its keys are that row and
// the one 8 below, both g modulo 8) plus 4 t.
template <class Tr, typename T>
__device__ __forceinline__ void bwd90w_store_half(const float (&x)[Tr::kMF][4], uint32_t row, int chunk0, int g) {
#pragma unroll
  for (int nf = 0; nf < Tr::kMF; ++nf) {
    const uint32_t off = ((chunk0 + nf) ^ g) * 16;
    ptx::sts32(row + off, ptx::pack2<T>(x[nf][0], x[nf][1]));
    ptx::sts32(row + 8 * 128 + off, ptx::pack2<T>(x[nf][2], x[nf][3]));
  }
}

// The kernel's body: one CTA's key blocks.
// kOrdered: deterministic mode in one slice (as bwd_sm90_cta's).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, bool kOrdered>
__device__ __forceinline__ void bwd_sm90_wide_cta(const CUtensorMap* tm_q, const CUtensorMap* tm_do,
                                                  const BwdParams& p) {
  using Tr = BwdSm90WideTraits<T, kHeadDim, kBlockM, kBlockN, kStages>;
  constexpr int kMF = Tr::kMF, kOF = Tr::kOF;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - ptx::smem_addr(smem_raw));
  const int hk = blockIdx.y, b = blockIdx.z;
  // (ordered mode's in-order walk: the last key block first, as its adders come in descending n)
  const int cta = kOrdered && p.dq_order == 2 ? p.key_ctas - 1 - int(blockIdx.x) : int(blockIdx.x);
  const SeqInfo seq = seq_info(p.f, b);
  const Band32 band{p.f.window_left, p.f.window_right, seq.sk - seq.sq, seq.sk};
  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int key = warp * 16 + g;  // this lane's key rows in the block: key, key + 8 (both warpgroups)
  // (the slice, a panel's floats and the mode are read from the parameters where used: the
  // registers are the products')
  const auto panel = [&] { return int64_t(p.nb) * p.f.heads * p.rows_q * Tr::kWgCols; };
  const DqPending pend{base + Tr::kOffPending};
  QStageBars<kStages> bars{base + Tr::kOffBar};
  if (tid == 0) {
    pend.clear();
    bars.init();
  }
  __syncthreads();  // (the barriers initialized before any thread waits on them)
  const int h0 = hk * p.f.group, h_end = h0 + p.f.group;

  // Descriptors (SW128). K-major: k-step ks reads 32 bytes of column block ks / 4. N- / MN-major
  // (LBO: the next column block, SBO: the next 8 rows): a k-step adds 16 rows.
  const uint64_t d_k = ptx::desc_sw128(base + Tr::kOffK, 16, 1024);
  const uint64_t d_v = ptx::desc_sw128(base + Tr::kOffV, 16, 1024);
  const uint64_t d_p = ptx::desc_sw128(base + Tr::kOffP, 16, 1024);
  const uint64_t d_ds = ptx::desc_sw128(base + Tr::kOffDs, 16, 1024);
  const uint64_t d_dsn = ptx::desc_sw128(base + Tr::kOffDs, kBlockN * 128, 1024);
  const uint64_t d_kn = ptx::desc_sw128(base + Tr::kOffK + wg * Tr::kWgBlocks * kBlockN * 128, kBlockN * 128, 1024);

  // Ordered mode's dQ warpgroup (bwd90_dq_warpgroup), as bwd_sm90_cta's: its barriers are
  // DqBarriers (every one but (B) and the key block's second opens a phase of its work).
  constexpr bool kWarp = kOrdered;
  DqBarriers<kWarp> loop_bars{pend, tid};
  if constexpr (kWarp) {
    if (wg == 2) {
      ptx::setmaxnreg_dec<Tr::kDqRegs>();
      bwd90_dq_warpgroup<kBlockM, kBlockN, 2, true>(pend, tid == Tr::kThreads, p.dq_order, Tr::kWgStage, panel());
      return;
    }
    ptx::setmaxnreg_inc<Tr::kMmaRegs>();
  }

  // Q, dO and the row stats of query block m0 of head h into stage st (bwd90_load_q: each
  // warpgroup's column blocks of Q then of dO together, Tr::kWgStage apart).
  auto load_q = [&](int h, int m0, int st) {
    const uint32_t stage = base + Tr::kOffStage + st * Tr::kStage;
    bwd90_load_q<Tr, T, Tr::kWgBlocks, Tr::kWgStage>(p, seq, tm_q, tm_do, stage, stage + Tr::kWgBlocks * Tr::kCb,
                                                      base + Tr::kOffStat + st * kBlockM * 8, bars.at(st), h, m0,
                                                      tid);
  };

  for (int n = cta; n * kBlockN < seq.sk; n += p.key_ctas) {
    const int n0 = n * kBlockN;
    const QueryBlocks qb = query_blocks<kBlockM, kBlockN>(band, seq.sq, n0);
    const bool any = qb.hi > qb.lo && h0 < h_end;
    const DqOrder<kBlockM, kBlockN> ord{kOrdered ? p.dq_order : 0, n, (seq.sk + kBlockN - 1) / kBlockN};
    const int mb_first = kOrdered ? ord.first(qb) : qb.lo;
    const auto rank = [&](int m) { return ord.rank(band, qb, m); };
    if (any) {
      // (with a dQ warpgroup: the sequence's bounds read again here, not held over the walk)
      const SeqInfo kv_seq = kWarp ? seq_info(p.f, ptx::opaque(b)) : seq;
      bwd90_load_kv<kBlockN, kHeadDim, Tr::kThreads, T>(p, kv_seq, hk, n0, base + Tr::kOffK, base + Tr::kOffV, tid);
      load_q(h0, mb_first * kBlockM, 0);  // one commit group: K, V and the first query block
    }
    float dk[kOF][4], dv[kOF][4];
#pragma unroll
    for (int i = 0; i < kOF; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

    int buf = 0;
    for (int h = any ? h0 : h_end, mb = mb_first; h < h_end; buf ^= 1) {
      const int m0 = mb * kBlockM;
      ptx::cp_async_wait<0>();
      bars.wait(buf);
      // The copies' writes (and the previous block's dQ stores), seen by wgmma's reads (the
      // bulk reductions').
      ptx::fence_proxy_async();
      loop_bars.open(DqPending::kQueryBlock);  // (A)
      if (!kWarp && tid == 0) pend.flush<2>(Tr::kWgStage, panel(), kOrdered, rank);  // the previous block's dQ (in the other stage)
      const WalkStep next = bwd90_next<kOrdered>(h, mb, qb, mb_first);
      const bool full = tile_unmasked<kBlockM, kBlockN>(band, seq.sq, m0, n0);
      const uint32_t stage = base + Tr::kOffStage + buf * Tr::kStage;
      const uint32_t do0 = Tr::kWgBlocks * Tr::kCb;  // dO's blocks after Q's in each half
      const float2* stat = reinterpret_cast<const float2*>(smem + Tr::kOffStat) + buf * kBlockM + wg * Tr::kQw + 2 * t;

      // S^T and dP^T of this warpgroup's queries: B's column block c at stage + (c / kWgBlocks)
      // kWgStage + (c % kWgBlocks) kCb, its rows from wg kQw.
      float s[kMF][4], dp[kMF][4];
      const uint64_t d_q = ptx::desc_sw128(stage + wg * Tr::kQw * 128, 16, 1024);
      bwd90w_scores<Tr, T>(s, d_k, d_q);
      bwd90w_scores<Tr, T>(dp, d_v, ptx::desc_add(d_q, do0));
      ptx::wgmma_wait<1>();  // S^T
      ptx::fence_regs(s);
#pragma unroll
      for (int nf = 0; nf < kMF; ++nf) {
        const float2 r0 = stat[8 * nf], r1 = stat[8 * nf + 1];  // queries 8 nf + 2t, + 1
        s[nf][0] = ptx::exp2_fast(fmaf(s[nf][0], p.f.scale_log2, -r0.x));
        s[nf][1] = ptx::exp2_fast(fmaf(s[nf][1], p.f.scale_log2, -r1.x));
        s[nf][2] = ptx::exp2_fast(fmaf(s[nf][2], p.f.scale_log2, -r0.x));
        s[nf][3] = ptx::exp2_fast(fmaf(s[nf][3], p.f.scale_log2, -r1.x));
      }
      if (!full) mask_transposed<kMF>(s, band, seq.sq, n0 + key, m0 + wg * Tr::kQw, t);
      const uint32_t row_p = base + Tr::kOffP + key * 128 + 4 * t, row_ds = base + Tr::kOffDs + key * 128 + 4 * t;
      bwd90w_store_half<Tr, T>(s, row_p, wg * (Tr::kQw / 8), g);
      ptx::wgmma_wait<0>();  // dP^T
      ptx::fence_regs(dp);
#pragma unroll
      for (int nf = 0; nf < kMF; ++nf) {  // dS^T = P^T (dP^T - D)
        const float d0 = stat[8 * nf].y, d1 = stat[8 * nf + 1].y;
        s[nf][0] *= dp[nf][0] - d0;
        s[nf][1] *= dp[nf][1] - d1;
        s[nf][2] *= dp[nf][2] - d0;
        s[nf][3] *= dp[nf][3] - d1;
      }
      bwd90w_store_half<Tr, T>(s, row_ds, wg * (Tr::kQw / 8), g);
      ptx::fence_proxy_async();                  // P^T's and dS^T's stores, seen by wgmma's reads
      if (!kWarp && tid == 0) pend.settle();  // the other stage's dQ was read (flushed after (A))
      loop_bars.sync();                         // (B)
      if (next.h < h_end) load_q(next.h, next.mb * kBlockM, buf ^ 1);

      // dV += P^T dO, dK += dS^T Q (this warpgroup's columns), dQ = dS K (the same columns).
      const uint32_t half = stage + wg * Tr::kWgStage;
      const uint64_t d_qn = ptx::desc_sw128(half, Tr::kCb, 1024), d_don = ptx::desc_sw128(half + do0, Tr::kCb, 1024);
      ptx::wgmma_fence();
#pragma unroll
      for (int pk = 0; pk < Tr::kPK; ++pk)
        ptx::wgmma_ss_bt<Tr::kWgCols, T>(dv, ptx::desc_add(d_p, pk * 32), ptx::desc_add(d_don, pk * 16 * 128), 1);
#pragma unroll
      for (int pk = 0; pk < Tr::kPK; ++pk)
        ptx::wgmma_ss_bt<Tr::kWgCols, T>(dk, ptx::desc_add(d_ds, pk * 32), ptx::desc_add(d_qn, pk * 16 * 128), 1);
      ptx::wgmma_commit();
      // (ordered mode: the previous block's dQ, behind dV's and dK's products, before dQ's
      // accumulators take their registers)
      if (kOrdered && !kWarp && tid == 0) pend.release();
      float dq[kOF][4];
#pragma unroll
      for (int i = 0; i < kOF; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Tr::kKK; ++kk)
        ptx::wgmma_ss_tt<Tr::kWgCols, T>(dq, ptx::desc_add(d_dsn, kk * 16 * 128), ptx::desc_add(d_kn, kk * 16 * 128), 1);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::fence_regs(dk);
      ptx::fence_regs(dv);
      ptx::fence_regs(dq);

      // dQ over this warpgroup's half of the stage: fp32 rows of kWgCols, 16-byte chunk c of
      // the row of workspace row w at c ^ (w % 8) (the same for this lane's two rows).
      const int r = warp * 16 + g;
      const int64_t qrow0 = (seq.bb * p.f.heads + h) * p.rows_q + seq.q_row0 + m0;
      const uint32_t key8 = uint32_t(qrow0 + r) & 7u, row_q = half + r * Tr::kWgCols * 4 + t * 8;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int nf = 0; nf < kOF; ++nf)
          ptx::sts64((row_q + hf * 8 * Tr::kWgCols * 4 + nf * 32) ^ (key8 << 4),
                     make_uint2(__float_as_uint(dq[nf][2 * hf]), __float_as_uint(dq[nf][2 * hf + 1])));
      if (tid == 0) {
        pend.set(p.dq_acc + int64_t(blockIdx.x) * p.dq_split + qrow0 * Tr::kWgCols,
                 uint32_t(min(kBlockM, seq.sq - m0) * Tr::kWgCols * 4), stage,
                 kOrdered ? p.dq_sem + (int64_t(b) * p.f.heads + h) * p.sem_mblocks + mb : nullptr, mb);
        if (kWarp) pend.set_walk(n, ord.nblocks, qb.lo, qb.hi, band.offset, band.right);
      }
      h = next.h;  // (dQ's stores are fenced into the async proxy before (A) or the barrier below)
      mb = next.mb;
    }

    const int row0 = n0 + key, col0 = wg * Tr::kWgCols + 2 * t;
    T* gdk = static_cast<T*>(p.dk) + seq.bb * p.dk_sb + seq.k_row0 * p.dk_ss + hk * p.dk_sh;
    T* gdv = static_cast<T*>(p.dv) + seq.bb * p.dv_sb + seq.k_row0 * p.dv_ss + hk * p.dv_sh;
    bwd_store_rows<T, kOF>(dk, gdk, p.dk_ss, row0, seq.sk, col0, p.f.d, p.scale);
    bwd_store_rows<T, kOF>(dv, gdv, p.dv_ss, row0, seq.sk, col0, p.f.dv, 1.f);
    ptx::fence_proxy_async();  // the last block's dQ stores, seen by the bulk reductions
    loop_bars.open(DqPending::kKeyBlockEnd);  // the last block's dQ tiles are stored
    if (!kWarp && tid == 0) {
      pend.flush<2>(Tr::kWgStage, panel(), kOrdered, rank);
      pend.finish(kOrdered, p.dq_split > 0, true);  // (the next key block's loads overwrite the stages)
    }
    loop_bars.sync();
  }
  if constexpr (kWarp) {
    loop_bars.open(DqPending::kDone);
  }
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, bool kOrdered>
__global__ void __launch_bounds__(kOrdered ? 384 : 256, 1)
    bwd_sm90_wide_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                         const BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bwd_sm90_wide_cta<T, kHeadDim, kBlockM, kBlockN, kStages, kOrdered>(&tm_q, &tm_do, p);
#endif
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages>
cudaError_t launch_bwd_sm90_wide(const BwdParams& p, cudaStream_t stream) {
  using Tr = BwdSm90WideTraits<T, kHeadDim, kBlockM, kBlockN, kStages>;
  return launch_bwd90<T, kBlockM, bwd_sm90_wide_kernel<T, kHeadDim, kBlockM, kBlockN, kStages, false>,
                      bwd_sm90_wide_kernel<T, kHeadDim, kBlockM, kBlockN, kStages, true>>(
      p, Tr::kThreads, Tr::kOrderedThreads, Tr::kSmem, stream);
}

}  // namespace flashcore::cuda
