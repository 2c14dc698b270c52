// Shared-memory tile layout of the sm80 kernels: rows of `kRowBytes` bytes, a multiple
// of 128 (all 32 banks), and the 16-byte chunk c of row r stored at chunk c ^ (r % 8).
// The eight row addresses of one ldmatrix 8x8 matrix (same logical chunk, eight
// consecutive rows) then fall in eight different 16-byte bank groups, and so do the
// cp.async writes of eight consecutive rows: no bank conflicts without padding. A chunk
// holds 8 16-bit or 4 fp32 elements; the layout is the same in bytes for both.
#pragma once

#include <cstdint>

namespace flashcore::cuda {

template <int kHeadDim, typename T>
struct SwizzledTile {
  static constexpr int kElemsPerChunk = 16 / int(sizeof(T));
  static constexpr int kChunks = kHeadDim / kElemsPerChunk;               // used chunks per row
  static constexpr int kRowBytes = (kHeadDim * int(sizeof(T)) + 127) / 128 * 128;
  static_assert(kHeadDim * sizeof(T) % 32 == 0, "head dim instances span whole 32-byte k-steps");

  // Byte offset of chunk `chunk` (logical) of row `row`.
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) * 16));
  }
};

}  // namespace flashcore::cuda
