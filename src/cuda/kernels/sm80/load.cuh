// The loads of the sm80 forward: global -> shared tiles by cp.async (parts/tile_load.cuh:
// 16 bytes per copy, rows past the sequence and columns past the head dim zero-filled), K
// and V by key block. Where a key block lives is the KV indexing policy's answer
// (ContiguousKvRows: a sequence's keys are consecutive rows; CacheKvRows: a KV cache's,
// contiguous or paged, whose rows are looked up in the block table), so the load step takes
// "which key block" only.
#pragma once

#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/parts/tile_load.cuh"

namespace flashcore::cuda::sm80 {

// K and V rows of a (sequence, KV head) from its first key on, in the caller's strides.
template <typename T, int kBlockN>
struct ContiguousKvRows {
  const T *k, *v;
  int64_t k_ss, v_ss;
  __device__ __forceinline__ const T* k_block(int n) const { return k + n * kBlockN * k_ss; }
  __device__ __forceinline__ const T* v_block(int n) const { return v + n * kBlockN * v_ss; }
};

// K and V of key block n (of a sequence of sk keys) into the ring's stage at sK + stage
// tile bytes, sV + the same; d, dv: the columns that hold data.
template <int kBlockN, int kHeadDim, int kThreads, int kTileKV, typename T, class Kv>
__device__ __forceinline__ void load_kv(uint32_t sK, uint32_t sV, const Kv& kv, int n, int stage, int sk, int d, int dv,
                                        int tid) {
  const int rows = sk - n * kBlockN;
  load_tile<kBlockN, kHeadDim, kThreads>(sK + stage * kTileKV, kv.k_block(n), kv.k_ss, rows, d, tid);
  load_tile<kBlockN, kHeadDim, kThreads>(sV + stage * kTileKV, kv.v_block(n), kv.v_ss, rows, dv, tid);
}

// K and V of a (sequence, KV head) in a KV cache (attention_with_kvcache): contiguous rows
// from the sequence's first key (pages null: as ContiguousKvRows), or paged: key s at row
// s % page_size of page pages[s / page_size], page ids outside [0, num_pages) read as zeros.
template <typename T, int kBlockN>
struct CacheKvRows {
  const T *k, *v;          // contiguous: the sequence's key 0; paged: page 0 (head offset included)
  int64_t k_ss, v_ss;      // row strides (within a page when paged)
  int64_t k_ps, v_ps;      // page strides
  const int32_t* pages;    // the sequence's block-table row, or null
  int page_size, num_pages;

  __device__ __forceinline__ static CacheKvRows make(const FwdParams& p, int b, int hk) {
    const bool paged = p.block_table != nullptr;
    const int64_t kb = paged ? 0 : b * p.k_sb, vb = paged ? 0 : b * p.v_sb;
    return {static_cast<const T*>(p.k) + kb + hk * p.k_sh,
            static_cast<const T*>(p.v) + vb + hk * p.v_sh,
            p.k_ss,
            p.v_ss,
            p.k_sb,
            p.v_sb,
            paged ? p.block_table + b * p.bt_sb : nullptr,
            p.page_size,
            p.num_pages};
  }
  // Row `key` of the cache from `base` (k or v) with row stride ss and page stride ps, or
  // null for a page id out of range.
  __device__ __forceinline__ const T* row(const T* base, int64_t ss, int64_t ps, int key) const {
    const int slot = key / page_size;
    const int page = pages[slot];
    if (page < 0 || page >= num_pages) return nullptr;
    return base + page * ps + (key - slot * page_size) * ss;
  }
};

template <int kBlockN, int kHeadDim, int kThreads, int kTileKV, typename T>
__device__ __forceinline__ void load_kv(uint32_t sK, uint32_t sV, const CacheKvRows<T, kBlockN>& kv, int n, int stage,
                                        int sk, int d, int dv, int tid) {
  const int rows = sk - n * kBlockN, key0 = n * kBlockN;
  if (kv.pages == nullptr) {
    load_tile<kBlockN, kHeadDim, kThreads>(sK + stage * kTileKV, kv.k + key0 * kv.k_ss, kv.k_ss, rows, d, tid);
    load_tile<kBlockN, kHeadDim, kThreads>(sV + stage * kTileKV, kv.v + key0 * kv.v_ss, kv.v_ss, rows, dv, tid);
    return;
  }
  const auto k_row = [&](int r) { return kv.row(kv.k, kv.k_ss, kv.k_ps, key0 + r); };
  const auto v_row = [&](int r) { return kv.row(kv.v, kv.v_ss, kv.v_ps, key0 + r); };
  load_tile_rows<kBlockN, kHeadDim, kThreads>(sK + stage * kTileKV, k_row, kv.k, rows, d, tid);
  load_tile_rows<kBlockN, kHeadDim, kThreads>(sV + stage * kTileKV, v_row, kv.v, rows, dv, tid);
}

}  // namespace flashcore::cuda::sm80
