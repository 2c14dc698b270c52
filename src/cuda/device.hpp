// What the CUDA backend asks the device and the driver: the current device's facts, whether
// a pointer is memory of that device, the longest sequences of a varlen batch (cu_seqlens
// copied to the host), and CUDA errors turned into flashcore::Error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "cuda/policy.hpp"

namespace flashcore::cuda {

struct DeviceInfo : DeviceFacts {
  int id = -1;
  int l2_bytes = 0;
};

// Throws flashcore::Error(code) with `what` and the CUDA error's name and text.
[[noreturn]] void cuda_fail(Status code, const std::string& what, cudaError_t e);

// The current device; throws `unsupported` when there is none or (require_sm80) it
// predates sm80. Cached per thread for the last device seen.
DeviceInfo device_info(bool require_sm80);

// A pointer given as a Device::cuda tensor must be device (or managed) memory of the
// current device (null passes); throws invalid_argument naming `name` otherwise.
void check_device_pointer(const void* ptr, const char* name, int device);
// q, k, v, out, lse and the cu_seqlens of a problem.
void check_pointers(const core::AttentionProblem& p, const DeviceInfo& dev);

// The longest sequences: Sq and Sk, or for varlen batches the caller's bounds or the
// longest in cu_seqlens copied to the host and checked (the copy synchronizes the stream).
void longest_sequences(const core::AttentionProblem& p, int64_t* sq, int64_t* sk);

}  // namespace flashcore::cuda
