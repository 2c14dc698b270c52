// The score variants on mma accumulator fragments (softcap, ALiBi; core/variants/score.hpp
// for the definitions) and the sink joined to a row's softmax, for the kernels' variant
// forms (FwdParams::variants). The plain kernels never include these steps.
//
// The kernels' softmax works in the log2 domain. A variant tile's raw scores acc = q.k become
// the transformed scores times log2 e before the mask and the row max, or (ScoreFold, the
// sm90 variant rows) a form of them that the softmax's own FFMA, with a factor and a row
// offset, turns into the log2 domain:
//   softcap c:  c log2 e * tanh(scale acc / c) = C - 2 C / (2^y + 1), C = c log2 e,
//               y = 2 x log2 e = acc * FwdParams::softcap_in (one MUFU.EX2, one MUFU.RCP; y past
//               127 gives 2^y = inf and the cap C, y below -126 flushes 2^y to 0: -C). Absolute
//               error of tanh ~2.4e-7 (ex2.approx's 2^-22 relative, rcp.approx's ulp): the
//               score's error is c times that, as the CPU's tanh_f32 (core/variants/score.hpp).
//               Folded: the scores leave as u = -1 / (2^y + 1), the softmax's factor is 2 C
//               and its row offset C (z = 2 C u + C in the exponent's FFMA: no FFMA here).
//               tanh.approx.f32 would take one MUFU op instead of two, but its ~2^-11
//               relative error is c * 5e-4 in the score (a 2.4% error of P at c = 50), more
//               than the 16-bit types' rounding of P: it is taken only under Exp2Mode::fast
//               (FwdParams::tanh_in), as the FlashAttention kernels take it always; folded,
//               the scores leave as tanh and the factor is C.
//   no softcap: acc * scale log2 e (any sign of the scale); or, folded, acc as it is, the
//               scale left to the softmax's exponent.
//   ALiBi m:    minus m log2 e * |i + Sk - Sq - j| (the sequence's lengths, bottom-right);
//               folded, in the scores' units (over the softmax's factor).
// Each step costs the consumer's issue slots, which bound these kernels (more than the MUFU
// unit: docs/results/cuda-variants-2026-12-01.md moved exponentials to the FP32 pipe and lost).
#pragma once

#include <cmath>

#include "core/variants/score.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {

constexpr float kLog2eF = 1.4426950408889634f;
constexpr float kLn2F = 0.69314718055994531f;

// -1 / (2^y + 1), and the capped score C - 2 C / (2^y + 1) from it (above).
__device__ __forceinline__ float softcap_u(float y) { return ptx::rcp_fast(-(ptx::exp2_fast(y) + 1.f)); }

// The ALiBi slope of (sequence or batch entry b, head h) times log2 e (0 without ALiBi): the
// one register the variants hold across the key loop; every other factor is read from the
// kernel parameters (constant memory) where it is used.
__device__ __forceinline__ float alibi_slope_log2(const FwdParams& p, int b, int h) {
  return p.alibi != nullptr ? p.alibi[b * p.alibi_sb + h] * kLog2eF : 0.f;
}

// How a variant kernel's tile scores reach the softmax (one per item; slope2 from
// alibi_slope_log2). Folded (the sm90 variant rows: allow), the softmax's exponent is
// fma(score, factor, row offset - max): with softcap the scores leave transform_scores as
// u or tanh (above; factor 2 C or C, offset C or 0); without, as acc with factor
// p.scale_log2 as in the plain kernels, unless the scale is below kFoldFrom (zero, negative,
// or so small that the ALiBi term over it could overflow): then the scores go to the log2
// domain here, times the scale, and the softmax takes factor 1. ALiBi's term is added in the
// scores' units: factor (s + slope2 d / factor) = factor s + slope2 d, with the rounding of
// one fp32 sum.
struct ScoreFold {
  static constexpr float kFoldFrom = 0x1p-20f;
  bool capped;   // softcap folded into the softmax's factor (allow and p.softcap_out > 0)
  bool folded;   // the scale folded (allow, no softcap, scale_log2 >= kFoldFrom)
  float factor;  // the softmax's factor: 2 C or C (capped), p.scale_log2 (folded) or 1
  float base;    // the rows' offset in log2 units: C for the exact cap, else 0
  float slope;   // the ALiBi slope in the scores' units: slope2 / factor
  float slope2;  // the ALiBi slope times log2 e
  // allow = false: scores leave in the log2 domain (kernels whose softmax takes factor 1).
  __device__ __forceinline__ ScoreFold(const FwdParams& p, float slope_log2, bool allow = true)
      : capped(allow && p.softcap_out > 0.f),
        folded(allow && !(p.softcap_out > 0.f) && p.scale_log2 >= kFoldFrom),
        factor(capped ? (p.tanh_in != 0.f ? p.softcap_out : 2.f * p.softcap_out) : folded ? p.scale_log2 : 1.f),
        base(capped && p.tanh_in == 0.f ? p.softcap_out : 0.f),
        slope(slope_log2 / factor),
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

// s = fn(s) on every element of a tile's fragments.
template <int kMI, int kNF, class Fn>
__device__ __forceinline__ void each_score(float (&s)[kMI][kNF][4], Fn&& fn) {
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mi][nf][e] = fn(s[mi][nf][e]);
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
//    side (slope (j - col0 - 2 t) + slope2 (col0 + 2 t - i - offset)) for lane t: the first
//    part per score by one FFMA of an immediate (the fragment's column, 8 nf + e % 2), the
//    second per row into ro[] (log2 units, the lane's own: OnlineSoftmax takes each lane's
//    offset before the row's max over the quad), which the softmax adds to the row's scores
//    (OnlineSoftmax's row offsets) instead of each score taking it.
// ro[] starts at f.base (the exact cap's C, else 0).
template <int kMI, int kNF>
__device__ __forceinline__ void transform_scores(float (&s)[kMI][kNF][4], const FwdParams& p, const ScoreFold& f,
                                                 int side, int offset, int row0, int col0, int t,
                                                 float (&ro)[2 * kMI]) {
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) ro[r] = f.base;
  // (The form is chosen once per tile: chosen per score, ptxas branched around each one.)
  if (p.softcap_out > 0.f) {
    const float tin = p.tanh_in, yin = p.softcap_in, c = p.softcap_out, c2 = 2.f * p.softcap_out;
    if (f.capped && tin != 0.f) each_score(s, [&](float x) { return ptx::tanh_fast(x * tin); });
    else if (f.capped) each_score(s, [&](float x) { return softcap_u(x * yin); });
    else if (tin != 0.f) each_score(s, [&](float x) { return c * ptx::tanh_fast(x * tin); });
    else each_score(s, [&](float x) { return fmaf(c2, softcap_u(x * yin), c); });
  } else if (!f.folded) {
    const float sc = p.scale_log2;
    each_score(s, [&](float x) { return x * sc; });
  }
  if (p.alibi == nullptr) return;
  if (side != 0) {
    const float sl = side > 0 ? f.slope : -f.slope;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        ro[2 * mi + half] += f.slope2 * float(side * (col0 + 2 * t - (row0 + 16 * mi + 8 * half) - offset));
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          s[mi][nf][e] = fmaf(float(nf * 8 + e), sl, s[mi][nf][e]);
          s[mi][nf][2 + e] = fmaf(float(nf * 8 + e), sl, s[mi][nf][2 + e]);
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
