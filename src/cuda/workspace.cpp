// The CUDA backend's workspace pool (workspace.hpp).
#include "cuda/workspace.hpp"

#include <cstdint>
#include <mutex>
#include <vector>

#include "cuda/device.hpp"

namespace flashcore::cuda {

cudaMemPool_t workspace_pool(int device) {
  static std::mutex mu;
  static std::vector<cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mu);
  if (int(pools.size()) <= device) pools.resize(size_t(device) + 1, nullptr);
  if (pools[size_t(device)] == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    // The first call may come while the caller's stream is being captured into a CUDA graph,
    // where creating a pool is refused unless this thread's capture mode is relaxed.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMemPoolCreate(&pool, &props);
    uint64_t keep = UINT64_MAX;
    if (e == cudaSuccess) e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) cuda_fail(Status::device_error, "q: creating the CUDA workspace pool failed", e);
    pools[size_t(device)] = pool;
  }
  return pools[size_t(device)];
}

}  // namespace flashcore::cuda
