// Launch helpers shared by the kernel families' launchers (host code).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flashcore::cuda {

// Threads per row of the row-wise helper kernels (bwd_aux.cu, head_pad.cu), which give a
// row n pieces, one per lane: the smallest power of two >= n within [1, 32], so that a
// row's lanes stay in one warp and a warp holds whole rows.
constexpr int row_lanes(int64_t n) {
  int l = 1;
  while (l < n && l < 32) l *= 2;
  return l;
}

// Opts `kernel` in to `bytes` of dynamic shared memory (> 48 KiB needs it) once per device
// (bit d of `done`, one per kernel): the call costs microseconds, which short shapes
// would pay on every launch.
template <typename Kernel>
cudaError_t opt_in_smem_once(Kernel kernel, int bytes, std::atomic<uint64_t>& done) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (bit == 0 || (done.load(std::memory_order_relaxed) & bit) == 0) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return e;
    done.fetch_or(bit, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

}  // namespace flashcore::cuda
