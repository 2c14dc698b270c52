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

// exp2, both policies of core/exp2.hpp on 16 lanes. x = n + f with n = round(x),
// f in [-0.5, 0.5]; 2^f by a polynomial; 2^n applied by vscalefps, which scales by an
// integer power of two exactly, rounds subnormal results correctly and saturates to
// 0 / inf, so no exponent-field arithmetic or two-step scaling is needed.
//
// exact: degree-6 fit (relative truncation error 1.9e-9): <= 2 ulp over the fp32 range.
// The clamp to [-151, 128] maps -inf (a masked score) to -151 (2^-151 rounds to +0)
// and also keeps f finite; a NaN input gives 0 (vmaxps returns its second operand).
static inline __m512 exp2_exact(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-151.0f)), _mm512_set1_ps(128.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  static constexpr float kC[] = {1.5337569417518130e-4f, 1.3399860276460376e-3f,
                                 9.6185195618845430e-3f, 5.5503289977903830e-2f,
                                 2.4022646608459428e-1f, 6.9314720560033780e-1f,
                                 1.0000000005920564f};
  return _mm512_scalef_ps(horner(f, kC), n);
}

// 2^x for a clamped x: n = round(x) by the 1.5 * 2^23 addition, 2^(x - n) by the
// polynomial kC (Horner), 2^n by vscalefps (exp2_p16 and exp2_pbf16 below).
template <int N>
static inline __m512 exp2_rounded(__m512 x, const float (&kC)[N]) {
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_add_ps(x, magic), magic);
  return _mm512_scalef_ps(horner(_mm512_sub_ps(x, n), kC), n);
}

// exact where P is stored in 16 bits (fp16 or bf16 P of the 16-bit kernels): a degree-4
// fit, relative error 2.7e-6 with fp32 arithmetic, 180x below fp16's half ulp (2^-11) and
// 1400x below bf16's, so the stored P is the correctly rounded exp2 except within 2.7e-6
// of a rounding tie, where it may be the other neighbour (1 ulp of the 16-bit type).
// n = round(x) by the 1.5 * 2^23 addition (two adds on either FMA port, where vrndscaleps
// is two port-0 uops). Sapphire Rapids host, 1 thread, a 256 x 256 tile's exp2 + sum:
// 0.198 ns per value against 0.264 for exp2_exact (session 10 probe).
static inline __m512 exp2_p16(__m512 x) {
  static constexpr float kC[] = {9.5700970725210027e-3f, 5.5917863287911894e-2f,
                                 2.4024744976421386e-1f, 6.9312181440142462e-1f,
                                 9.9999926139192319e-1f};
  return exp2_rounded(_mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-151.0f)), _mm512_set1_ps(128.0f)), kC);
}

// exact where P is stored in bf16 (8 significant bits; the bf16 kernels' P): a degree-3
// fit, relative error 7.5e-5 with fp32 arithmetic, 26x below bf16's half ulp (2^-9), and
// only the lower clamp (-inf and NaN give 0 as in exp2_p16; the softmax's arguments are at
// most its rescale slack, 8, and a larger x still gives the right 2^x through vscalefps,
// up to inf): 7 vector ops against exp2_p16's 10.
static inline __m512 exp2_pbf16(__m512 x) {
  static constexpr float kC[] = {5.517147481e-2f, 2.426106781e-1f, 6.932609678e-1f, 9.999281168e-1f};
  return exp2_rounded(_mm512_max_ps(x, _mm512_set1_ps(-151.0f)), kC);
}

// fast: degree-2 fit, relative error <= 1.8e-3 (~9 bits; the seeds' FEXPA is ~7 bits).
// Results below 2^-126 flush to zero, as in core::exp2_fast: the clamp to -127 gives
// n = -127 and p * 2^-127 < 2^-126, which the final mask zeroes; this also avoids
// producing subnormals (microcode assists on some Intel cores).
static inline __m512 exp2_fast(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  static constexpr float kC[] = {2.3783041826769766e-1f, 7.0339652313338260e-1f,
                                 1.0005137006082232f};
  const __m512 p = horner(f, kC);
  const __mmask16 keep = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.5f), _CMP_GT_OQ);
  return _mm512_maskz_scalef_ps(keep, p, n);
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
