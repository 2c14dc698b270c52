// Epilogue of the sm80 forward: O = acc / l per row (0 for a row with no visible key: its
// accumulators were zeroed, zero_empty_rows), converted to the storage type and written from
// the accumulator fragments (two adjacent columns per store, ptx::store2); lse = ln(sum
// exp(scale * s)) = (m' + log2 l) ln 2 (row_lse). Rows past Sq and columns past Dv are not
// written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "cuda/common/ptx.cuh"

namespace flashcore::cuda {

// lse of a row from its max m + mlo (log2 units, scaled; OnlineSoftmax::finish) and sum l:
// (m + mlo + log2 l) ln 2; -inf for a row with no finite score (l = 0: the fully masked
// marker); NaN for a row that saw a NaN score (l = NaN), which must not read as masked.
__device__ __forceinline__ float row_lse(float m, float mlo, float l) {
  return l > 0.f ? (m + (mlo + log2f(l))) * 0.69314718055994531f : l == 0.f ? -INFINITY : l;
}

// 1 / l for O's rows: 0 for l = 0 (rows with no finite score, whose accumulators are zero),
// NaN for l = NaN.
__device__ __forceinline__ float row_inv(float l) { return l == 0.f ? 0.f : 1.f / l; }

// One row of this lane's fragments (get(df, e): column 8 df + 2 t + e) normalized into O's
// row orow, and its lse into *lse where lse is not null (lane t == 0 writes it). 16-bit T:
// pairs converted by pack (ptx::PackAs<T>, or ptx::Pack16 for a type chosen at run time; T
// then only sizes the elements).
// kAnyDv: Dv may be odd and the row only element-aligned (the sm90 kernels' rows read with
// heads in columns: a pair stored as two elements where it is not 4-byte aligned or ends
// past Dv); else pairs are stored whole.
template <typename T, int kDF, bool kAnyDv = false, typename Pack, class Get>
__device__ __forceinline__ void store_row(const Get& get, float m, float mlo, float l, T* orow, float* lse, int dv,
                                          int t, Pack pack) {
  const float inv = row_inv(l);
#pragma unroll
  for (int df = 0; df < kDF; ++df) {
    const int col = df * 8 + 2 * t;
    if (col < dv) {
      if constexpr (sizeof(T) == 2) {
        const uint32_t x = pack(get(df, 0) * inv, get(df, 1) * inv);
        if (!kAnyDv || (col + 1 < dv && (reinterpret_cast<uintptr_t>(orow + col) & 3) == 0)) {
          *reinterpret_cast<uint32_t*>(orow + col) = x;
        } else {  // an odd Dv's last column, or rows that are only element-aligned
          uint16_t* o2 = reinterpret_cast<uint16_t*>(orow + col);
          o2[0] = uint16_t(x);
          if (col + 1 < dv) o2[1] = uint16_t(x >> 16);
        }
      } else {
        ptx::store2<T>(orow + col, get(df, 0) * inv, get(df, 1) * inv);
      }
    }
  }
  if (lse != nullptr && t == 0) *lse = row_lse(m, mlo, l);
}

// Rows row0 and row0 + 8 of the tile. GQA packing (sm90, shift = log2 G > 0): packed row r
// is query r >> shift of head offset r & (G - 1), so go and glse point at the item's first
// head and the head strides o_sh, lse_sh place the row; shift 0: row r is query r.
template <typename T, int kDF, typename Pack = ptx::PackAs<T>>
__device__ __forceinline__ void store_output(const float (&acc)[kDF][4], const float* m, const float* mlo, const float* l,
                                             T* go, int64_t o_ss, float* glse,
                                             int row0, int sq, int dv, int t, int shift = 0, int64_t o_sh = 0,
                                             int64_t lse_sh = 0, Pack pack = {}) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int prow = row0 + half * 8, row = prow >> shift, hoff = prow & ((1 << shift) - 1);
    if (row >= sq) continue;
    store_row<T, kDF>([&](int df, int e) { return acc[df][2 * half + e]; }, m[half], mlo[half], l[half],
                      go + row * o_ss + hoff * o_sh, glse != nullptr ? glse + row + hoff * lse_sh : nullptr, dv, t, pack);
  }
}

// x (non-finite: V's element at a key the row sees, parts/nonfinite_v.cuh) added to an
// element of the written O: 16-bit (bf16: as bf16, else f16) or fp32.
template <typename T>
__device__ __forceinline__ void add_to_output(T* at, float x, bool bf16) {
  if constexpr (sizeof(T) == 4) {
    *at += x;
  } else if (bf16) {
    __nv_bfloat16* b = reinterpret_cast<__nv_bfloat16*>(at);
    *b = __float2bfloat16(__bfloat162float(*b) + x);
  } else {
    __half* h = reinterpret_cast<__half*>(at);
    *h = __float2half(__half2float(*h) + x);
  }
}

// KV-split partials (kv_combine.cu) of rows row0 and row0 + 8: the unnormalized O row and
// its (m, mlo, l) (the max in two parts, OnlineSoftmax::finish); query q of head offset o (packed rows, shift > 0: row r is query r >> shift of
// head offset r & (G - 1); else row r is query r, offset 0) at index i0 + q * heads + o
// (part_o: index * dv floats on). Rows past Sq and columns past Dv are not written.
template <int kDF>
__device__ __forceinline__ void store_partial(const float (&acc)[kDF][4], const float* m, const float* mlo,
                                              const float* l, float* part_o, float4* part_ml, int64_t i0, int heads,
                                              int row0, int sq, int dv, int t, int shift = 0) {
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
    if (t == 0) part_ml[i] = make_float4(m[half], mlo[half], l[half], 0.f);
  }
}

}  // namespace flashcore::cuda
