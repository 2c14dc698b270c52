// The CPU backward of attention (backward.cpp): FlashAttention-2's recomputation, written
// against the forward's GEMM micro-kernel table (cpu/ukernels, cpu/dispatch).
#pragma once

#include "core/backward_problem.hpp"

namespace flashcore::cpu {

// Writes every element of p.dq, p.dk and p.dv. Throws flashcore::Error for a kernel that
// `impl` forces and the backward cannot use (one that sums in fp16).
void attention_backward(const core::AttentionBackwardProblem& p);

}  // namespace flashcore::cpu
