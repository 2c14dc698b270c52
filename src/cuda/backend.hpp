// The CUDA backend's entry points, called by src/api for Device::cuda tensors. Defined
// in src/cuda when the build has CUDA (FC_BUILD_CUDA); kernels know nothing of the API.
#pragma once

#include <string>
#include <vector>

#include "core/backward_problem.hpp"
#include "core/problem.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cuda {

// Runs attention on device tensors; throws flashcore::Error (unsupported arch/head dim,
// host pointers, launch failures) before or instead of writing a wrong result.
void attention(const core::AttentionProblem& p, PhaseTimes* times);

// attention_with_kvcache on device tensors (kvcache_host.cpp; f16 / bf16, contiguous or
// paged caches, the append first): throws flashcore::Error before launching anything when
// the problem cannot run, or when a launch fails. cache_seqlens and block_table are not read
// on the host.
void attention_with_kvcache(const core::KvCacheProblem& p, PhaseTimes* times);

// Copies `rows` rows of `row_bytes` bytes, `pitch` bytes apart in device memory, into host
// memory (dst, rows packed) on `stream` and waits for them; throws device_error naming `name`.
void copy_rows_to_host(void* dst, const void* src, int64_t rows, int64_t row_bytes, int64_t pitch, void* stream,
                       const char* name);

// The gradients of attention on device tensors (bwd_backend.cpp; f16 / bf16): throws
// flashcore::Error before launching anything when the problem cannot run, or when a
// launch fails.
void attention_backward(const core::AttentionBackwardProblem& p);

// merge_states on device tensors (merge_states.cu); throws flashcore::Error (more parts than
// one launch takes, host pointers, launch failures).
void merge_states(const core::MergeProblem& p);

// Kernel keys compiled into this build, with whether the current device can run them.
std::vector<KernelInfo> kernels();

}  // namespace flashcore::cuda
