// Device-independent checks of the CUDA kernels' limits (problem_checks.hpp).
#include "cuda/problem_checks.hpp"

#include <algorithm>
#include <climits>

#include "core/errors.hpp"

namespace flashcore::cuda {

const char* score_variant_name(const core::AttentionProblem& p) {
  return p.softcap > 0.0f ? "params.softcap" : p.alibi ? "params.alibi_slopes" : p.sinks ? "params.sinks" : nullptr;
}

void refuse_score_variants(const core::AttentionProblem& p, const char* kernels) {
  if (const char* variant = score_variant_name(p); variant != nullptr)
    throw_error(Status::unsupported, std::string(variant) + ": the score variants (softcap, alibi_slopes, sinks) are not in " +
                                         kernels + " yet (the sm80 forward kernels and the CPU backend take them)");
}

void check_kernel_limits(const core::AttentionProblem& p) {
  if (p.heads > 65535 || p.batch > 65535)
    throw_error(Status::unsupported, "q: B = " + std::to_string(p.batch) + ", H = " + std::to_string(p.heads) +
                                         ": the CUDA kernels take at most 65535 of each");
  if (p.sq > INT_MAX / 2 || p.sk > INT_MAX / 2)
    throw_error(Status::unsupported, "q: sequence lengths above 2^30 are not supported by the CUDA kernels");
}

std::string misalignment(const void* ptr, int64_t bytes, int64_t elem_size, Strides strides) {
  const int64_t elems = std::max<int64_t>(bytes / elem_size, 1);
  if (reinterpret_cast<uintptr_t>(ptr) % uintptr_t(bytes) != 0)
    return "data pointer must be " + std::to_string(bytes) + "-byte aligned for the CUDA kernels";
  for (const auto& [stride, extent] : strides)
    if (extent > 1 && stride % elems != 0)
      return "stride " + std::to_string(stride) + " is not a multiple of " + std::to_string(elems) +
             " elements (rows must be " + std::to_string(bytes) + "-byte aligned for the CUDA kernels)";
  return {};
}

}  // namespace flashcore::cuda
