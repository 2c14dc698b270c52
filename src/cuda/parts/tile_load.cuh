// Global -> shared tile copies of the sm80 mainloop: `kRows` rows of the head dim, 16
// bytes per cp.async, rows past `rows` (and, kRowLo, before `row_lo`) and columns past `cols`
// zero-filled (so padded head dims and sequence tails feed zeros, never stale shared
// memory, to the MMAs; `cols` is a multiple of the 16-byte chunk's elements, checked on the
// host).
// Each thread copies one fixed 16-byte column chunk of every kThreads / kChunks-th row,
// so the addresses advance by constants (no per-chunk division or 64-bit multiply).
#pragma once

#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"

namespace flashcore::cuda {

template <int kRows, int kHeadDim, int kThreads, bool kRowLo = false, typename T>
__device__ __forceinline__ void load_tile(uint32_t smem, const T* gmem, int64_t row_stride,
                                          int rows, int cols, int tid, int row_lo = 0) {
  using Tile = SwizzledTile<kHeadDim, T>;
  constexpr int kChunks = Tile::kChunks, kE = Tile::kElemsPerChunk;
  // Rows per pass where every thread keeps one chunk (else 0), and the passes after which a
  // thread's chunk's swizzle (row % 8) repeats: 8 / gcd(8, kStep).
  constexpr int kStep = kThreads % kChunks == 0 ? kThreads / kChunks : 0;
  constexpr int kCycle = kStep == 0 ? 0 : kStep % 8 == 0 ? 1 : kStep % 4 == 0 ? 2 : kStep % 2 == 0 ? 4 : 8;
  if constexpr (kCycle > 0) {
    // A thread's rows are kStep apart, so its chunk's swizzle repeats every kCycle passes:
    // kCycle destination bases, then whole 8-row groups (same swizzle) added.
    const int chunk = tid % kChunks;
    const int c = chunk * kE;
    const int r0 = tid / kChunks;
    const T* src = gmem + r0 * row_stride + c;
    uint32_t dst[kCycle];
#pragma unroll
    for (int q = 0; q < kCycle; ++q) dst[q] = smem + Tile::offset(r0 + q * kStep, chunk);
    const int64_t src_step = kStep * row_stride;
#pragma unroll
    for (int pass = 0; pass < (kRows + kStep - 1) / kStep; ++pass) {
      const int r = r0 + pass * kStep;
      if (kRows % kStep == 0 || r < kRows) {
        const bool ok = (!kRowLo || r >= row_lo) && r < rows && c < cols;
        const uint32_t at = dst[pass % kCycle] + (pass / kCycle) * kCycle * kStep * Tile::kRowBytes;
        ptx::cp_async_16(at, ok ? src + pass * src_step : gmem, ok);
      }
    }
  } else {
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int i0 = 0; i0 < kTotal; i0 += kThreads) {
      const int i = i0 + tid;
      if (kTotal % kThreads == 0 || i < kTotal) {
        const int r = i / kChunks, chunk = i % kChunks, c = chunk * kE;
        const bool ok = (!kRowLo || r >= row_lo) && r < rows && c < cols;
        const T* src = ok ? gmem + r * row_stride + c : gmem;
        ptx::cp_async_16(smem + Tile::offset(r, chunk), src, ok);
      }
    }
  }
}

// load_tile for rows that are not a fixed stride apart (a paged KV cache): row r of the
// tile starts at row_ptr(r), or is zero-filled where row_ptr gives null (a row past `rows`
// is not asked for). `any`: a valid global address for the copies that read nothing.
template <int kRows, int kHeadDim, int kThreads, typename T, class RowPtr>
__device__ __forceinline__ void load_tile_rows(uint32_t smem, const RowPtr& row_ptr, const T* any, int rows, int cols,
                                               int tid) {
  using Tile = SwizzledTile<kHeadDim, T>;
  constexpr int kChunks = Tile::kChunks, kE = Tile::kElemsPerChunk, kTotal = kRows * kChunks;
#pragma unroll
  for (int i0 = 0; i0 < kTotal; i0 += kThreads) {
    const int i = i0 + tid;
    if (kTotal % kThreads == 0 || i < kTotal) {
      const int r = i / kChunks, chunk = i % kChunks, c = chunk * kE;
      const T* row = r < rows && c < cols ? row_ptr(r) : nullptr;
      ptx::cp_async_16(smem + Tile::offset(r, chunk), row != nullptr ? row + c : any, row != nullptr);
    }
  }
}

}  // namespace flashcore::cuda
