#include "core/dtype.hpp"

#include "core/clones.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace flashcore::core {

#if defined(__x86_64__)
namespace {
// fp16 -> fp32 by vcvtph2ps (F16C, exact for every fp16 value; NaNs come out quiet), on
// x86 CPUs that have it: every AVX2 CPU and most before. The decode path widens each f16
// key and value row it reads; the branch-free bit form below took 5.4 ms where bf16 took
// 3.3 (Zen 3 VM, B1 H32/8 Sq1 Sk8192 D128, 2 threads, docs/results/cpu-avx2-2026-11-25.md).
__attribute__((target("avx,f16c"))) void f16_row_f16c(const uint16_t* s, int64_t n, float* d) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}
// cpuid leaf 1: F16C, AVX and OSXSAVE, and the OS saving the ymm state (XCR0 bits 1-2).
// (Clang 14's __builtin_cpu_supports does not know "f16c".)
bool have_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    if ((c >> 27 & 1u) == 0 || (c >> 28 & 1u) == 0 || (c >> 29 & 1u) == 0) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return yes;
}
}  // namespace
#endif

#if defined(__x86_64__)
// e4m3 -> fp32 by vcvtph2ps: the 7 magnitude bits shifted to bits 7..13 of a binary16 (the
// sign to bit 15) are that fp16 number 2^(e - 15) (1 + m / 8), or m 2^-17 when e = 0 (an
// fp16 subnormal, which vcvtph2ps widens exactly); times 2^8 that is the e4m3 value, normal
// or subnormal, exactly and without subnormal fp32 arithmetic. S.1111.111 becomes NaN.
// Reading an fp8 KV cache widens every key and value this way (the scalar decode took 4x
// the bf16 cache's time at B32 H32/8 Sk4096 D128 on 2 threads).
__attribute__((target("avx2,f16c"))) void e4m3_row_avx2(const uint8_t* s, int64_t n, float* d) {
  const __m256 k256 = _mm256_set1_ps(256.0f), qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
  const __m128i m7f = _mm_set1_epi16(0x7F), m80 = _mm_set1_epi16(0x80);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + i)));
    const __m128i mag = _mm_and_si128(x, m7f);
    const __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(x, m80), 8));
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), k256);
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, m7f)));
    _mm256_storeu_ps(d + i, _mm256_or_ps(_mm256_blendv_ps(v, qnan, nan),
                                         _mm256_and_ps(nan, _mm256_castsi256_ps(_mm256_slli_epi32(
                                                                 _mm256_cvtepu16_epi32(_mm_and_si128(x, m80)), 24)))));
  }
  for (; i < n; ++i) d[i] = e4m3_to_f32(s[i]);
}
// The same 16 at a time where AVX-512 (F, BW, VL) is there.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void e4m3_row_avx512(const uint8_t* s, int64_t n, float* d) {
  const __m512 k256 = _mm512_set1_ps(256.0f), qnan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000));
  const __m256i m7f = _mm256_set1_epi16(0x7F), m80 = _mm256_set1_epi16(0x80);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    const __m256i mag = _mm256_and_si256(x, m7f);
    const __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(_mm256_and_si256(x, m80), 8));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, m7f);
    _mm512_storeu_ps(d + i, _mm512_mask_blend_ps(nan, _mm512_mul_ps(_mm512_maskz_cvtph_ps(0xFFFF, h), k256), qnan));
  }
  for (; i < n; ++i) d[i] = e4m3_to_f32(s[i]);
}
bool have_e4m3_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}
bool have_e4m3_avx2() {
  static const bool yes = have_f16c() && __builtin_cpu_supports("avx2");
  return yes;
}
#endif

// Widening rows of K/V/Q to fp32 is on the decode path's critical path (the row ops
// convert every f16/bf16 key and value row they read): the portable clones, so the
// x86-64-v3 clone converts 8 lanes at a time.
FC_PORTABLE_CLONES void convert_row(const void* src, DType st, int64_t n, float* dst) {
  switch (st) {
    case DType::f32: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      break;
    }
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
#if defined(__x86_64__)
      if (have_f16c()) {
        f16_row_f16c(s, n, dst);
        break;
      }
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::e4m3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
#if defined(__x86_64__)
      if (have_e4m3_avx512()) {
        e4m3_row_avx512(s, n, dst);
        break;
      }
      if (have_e4m3_avx2()) {
        e4m3_row_avx2(s, n, dst);
        break;
      }
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_f32(s[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(src, i, st);
  }
}

// And back (the output rows of attention and softmax_v): branch-free f32_to_f16 / f32_to_bf16,
// so the x86-64-v3 clone converts 8 lanes at a time too.
FC_PORTABLE_CLONES void convert_row(const float* src, int64_t n, void* dst, DType dt) {
  switch (dt) {
    case DType::f32: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      break;
    }
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      break;
    }
    case DType::bf16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) store_from_f32(dst, i, dt, src[i]);
  }
}

}  // namespace flashcore::core
