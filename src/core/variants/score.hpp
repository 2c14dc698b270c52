// Score variants shared by the CPU pipelines and (later) the CUDA kernels: what happens to a
// scaled score s = scale * q.k before the softmax, and how a sink logit joins a row's sum.
// The reference (src/reference) computes the same in fp64 on its own, as the truth.
//
//   softcap c > 0:  s -> c * tanh(s / c)                (Gemma 2, FlashAttention's softcap)
//   ALiBi slope m:  s -> s - m * |i + Sk - Sq - j|       (after the softcap; bottom-right
//                   aligned like the masks, so a query's own key has distance 0)
//   sink z:         a logit in each row's softmax sum with no value: O = sum_j e^(s_j) v_j /
//                   (e^z + sum_j e^(s_j)), lse = log(e^z + sum_j e^(s_j))
//
// Every hook is the identity when its variant is off (softcap 0, slope 0, no sink), so a
// kernel can call them unconditionally where that is cheaper than a branch; the CPU pipelines
// decide once per call whether to run them at all (ScoreMod::active).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/exp2.hpp"
#include "core/variants/mask.hpp"

// Host copies are `static` (one per translation unit, compiled with that unit's ISA flags:
// see core/exp2.hpp); device code gets the CUDA form.
#if defined(__CUDACC__)
#define FC_SHD __host__ __device__ __forceinline__
#else
#define FC_SHD static inline
#endif

namespace flashcore::core {

// tanh in fp32, branch-free so that loops over it vectorize (the CPU's portable code):
// (e - 1) / (e + 1) with e = exp2_exact(2 x log2 e), the exponent clamped at 64 (beyond it
// the result is 1 in fp32; this also keeps e finite). Absolute error <= 1.4e-7 (checked on a
// grid of step 1e-5 over [-20, 20] against fp64 tanh; relative error <= 6.3e-7 where |tanh|
// > 0.1): what the softcap needs, since an error in a score is an absolute one (a Taylor
// branch near 0 for relative accuracy there cost more time than it was worth:
// docs/results/cpu-variants-2026-11-29.md). NaN stays NaN (the clamp keeps it), +-inf gives
// +-1. Device code: tanhf.
FC_SHD float tanh_f32(float x) {
#if defined(__CUDA_ARCH__)
  return tanhf(x);
#else
  const float y = 2.0f * kLog2e * x;
  const float e = exp2_exact(y > 64.0f ? 64.0f : y);
  return (e - 1.0f) / (e + 1.0f);
#endif
}

// The two score hooks. Kernels that decide once per call which variants run (the CPU's
// loops, templated on them) call these directly; ScoreMod::apply composes them.
// softcap(s) = c * tanh(s / c), given c and 1 / c; with `tanh_out`, tanh(s / c) too (the
// backward's derivative is 1 - tanh^2).
FC_SHD float softcap_score(float s, float cap, float inv_cap, float* tanh_out = nullptr) {
  const float t = tanh_f32(s * inv_cap);
  if (tanh_out != nullptr) *tanh_out = t;
  return cap * t;
}
// ALiBi: the score of a query whose slope is `slope` and whose key is `dist` = |i + Sk - Sq - j|
// positions away.
FC_SHD float alibi_score(float s, float slope, float dist) { return s - slope * dist; }

// The score transform of one call: softcap and ALiBi (sinks act on the row sums, below).
struct ScoreMod {
  float softcap = 0.0f;      // > 0: on
  float inv_softcap = 0.0f;  // 1 / softcap
  bool alibi = false;        // per-row slopes given (a row's slope may still be 0)

  FC_HD bool active() const { return softcap > 0.0f || alibi; }

  // The transformed score of scaled score s (slope and dist are ALiBi's; slope 0 without).
  FC_HD float apply(float s, float slope, float dist) const {
    if (softcap > 0.0f) s = softcap_score(s, softcap, inv_softcap);
    return alibi_score(s, slope, dist);
  }
};

inline ScoreMod make_score_mod(float softcap, bool alibi) {
  ScoreMod m;
  m.softcap = softcap > 0.0f ? softcap : 0.0f;
  m.inv_softcap = softcap > 0.0f ? 1.0f / softcap : 0.0f;
  m.alibi = alibi;
  return m;
}

// A row's softmax with a sink logit joined: its keys gave the (scaled, natural-log) max m
// and the sum l = sum_j exp(s_j - m); `inv` multiplies the row's sum_j exp(s_j - m) v_j into
// O and `lse` is the row's log-sum-exp with the sink. A row with no key (l = 0) gives O = 0
// and lse = the sink. Taken relative to max(m, sink), so neither term overflows. A NaN l (a
// NaN score) stays NaN; a sink of -inf is no sink, a NaN or +inf sink gives NaN rows.
struct SinkJoin {
  float inv, lse;
};
FC_SHD SinkJoin join_sink(float m, float l, float sink) {
  if (l == 0.0f) return {0.0f, sink};
  const float mx = m > sink ? m : sink;
  const float a = std::exp(m - mx), b = std::exp(sink - mx);
  const float total = l * a + b;
  return {a / total, mx + std::log(total)};
}

}  // namespace flashcore::core
