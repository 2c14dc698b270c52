// bwd_sm90: the attention backward's main kernel on Hopper's warpgroup MMA (wgmma, sm_90a),
// f16/bf16 storage, fp32 accumulation. The same algorithm and data flow as bwd_sm80.cuh
// (FlashAttention-2's backward laid out transposed; the row stats, the dQ workspace and its
// finishing pass are shared: bwd_aux.cu), with the five products as wgmma:
//
//   S^T  = K Q^T       m64 n<kBlockM> k16, K and Q from shared memory (both K-major)
//   dP^T = V dO^T      the same with V and dO
//   dV  += P^T dO      m64 n<kHeadDim>: P^T from registers (the accumulators converted),
//                      dO from shared memory read N-major (transposed descriptor)
//   dK  += dS^T Q      the same with dS^T and Q; dS^T is also stored to shared memory
//   dQ   = dS K        m64 n64 per pass: dS^T and K from shared memory, both MN-major
//                      (wgmma_ss_tt); each warpgroup kDqCols of the columns, stored to the
//                      block's fp32 dQ tile in shared memory, which one thread adds to the
//                      workspace with one bulk reduction (cp.reduce.async.bulk .add.f32)
//
// One CTA owns kBlockN keys of one (sequence, KV head), 64 per warpgroup (wgmma's M), and
// keeps their dK and dV in registers while it walks the query blocks that see them, for each
// query head of the group. Q and dO come into two buffers (the next block's loads are issued
// while the current one is computed): a block of kBlockM rows inside its sequence by TMA
// (thread 0, counted on the stage's mbarrier: the other threads issue no load instructions),
// a sequence's last, cut block by cp.async with the rows past it zero-filled (so that no row
// of another sequence, finite or not, meets a masked P^T = 0), as is every block where the
// maps could not be made; the row stats by cp.async. Tiles are column blocks of [rows][128
// bytes] in the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)), the layout
// wgmma's SW128 descriptors read; the loads write it directly.
// Two barriers per query block: (A) the block's tiles have landed (and every warpgroup is done
// with the previous block's dS^T), (B) dS^T is complete. Deterministic mode: the query
// blocks' dQ added in a fixed order into the one slice (p.dq_order > 0, sm90/bwd_dq.cuh; with
// two MMA warpgroups, by a third, dQ warpgroup that keeps the order's waits off them), or
// as bwd_sm80's (p.dq_split > 0: a CTA walks key blocks cta, cta + key_ctas, ... into its
// own dQ slice). Parts: bwd90_scores (S^T, dP^T), bwd90_accumulate (dV, dK), bwd90_store_ds,
// bwd90_dq, the dQ tile's flush (sm90/bwd_dq.cuh); the CTA body (bwd_sm90_cta) walks key
// blocks and query blocks and owns the barriers. Head dims above 128: bwd_sm90_wide.cuh.
#pragma once

#include <cuda_runtime.h>


#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/bwd_params.hpp"
#include "cuda/kernels/bwd_sm90_wide.cuh"
#include "cuda/kernels/sm90/bwd_dq.cuh"
#include "cuda/kernels/sm90/bwd_load.cuh"
#include "cuda/kernels/sm90/bwd_mma.cuh"
#include "cuda/parts/bwd_rows.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct BwdSm90Traits : BwdSm90Shape<T, kHeadDim_, kBlockM_, kBlockN_> {
  using S = BwdSm90Shape<T, kHeadDim_, kBlockM_, kBlockN_>;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * S::kWGs;
  // Ordered mode's dQ warpgroup: a third warpgroup whose first thread owns the dQ tile's
  // flush (the counter wait and the reductions), settle and release, so that their round trips
  // leave warpgroup 0 (docs/results/cuda-backward-hd64-2026-11-30.md). setmaxnreg gives it
  // kDqRegs registers and the MMA warpgroups kMmaRegs, moved among the 168 per thread a CTA of
  // 384 threads is launched with: 504 per lane of one warp of each (hd64: 232 + 232 + 40;
  // hd128: 240 + 240 + 24; an increase beyond the pool waits forever). (A ninth warp alone
  // would cost as much: ptxas bounds every warp of 288 threads to 168 registers.) At hd128
  // the MMA warpgroups fit 240 registers only as kSlim: dS^T from P^T's 16-bit operands
  // (bwd90_block's kPFromOperands) and the K / V load's sequence bounds read again per key
  // block (without either ptxas spills 8-20 bytes there).
  static constexpr bool kDqWarpgroup = S::kWGs == 2;
  static constexpr bool kSlim = kDqWarpgroup && kHeadDim_ > 64;
  static constexpr int kOrderedThreads = kThreads + (kDqWarpgroup ? 128 : 0);
  static constexpr int kDqRegs = kSlim ? 24 : 40, kMmaRegs = kSlim ? 240 : 232;
  // Offsets from the 1024-byte aligned base: K, V, kStages Q, kStages dO, dS^T, row stats, dQ.
  static constexpr int kOffK = 0, kOffV = S::kTileKV, kOffQ = 2 * S::kTileKV;
  static constexpr int kOffDo = kOffQ + kStages * S::kTileQ;
  static constexpr int kOffDs = kOffDo + kStages * S::kTileQ;
  static constexpr int kOffStat = kOffDs + S::kTileDs;
  static constexpr int kOffDq = kOffStat + kStages * S::kBlockM * 8;
  static constexpr int kOffPending = kOffDq + S::kTileDq;  // the dQ tile's destination (DqPending)
  static constexpr int kOffBar = kOffPending + 64;          // per stage: its Q / dO tiles' TMA loads
  static constexpr int kSmem = kOffBar + 8 * kStages + 1024;
  static constexpr int kCtasPerSm = bwd_sm90_ctas_per_sm(kHeadDim_, kBlockN_);  // (__launch_bounds__)

  static_assert(kSmem == bwd_sm90_smem(kHeadDim_, kBlockM_, kBlockN_, kStages, int(sizeof(T))), "the registry's size");
  static_assert(kStages == 2, "Q / dO double buffered");
  static_assert(kSmem <= 232448 && kCtasPerSm * (kSmem + 1024) <= 233472, "shared memory (228 KiB per SM)");
};


// The kernel's body: one CTA's key blocks.
// kOrdered: deterministic mode in one slice (BwdParams::dq_order > 0; a template argument, so
// that the default mode's loop is compiled without the ordered walk's state).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, bool kOrdered>
__device__ __forceinline__ void bwd_sm90_cta(const CUtensorMap* tm_q, const CUtensorMap* tm_do, const BwdParams& p) {
  using Tr = BwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>;
  constexpr int kOF = Tr::kOF, kPK = Tr::kPK;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - ptx::smem_addr(smem_raw));
  const int hk = blockIdx.y, b = blockIdx.z;
  // (ordered mode's in-order walk: the last key block first, as its adders come in descending n)
  const int cta = kOrdered && p.dq_order == 2 ? p.key_ctas - 1 - int(blockIdx.x) : int(blockIdx.x);
  const SeqInfo seq = seq_info(p.f, b);
  const Band32 band{p.f.window_left, p.f.window_right, seq.sk - seq.sq, seq.sk};
  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int key = wg * 64 + warp * 16 + g;  // this lane's key rows in the CTA's block: key, key + 8
  float* const dq_slice = p.dq_acc + int64_t(cta) * p.dq_split;  // dq_split 0: one shared slice
  const DqPending pend{base + Tr::kOffPending};
  QStageBars<kStages> bars{base + Tr::kOffBar};
  if (tid == 0) {
    pend.clear();
    bars.init();
  }
  __syncthreads();  // (the barriers initialized before any thread waits on them)
  const int h0 = hk * p.f.group, h_end = h0 + p.f.group;

  // Descriptors (SW128; K in SW64 where Tr::kKSw64). K-major operands: k-step ks reads 32
  // bytes of column block ks / 4 (SW64: ks / 2). N- / M-major operands (LBO: the next column
  // block, SBO: the next 8 rows of K): k-step adds 16 rows.
  const uint64_t d_k = Tr::kKSw64 ? ptx::desc_sw64(base + Tr::kOffK + wg * 64 * 64, 16, 512)
                                  : ptx::desc_sw128(base + Tr::kOffK + wg * 64 * 128, 16, 1024);
  const uint64_t d_v = ptx::desc_sw128(base + Tr::kOffV + wg * 64 * 128, 16, 1024);
  const uint64_t d_ds = ptx::desc_sw128(base + Tr::kOffDs, kBlockN * 128, 1024);
  const uint64_t d_kn =
      Tr::kKSw64 ? ptx::desc_sw64(base + Tr::kOffK + wg * kBlockN * 64, kBlockN * 64, 512)
                 : ptx::desc_sw128(base + Tr::kOffK + wg * (Tr::kDqCols / Tr::kColElems) * kBlockN * 128,
                                   kBlockN * 128, 1024);

  // Ordered mode's dQ warpgroup (Tr::kDqWarpgroup: bwd90_dq_warpgroup): the walk's barriers,
  // and its first thread's flush, settle and release of each block's dQ tile; the MMA
  // warpgroups then skip them.
  constexpr bool kWarp = kOrdered && Tr::kDqWarpgroup;
  // ((A), (B) and each key block's end; every one but (B) opens a phase of the dQ warpgroup)
  DqBarriers<kWarp> loop_bars{pend, tid};
  if constexpr (kWarp) {
    if (wg == 2) {
      ptx::setmaxnreg_dec<Tr::kDqRegs>();
      bwd90_dq_warpgroup<kBlockM, kBlockN, 1, false>(pend, tid == Tr::kThreads, p.dq_order, 0, 0);
      return;
    }
    ptx::setmaxnreg_inc<Tr::kMmaRegs>();
  }

  // Q, dO and the row stats of query block m0 of head h into stage st (bwd90_load_q).
  auto load_q = [&](int h, int m0, int st) {
    bwd90_load_q<Tr, T>(p, seq, tm_q, tm_do, base + Tr::kOffQ + st * Tr::kTileQ, base + Tr::kOffDo + st * Tr::kTileQ,
                        base + Tr::kOffStat + st * kBlockM * 8, bars.at(st), h, m0, tid);
  };

  for (int n = cta; n * kBlockN < seq.sk; n += p.key_ctas) {
    const int n0 = n * kBlockN;
    const QueryBlocks qb = query_blocks<kBlockM, kBlockN>(band, seq.sq, n0);
    const bool any = qb.hi > qb.lo && h0 < h_end;  // (a group of no query heads sees nothing)
    const DqOrder<kBlockM, kBlockN> ord{kOrdered ? p.dq_order : 0, n, (seq.sk + kBlockN - 1) / kBlockN};
    const int mb_first = kOrdered ? ord.first(qb) : qb.lo;
    const auto rank = [&](int m) { return ord.rank(band, qb, m); };
    if (any) {
      // (kSlim: the sequence's bounds read again here, not held in registers over the walk)
      const SeqInfo kv_seq = kWarp && Tr::kSlim ? seq_info(p.f, ptx::opaque(b)) : seq;
      bwd90_load_kv<kBlockN, kHeadDim, Tr::kThreads, T, Tr::kKSw64>(p, kv_seq, hk, n0, base + Tr::kOffK,
                                                                     base + Tr::kOffV, tid);
      load_q(h0, mb_first * kBlockM, 0);  // one commit group: K, V and the first query block
    }
    float dk[kOF][4], dv[kOF][4];
#pragma unroll
    for (int i = 0; i < kOF; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

    int buf = 0;
    for (int h = any ? h0 : h_end, mb = mb_first; h < h_end; buf ^= 1) {
      const int m0 = mb * kBlockM, st = buf;
      ptx::cp_async_wait<0>();
      bars.wait(st);
      // The copies' writes (and the previous block's dQ stores), seen by wgmma's reads (the
      // bulk reduction's).
      ptx::fence_proxy_async();
      loop_bars.open(DqPending::kQueryBlock);  // (A)
      // The next block's loads, then the previous block's dQ (whose flush may wait for the
      // adders before this CTA in ordered mode).
      const WalkStep next = bwd90_next<kOrdered>(h, mb, qb, mb_first);
      if (next.h < h_end) load_q(next.h, next.mb * kBlockM, buf ^ 1);
      if (!kWarp && tid == 0) pend.flush<1>(0, 0, kOrdered, rank);
      const bool full = tile_unmasked<kBlockM, kBlockN>(band, seq.sq, m0, n0);
      const uint32_t q_off = Tr::kOffQ + st * Tr::kTileQ, do_off = Tr::kOffDo + st * Tr::kTileQ;
      const float2* stat = reinterpret_cast<const float2*>(smem + Tr::kOffStat) + st * kBlockM + 2 * t;

      // S^T, dP^T, P^T; dV += P^T dO; dS^T (stored for dQ); dK += dS^T Q.
      uint32_t pa[kPK][4], da[kPK][4];
      bwd90_block<Tr, T, kWarp && Tr::kSlim>(pa, da, dk, dv, d_k, d_v, base + q_off, base + do_off, stat,
                                             p.f.scale_log2, full, band, seq.sq, n0 + key, m0, t,
                                             base + Tr::kOffDs + key * 128 + 4 * t, g);
      ptx::fence_proxy_async();                 // dS^T's stores, seen by wgmma's reads
      if (!kWarp && tid == 0) pend.settle();  // the dQ tile was read (flushed after (A))
      loop_bars.sync();                         // (B)

      const int r = warp * 16 + g;
      // The block's first workspace row; the swizzle's key is the lane's row's, modulo 8.
      const int64_t qrow0 = (seq.bb * p.f.heads + h) * p.rows_q + seq.q_row0 + m0;
      const uint32_t key8 = uint32_t(qrow0 + r) & 7u;
      bwd90_dq<Tr, T>(base + Tr::kOffDq + r * kHeadDim * 4 + wg * Tr::kDqCols * 4 + t * 8, key8, d_ds, d_kn, pa, da,
                      dk, dv, [&] {  // (behind the products)
                        if (kOrdered && !kWarp && tid == 0) pend.release();  // (the previous block's dQ)
                      });
      if (tid == 0) {
        pend.set(dq_slice + qrow0 * kHeadDim, uint32_t(min(kBlockM, seq.sq - m0) * kHeadDim * 4), base + Tr::kOffDq,
                 kOrdered ? p.dq_sem + (int64_t(b) * p.f.heads + h) * p.sem_mblocks + mb : nullptr, mb);
        if (kWarp) pend.set_walk(n, ord.nblocks, qb.lo, qb.hi, band.offset, band.right);
      }
      h = next.h;  // (dQ's stores are fenced into the async proxy before (A) or the barrier below)
      mb = next.mb;
    }

    const int row0 = n0 + key, col0 = 2 * t;
    T* gdk = static_cast<T*>(p.dk) + seq.bb * p.dk_sb + seq.k_row0 * p.dk_ss + hk * p.dk_sh;
    T* gdv = static_cast<T*>(p.dv) + seq.bb * p.dv_sb + seq.k_row0 * p.dv_ss + hk * p.dv_sh;
    bwd_store_rows<T, kOF>(dk, gdk, p.dk_ss, row0, seq.sk, col0, p.f.d, p.scale);
    bwd_store_rows<T, kOF>(dv, gdv, p.dv_ss, row0, seq.sk, col0, p.f.dv, 1.f);
    ptx::fence_proxy_async();  // the last dQ tile's stores, seen by the bulk reduction
    // the next key block's loads overwrite K, V; the last dQ tile is stored
    loop_bars.open(DqPending::kKeyBlockEnd);
    if (!kWarp && tid == 0) {
      pend.flush<1>(0, 0, kOrdered, rank);
      pend.finish(kOrdered, p.dq_split > 0, false);  // (the next tile write waits at (B))
    }
  }
  if constexpr (kWarp) {
    loop_bars.open(DqPending::kDone);
  }
  if (!kWarp && tid == 0) ptx::tma_store_wait_read();  // (the CTA's shared memory outlives the reads)
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, bool kOrdered>
__global__ void __launch_bounds__(kOrdered ? BwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>::kOrderedThreads
                                           : BwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>::kThreads,
                                  BwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>::kCtasPerSm)
    bwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                    const BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bwd_sm90_cta<T, kHeadDim, kBlockM, kBlockN, kStages, kOrdered>(&tm_q, &tm_do, p);
#endif
}

// kVariant: the instance row's last column (0; kept for the table's sm90 row format).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant>
cudaError_t launch_bwd_sm90(const BwdParams& p, cudaStream_t stream) {
  static_assert(kVariant == 0, "bwd_sm90: plain rows only");
  if constexpr (bwd_sm90_wide(kHeadDim)) {
    return launch_bwd_sm90_wide<T, kHeadDim, kBlockM, kBlockN, kStages>(p, stream);
  } else {
    using Tr = BwdSm90Traits<T, kHeadDim, kBlockM, kBlockN, kStages>;
    return launch_bwd90<T, kBlockM, bwd_sm90_kernel<T, kHeadDim, kBlockM, kBlockN, kStages, false>,
                        bwd_sm90_kernel<T, kHeadDim, kBlockM, kBlockN, kStages, true>>(
        p, Tr::kThreads, Tr::kOrderedThreads, Tr::kSmem, stream);
  }
}

}  // namespace flashcore::cuda
