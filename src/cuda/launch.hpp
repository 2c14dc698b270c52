// The launches of one CUDA attention call: the kernels' parameters from a checked problem,
// then on the caller's stream the fp8 V^T pre-pass (or the counters of the kernels that make
// V^T themselves), the chosen instance, and the combine after KV splits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.hpp"
#include "flashcore/flashcore.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/policy.hpp"

namespace flashcore::cuda {

// The kernels' parameters for a checked problem (sq, sk: the longest sequences).
FwdParams fwd_params(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceInfo& dev);

// Names the kernel that runs in times (when given): its key, "+gqa<G>" for packed query
// heads, "+kv<N>" for KV splits, "+chord" for an fp8 kernel's chord form.
void name_kernel(PhaseTimes* times, const char* key, const FwdParams& f);

// Runs `inst` (an instance of registry.hpp's instances()) with f (f.kv_splits, f.pack_shift
// and the dtype's fields set) and whatever it needs before and after; the workspace goes back
// to the pool in stream order whatever launched. Throws device_error naming the launch that
// failed.
void launch(const core::AttentionProblem& p, const DeviceInfo& dev, const InstanceInfo& inst, FwdParams& f,
            cudaStream_t stream);

}  // namespace flashcore::cuda
