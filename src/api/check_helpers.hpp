// The argument-check helpers of checks.cpp that other check files share (the backward's).
// Each failure throws flashcore::Error (invalid_argument unless said otherwise) with a
// message that starts with the argument's name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flashcore/flashcore.hpp"

namespace flashcore::api::detail {

std::string shape_str(const Tensor& t);
[[noreturn]] void bad(const char* name, const std::string& what);
// Rank, dtype and device codes, sizes and strides in range, last dim contiguous, byte span
// and element count within what flashcore indexes, data non-null when non-empty.
void check_tensor(const Tensor& t, const char* name, int rank, const char* layout);
// [first byte, one past the last byte) of a non-empty view.
struct Extent { uintptr_t lo, hi; };
Extent extent(const Tensor& t);
// out_name: "overlaps <in_name> in memory" when the two views' extents intersect, or when
// the output's extent meets the in_bytes bytes at `in` (an array read by pointer).
void check_no_alias(const Tensor& out, const char* out_name, const Tensor& in, const char* in_name);
void check_no_alias(const Tensor& out, const char* out_name, const void* in, int64_t in_bytes,
                    const char* in_name);
// An output whose elements do not all have their own address (zero or overlapping strides).
void check_no_self_overlap(const Tensor& t, const char* name);
// Whether the dims (stride, size), in any order, give every index its own element offset.
// Sufficient test: with the dims of size > 1 ordered by stride, each stride must pass the
// extent of the dims inside it (a few exotic interleaved views that do not overlap fail it).
bool distinct_elements(std::vector<std::pair<int64_t, int64_t>> dims);
void check_same_device(const Tensor& t, const char* name, Device d);
void check_dim(const Tensor& t, const char* name, int dim, const char* dim_name, int64_t expect,
               const char* from);
// f32/f16/bf16 (and fp8 on CUDA); Status::unsupported otherwise.
void check_storage_dtype(DType d, const char* name, Device dev);
// CPU threads: 0 (automatic) up to core::max_threads().
void check_threads(int threads);
// A per-head fp32 array of the score variants: [H], or [nb, H] when `batched`, on `dev`.
// Returns its row stride (0 for [H]).
int64_t check_head_array(const Tensor& t, const char* name, int64_t nb, int64_t heads, bool batched, Device dev);

}  // namespace flashcore::api::detail
