// The CPU strategies (two_pass, three_pass, online), written once against the
// micro-kernel interface. Entry points take checked problems from src/api.
#pragma once

#include "core/problem.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cpu {

void attention(const core::AttentionProblem& p, PhaseTimes* times);
void softmax_v(const core::SoftmaxVProblem& p, PhaseTimes* times);
void gemm_chain(const core::GemmChainProblem& p, PhaseTimes* times);

// What `automatic` resolves to for a problem of this shape (shown by flashcore-bench).
Strategy choose_strategy(int64_t sq, int64_t sk, int64_t d, DType storage);

}  // namespace flashcore::cpu
