#pragma once

#include <vector>

#include "core/problem.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::api {

// attention_with_kvcache's checks (flashcore.hpp states the contract): the forward's
// (check_attention) for q, the caches, out and params, then cache_seqlens, the block table,
// k_new / v_new and the lengths and page ids they hold (CUDA tensors: only with
// cache.check_contents, copied to the host).
core::KvCacheProblem check_attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                                  const Tensor& cache_seqlens, const Tensor& out,
                                                  const KvCacheOptions& cache, const AttentionParams& params);

// merge_states' checks (the device's too: the CUDA backend then checks the pointers);
// `pair`: the two-part form (messages name out_a / out_b). The parts
// go into `parts` (the problem points at them).
core::MergeProblem check_merge_states(const Tensor* out_parts, const Tensor* lse_parts, int64_t n,
                                      const Tensor& out, const Tensor& lse, const MergeStatesParams& params,
                                      bool pair, std::vector<core::StatePart>& parts);

}  // namespace flashcore::api
