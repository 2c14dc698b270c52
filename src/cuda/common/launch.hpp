// Launch helpers shared by the kernel families' launchers (host code).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flashcore::cuda {

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
