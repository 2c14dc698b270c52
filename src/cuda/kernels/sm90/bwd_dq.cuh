// The sm90 backward's dQ path after the tiles: a query block's dQ, written to shared memory
// by the consumer threads, is added to the fp32 workspace by bulk reductions that thread 0
// issues after the next barrier ("flush"), and read before the tile's memory is written
// again ("settle"). Between them, the tile's destination waits in shared memory (`pending`,
// 48 bytes), so that no register stays live for it across the query loop:
//   [0, 8)   the workspace address of the first panel's rows
//   [8, 12)  bytes per panel (0: nothing pending), [12, 16) the tile's shared address
//   [16, 24) ordered mode: the block's counter (BwdParams::dq_sem), [24, 28) its query block
//   [32, 40) ordered mode: the counter to step once the issued reductions are complete (0: none)
// Ordered mode (BwdParams::dq_order > 0) makes deterministic dQ in one workspace slice: the
// flush waits until the block's counter equals the CTA's rank among the block's adders, and
// "release", once the reductions are complete, steps the counter for the next adder. Thread
// 0 calls it while its warpgroup's products of the next block run, so that its wait for the
// reductions' completion hides behind them rather than holding a barrier; where the kernel
// has a dQ warpgroup (bwd_sm90.cuh: kDqWarpgroup), that warpgroup's first thread does the
// flush, settle and release instead, off the MMA warps.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/bwd_params.hpp"
#include "cuda/kernels/sm90/bwd_load.cuh"
#include "cuda/parts/bwd_rows.cuh"

namespace flashcore::cuda {

struct DqPending {
  uint32_t at;  // shared address of the 64 bytes

  __device__ __forceinline__ void clear() const {
    ptx::sts32(at + 8, 0);
    ptx::sts64(at + 32, make_uint2(0, 0));
  }
  // The tile of query block mb at shared `src` goes to `dst` (ordered mode: after the adders
  // before this CTA on `sem`). `mb` is what flush's rank_of takes, the block's index (a dQ
  // warpgroup's rank_of reads the walk that set_walk records beside it).
  __device__ __forceinline__ void set(const float* dst, uint32_t bytes, uint32_t src, const unsigned* sem,
                                      int mb) const {
    const uint64_t a = reinterpret_cast<uint64_t>(dst), s = reinterpret_cast<uint64_t>(sem);
    ptx::sts64(at, make_uint2(uint32_t(a), uint32_t(a >> 32)));
    ptx::sts64(at + 8, make_uint2(bytes, src));
    ptx::sts64(at + 16, make_uint2(uint32_t(s), uint32_t(s >> 32)));
    ptx::sts32(at + 24, uint32_t(mb));
  }
  // Thread 0, after a barrier that follows every thread's stores to the tile and their fence
  // into the async proxy: kPanels reductions, panel i from the tile + i src_step to the
  // workspace at dst + i panel floats, as one bulk group. rank(mb): this CTA's rank among the
  // adders of query block mb (computed here, where no wgmma is in flight: next to the
  // products' accumulators, the arithmetic made ptxas fence their registers).
  template <int kPanels, class Rank>
  __device__ __forceinline__ void flush(uint32_t src_step, int64_t panel, bool ordered, const Rank& rank_of) const {
    const uint2 bs = ptx::lds64(at + 8);
    const uint32_t bytes = bs.x, src = bs.y;
    if (bytes == 0) return;
    const uint2 a = ptx::lds64(at);
    float* const dst = reinterpret_cast<float*>(uint64_t(a.x) | uint64_t(a.y) << 32);
    if (ordered) {
      const uint2 s = ptx::lds64(at + 16);
      const unsigned* sem = reinterpret_cast<const unsigned*>(uint64_t(s.x) | uint64_t(s.y) << 32);
      const uint32_t rank = rank_of(int(ptx::lds32(at + 24)));
      while (ptx::ld_acquire_gpu(sem) != rank) __nanosleep(64);
      ptx::fence_proxy_async_global();  // the earlier adders' sums, before this CTA's reductions
      ptx::sts64(at + 32, s);
    }
#pragma unroll
    for (int i = 0; i < kPanels; ++i) ptx::bulk_reduce_add_f32(dst + i * panel, src + i * src_step, bytes);
    ptx::tma_store_commit();
    ptx::sts32(at + 8, 0);
  }
  // Thread 0, before the tile's memory is written again: the flushed reductions have read it.
  __device__ __forceinline__ void settle() const { ptx::tma_store_wait_read(); }
  // Thread 0, ordered mode: once the flushed reductions are complete, the block's counter
  // steps to the next adder (nothing when none is waiting for it).
  __device__ __forceinline__ void release() const {
    const uint2 s = ptx::lds64(at + 32);
    if ((s.x | s.y) == 0) return;
    ptx::tma_store_wait();
    ptx::fence_proxy_async_global();
    ptx::red_release_gpu_add(reinterpret_cast<unsigned*>(uint64_t(s.x) | uint64_t(s.y) << 32), 1u);
    ptx::sts64(at + 32, make_uint2(0, 0));
  }
  // The phase of the walk's next barrier, for a dQ warpgroup that does not walk the blocks
  // itself (bwd_sm90.cuh: bwd90_dq_warpgroup): warp 0 posts it before the barrier, the dQ
  // warpgroup reads it after. Barrier i's phase is in slot i % 2, so that the post for i + 1
  // cannot overwrite it before it is read (that post may come before the reads; the one for
  // i + 2 waits on barrier i + 1, which the readers reach after reading).
  enum Phase : uint32_t { kQueryBlock = 1, kKeyBlockEnd = 2, kDone = 3 };
  // With a dQ warpgroup, beside each tile (set): its key block's walk (key block n of
  // nblocks, its query blocks, the band's offset and right edge), from which the warpgroup's
  // flush computes the tile's rank (dq_walk_rank). (Blocks of a sequence number less than 2^16.)
  __device__ __forceinline__ void set_walk(int n, int nblocks, int qb_lo, int qb_hi, int offset, int right) const {
    ptx::sts32(at + 40, uint32_t(qb_lo) | uint32_t(qb_hi) << 16);
    ptx::sts64(at + 48, make_uint2(uint32_t(n), uint32_t(nblocks)));
    ptx::sts64(at + 56, make_uint2(uint32_t(offset), uint32_t(right)));
  }
  __device__ __forceinline__ void post(uint32_t parity, Phase phase) const { ptx::sts32(at + 28 + 16 * parity, phase); }
  __device__ __forceinline__ Phase phase(uint32_t parity) const { return Phase(ptx::lds32(at + 28 + 16 * parity)); }
  // Thread 0, after the last flush of a key block: released (ordered mode), complete
  // (`complete`: deterministic slices, whose next key block adds to the same rows; bulk
  // reductions are not ordered among themselves), or read (`read`: the tile's memory is
  // written next, with no barrier's settle before it).
  __device__ __forceinline__ void finish(bool ordered, bool complete, bool read) const {
    if (ordered)
      release();
    else if (complete)
      ptx::tma_store_wait();
    else if (read)
      ptx::tma_store_wait_read();
  }
};

// The walk's step from query block mb of head h: the next block (the walk wraps at qb.hi) and
// head (the next once the walk is back at its first block, mb_first; without the ordered
// walk's cyclic start, once it passed qb.hi).
struct WalkStep {
  int h, mb;
};
template <bool kOrdered>
__device__ __forceinline__ WalkStep bwd90_next(int h, int mb, const QueryBlocks& qb, int mb_first) {
  const int mb_next = mb + 1 == qb.hi ? qb.lo : mb + 1;
  const bool last_m = kOrdered ? mb_next == mb_first : mb + 1 == qb.hi;
  return {last_m ? h + 1 : h, mb_next};
}

// Ordered mode's walk and ranks for key block n of a sequence (band, Sq) with query blocks
// [qb.lo, qb.hi) and N key blocks: where the walk starts, and the CTA's rank among the adders
// of query block mb (kernels/bwd_params.hpp: dq_order).
template <int kBlockM, int kBlockN>
struct DqOrder {
  int order, n, nblocks;  // nblocks: N
  // The first query block of the walk: cyclic order, block lo + n M / N. (32-bit arithmetic:
  // blocks of a sequence number less than 2^16.)
  __device__ __forceinline__ int first(const QueryBlocks& qb) const {
    return order == 1 ? qb.lo + n * (qb.hi - qb.lo) / nblocks : qb.lo;
  }
  __device__ __forceinline__ uint32_t rank(const Band32& band, const QueryBlocks& qb, int mb) const {
    if (order == 1) {  // the last CTA starting at or before mb: ceil((m + 1) N / M) - 1
      const int m = mb - qb.lo, blocks = qb.hi - qb.lo;
      const int last = min(nblocks - 1, ((m + 1) * nblocks + blocks - 1) / blocks - 1);
      return uint32_t((last - n + nblocks) % nblocks);
    }
    // In order: the last key block whose first query block is at or before mb (with no right
    // edge to the band, every key block's walk starts at block 0).
    if (band.right < 0) return uint32_t(nblocks - 1 - n);
    const int num = (mb + 1) * kBlockM + band.offset + band.right;
    const int last = min(nblocks - 1, (num + kBlockN - 1) / kBlockN - 1);
    return uint32_t(last - n);
  }
};

// The rank of the pending tile's CTA among the adders of query block mb, from the walk its
// key block's thread 0 recorded beside it (DqPending::set_walk).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ uint32_t dq_walk_rank(const DqPending& pend, int order, int mb) {
  const uint32_t q = ptx::lds32(pend.at + 40);
  const uint2 nn = ptx::lds64(pend.at + 48), br = ptx::lds64(pend.at + 56);
  const QueryBlocks qb{int(q & 0xffffu), int(q >> 16)};
  const Band32 band{0, int(br.y), int(br.x), 0};
  return DqOrder<kBlockM, kBlockN>{order, int(nn.x), int(nn.y)}.rank(band, qb, mb);
}

// The MMA warpgroups' CTA barriers of a bwd_sm90 kernel's key loop. With a dQ warpgroup
// (kWarp) they are barrier.sync without .aligned (it meets them from other instructions than
// theirs), and the barrier that opens a phase of its work has warp 0 post the phase first
// into the alternating slot (DqPending::post): the whole warp, so that it reaches that barrier
// converged. Without one, __syncthreads and no post.
template <bool kWarp>
struct DqBarriers {
  DqPending pend;
  int tid;
  uint32_t parity = 0;
  __device__ __forceinline__ static void sync() {
    if constexpr (kWarp)
      ptx::cta_sync_unaligned();
    else
      __syncthreads();
  }
  __device__ __forceinline__ void open(DqPending::Phase phase) {
    if constexpr (kWarp) {
      if (tid < 32) pend.post(parity, phase);
      parity ^= 1;
    }
    sync();
  }
};

// Ordered mode's dQ warpgroup (bwd_sm90.cuh, bwd_sm90_wide.cuh: kDqWarpgroup): it meets the
// MMA warpgroups at each of their barriers ((A), (B), each key block's end, with kEndBarrier
// a second one after the end's flush, and one after the last; barrier.sync without .aligned:
// from other instructions than theirs), and its first thread flushes (kPanels reductions,
// as DqPending::flush), settles and releases each query block's dQ tile. It does not walk the
// blocks: the MMA warpgroups' warp 0 posts each barrier's phase (DqPending::post), their
// thread 0 each tile's key block walk beside it (set_walk), from which the flush computes the
// tile's rank (off the MMA warps); in the few registers it has it holds no walk state.
template <int kBlockM, int kBlockN, int kPanels, bool kEndBarrier>
__device__ __forceinline__ void bwd90_dq_warpgroup(const DqPending& pend, bool dq_thread, int order, uint32_t src_step,
                                                   int64_t panel) {
  const auto as_rank = [&](int mb) { return dq_walk_rank<kBlockM, kBlockN>(pend, order, mb); };
  for (uint32_t parity = 0;; parity ^= 1) {
    ptx::cta_sync_unaligned();  // (A), a key block's end, or the last
    const DqPending::Phase phase = pend.phase(parity);
    if (phase == DqPending::kDone) break;
    if (dq_thread) pend.flush<kPanels>(src_step, panel, true, as_rank);  // (the previous block's tile)
    if (phase == DqPending::kQueryBlock) {
      if (dq_thread) pend.settle();
      ptx::cta_sync_unaligned();       // (B)
      if (dq_thread) pend.release();  // (while the MMA warpgroups compute dQ)
    } else {
      if (dq_thread) pend.finish(true, false, false);
      if constexpr (kEndBarrier) ptx::cta_sync_unaligned();
    }
  }
  if (dq_thread) ptx::tma_store_wait_read();
}

// Launches a bwd_sm90 kernel (both forms: arguments Q's and dO's TMA maps, then p) in the
// instance of p's mode: kPlain (`threads` per CTA), or kOrdered where p.dq_order > 0
// (`ordered_threads`) (grid: key CTAs x KV heads x batch entries; each instance opts in to its
// shared memory once per device). The maps are
// made here (bwd90_q_maps, kBlockM-row boxes of T); where they cannot be, the kernel loads
// every block by cp.async (BwdParams::q_tma false).
template <typename T, int kBlockM, auto kPlain, auto kOrdered>
cudaError_t launch_bwd90(const BwdParams& p, int threads, int ordered_threads, int smem, cudaStream_t stream) {
  const bool ordered = p.dq_order > 0;
  auto kernel = ordered ? kOrdered : kPlain;
  if (ordered) threads = ordered_threads;
  static std::atomic<uint64_t> smem_done[2];  // (static: zero-initialized)
  const cudaError_t e = opt_in_smem_once(kernel, smem, smem_done[ordered]);
  if (e != cudaSuccess) return e;
  CUtensorMap tm_q{}, tm_do{};
  BwdParams kp = p;
  kp.q_tma = bwd90_q_maps<T, kBlockM>(p, &tm_q, &tm_do);
  kernel<<<dim3(p.key_ctas, p.kv_heads, p.f.batch), threads, smem, stream>>>(tm_q, tm_do, kp);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
