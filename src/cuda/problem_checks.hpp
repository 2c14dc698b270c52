// Checks of a problem against what the CUDA kernels can index and load, without the device:
// grid and row-index limits, and the row alignment of 16-byte (cp.async) and 4-byte
// (paired stores) accesses. Shared by the forward (backend.cpp) and the backward.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/problem.hpp"

namespace flashcore::cuda {

// The kernels' index limits: B and H are grid dimensions (<= 65535), row arithmetic is
// 32-bit (the tensors' rows <= 2^30; varlen's longest sequence is at most its total).
// Throws `unsupported` naming q.
void check_kernel_limits(const core::AttentionProblem& p);

// The score variants (softcap, ALiBi, sinks) run on the sm80 forward kernels (and the exact
// fp32 one) only. The first one set, by its argument's name ("params.softcap", ...), or null.
const char* score_variant_name(const core::AttentionProblem& p);
// Throws `unsupported` naming the first variant set, for the kernels that do not take them
// (`kernels`: e.g. "the CUDA backward").
void refuse_score_variants(const core::AttentionProblem& p, const char* kernels);

// Rows `bytes`-aligned: the base and every stride that is used (its dim > 1) a multiple of
// `bytes` / (element size) elements. Returns why not ("" when aligned).
using Strides = std::initializer_list<std::pair<int64_t, int64_t>>;
std::string misalignment(const void* ptr, int64_t bytes, int64_t elem_size, Strides strides);

}  // namespace flashcore::cuda
