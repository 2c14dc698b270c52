// AVX2 + FMA softmax vector ops (VecOps in ukernel.hpp) for the AVX2 kernels (f32_*_avx2),
// over key-major tiles t[k * ldt + i].
//
// col_max and the fp32 k-major exp2_pack are written on ymm: each walks the query axis in
// chunks of up to 4 vectors (32 queries) and runs over the keys inside the chunk, so the
// per-query state (running max, c*m, row sums) stays in registers for the whole tile and
// 4 independent exp2 chains hide the FMA latency. Zen 3 VM, attention f32 B1 H16 S2048
// D128 on 2 threads: exp+pack 20.5 -> 13.8 ms per thread (0.61 -> 0.41 ns per value)
// against the portable body's x86-64-v3 clone (docs/results/cpu-avx2-2026-11-25.md). The
// polynomials, clamps and 2^n scaling are core/exp2.hpp's, so the values equal the
// portable ones except where FMA contraction differs.
//
// Query tails shorter than a vector (mq is a multiple of MR, e.g. 12 in softmax_v), the
// other P layouts and dtypes, and the remaining ops are the portable bodies, compiled here
// with the AVX2 flags.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"
#include "cpu/ukernels/vecops_portable.hpp"

namespace flashcore::cpu::ukernels {
namespace {

namespace port = flashcore::cpu::portable;

inline __m256 set(float x) { return _mm256_set1_ps(x); }

// 2^n for integer-valued n in [lo, hi] of the callers' clamps, as a float.
inline __m256 pow2i(__m256i n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

// core::exp2_exact on 8 lanes: arguments clamped to [-151, 128] (NaN to -151, so that the
// conversion is defined; NaN returned at the end), degree-6 polynomial on [-0.5, 0.5],
// 2^n as two factors so that n never leaves the normal range.
inline __m256 exp2_exact(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, set(-151.0f)), set(128.0f));  // max: NaN -> -151
  const __m256 nf = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(xc, nf);
  const __m256 f2 = _mm256_mul_ps(f, f);
  const __m256 a = _mm256_fmadd_ps(set(6.9314720560033780e-1f), f, set(1.0000000005920564f));
  const __m256 b = _mm256_fmadd_ps(set(5.5503289977903830e-2f), f, set(2.4022646608459428e-1f));
  const __m256 c = _mm256_fmadd_ps(set(1.3399860276460376e-3f), f, set(9.6185195618845430e-3f));
  __m256 p = _mm256_fmadd_ps(f2, set(1.5337569417518130e-4f), c);
  p = _mm256_fmadd_ps(f2, p, b);
  p = _mm256_fmadd_ps(f2, p, a);
  const __m256i n = _mm256_cvtps_epi32(nf);
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256 r = _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(_mm256_sub_epi32(n, n1)));
  return _mm256_blendv_ps(x, r, _mm256_cmp_ps(x, x, _CMP_ORD_Q));
}

// core::exp2_fast on 8 lanes: degree-2 polynomial, arguments below -126 flush to zero.
inline __m256 exp2_fast(__m256 x) {
  const __m256 xl = _mm256_max_ps(x, set(-127.0f));  // NaN -> -127 (returned at the end)
  const __m256 xc = _mm256_min_ps(_mm256_blendv_ps(set(-127.0f), xl, _mm256_cmp_ps(xl, set(-126.0f), _CMP_GE_OQ)),
                                  set(127.0f));
  const __m256 nf = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(xc, nf);
  __m256 p = _mm256_fmadd_ps(set(2.3783041826769766e-1f), f, set(7.0339652313338260e-1f));
  p = _mm256_fmadd_ps(p, f, set(1.0005137006082232f));
  const __m256i n = _mm256_cvtps_epi32(nf);
  const __m256 s = _mm256_and_ps(pow2i(n), _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_set1_epi32(-127))));
  return _mm256_blendv_ps(x, _mm256_mul_ps(p, s), _mm256_cmp_ps(x, x, _CMP_ORD_Q));
}

template <int NV>
void col_max_chunk(int64_t kc, const float* t, int64_t ldt, float* mx) {
  __m256 acc[NV];
  for (int j = 0; j < NV; ++j) acc[j] = _mm256_loadu_ps(mx + 8 * j);
  for (int64_t k = 0; k < kc; ++k, t += ldt)
    for (int j = 0; j < NV; ++j) acc[j] = _mm256_max_ps(acc[j], _mm256_loadu_ps(t + 8 * j));
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(mx + 8 * j, acc[j]);
}

void col_max(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx) {
  int64_t i = 0;
  for (; i + 32 <= mq; i += 32) col_max_chunk<4>(kc, t + i, ldt, mx + i);
  for (; i + 8 <= mq; i += 8) col_max_chunk<1>(kc, t + i, ldt, mx + i);
  if (i < mq) port::col_max(kc, mq - i, t + i, ldt, mx + i);
}

// p = exp2(c*t - cm) into fp32 P (k-major, leading dimension ldd); sum += p.
template <int NV, bool kFast>
void exp2_chunk(int64_t kc, const float* t, int64_t ldt, float c, const float* cm, float* d,
                int64_t ldd, float* sum) {
  __m256 cmv[NV], sv[NV];
  const __m256 cv = set(c);
  for (int j = 0; j < NV; ++j) {
    cmv[j] = _mm256_loadu_ps(cm + 8 * j);
    sv[j] = _mm256_loadu_ps(sum + 8 * j);
  }
  for (int64_t k = 0; k < kc; ++k, t += ldt, d += ldd)
    for (int j = 0; j < NV; ++j) {
      const __m256 x = _mm256_fmsub_ps(cv, _mm256_loadu_ps(t + 8 * j), cmv[j]);
      const __m256 p = kFast ? exp2_fast(x) : exp2_exact(x);
      _mm256_storeu_ps(d + 8 * j, p);
      sv[j] = _mm256_add_ps(sv[j], p);
    }
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(sum + 8 * j, sv[j]);
}

template <bool kFast>
void exp2_f32(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
              float* d, int64_t ldd, float* sum) {
  int64_t i = 0;
  for (; i + 32 <= mq; i += 32) exp2_chunk<4, kFast>(kc, t + i, ldt, c, cm + i, d + i, ldd, sum + i);
  for (; i + 8 <= mq; i += 8) exp2_chunk<1, kFast>(kc, t + i, ldt, c, cm + i, d + i, ldd, sum + i);
  if (i < mq)
    port::exp2_pack(kc, mq - i, t + i, ldt, c, cm + i, d + i, ldd, DType::f32, Layout::kmajor,
                    kFast ? Exp2Mode::fast : Exp2Mode::exact, sum + i);
}

void exp2_pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
               void* dst, int64_t ldd, DType dst_type, Layout layout, Exp2Mode mode,
               float* sum) {
  if (dst_type != DType::f32 || layout != Layout::kmajor)
    port::exp2_pack(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, mode, sum);
  else if (mode == Exp2Mode::fast)
    exp2_f32<true>(kc, mq, t, ldt, c, cm, static_cast<float*>(dst), ldd, sum);
  else
    exp2_f32<false>(kc, mq, t, ldt, c, cm, static_cast<float*>(dst), ldd, sum);
}

}  // namespace

const VecOps vecops_avx2 = {"vecops_avx2", Isa::avx2, col_max, exp2_pack, port::pack, port::scale_rows,
                            port::add_f16_tile, port::f16_tile_as, port::store_row, nullptr, nullptr};

}  // namespace flashcore::cpu::ukernels
