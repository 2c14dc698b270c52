// The loads of the sm80 forward: global -> shared tiles by cp.async (parts/tile_load.cuh:
// 16 bytes per copy, rows past the sequence and columns past the head dim zero-filled), K
// and V by key block. Where a key block lives is the KV indexing policy's answer
// (ContiguousKvRows: a sequence's keys are consecutive rows; a paged cache would look its
// blocks up instead), so the load step takes "which key block" only.
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

}  // namespace flashcore::cuda::sm80
