// What the CUDA backend's GPU tests share: whether a GPU (sm80+, or sm90) can run them, the
// skip macros that say why not, device copies of host tensors, and the kernel keys of this
// build by prefix. Header-only (inline).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace fctest {

// Empty when an sm80+ GPU is usable, else why not.
inline std::string gpu_missing() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device";
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 8) return "CUDA device is older than sm80";
  return {};
}

// Empty when the device runs the sm90 kernels (compute capability 9.0), else why not.
inline std::string sm90_missing() {
  std::string why = gpu_missing();
  if (!why.empty()) return why;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0) return "device is sm" + std::to_string(major) + std::to_string(minor) + ", not sm90";
  return {};
}

#define FC_REQUIRE_GPU()                                                \
  do {                                                                  \
    const std::string why = fctest::gpu_missing();                      \
    if (!why.empty()) { GTEST_SKIP() << why << ": CUDA test skipped"; } \
  } while (0)

#define FC_REQUIRE_SM90()                                               \
  do {                                                                  \
    const std::string why = fctest::sm90_missing();                     \
    if (!why.empty()) { GTEST_SKIP() << why << ": sm90 test skipped"; } \
  } while (0)

// Device copy of a host tensor's whole storage (padding included), with the same view.
class DevTensor {
 public:
  explicit DevTensor(const HostTensor& h) : bytes_(h.bytes()) {
    if (bytes_ > 0) {  // (an empty tensor stays null)
      EXPECT_EQ(cudaMalloc(&base_, bytes_), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(base_, h.raw(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
    view_ = h.view();
    view_.device = flashcore::Device::cuda;
    view_.data = static_cast<uint8_t*>(base_) + (static_cast<const uint8_t*>(h.view().data) - h.raw());
  }
  ~DevTensor() { cudaFree(base_); }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  flashcore::Tensor& view() { return view_; }
  // Copies the device storage back into h (same layout).
  void download(HostTensor& h) const {
    if (bytes_ > 0) {
      ASSERT_EQ(cudaMemcpy(const_cast<uint8_t*>(h.raw()), base_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
  flashcore::Tensor view_;
};

// The kernel keys of this build that start with `prefix` (which ends in "_hd"), each with
// the head dim that follows it, in table order (the first of a head dim is the
// dispatcher's choice); only those available on this device when asked, only head dim
// `hd` when it is not 0.
inline std::vector<std::pair<std::string, int64_t>> keys_by_prefix(const std::string& prefix, bool available_only,
                                                                  int64_t hd = 0) {
  std::vector<flashcore::KernelInfo> ks(256);
  ks.resize(size_t(flashcore::list_kernels(ks.data(), int(ks.size()))));
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& k : ks)
    if (k.key.rfind(prefix, 0) == 0 && (k.available || !available_only)) {
      const int64_t d = std::stoll(k.key.substr(prefix.size()));
      if (hd == 0 || d == hd) out.emplace_back(k.key, d);
    }
  return out;
}

// Runs call(stream) captured into a CUDA graph on a stream of its own, replays the graph
// once and waits for it (a call that synchronizes the stream fails the capture).
template <class F>
inline void run_captured(F&& call) {
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  call(st);
  ASSERT_EQ(cudaStreamEndCapture(st, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ge, st), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(st);
}

inline bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace fctest
