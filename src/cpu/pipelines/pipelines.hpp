// The CPU strategies (two_pass, three_pass, online), written once against the
// micro-kernel interface. Entry points take checked problems from src/api.
#pragma once

#include <memory>

#include "core/problem.hpp"
#include "cpu/pipelines/packed.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cpu {

void attention(const core::AttentionProblem& p, PhaseTimes* times);
// k_new / v_new written into the cache, then attention over it (kvcache.cpp).
void attention_with_kvcache(const core::KvCacheProblem& p, PhaseTimes* times);
// The parts merged row by row (merge_states.cpp).
void merge_states(const core::MergeProblem& p);
// `packed` (or null): V, or B and C, packed by the functions below; the problem's own
// v / b / c pointers are then not read. Null packs them on the way, as part of the call.
void softmax_v(const core::SoftmaxVProblem& p, const PackedOperands::State* packed,
               PhaseTimes* times);
void gemm_chain(const core::GemmChainProblem& p, const PackedOperands::State* packed,
                PhaseTimes* times);

// The operands of a checked problem packed for the kernel that p.dtype / p.impl select
// (the rows, queries and outputs of the problem are not read).
std::shared_ptr<const PackedOperands::State> pack_softmax_v(const core::SoftmaxVProblem& p);
std::shared_ptr<const PackedOperands::State> pack_gemm_chain(const core::GemmChainProblem& p);

// What `automatic` resolves to for a problem of this shape (shown by flashcore-bench).
Strategy choose_strategy(int64_t sq, int64_t sk, int64_t d, DType storage);

}  // namespace flashcore::cpu
