// Online softmax on mma.sync accumulator fragments (FlashAttention-2's running max with
// rescale). Each lane owns 2 rows per 16-row fragment (g and g+8, g = lane/4) and, per
// 8-key fragment, 2 columns; a row is spread over the 4 lanes of a quad, so row maxima
// need two xor-shuffles. Row sums stay per-lane until the epilogue (one reduction, not
// one per tile). The softmax scale is folded into the exponent: with e = scale * log2 e
// (> 0), exp(scale * s) = 2^(s e), the running max m' is kept in that log2 domain and
// P = 2^(fma(s, e, -m')) costs one FFMA and one MUFU per score. Masked scores are -inf,
// whose 2^ is exactly 0.
//
// Lazy rescaling: the max in use moves only when a tile's row max passes it by more than
// kSlack (log2 units), so P may reach 2^kSlack and O is rescaled (kDF * 4 FMULs per row
// fragment) a few times per row instead of on most tiles (with 16 rows per warp, some row's
// max moves on nearly every tile of a long sequence). Exact: O and l share the max in use,
// which O / l and lse = m + log2 l take as it is; only P's range grows.
#pragma once

#include <cmath>

#include "cuda/common/ptx.cuh"

namespace flashcore::cuda {

template <int kRows /* 2 * fragments per warp */>
struct OnlineSoftmax {
  float m[kRows];  // running max of s e (log2 domain); -inf until a visible key is seen
  float l[kRows];  // running sum of 2^(s' - m), this lane's columns only

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
    }
  }

  // s[r/2][nf][..]: the tile's raw scores, rows r = 2*mi + half; e > 0. Overwrites s
  // with P = 2^(s e - m_new) and returns in corr[] the factor that rescales the old O rows.
  // kPLog2 != 0: P and l come out scaled by 2^kPLog2 (folded into the exponent, free), which
  // O / l does not see; lse then needs m - kPLog2 (the fp8 path: P stored as e4m3(2^kPLog2 P)).
  // P <= 2^(kPLog2 + kSlack): 256 for both the 16-bit types and fp8.
  template <int kMI, int kNF, int kPLog2 = 0, int kSlack = 8>
  __device__ __forceinline__ void update(float (&s)[kMI][kNF][4], float e, float (&corr)[kRows]) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 2 * mi + half;
        float mx = -INFINITY;
#pragma unroll
        for (int nf = 0; nf < kNF; ++nf) mx = fmaxf(mx, fmaxf(s[mi][nf][2 * half], s[mi][nf][2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx *= e;
        // The max in use moves only past the slack (-inf + kSlack is -inf: a row's first
        // visible key always moves it).
        mx = mx > m[r] + float(kSlack) ? mx : m[r];
        // A row with no visible key yet keeps m = -inf; subtract 0 instead so that
        // 2^(-inf - (-inf)) never makes a NaN (its P and corr are then 0).
        const float base = mx == -INFINITY ? 0.f : mx;
        corr[r] = ptx::exp2_fast(m[r] - base);
        m[r] = mx;
        const float pbase = base - float(kPLog2);
        float sum = 0.f;
#pragma unroll
        for (int nf = 0; nf < kNF; ++nf) {
          const float p0 = ptx::exp2_fast(fmaf(s[mi][nf][2 * half], e, -pbase));
          const float p1 = ptx::exp2_fast(fmaf(s[mi][nf][2 * half + 1], e, -pbase));
          s[mi][nf][2 * half] = p0;
          s[mi][nf][2 * half + 1] = p1;
          sum += p0 + p1;
        }
        l[r] = l[r] * corr[r] + sum;
      }
    }
  }

  // Full row sums (quad reduction), for the epilogue.
  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
  }
};

// O *= corr per row (corr from OnlineSoftmax::update), skipped when no row of the warp
// moved its max (after the first tiles it rarely does: kDF * 4 FMULs per row fragment).
template <int kMI, int kDF>
__device__ __forceinline__ void rescale_rows(float (&acc)[kMI][kDF][4], const float (&corr)[2 * kMI]) {
  bool moved = false;
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) moved |= corr[r] != 1.f;
  if (!__any_sync(0xffffffffu, moved)) return;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int df = 0; df < kDF; ++df) {
      acc[mi][df][0] *= corr[2 * mi];
      acc[mi][df][1] *= corr[2 * mi];
      acc[mi][df][2] *= corr[2 * mi + 1];
      acc[mi][df][3] *= corr[2 * mi + 1];
    }
}

}  // namespace flashcore::cuda
