// Device queries and device-side checks of the CUDA backend (device.hpp).
#include "cuda/device.hpp"

#include <vector>

#include "core/cu_seqlens.hpp"
#include "core/errors.hpp"

namespace flashcore::cuda {

void cuda_fail(Status code, const std::string& what, cudaError_t e) {
  throw_error(code, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// The attributes are cached per thread for the last device seen (short shapes would pay
// microseconds per call for the queries).
DeviceInfo device_info(bool require_sm80) {
  thread_local DeviceInfo cached;
  DeviceInfo d;
  cudaError_t e = cudaGetDevice(&d.id);
  if (e == cudaSuccess && cached.id == d.id) {
    d = cached;
  } else {
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, d.id);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, d.id);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.id);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, d.id);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.l2_bytes, cudaDevAttrL2CacheSize, d.id);
    if (e == cudaSuccess) cached = d;
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    cuda_fail(Status::unsupported, "q: CUDA tensors given, but no usable CUDA device", e);
  }
  if (require_sm80 && d.major < 8)
    throw_error(Status::unsupported, "q: the CUDA kernels need compute capability >= 8.0 (Ampere); device " +
                                         std::to_string(d.id) + " is sm" + std::to_string(d.major) +
                                         std::to_string(d.minor));
  return d;
}

// A host pointer would fault inside the kernel instead of failing here.
void check_device_pointer(const void* ptr, const char* name, int device) {
  if (ptr == nullptr) return;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear: this call's failure is not sticky
    cuda_fail(Status::invalid_argument, std::string(name) + ": cannot query the pointer", e);
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw_error(Status::invalid_argument,
                std::string(name) + ": is not device memory (a host pointer was given for a Device::cuda tensor)");
  if (a.device != device)
    throw_error(Status::invalid_argument, std::string(name) + ": lives on device " + std::to_string(a.device) +
                                              " but the current device is " + std::to_string(device));
}

void check_pointers(const core::AttentionProblem& p, const DeviceInfo& dev) {
  const char* names[] = {"q", "k", "v", "out"};
  const void* ptrs[] = {p.q.data, p.k.data, p.v.data, p.o};
  for (int i = 0; i < 4; ++i) check_device_pointer(ptrs[i], names[i], dev.id);
  check_device_pointer(p.lse, "params.lse", dev.id);
  check_device_pointer(p.cu_q, "params.cu_seqlens_q", dev.id);
  check_device_pointer(p.cu_k, "params.cu_seqlens_k", dev.id);
}

namespace {

// Device-resident cu_seqlens: copy to the host (on the caller's stream) and check.
int64_t varlen_max(const int32_t* cu, int64_t batch, int64_t total, const char* name, cudaStream_t stream) {
  std::vector<int32_t> host(size_t(batch) + 1);
  cudaError_t e = cudaMemcpyAsync(host.data(), cu, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string(name) + ": copying to the host failed", e);
  int64_t max_len = 0;
  core::check_cu_seqlens(host.data(), batch, total, name, &max_len);
  return max_len;
}

}  // namespace

void longest_sequences(const core::AttentionProblem& p, int64_t* sq, int64_t* sk) {
  *sq = p.sq;
  *sk = p.sk;
  if (p.cu_q != nullptr && p.max_sq > 0) {
    *sq = p.max_sq;
    *sk = p.max_sk;
  } else if (p.cu_q != nullptr) {
    cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
    *sq = varlen_max(p.cu_q, p.batch, p.sq, "params.cu_seqlens_q", stream);
    *sk = varlen_max(p.cu_k, p.batch, p.sk, "params.cu_seqlens_k", stream);
  }
}

}  // namespace flashcore::cuda
