#pragma once

#include "core/backward_problem.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::api {

// attention_backward's checks (flashcore.hpp states the contract); the fp64 reference runs
// the same ones.
core::AttentionBackwardProblem check_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& dout, const Tensor& lse,
                                                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                                        const AttentionParams& params);

}  // namespace flashcore::api
