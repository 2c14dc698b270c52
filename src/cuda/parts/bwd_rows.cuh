// Pieces of the attention backward's main kernels that do not depend on the MMA family
// (kernels/bwd_sm80.cuh: mma.sync; kernels/bwd_sm90.cuh: wgmma): which query blocks see a key
// block, the mask of S^T's fragments (both families hold S^T with keys as rows in the m16n8
// accumulator layout), dQ's fp32 reductions, and the dK / dV row stores.
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda {

// Zeroes P^T where (query i, key j) is not visible: i >= sq, j >= sk, or outside the band.
// s[nf][e] is key row0 + 8 (e / 2), query col0 + 8 nf + 2 t + e % 2 (S^T's fragments). As
// mask_scores does for the forward, each key row's visible queries become a range [lo, hi]
// of the compile-time offsets 8 nf + e % 2 (BandMask::visible: i <= j - off + left,
// i >= j - off - right).
template <int kMF>
__device__ __forceinline__ void mask_transposed(float (&s)[kMF][4], const Band32& band, int sq, int row0, int col0,
                                                int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = row0 + 8 * half, i0 = col0 + 2 * t;
    int lo = band.right < 0 ? INT_MIN / 2 : j - band.offset - band.right - i0;
    int hi = (band.left < 0 ? sq - 1 : min(sq - 1, j - band.offset + band.left)) - i0;
    if (j >= band.sk) lo = INT_MAX / 2;
#pragma unroll
    for (int nf = 0; nf < kMF; ++nf)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = nf * 8 + e;
        if (c < lo || c > hi) s[nf][2 * half + e] = 0.f;
      }
  }
}

// The query blocks [lo, hi) that see a key of [n0, n0 + kBlockN) (band, Sq, Sk of the
// sequence): queries i with j - off - right <= i <= j - off + left for some key j < Sk.
struct QueryBlocks {
  int lo, hi;
};
template <int kBlockM, int kBlockN>
__device__ __forceinline__ QueryBlocks query_blocks(const Band32& band, int sq, int n0) {
  const int n_last = min(n0 + kBlockN, band.sk) - 1;
  const int q_lo = band.right < 0 ? 0 : max(0, n0 - band.offset - band.right);
  const int q_hi = band.left < 0 ? sq : min(sq, n_last - band.offset + band.left + 1);
  const int lo = q_lo / kBlockM;
  return {lo, q_hi > q_lo ? (q_hi + kBlockM - 1) / kBlockM : lo};
}

// Whether no element of the tile of queries [m0, m0 + kBlockM) and keys [n0, n0 + kBlockN)
// is masked (then S^T's mask need not be applied): inside Sq and Sk, and inside the band
// for every pair.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool tile_unmasked(const Band32& band, int sq, int m0, int n0) {
  return m0 + kBlockM <= sq && n0 + kBlockN <= band.sk &&
         (band.right < 0 || n0 + kBlockN - 1 - band.offset - band.right <= m0) &&
         (band.left < 0 || n0 - band.offset + band.left >= m0 + kBlockM - 1);
}

// Adds a pair of fp32 values to global memory (sm90: one 64-bit reduction).
__device__ __forceinline__ void red_add2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

// Writes one gradient's rows of this warp (keys row0, row0 + 8 of the sequence, < sk) from
// this CTA's first column, times `mul`, columns < cols.
template <typename T, int kOF>
__device__ __forceinline__ void bwd_store_rows(const float (&acc)[kOF][4], T* g0, int64_t row_stride, int row0, int sk,
                                               int col0, int cols, float mul) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + 8 * half;
    if (row >= sk) continue;
    T* dst = g0 + int64_t(row) * row_stride;
#pragma unroll
    for (int df = 0; df < kOF; ++df) {
      const int col = col0 + df * 8;
      if (col < cols) ptx::store2<T>(dst + col, acc[df][2 * half] * mul, acc[df][2 * half + 1] * mul);
    }
  }
}

}  // namespace flashcore::cuda
