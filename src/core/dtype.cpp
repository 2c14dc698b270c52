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
