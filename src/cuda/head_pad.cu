// Padding copies for head dims that are not a multiple of 8 (head_pad.hpp). One thread per
// 16-byte chunk of a padded row: 8 elements gathered from (or scattered to) the strided
// view, the padded side read or written as one 16-byte vector. The data are moved as
// 2-byte words: f16 and bf16 alike, bit for bit.
#include "cuda/head_pad.hpp"

#include <cstdint>

namespace flashcore::cuda {
namespace {

constexpr int kThreads = 256;

// The strided element offset of (row r of the [n0 * n1 * n2] rows, column 0).
__device__ __forceinline__ int64_t row_offset(const PadView& v, int64_t r) {
  const int64_t i2 = r % v.n2, r1 = r / v.n2;
  const int64_t i1 = r1 % v.n1, i0 = r1 / v.n1;
  return i0 * v.s0 + i1 * v.s1 + i2 * v.s2;
}

__global__ void __launch_bounds__(kThreads) pad_head_kernel(PadView v, uint4* dst, int64_t chunks) {
  const int64_t per_row = v.cols_p / 8;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * kThreads) {
    const int64_t r = i / per_row, c0 = (i % per_row) * 8;
    const uint16_t* src = static_cast<const uint16_t*>(v.src) + row_offset(v, r) + c0;
    uint16_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = c0 + j < v.cols ? src[j] : uint16_t(0);
    dst[i] = make_uint4(w[0] | uint32_t(w[1]) << 16, w[2] | uint32_t(w[3]) << 16, w[4] | uint32_t(w[5]) << 16,
                        w[6] | uint32_t(w[7]) << 16);
  }
}

__global__ void __launch_bounds__(kThreads) unpad_head_kernel(const uint4* src, PadView v, uint16_t* dst,
                                                               int64_t chunks) {
  const int64_t per_row = v.cols_p / 8;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * kThreads) {
    const int64_t r = i / per_row, c0 = (i % per_row) * 8;
    if (c0 >= v.cols) continue;
    const uint4 x = src[i];
    const uint32_t p[4] = {x.x, x.y, x.z, x.w};
    uint16_t* out = dst + row_offset(v, r) + c0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (c0 + j < v.cols) out[j] = uint16_t(p[j / 2] >> (16 * (j % 2)));
  }
}

int grid_for(int64_t chunks) {
  const int64_t blocks = (chunks + kThreads - 1) / kThreads;
  return int(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

}  // namespace

cudaError_t launch_pad_head(const PadView& v, void* dst, cudaStream_t stream) {
  const int64_t chunks = v.padded_elems() / 8;
  if (chunks == 0) return cudaSuccess;
  pad_head_kernel<<<grid_for(chunks), kThreads, 0, stream>>>(v, static_cast<uint4*>(dst), chunks);
  return cudaGetLastError();
}

cudaError_t launch_unpad_head(const void* src, const PadView& v, void* dst, cudaStream_t stream) {
  const int64_t chunks = v.padded_elems() / 8;
  if (chunks == 0) return cudaSuccess;
  unpad_head_kernel<<<grid_for(chunks), kThreads, 0, stream>>>(static_cast<const uint4*>(src), v,
                                                                static_cast<uint16_t*>(dst), chunks);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
