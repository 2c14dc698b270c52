// The score variants on mma accumulator fragments (softcap, ALiBi; core/variants/score.hpp
// for the definitions) and the sink joined to a row's softmax, for the kernels' variant
// forms (FwdParams::variants). The plain kernels never include these steps.
//
// The kernels' softmax works in the log2 domain. A variant tile's raw scores acc = q.k become
// the transformed scores times log2 e before the mask and the row max, so the softmax then
// runs with the factor 1:
//   softcap c:  c log2 e * tanh(scale acc / c), tanh(x) = (2^y - 1) / (2^y + 1) with
//               y = 2 x log2 e = acc * FwdParams::softcap_in (one MUFU.EX2, one MUFU.RCP;
//               y clamped at 64, where the quotient is 1 in fp32; y below -126 flushes 2^y to
//               0: -1). Absolute error of tanh ~2.4e-7 (ex2.approx's 2^-22 relative, the
//               fast division's 2 ulp): the score's error is c times that, as the CPU's
//               tanh_f32 (core/variants/score.hpp). tanh.approx.f32 would take one MUFU op
//               instead of two, but its ~2^-11 relative error is c * 5e-4 in the score (a
//               2.4% error of P at c = 50), more than the 16-bit types' rounding of P:
//               it is taken only under Exp2Mode::fast (FwdParams::tanh_in), as the
//               FlashAttention kernels take it always.
//   no softcap: acc * scale log2 e (any sign of the scale); or (ScoreFold, the sm90 variant
//               rows) acc as it is, the scale left to the softmax's exponent.
//   ALiBi m:    minus m log2 e * |i + Sk - Sq - j| (the sequence's lengths, bottom-right).
#pragma once

#include <cmath>

#include "core/variants/score.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {

constexpr float kLog2eF = 1.4426950408889634f;
constexpr float kLn2F = 0.69314718055994531f;

// tanh(x) from y = 2 x log2 e (see above). A NaN y stays NaN (the clamp keeps it).
__device__ __forceinline__ float tanh_of_exp2_arg(float y) {
  const float e = ptx::exp2_fast(y > 64.f ? 64.f : y);
  return __fdividef(e - 1.f, e + 1.f);
}

// The ALiBi slope of (sequence or batch entry b, head h) times log2 e (0 without ALiBi): the
// one register the variants hold across the key loop; every other factor is read from the
// kernel parameters (constant memory) where it is used.
__device__ __forceinline__ float alibi_slope_log2(const FwdParams& p, int b, int h) {
  return p.alibi != nullptr ? p.alibi[b * p.alibi_sb + h] * kLog2eF : 0.f;
}

// How a variant kernel's tile scores reach the softmax (one per item; slope2 from
// alibi_slope_log2). With softcap, or a scale below kFoldFrom (zero, negative, or so small that
// the ALiBi term over it could overflow), the scores go to the log2 domain here (times the
// scale, or through the cap) and the softmax takes factor 1; else the softmax folds the scale
// into its exponent as in the plain kernels, and the ALiBi term is added over the scale:
// scale (acc + slope2 d / scale) = scale acc + slope2 d, with the rounding of one fp32 sum.
struct ScoreFold {
  static constexpr float kFoldFrom = 0x1p-20f;
  bool folded;
  float factor;  // the softmax's factor: p.scale_log2 (folded) or 1
  float slope;   // the ALiBi slope in the scores' units: slope2 / p.scale_log2 (folded) or slope2
  float slope2;  // the ALiBi slope times log2 e
  // allow = false: never folded (kernels whose softmax always takes factor 1).
  __device__ __forceinline__ ScoreFold(const FwdParams& p, float slope_log2, bool allow = true)
      : folded(allow && !(p.softcap_out > 0.f) && p.scale_log2 >= kFoldFrom),
        factor(folded ? p.scale_log2 : 1.f),
        slope(folded ? slope_log2 / p.scale_log2 : slope_log2),
        slope2(slope_log2) {}
};

// One raw score -> its transformed score in the log2 domain, the exact fp32 kernel's form
// (tanhf; dist: the ALiBi distance).
__device__ __forceinline__ float transform_score_exact(float acc, const FwdParams& p, float slope2, float dist) {
  float z = p.softcap_out > 0.f ? p.softcap_out * tanhf(acc * p.softcap_in * (0.5f * kLn2F)) : acc * p.scale_log2;
  if (p.alibi != nullptr) z -= slope2 * dist;
  return z;
}

// The same score as hi + lo, for a row's max where the key loop could not take it (rows
// computed again, parts/exact_rows.cuh): without softcap, c u and the ALiBi term s d are
// each formed with their product's remainder and added with a two-sum, so that lo keeps what
// hi's rounding drops: the ALiBi term beside a huge c u, which KV splits' merges of such rows
// would otherwise lose. With softcap the score is bounded and lo = 0.
__device__ __forceinline__ float2 transform_score_exact2(float acc, const FwdParams& p, float slope2, float dist) {
  if (p.softcap_out > 0.f) return make_float2(transform_score_exact(acc, p, slope2, dist), 0.f);
  const float a = __fmul_rn(acc, p.scale_log2), alo = fmaf(acc, p.scale_log2, -a);
  if (p.alibi == nullptr) return make_float2(a, isfinite(a) ? alo : 0.f);
  const float b = __fmul_rn(-slope2, dist), blo = fmaf(-slope2, dist, -b);
  const float s = __fadd_rn(a, b), bb = __fsub_rn(s, a);
  const float e = __fadd_rn(__fsub_rn(a, __fsub_rn(s, bb)), __fsub_rn(b, bb));
  return make_float2(s, isfinite(s) ? e + alo + blo : 0.f);  // (an infinite or NaN score: lo 0)
}

// Where a key tile [col0, col0 + cols) lies against the diagonals (key i + offset) of query
// rows [r0, r1]: 1 when each key is at or left of every row's diagonal, -1 when at or right
// of it, 0 when a diagonal crosses the tile. Uniform where r0, r1 and col0 are.
__device__ __forceinline__ int alibi_side(int r0, int r1, int offset, int col0, int cols) {
  return col0 + cols - 1 <= r0 + offset ? 1 : col0 >= r1 + offset ? -1 : 0;
}

// A key tile's raw scores (mma accumulator fragments: s[mi][nf][e] is query row row0 + 16 mi
// + 8 (e / 2), key col0 + 8 nf + 2 t + e % 2) -> transformed scores, every element (the mask
// comes after: masked ones become -inf there); f from the item's ScoreFold, offset = Sk - Sq
// of the sequence. The branches are uniform.
//
// ALiBi, -slope2 |i + offset - j| in the log2 domain (slope f.slope in the scores' units):
//  - side 0 (alibi_side; always without ro): per score from the distance, exact in fp32
//    (integers below 2^24) with one rounding in the product: three instructions (FADD of an
//    immediate, FMUL by the uniform slope, FADD of the magnitude; an FFMA with the slope as a
//    factor and an immediate took a MOV of the uniform register per score besides).
//  - side +-1 (the tile wholly on one side of the rows' diagonals): the term is
//    side (slope (j - col0) + slope2 (col0 - i - offset)); the first part per score by one FFMA
//    of the exact column offset (its FADD of an immediate is shared by the lane's two rows),
//    the second per row into ro[] (log2 units), which the softmax adds to the row's scores
//    (OnlineSoftmax's row offsets) instead of each score taking it.
// ro[] is 0 for the rows without a row term.
template <int kMI, int kNF>
__device__ __forceinline__ void transform_scores(float (&s)[kMI][kNF][4], const FwdParams& p, const ScoreFold& f,
                                                 int side, int offset, int row0, int col0, int t,
                                                 float (&ro)[2 * kMI]) {
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) ro[r] = 0.f;
  // (The tanh form is chosen once per tile: chosen per score, ptxas branched around each one.)
  if (p.softcap_out > 0.f && p.tanh_in != 0.f) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nf][e] = p.softcap_out * ptx::tanh_fast(s[mi][nf][e] * p.tanh_in);
  } else if (p.softcap_out > 0.f) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nf][e] = p.softcap_out * tanh_of_exp2_arg(s[mi][nf][e] * p.softcap_in);
  } else if (!f.folded) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nf][e] *= p.scale_log2;
  }
  if (p.alibi == nullptr) return;
  if (side != 0) {
    const float sl = side > 0 ? f.slope : -f.slope, jb = float(2 * t);
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        ro[2 * mi + half] = f.slope2 * float(side * (col0 - (row0 + 16 * mi + 8 * half) - offset));
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float jf = jb + float(nf * 8 + e);
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          s[mi][nf][e] = fmaf(jf, sl, s[mi][nf][e]);
          s[mi][nf][2 + e] = fmaf(jf, sl, s[mi][nf][2 + e]);
        }
      }
    return;
  }
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float d0 = float(row0 + 16 * mi + 8 * half + offset - col0 - 2 * t);  // the lane's first column's distance
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int e = 0; e < 2; ++e) s[mi][nf][2 * half + e] -= fabsf(f.slope * (d0 - float(nf * 8 + e)));
    }
}

// A row's (m, l) (log2 domain, m the max in use, l the full row sum 2^(z - m)) with the sink
// z_h joined (core::join_sink, in the natural-log domain): returns the factor of the row's
// unnormalized O and sets lse (natural log). A row with no visible key (l = 0): 0 and the
// sink; a sink of -inf: 1 / l and the row's own lse (-inf when l = 0).
__device__ __forceinline__ float join_sink_log2(float m, float l, float sink, float& lse) {
  const core::SinkJoin j = core::join_sink(m * kLn2F, l, sink);
  lse = j.lse;
  return j.inv;
}

}  // namespace flashcore::cuda
