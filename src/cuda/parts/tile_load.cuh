// Global -> shared tile copies of the sm80 mainloop: `kRows` rows of the head dim, 16
// bytes per cp.async, rows past `rows` and columns past `cols` zero-filled (so padded
// head dims and sequence tails feed zeros, never stale shared memory, to the MMAs).
#pragma once

#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"

namespace flashcore::cuda {

template <int kRows, int kHeadDim, int kThreads, typename T>
__device__ __forceinline__ void load_tile(uint32_t smem, const T* gmem, int64_t row_stride,
                                          int rows, int cols, int tid) {
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kTotal = kRows * kChunks;
#pragma unroll
  for (int i0 = 0; i0 < kTotal; i0 += kThreads) {
    const int i = i0 + tid;
    if (kTotal % kThreads == 0 || i < kTotal) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const bool ok = r < rows && c < cols;
      const T* src = ok ? gmem + r * row_stride + c : gmem;
      ptx::cp_async_16(smem + SwizzledTile<kHeadDim>::offset(r, c), src, ok);
    }
  }
}

}  // namespace flashcore::cuda
