// Head dims that are not a multiple of 8 on the 16-bit tensor-core kernels: q, k, v copied
// into contiguous buffers whose head dim is padded with zeros (to what policy.hpp's
// padded_head_dims says), the attention run on those, and O's first Dv columns copied back
// (backend.cpp: attention_head_padded). Zero columns add nothing to Q K^T, and V's zero columns give O
// columns that are dropped; the scale stays the caller's (1 / sqrt(D) of the real D).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashcore::cuda {

// A [n0, n1, n2, cols] view of 2-byte elements with strides (s0, s1, s2) in elements (the
// last dim contiguous), and the same shape padded to `cols_p` columns, contiguous.
struct PadView {
  const void* src = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0;
  int64_t n0 = 0, n1 = 0, n2 = 0, cols = 0, cols_p = 0;
  // The padded side: its elements, and its strides of dims 0 and 1 (dim 2's is cols_p).
  int64_t padded_elems() const { return n0 * n1 * n2 * cols_p; }
  int64_t padded_s0() const { return n1 * n2 * cols_p; }
  int64_t padded_s1() const { return n2 * cols_p; }
};

// dst[r][c] = src[r][c] for c < cols, 0 for cols <= c < cols_p (dst contiguous, 16-byte
// aligned, cols_p a multiple of 8).
cudaError_t launch_pad_head(const PadView& v, void* dst, cudaStream_t stream);

// The reverse: dst (strided as v's strides, `cols` columns) = src's first cols columns.
cudaError_t launch_unpad_head(const void* src, const PadView& v, void* dst, cudaStream_t stream);

}  // namespace flashcore::cuda
