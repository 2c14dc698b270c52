// fwd_sm80_f32_hd256_simt: fp32 attention on the FFMA (SIMT) units, exact exp2f. One warp
// per query row: lane l holds q and o at d = l + 32 i; a score is a warp-wide sum (five
// xor-shuffles), then the running max / sum update of the online softmax is the same
// on every lane. Keys outside the row's band are never visited. Correct for any D <= 256,
// any strides; it is the precise path (`exact_fp32`), and the fp32 path where TF32 cannot run.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/kernels/params.hpp"
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
    // scores land in the log2 domain (variants: raw, transformed per key)
    qr[c] = d < p.d ? (kVariants ? q[d] : q[d] * p.scale_log2) : 0.f;
    o[c] = 0.f;
  }
  const core::BandMask mask = band_mask(p, seq);
  const int j0 = int(mask.key_begin(i, seq.sk)), j1 = int(mask.key_end(i, seq.sk));
  float m = -INFINITY, l = 0.f;
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
    if constexpr (kVariants) s = transform_score_exact(s, p, slope2, fabsf(float(i + seq.sk - seq.sq - j)));
    const float mn = fmaxf(m, s);
    const float corr = exp2f(m - mn);  // m = -inf on the first key: corr = 0
    const float pj = exp2f(s - mn);
    l = l * corr + pj;
    m = mn;
    const float* vj = v + j * p.v_ss;
#pragma unroll
    for (int c = 0; c < kSimtMaxPerLane; ++c) {
      const int d = lane + 32 * c;
      o[c] = d < p.dv ? fmaf(pj, vj[d], o[c] * corr) : 0.f;
    }
  }
  if constexpr (kVariants) {
    if (p.sinks != nullptr) {  // the sink joins the row's sum
      float lse;
      const float f = join_sink_log2(m, l, p.sinks[h], lse);
      float* orow = static_cast<float*>(p.o) + seq.bb * p.o_sb + (seq.q_row0 + i) * p.o_ss + h * p.o_sh;
#pragma unroll
      for (int c = 0; c < kSimtMaxPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < p.dv) orow[d] = o[c] * f;
      }
      if (p.lse != nullptr && lane == 0) p.lse[seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0 + i] = lse;
      return;
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  float* orow = static_cast<float*>(p.o) + seq.bb * p.o_sb + (seq.q_row0 + i) * p.o_ss + h * p.o_sh;
#pragma unroll
  for (int c = 0; c < kSimtMaxPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < p.dv) orow[d] = o[c] * inv;
  }
  if (p.lse != nullptr && lane == 0)
    p.lse[seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0 + i] =
        l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
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
