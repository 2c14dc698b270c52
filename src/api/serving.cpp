// attention_with_kvcache and merge_states: check, then the backend of the tensors' device.
#include <vector>

#include "api/checks_serving.hpp"
#include "core/errors.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "flashcore/flashcore.hpp"
#if defined(FC_BUILD_CUDA)
#include "cuda/backend.hpp"
#endif

namespace flashcore {

void attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const Tensor& cache_seqlens, const Tensor& out, const KvCacheOptions& cache,
                            const AttentionParams& params, PhaseTimes* times) {
  const core::KvCacheProblem p =
      api::check_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, out, cache, params);
  if (p.attn.device == Device::cuda) {
#if defined(FC_BUILD_CUDA)
    cuda::attention_with_kvcache(p, times);
    return;
#else
    throw_error(Status::unsupported, "q: CUDA tensors given, but this flashcore was built without CUDA");
#endif
  }
  cpu::attention_with_kvcache(p, times);
}

namespace {

void run_merge(const core::MergeProblem& p) {
  if (p.device == Device::cuda) {
#if defined(FC_BUILD_CUDA)
    cuda::merge_states(p);
    return;
#else
    throw_error(Status::unsupported, "out: CUDA tensors given, but this flashcore was built without CUDA");
#endif
  }
  cpu::merge_states(p);
}

}  // namespace

void merge_states(const Tensor* out_parts, const Tensor* lse_parts, int64_t n, const Tensor& out,
                  const Tensor& lse, const MergeStatesParams& params) {
  std::vector<core::StatePart> parts;
  run_merge(api::check_merge_states(out_parts, lse_parts, n, out, lse, params, false, parts));
}

void merge_states(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b,
                  const Tensor& out, const Tensor& lse, const MergeStatesParams& params) {
  const Tensor outs[] = {out_a, out_b}, lses[] = {lse_a, lse_b};
  std::vector<core::StatePart> parts;
  run_merge(api::check_merge_states(outs, lses, 2, out, lse, params, true, parts));
}

}  // namespace flashcore
