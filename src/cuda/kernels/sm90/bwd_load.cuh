// The sm90 backward's tile loads: rows of the head dim from global memory into 128-byte
// column blocks of [rows][128 bytes] in the 128-byte swizzle (16-byte chunk c of row r at
// c ^ (r % 8)), the layout wgmma's SW128 descriptors read (K of the hd64 two-warpgroup row:
// 64-byte column blocks in the 64-byte swizzle, SW64): by cp.async (rows past the
// sequence and columns past the head dim zero-filled, never read), or a whole query block's
// Q and dO by TMA (columns past the head dim zero-filled by the map's bounds).
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/tma_host.hpp"
#include "cuda/kernels/bwd_params.hpp"

namespace flashcore::cuda {

// kRows rows of kHeadDim elements (row stride `stride`) into column blocks at `smem` in the
// kSw-byte swizzle (128 or 64: a column block's rows are kSw bytes, and 16-byte chunk c of row
// r sits at c ^ ((r kSw / 128) % (kSw / 16)), as wgmma's SW128 / SW64 descriptors read it):
// column block c at (c / kGroup) kGroupStride + (c % kGroup) kRows kSw bytes (by default one
// run of blocks; the wide backward interleaves groups of them, bwd_sm90_wide.cuh); rows past
// `rows` and chunks past `cols` zero-filled. Each thread copies one fixed chunk of every
// kThreads / kChunks-th row (a multiple of 8: the swizzle of its chunk is the same in every
// pass).
template <int kSw, int kRows, int kHeadDim, int kThreads, int kGroup = (1 << 20), int kGroupStride = 0, typename T>
__device__ __forceinline__ void load_tile_sw(uint32_t smem, const T* g, int64_t stride, int rows, int cols, int tid) {
  static_assert(kSw == 128 || kSw == 64, "the 128- or 64-byte swizzle");
  constexpr int kE = 16 / int(sizeof(T)), kChunks = kHeadDim / kE, kStep = kThreads / kChunks;
  constexpr int kRowChunks = kSw / 16;  // chunks per row of a column block
  static_assert(kThreads % kChunks == 0 && kStep % 8 == 0 && kRows % kStep == 0, "fixed chunk per thread");
  const int ch = tid % kChunks, r0 = tid / kChunks, c = ch * kE, cb = ch / kRowChunks;
  const uint32_t dst = smem + (cb / kGroup) * kGroupStride + (cb % kGroup) * (kRows * kSw) + r0 * kSw +
                       (((ch % kRowChunks) ^ ((r0 * kSw / 128) % kRowChunks)) * 16);
  const T* src = g + r0 * stride + c;
#pragma unroll
  for (int pass = 0; pass < kRows / kStep; ++pass) {
    const int r = r0 + pass * kStep;
    const bool ok = r < rows && c < cols;
    ptx::cp_async_16(dst + pass * kStep * kSw, ok ? src + pass * kStep * stride : g, ok);
  }
}

// K and V of key block n0 of a (sequence, KV head) into their tiles (kBlockN rows, column
// blocks of kBlockN x 128 bytes; K's of kBlockN x 64 bytes in the 64-byte swizzle where
// kKSw64), by kThreads threads.
template <int kBlockN, int kHeadDim, int kThreads, typename T, bool kKSw64 = false>
__device__ __forceinline__ void bwd90_load_kv(const BwdParams& p, const SeqInfo& seq, int hk, int n0, uint32_t k_tile,
                                              uint32_t v_tile, int tid) {
  const int64_t row = seq.k_row0 + n0;
  const T* gk = static_cast<const T*>(p.f.k) + seq.bb * p.f.k_sb + row * p.f.k_ss + hk * p.f.k_sh;
  const T* gv = static_cast<const T*>(p.f.v) + seq.bb * p.f.v_sb + row * p.f.v_ss + hk * p.f.v_sh;
  load_tile_sw<kKSw64 ? 64 : 128, kBlockN, kHeadDim, kThreads>(k_tile, gk, p.f.k_ss, seq.sk - n0, p.f.d, tid);
  load_tile_sw<128, kBlockN, kHeadDim, kThreads>(v_tile, gv, p.f.v_ss, seq.sk - n0, p.f.dv, tid);
}

// Q's and dO's TMA maps for bwd90_load_q_tma: [batch entries][rows][heads][head dim] (varlen:
// one entry of the packed rows), boxes of kBlockM rows x 128 bytes. With Dv = 0 dO is never
// read (V's tile is all zeros): its map is Q's. False where a map cannot be made (an extent
// of zero: no whole query block exists, or D = 0): the kernel then loads by cp.async.
template <typename T, int kBlockM>
bool bwd90_q_maps(const BwdParams& p, CUtensorMap* tm_q, CUtensorMap* tm_do) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if (p.f.d <= 0 || p.rows_q <= 0 || p.f.heads <= 0 || p.nb <= 0) return false;
  if (make_tma_16bit_4d(tm_q, kBf16, p.f.q, p.f.d, p.rows_q, p.f.heads, p.nb, p.f.q_ss, p.f.q_sh, p.f.q_sb,
                        kBlockM) != cudaSuccess)
    return false;
  if (p.f.dv <= 0) {
    *tm_do = *tm_q;
    return true;
  }
  return make_tma_16bit_4d(tm_do, kBf16, p.dout, p.f.dv, p.rows_q, p.f.heads, p.nb, p.do_ss, p.do_sh, p.do_sb,
                           kBlockM) == cudaSuccess;
}

// The query stages' mbarriers (one per stage at `bar` + 8 st, each completed once per use of
// its stage: by the TMA loads' bytes or, for a cut block, thread 0's plain arrival) and the
// parity each thread waits for next.
template <int kStages>
struct QStageBars {
  uint32_t bar;
  uint32_t phase = 0;  // bit st: the parity of stage st's next completion

  // Thread 0, before a barrier that precedes every wait.
  __device__ __forceinline__ void init() const {
    for (int st = 0; st < kStages; ++st) ptx::mbar_init(bar + 8 * st, 1);
    ptx::mbar_init_fence();
  }
  __device__ __forceinline__ uint32_t at(int st) const { return bar + 8 * st; }
  // Every thread: until stage st's tiles have landed.
  __device__ __forceinline__ void wait(int st) {
    ptx::mbar_wait(at(st), (phase >> st) & 1u);
    phase ^= 1u << st;
  }
};

// Thread 0: Q's and dO's tiles of the kBlockM rows from packed row `row` of head h (batch
// entry bb) into their column blocks at q_tile, do_tile (column block c at (c / kGroup)
// kGroupStride + (c % kGroup) kBlockM 128 bytes, as load_tile_sw<128> places them), counted on
// mbarrier `bar` (the bytes expected first, by the arrival that the phase waits for).
template <class Tr, int kGroup = (1 << 20), int kGroupStride = 0>
__device__ __forceinline__ void bwd90_load_q_tma(const CUtensorMap* tm_q, const CUtensorMap* tm_do, uint32_t q_tile,
                                                 uint32_t do_tile, uint32_t bar, int row, int h, int bb) {
  ptx::mbar_arrive_expect_tx(bar, 2 * Tr::kColBlocks * Tr::kBlockM * 128);
#pragma unroll
  for (int cb = 0; cb < Tr::kColBlocks; ++cb) {
    const uint32_t off = (cb / kGroup) * kGroupStride + (cb % kGroup) * Tr::kBlockM * 128;
    ptx::tma_load_4d(q_tile + off, tm_q, bar, cb * Tr::kColElems, row, h, bb);
    ptx::tma_load_4d(do_tile + off, tm_do, bar, cb * Tr::kColElems, row, h, bb);
  }
}

// Q, dO and the row stats of query block m0 of head h into a stage (Q's and dO's column blocks
// at q_tile, do_tile placed as in bwd90_load_q_tma, the stats' kBlockM float2 at stat), by
// Tr::kThreads threads: Q and dO by TMA for a whole block where p.q_tma, else by cp.async
// with the rows past the sequence zero-filled (a sequence's cut last block: no row of the
// next sequence meets a masked P^T = 0), thread 0 then completing the stage's barrier phase
// `bar` by a plain arrival; the stats by cp.async (one commit group).
template <class Tr, typename T, int kGroup = (1 << 20), int kGroupStride = 0>
__device__ __forceinline__ void bwd90_load_q(const BwdParams& p, const SeqInfo& seq, const CUtensorMap* tm_q,
                                             const CUtensorMap* tm_do, uint32_t q_tile, uint32_t do_tile,
                                             uint32_t stat, uint32_t bar, int h, int m0, int tid) {
  constexpr int kBlockM = Tr::kBlockM;
  const int64_t row = seq.q_row0 + m0;
  const int rows = seq.sq - m0;
  if (rows >= kBlockM && p.q_tma) {
    if (tid == 0) bwd90_load_q_tma<Tr, kGroup, kGroupStride>(tm_q, tm_do, q_tile, do_tile, bar, int(row), h, seq.bb);
  } else {
    const T* gq = static_cast<const T*>(p.f.q) + seq.bb * p.f.q_sb + row * p.f.q_ss + h * p.f.q_sh;
    const T* gdo = static_cast<const T*>(p.dout) + seq.bb * p.do_sb + row * p.do_ss + h * p.do_sh;
    load_tile_sw<128, kBlockM, Tr::kHeadDim, Tr::kThreads, kGroup, kGroupStride>(q_tile, gq, p.f.q_ss, rows,
                                                                                   p.f.d, tid);
    load_tile_sw<128, kBlockM, Tr::kHeadDim, Tr::kThreads, kGroup, kGroupStride>(do_tile, gdo, p.do_ss, rows,
                                                                                   p.f.dv, tid);
    if (tid == 0) ptx::mbar_arrive(bar);
  }
  if (tid < kBlockM) {
    const bool ok = m0 + tid < seq.sq;
    const float2* src = ok ? p.rowstat + (seq.bb * p.f.heads + h) * p.rows_q + row + tid : p.rowstat;
    ptx::cp_async_8(stat + tid * 8, src, ok);
  }
  ptx::cp_async_commit();
}

}  // namespace flashcore::cuda
