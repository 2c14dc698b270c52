// Typed AVX-512 (F + BW) helpers shared by the x86 micro-kernel TUs. Include only from a
// TU compiled with at least -mavx512f -mavx512bw -mavx512vl -mavx512dq. Everything is
// `static inline` in an ISA-named namespace, so a copy compiled with other flags (e.g.
// the AVX512-FP16 TU) never replaces this one in the linker.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace flashcore::cpu::avx512 {

// Lanes [0, n) of a 16-lane vector (n may exceed 16).
static inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

static inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void store(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }

// The register-blocked GEMM kernels' accumulators, zeroed.
template <int MR, int NV>
static inline void zero_tile(__m512 (&acc)[MR][NV]) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
}

// The C tile of the register-blocked GEMM kernels: C[i][16 v ..] (=|+=) acc[i][v],
// rows ldc floats apart (fp32 C, full vectors: the pipelines pad C to whole tiles).
template <int MR, int NV>
static inline void store_c_tile(float* c, int64_t ldc, const __m512 (&acc)[MR][NV], int accumulate) {
  if (accumulate) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* q = c + i * ldc + 16 * v;
        _mm512_storeu_ps(q, _mm512_add_ps(_mm512_loadu_ps(q), acc[i][v]));
      }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
  }
}

// p(f) = c[0] f^(N-1) + ... + c[N-1] by Horner's rule (coefficients highest degree first).
template <int N>
static inline __m512 horner(__m512 f, const float (&c)[N]) {
  __m512 p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
  for (int i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[i]));
  return p;
}

// exp2 on 16 lanes, four accuracies. x = n + f with n = floor(x) and f = x - n in [0, 1)
// from one vreduceps (round-down mode, 0 fraction bits); 2^f by a polynomial fitted on
// [0, 1) (relative weight, Lawson iterations); 2^n applied by vscalefps, which multiplies
// by 2^floor of its second operand, so x itself is passed. vscalefps scales exactly,
// rounds subnormal results correctly and saturates to 0 / inf, and vreduceps maps +-inf
// to 0, so no clamp is needed: -inf (a masked score) and x < -150 give +0, x >= 128 inf,
// NaN stays NaN (as core::exp2_exact; the clamp vmaxps(x, -151) of the previous form
// turned it into 0). Against that form (n by vrndscaleps or the 1.5 * 2^23 shift,
// f = x - n, the clamps) this saves 3-4 of 8-11 vector ops: Sapphire Rapids host, 1
// thread, exp2 of an L1-resident array, ns per value: exact 0.145 -> 0.103, exp2_p16
// 0.130 -> 0.084, exp2_pbf16 0.110 -> 0.079 with the clamp still in (2026-11-26 probe, 6a0ea8e),
// same errors.
template <int N>
static inline __m512 exp2_floored(__m512 x, const float (&kC)[N]) {
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  return _mm512_scalef_ps(horner(f, kC), x);
}

// exact: degree 6 (truncation error 1.9e-9 relative): <= 2 ulp over the fp32 range
// (1 ulp at worst on a 1/8192 grid of [-151.5, 128.5], subnormal results included).
static inline __m512 exp2_exact(__m512 x) {
  static constexpr float kC[] = {2.1701921469e-04f, 1.2439784217e-03f, 9.6788306833e-03f,
                                 5.5483346981e-02f, 2.4022983521e-01f, 6.9314698392e-01f,
                                 1.0000000019e+00f};
  return exp2_floored(x, kC);
}

// exact where P is stored in 16 bits (fp16 or bf16 P of the 16-bit kernels): a degree-4
// fit, relative error 2.6e-6 with fp32 arithmetic, 180x below fp16's half ulp (2^-11) and
// 1400x below bf16's, so the stored P is the correctly rounded exp2 except within 2.6e-6
// of a rounding tie, where it may be the other neighbour (1 ulp of the 16-bit type).
static inline __m512 exp2_p16(__m512 x) {
  static constexpr float kC[] = {1.3534167646e-02f, 5.2011461128e-02f, 2.4144275659e-01f,
                                 6.9300383453e-01f, 1.0000025934e+00f};
  return exp2_floored(x, kC);
}

// exact where P is stored in bf16 (8 significant bits; the bf16 kernels' P): a degree-3
// fit, relative error 7.5e-5 with fp32 arithmetic, 26x below bf16's half ulp (2^-9).
static inline __m512 exp2_pbf16(__m512 x) {
  static constexpr float kC[] = {7.8024520041e-02f, 2.2606715913e-01f, 6.9583353922e-01f,
                                 9.9992521862e-01f};
  return exp2_floored(x, kC);
}

// fast: degree-2 fit, relative error <= 1.8e-3 (1.7e-3; ~9 bits; the seeds' FEXPA is ~7
// bits). As core::exp2_fast: x clamped to 127 above, results below 2^-126 (x < -126)
// flushed to zero, which also avoids producing subnormals (microcode assists on some
// Intel cores), NaN kept (vminps returns its second operand for a NaN, and the unordered
// comparison keeps the lane).
static inline __m512 exp2_fast(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(127.0f), x);
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  static constexpr float kC[] = {3.3718941589e-01f, 6.5763629307e-01f, 1.0017247615e+00f};
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, horner(f, kC), x);
}

// fp32 -> fp16 (round to nearest even, F16C-class vcvtps2ph on zmm: AVX512F).
static inline __m256i to_f16(__m512 v) {
  return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline __m512 from_f16(__m256i h) { return _mm512_cvtph_ps(h); }

// fp32 -> bf16 bits in the low half of each 32-bit lane, round to nearest even:
// u + 0x7FFF + ((u >> 16) & 1), then drop the low 16 bits. Inputs here are finite
// (softmax probabilities, GEMM operands), so the NaN case of core::f32_to_bf16 is not needed.
static inline __m512i to_bf16_rounded(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd);
  return _mm512_srli_epi32(r, 16);
}
// The fp32 value a bf16 lane (as produced above) stands for.
static inline __m512 bf16_value(__m512i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
}
static inline __m256i narrow_u16(__m512i b) { return _mm512_cvtepi32_epi16(b); }

}  // namespace flashcore::cpu::avx512
