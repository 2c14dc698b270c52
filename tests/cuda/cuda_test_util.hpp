// Helpers of the CUDA test binaries: whether a usable GPU is present (tests skip with the
// reason when not: CI has none), and device copies of host tensors.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "common/test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

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

#define FC_REQUIRE_GPU()                                 \
  do {                                                   \
    const std::string why = gpu_missing();               \
    if (!why.empty()) { GTEST_SKIP() << why << ": CUDA test skipped"; } \
  } while (0)

// Device copy of a host tensor's whole storage (padding included), with the same view.
class DevTensor {
 public:
  explicit DevTensor(const fctest::HostTensor& h) : bytes_(h.bytes()) {
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
  void download(fctest::HostTensor& h) const {
    if (bytes_ > 0) {
      ASSERT_EQ(cudaMemcpy(const_cast<uint8_t*>(h.raw()), base_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
  flashcore::Tensor view_;
};

}  // namespace
