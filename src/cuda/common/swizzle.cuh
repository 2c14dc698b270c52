// Shared-memory tile layout of the sm80 kernels: rows of `kPitch` 16-bit elements,
// kPitch a multiple of 64 (128 bytes = all 32 banks), and the 16-byte chunk c of row r
// stored at chunk c ^ (r % 8). The eight row addresses of one ldmatrix 8x8 matrix (same
// logical chunk, eight consecutive rows) then fall in eight different 16-byte bank
// groups, and so do the cp.async writes of eight consecutive rows: no bank conflicts
// without padding.
#pragma once

#include <cstdint>

namespace flashcore::cuda {

template <int kHeadDim>
struct SwizzledTile {
  static constexpr int kPitch = (kHeadDim + 63) / 64 * 64;  // elements per smem row
  static_assert(kHeadDim % 16 == 0, "head dim instances are multiples of 16");

  // Byte offset of element (row, col), col a multiple of 8 (chunk start).
  __device__ __forceinline__ static uint32_t offset(int row, int col) {
    const int chunk = (col >> 3) ^ (row & 7);
    return uint32_t((row * kPitch + chunk * 8) * 2);
  }
};

}  // namespace flashcore::cuda
