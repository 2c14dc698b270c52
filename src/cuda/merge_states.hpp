// merge_states' kernel arguments (merge_states.cu) as the host side fills them
// (merge_states_host.cpp): the parts travel in the launch's arguments, at most kMaxParts
// (48 parts of 56 bytes: within the 4 KiB of kernel arguments).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashcore/types.hpp"

namespace flashcore::cuda {

struct MergePart {
  const void* o;  // O [B, S, H, D] of the part, strides in elements (last dim contiguous)
  int64_t sb, ss, sh;
  const float* lse;  // [B, H, S]
  int64_t lse_sb, lse_sh;
};

struct MergeArgs {
  static constexpr int kMaxParts = 48;
  MergePart parts[kMaxParts];
  int n;
  void* o;
  int64_t o_sb, o_ss, o_sh;
  float* lse;
  int64_t lse_sb, lse_sh;
  int64_t s, heads, d, rows;  // rows = B * S * H
};

// One warp per output row, parts of dtype `part`, out of dtype `out` (f32, f16 or bf16).
cudaError_t launch_merge_states(const MergeArgs& a, DType part, DType out, cudaStream_t stream);

}  // namespace flashcore::cuda
