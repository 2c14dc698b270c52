// Epilogue of the sm80 forward: O = acc / l per row (0 for a row with no visible key),
// converted to the storage type and written from the accumulator fragments (two
// adjacent columns per store, ptx::store2); lse = ln(sum exp(scale * s)) = (m' + log2 l) ln 2,
// -inf for a row with no visible key. Rows past Sq and columns past Dv are not written.
#pragma once

#include <cmath>

#include "cuda/common/ptx.cuh"

namespace flashcore::cuda {

// lse of a row from its running max m (log2 units, scaled) and sum l: (m + log2 l) ln 2,
// -inf for a row with no visible key.
__device__ __forceinline__ float row_lse(float m, float l) {
  return l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
}

// Rows row0 and row0 + 8 of the tile. GQA packing (sm90, shift = log2 G > 0): packed row r
// is query r >> shift of head offset r & (G - 1), so go and glse point at the item's first
// head and the head strides o_sh, lse_sh place the row; shift 0: row r is query r.
// 16-bit T: pairs converted by pack (ptx::PackAs<T>, or ptx::Pack16 for a type chosen at
// run time; T then only sizes the elements).
template <typename T, int kDF, typename Pack = ptx::PackAs<T>>
__device__ __forceinline__ void store_output(const float (&acc)[kDF][4], const float* m, const float* l,
                                             T* go, int64_t o_ss, float* glse,
                                             int row0, int sq, int dv, int t, int shift = 0, int64_t o_sh = 0,
                                             int64_t lse_sh = 0, Pack pack = {}) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int prow = row0 + half * 8, row = prow >> shift, hoff = prow & ((1 << shift) - 1);
    if (row >= sq) continue;
    const float inv = l[half] > 0.f ? 1.f / l[half] : 0.f;
    T* orow = go + row * o_ss + hoff * o_sh;
#pragma unroll
    for (int df = 0; df < kDF; ++df) {
      const int col = df * 8 + 2 * t;
      if (col < dv) {
        if constexpr (sizeof(T) == 2)
          *reinterpret_cast<uint32_t*>(orow + col) = pack(acc[df][2 * half] * inv, acc[df][2 * half + 1] * inv);
        else
          ptx::store2<T>(orow + col, acc[df][2 * half] * inv, acc[df][2 * half + 1] * inv);
      }
    }
    if (glse != nullptr && t == 0) glse[row + hoff * lse_sh] = row_lse(m[half], l[half]);
  }
}

// KV-split partials (kv_combine.cu) of rows row0 and row0 + 8: the unnormalized O row and
// its (m, l); query q of head offset o (packed rows, shift > 0: row r is query r >> shift of
// head offset r & (G - 1); else row r is query r, offset 0) at index i0 + q * heads + o
// (part_o: index * dv floats on). Rows past Sq and columns past Dv are not written.
template <int kDF>
__device__ __forceinline__ void store_partial(const float (&acc)[kDF][4], const float* m, const float* l, float* part_o,
                                              float2* part_ml, int64_t i0, int heads, int row0, int sq, int dv, int t,
                                              int shift = 0) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int prow = row0 + half * 8, row = prow >> shift, hoff = prow & ((1 << shift) - 1);
    if (row >= sq) continue;
    const int64_t i = i0 + int64_t(row) * heads + hoff;
    float* po = part_o + i * dv;
#pragma unroll
    for (int df = 0; df < kDF; ++df) {
      const int col = df * 8 + 2 * t;
      if (col < dv) *reinterpret_cast<float2*>(po + col) = make_float2(acc[df][2 * half], acc[df][2 * half + 1]);
    }
    if (t == 0) part_ml[i] = make_float2(m[half], l[half]);
  }
}

}  // namespace flashcore::cuda
