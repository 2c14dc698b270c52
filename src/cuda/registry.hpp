// The CUDA forward instances of this build: the fwd rows of src/cuda/instances.inc that the
// configure step enabled (sources.cmake writes them to instances_fwd.inc; the kvc rows of
// attention_with_kvcache to instances_kvc.inc), each with its facts for
// the policy (InstanceInfo) and its launcher (one generated translation unit per row), and
// the kernels outside the table (the exact FFMA kernel, the fp8 V^T pre-pass, the KV-split
// combine).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/policy.hpp"

namespace flashcore::cuda {

using LaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

// This build's instances, in table order (= preference within a dtype and head dim).
InstanceList instances();
// The instance with this key, or null.
const InstanceInfo* find_key(const char* key);
// The launcher of an instance of instances() or of kvcache_instances().
LaunchFn launcher(const InstanceInfo& i);
// attention_with_kvcache's instances (the kvc rows, kernels/kvc_sm80.cuh), in table order.
InstanceList kvcache_instances();

// The exact fp32 FFMA kernel (any head dim up to 256; no tensor cores) and its key.
inline constexpr const char* kSimtKey = "fwd_sm80_f32_hd256_simt";
cudaError_t fwd_sm80_f32_hd256_simt(const FwdParams&, cudaStream_t);
// The fp8 V^T pre-pass (vt_fp8.cu) and the KV-split combine (kv_combine.cu).
cudaError_t transpose_v_fp8(const FwdParams&, void* vt, int64_t sk_pad, cudaStream_t);
cudaError_t kv_combine(const FwdParams&, bool bf16, cudaStream_t);

}  // namespace flashcore::cuda
