// Sequence geometry and the band mask on the device: one definition with the CPU
// (core::BandMask), evaluated in 32-bit arithmetic in the inner loops.
#pragma once

#include <climits>
#include <cmath>

#include "core/variants/mask.hpp"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {

__device__ __forceinline__ SeqInfo seq_info(const FwdParams& p, int b) {
  SeqInfo s;
  if (p.cu_q != nullptr) {
    const int q0 = p.cu_q[b], k0 = p.cu_k[b];
    s.bb = 0;
    s.q_row0 = q0;
    s.k_row0 = k0;
    s.sq = p.cu_q[b + 1] - q0;
    s.sk = p.cu_k[b + 1] - k0;
  } else {
    s.bb = b;
    s.q_row0 = 0;
    s.k_row0 = 0;
    s.sq = p.sq;
    s.sk = p.sk;
  }
  return s;
}

// A KV cache's sequence b (FwdParams::seqlens_k): Sq queries, its cached keys plus the
// appended ones, clamped to what the cache holds (unchecked lengths stay in bounds).
__device__ __forceinline__ SeqInfo cache_seq_info(const FwdParams& p, int b) {
  SeqInfo s;
  s.bb = b;
  s.q_row0 = 0;
  s.k_row0 = 0;
  s.sq = p.sq;
  const int64_t n = int64_t(p.seqlens_k[b]) + p.s_new;
  s.sk = int(n < 0 ? 0 : n > p.cache_rows ? int64_t(p.cache_rows) : n);
  return s;
}

__device__ __forceinline__ core::BandMask band_mask(const FwdParams& p, const SeqInfo& s) {
  return band_mask(p, s.sq, s.sk);
}

// The band in int32 for the inner loops (BandMask::visible's rule, applied by mask_scores).
struct Band32 {
  int left, right, offset, sk;
};

// Masks the raw scores of one key tile held as mma accumulator fragments (mma.sync and
// wgmma share the layout): s[mi][nf][e] is query row row0 + 16 mi + 8 (e / 2), key
// col0 + 8 nf + 2 t + e % 2. Only where the band or Sk cuts the tile (!full) are scores
// set to -inf. A non-positive scale (legal, if odd) is applied here, up front, so that
// the softmax can fold a positive one into its exponent (it is then called with 1).
// The band of each row is turned into the range [lo, hi] of the compile-time offsets
// 8 nf + e % 2 that are visible (BandMask::visible: j < sk, j >= i + offset - left,
// j <= i + offset + right), so each score costs two compares with an immediate and a
// select (a per-element test of the three conditions cost 3-4x that on the diagonal tiles).
//
// shift > 0 (the sm90 kernel's GQA packing): the rows are packed (query, head) rows and
// query row r >> shift is the one masked.
template <int kMI, int kNF>
__device__ __forceinline__ void mask_scores(float (&s)[kMI][kNF][4], bool full, float scale_log2, const Band32& band,
                                            int row0, int col0, int t, int shift = 0) {
  if (full && scale_log2 > 0.f) return;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = (row0 + 16 * mi + 8 * half) >> shift, j0 = col0 + 2 * t;
      int lo = band.left < 0 ? INT_MIN / 2 : i + band.offset - band.left - j0;
      int hi = (band.right < 0 ? band.sk - 1 : min(band.sk - 1, i + band.offset + band.right)) - j0;
      if (full) {
        lo = INT_MIN / 2;
        hi = INT_MAX / 2;
      }
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nf * 8 + e;
          float x = s[mi][nf][2 * half + e];
          if (!(scale_log2 > 0.f)) x *= scale_log2;
          s[mi][nf][2 * half + e] = c < lo || c > hi ? -INFINITY : x;
        }
    }
}

}  // namespace flashcore::cuda
