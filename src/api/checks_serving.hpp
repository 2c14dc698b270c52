#pragma once

#include <vector>

#include "core/problem.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::api {

// merge_states' checks; `pair`: the two-part form (messages name out_a / out_b). The parts
// go into `parts` (the problem points at them).
core::MergeProblem check_merge_states(const Tensor* out_parts, const Tensor* lse_parts, int64_t n,
                                      const Tensor& out, const Tensor& lse, const MergeStatesParams& params,
                                      bool pair, std::vector<core::StatePart>& parts);

}  // namespace flashcore::api
