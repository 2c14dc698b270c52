// Padding copies for head dims that are not a multiple of 8 (head_pad.hpp). One thread per
// 16-byte chunk of a padded row: 8 elements gathered from (or scattered to) the strided
// view, the padded side read or written as one 16-byte vector. The data are moved as
// 2-byte words: f16 and bf16 alike, bit for bit.
#include "cuda/head_pad.hpp"

#include <algorithm>
#include <cstdint>

#include "cuda/common/launch.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kThreads = 256;

// A group of `lanes` threads per padded row (the power of two >= its 16-byte chunks, cols_p / 8
// <= 32), lane j on chunk j: one division chain per row, in 32 bits (the launches go over
// slabs of rows that fit), not 64-bit divisions per chunk: 0.93-0.94x the copies' time on an
// H200 (docs/results/cuda-head-pad-2026-12-02.md). A lane per element instead (each 2-byte
// access of a warp on contiguous bytes) took 3x the time of the gather.

// The strided element offset of (row r of the [n0 * n1 * n2] rows, column 0).
__device__ __forceinline__ int64_t row_offset(const PadView& v, uint32_t r) {
  const uint32_t n2 = uint32_t(v.n2), n1 = uint32_t(v.n1);
  const uint32_t r1 = r / n2, i2 = r - r1 * n2;
  const uint32_t i0 = r1 / n1, i1 = r1 - i0 * n1;
  return int64_t(i0) * v.s0 + int64_t(i1) * v.s1 + int64_t(i2) * v.s2;
}

constexpr int kMaxChunks = 32;  // 16-byte chunks of the widest padded row (256 columns)

__global__ void __launch_bounds__(kThreads) pad_head_kernel(PadView v, uint4* dst, uint32_t rows, int lanes) {
  const int per_row = int(v.cols_p / 8), j = int(threadIdx.x) % lanes;
  if (j >= per_row) return;
  const int64_t c0 = j * 8;
  const uint32_t per_block = kThreads / lanes;
  for (uint32_t r = blockIdx.x * per_block + threadIdx.x / lanes; r < rows; r += gridDim.x * per_block) {
    const uint16_t* src = static_cast<const uint16_t*>(v.src) + row_offset(v, r) + c0;
    uint16_t w[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e] = c0 + e < v.cols ? src[e] : uint16_t(0);
    dst[int64_t(r) * per_row + j] = make_uint4(w[0] | uint32_t(w[1]) << 16, w[2] | uint32_t(w[3]) << 16,
                                               w[4] | uint32_t(w[5]) << 16, w[6] | uint32_t(w[7]) << 16);
  }
}

__global__ void __launch_bounds__(kThreads) unpad_head_kernel(const uint4* src, PadView v, uint16_t* dst, uint32_t rows,
                                                               int lanes) {
  const int per_row = int(v.cols_p / 8), j = int(threadIdx.x) % lanes;
  const int64_t c0 = j * 8;
  if (j >= per_row || c0 >= v.cols) return;
  const uint32_t per_block = kThreads / lanes;
  for (uint32_t r = blockIdx.x * per_block + threadIdx.x / lanes; r < rows; r += gridDim.x * per_block) {
    const uint4 x = src[int64_t(r) * per_row + j];
    const uint32_t p[4] = {x.x, x.y, x.z, x.w};
    uint16_t* out = dst + row_offset(v, r) + c0;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (c0 + e < v.cols) out[e] = uint16_t(p[e / 2] >> (16 * (e % 2)));
  }
}

// Blocks for `rows` rows at kThreads / lanes rows per block (a grid-stride loop past the cap).
int grid_for(int64_t rows, int lanes) {
  const int64_t per_block = kThreads / lanes, blocks = (rows + per_block - 1) / per_block;
  return int(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

// Both copies run over slabs of whole entries of dim 0 with fewer than 2^31 rows each (one
// launch per slab; the views' dims 1 and 2 together must fit: a 2^31-row entry of q alone
// would be 32 GiB at the narrowest padded row), so that the kernels count rows in 32 bits.
template <class Launch>
cudaError_t over_slabs(const PadView& v, Launch&& launch) {
  const int64_t inner = v.n1 * v.n2, limit = int64_t(1) << 31;
  if (inner * v.n0 == 0 || v.cols_p == 0) return cudaSuccess;
  if (inner >= limit || v.cols_p > 8 * kMaxChunks || v.cols > v.cols_p) return cudaErrorInvalidValue;
  const int lanes = row_lanes(v.cols_p / 8);
  const int64_t slab = std::min(v.n0, (limit - 1) / inner);
  for (int64_t i0 = 0; i0 < v.n0; i0 += slab) {
    PadView part = v;
    part.src = static_cast<const uint16_t*>(v.src) + i0 * v.s0;
    part.n0 = std::min(slab, v.n0 - i0);
    const int64_t rows = part.n0 * inner;
    launch(part, i0, uint32_t(rows), grid_for(rows, lanes), lanes);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_pad_head(const PadView& v, void* dst, cudaStream_t stream) {
  return over_slabs(v, [&](const PadView& part, int64_t i0, uint32_t rows, int grid, int lanes) {
    uint4* d = static_cast<uint4*>(dst) + i0 * v.padded_s0() / 8;
    pad_head_kernel<<<grid, kThreads, 0, stream>>>(part, d, rows, lanes);
  });
}

cudaError_t launch_unpad_head(const void* src, const PadView& v, void* dst, cudaStream_t stream) {
  return over_slabs(v, [&](const PadView& part, int64_t i0, uint32_t rows, int grid, int lanes) {
    const uint4* s = static_cast<const uint4*>(src) + i0 * v.padded_s0() / 8;
    unpad_head_kernel<<<grid, kThreads, 0, stream>>>(s, part, static_cast<uint16_t*>(dst) + i0 * v.s0, rows, lanes);
  });
}

}  // namespace flashcore::cuda
