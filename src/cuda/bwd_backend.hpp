// The CUDA backward's side of the backend's kernel listing (cuda::kernels, backend.cpp).
#pragma once

#include <vector>

#include "cuda/device.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cuda {

// Appends the backward's kernel keys (bwd_sm80_*, bwd_sm90_*), available where a device is given and
// the instance's shared memory fits it.
void append_backward_kernels(std::vector<KernelInfo>& out, const DeviceInfo* dev);

}  // namespace flashcore::cuda
