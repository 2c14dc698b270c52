// fwd_sm80_f32_hd256_simt: fp32 attention on the FFMA (SIMT) units, exact exp2f. One warp
// per query row: lane l holds q and o at d = l + 32 i; a score is a warp-wide sum (five
// xor-shuffles), then the running max / sum update of the online softmax is the same
// on every lane. Keys outside the row's band are never visited (a NaN or Inf of V there never
// reaches the row). A score is the dot product q.k, then one product with the scale (log2
// domain), as the tensor-core kernels form it: keys whose products are equal get the same fp32
// score, and a score and the max it is compared with are the same fp32 value, so 2^(s - m) is
// exact (1) at the max and at every key tied with it, whatever the scores' size. (With the
// scale folded into q, q.k's partial sums of scaled terms rounded, differently per key: on
// q, k of 0 and +-2^40, keys tied in q.k came out one ulp of 2^77 apart, weights 1 and 0,
// and the rows' average over their tied keys was lost: CudaHostile.HugeScores, rel_err
// 0.14-0.26.) Correct for any D <= 256, any strides; it is the precise path (`exact_fp32`),
// and the fp32 path where TF32 cannot run. The variant form (kVariants) transforms q.k the
// same way, once per key (parts/score_mod.cuh), and keeps the rules above.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/kernels/params.hpp"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/score_mod.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda {

constexpr int kSimtRowsPerBlock = 4;  // warps per CTA, one query row each
constexpr int kSimtMaxPerLane = 8;    // 8 * 32 = 256 = the largest head dim

// kVariants: the score variants' form (FwdParams::variants): each score transformed in the
// log2 domain (parts/score_mod.cuh, tanhf), the sink joined at the end.
template <bool kVariants>
__global__ void __launch_bounds__(kSimtRowsPerBlock * 32) fwd_sm80_simt_f32_kernel(const FwdParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqInfo seq = seq_info(p, b);
  const int i = blockIdx.x * kSimtRowsPerBlock + warp;
  if (i >= seq.sq) return;
  const int hk = h / p.group;
  const float* q = static_cast<const float*>(p.q) + seq.bb * p.q_sb + (seq.q_row0 + i) * p.q_ss + h * p.q_sh;
  const float* k = static_cast<const float*>(p.k) + seq.bb * p.k_sb + seq.k_row0 * p.k_ss + hk * p.k_sh;
  const float* v = static_cast<const float*>(p.v) + seq.bb * p.v_sb + seq.k_row0 * p.v_ss + hk * p.v_sh;

  float qr[kSimtMaxPerLane], o[kSimtMaxPerLane];
#pragma unroll
  for (int c = 0; c < kSimtMaxPerLane; ++c) {
    const int d = lane + 32 * c;
    qr[c] = d < p.d ? q[d] : 0.f;
    o[c] = 0.f;
  }
  const core::BandMask mask = band_mask(p, seq);
  const int j0 = int(mask.key_begin(i, seq.sk)), j1 = int(mask.key_end(i, seq.sk));
  // The row's max so far, m + mlo (variants: the score's low part, transform_score_exact2,
  // so that the ALiBi term survives beside a huge q.k; plain: mlo stays 0).
  float m = -INFINITY, mlo = 0.f, l = 0.f;
  [[maybe_unused]] float slope2 = 0.f;  // variants: ALiBi's slope (log2 domain)
  if constexpr (kVariants) slope2 = alibi_slope_log2(p, b, h);
  for (int j = j0; j < j1; ++j) {
    const float* kj = k + j * p.k_ss;
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < kSimtMaxPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < p.d) s = fmaf(qr[c], kj[d], s);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    // the score in the log2 domain (one rounding, the same for equal q.k; variants: q.k
    // transformed, as hi + lo, the same for equal q.k and distance too)
    float corr, pj;
    if constexpr (kVariants) {
      const float2 z = transform_score_exact2(s, p, slope2, fabsf(float(i + seq.sk - seq.sq - j)));
      // (a NaN score is not taken: its pj is NaN, and so are l and o)
      const bool take = z.x > m || (z.x == m && z.y > mlo);
      const float mn = take ? z.x : m, mnlo = take ? z.y : mlo;
      const float base = mn == -INFINITY ? 0.f : mn, base_lo = mn == -INFINITY ? 0.f : mnlo;
      corr = exp2f((m - base) + (mlo - base_lo));  // differences exact near the max
      pj = exp2f((z.x - base) + (z.y - base_lo));
      m = mn;
      mlo = mnlo;
    } else {
      s *= p.scale_log2;
      const float mn = fmaxf(m, s);  // (fmaxf skips a NaN score: its pj is NaN, and so are l and o)
      const float base = mn == -INFINITY ? 0.f : mn;  // only -inf so far: no -inf - -inf
      corr = exp2f(m - base);                          // m = -inf on the first key: corr = 0
      pj = exp2f(s - base);
      m = mn;
    }
    l = l * corr + pj;
    const float* vj = v + j * p.v_ss;
#pragma unroll
    for (int c = 0; c < kSimtMaxPerLane; ++c) {
      const int d = lane + 32 * c;
      o[c] = d < p.dv ? fmaf(pj, vj[d], o[c] * corr) : 0.f;
    }
  }
  // A row with no finite score (l = 0) writes O = 0 (o may hold 0 * Inf from V) and lse =
  // -inf (with a sink: O = 0 and lse = the sink); one that saw a NaN score (l = NaN) NaN for
  // both.
  float inv = row_inv(l);
  [[maybe_unused]] float lse_sink = 0.f;
  if constexpr (kVariants) {
    if (p.sinks != nullptr) inv = join_sink_log2(m, l, p.sinks[h], lse_sink);  // the sink joins the row's sum
  }
  float* orow = static_cast<float*>(p.o) + seq.bb * p.o_sb + (seq.q_row0 + i) * p.o_ss + h * p.o_sh;
#pragma unroll
  for (int c = 0; c < kSimtMaxPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < p.dv) orow[d] = l == 0.f ? 0.f : o[c] * inv;
  }
  if (p.lse != nullptr && lane == 0)
    p.lse[seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0 + i] =
        kVariants && p.sinks != nullptr ? lse_sink : row_lse(m, mlo, l);
}

// The plain kernel, or with kVariants the variant one (each instantiated in a unit of its
// own: inst_simt_f32.cu, inst_simt_f32_variants.cu).
template <bool kVariants>
cudaError_t launch_fwd_sm80_simt_f32(const FwdParams& p, cudaStream_t stream) {
  const dim3 grid((p.sq + kSimtRowsPerBlock - 1) / kSimtRowsPerBlock, p.heads, p.batch);
  fwd_sm80_simt_f32_kernel<kVariants><<<grid, kSimtRowsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
