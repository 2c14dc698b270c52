// AVX2 + FMA fp32 GEMM micro-kernel for x86 CPUs without AVX-512 (AMD Zen 2/3, Intel
// before Skylake-SP and its client cores): C[6 x 16] (=|+=) A^T B on ymm, seed 000's
// register-tiled schedule (ukernel.hpp's k-major operands, like f32_*_avx512).
//
// Per k step: 2 ymm loads of the B panel, then 6 broadcasts of A(k, i) (vbroadcastss from
// memory: a load uop) each feeding 2 FMAs. 12 accumulators + 2 B + 1 A = 15 of the 16 ymm
// registers; two FMA pipes of 4-5 cycles latency need >= 10 independent accumulators.
// Loads per FMA: 8 / 12. The k loop is unrolled 4x; a kc % 4 tail runs the same step.
// The portable kernels' x86-64-v3 clone runs 4-wide FMAs (their generic vectors are 128
// bits), so this one is the 8-wide kernel those CPUs otherwise lack.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

constexpr int kMR = 6, kNV = 2, kNR = 8 * kNV;

__attribute__((always_inline)) inline void step(const float* a, const float* b,
                                                __m256 (&acc)[kMR][kNV]) {
  __m256 bv[kNV];
#pragma GCC unroll 2
  for (int v = 0; v < kNV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
  }
}

}  // namespace

void f32_6x2_avx2(int64_t kc, const void* a_, int64_t as, const void* b_, void* c_, int64_t ldc,
                  int accumulate) {
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  float* c = static_cast<float*>(c_);
  __m256 acc[kMR][kNV];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    step(a, b, acc);
    step(a + as, b + kNR, acc);
    step(a + 2 * as, b + 2 * kNR, acc);
    step(a + 3 * as, b + 3 * kNR, acc);
    a += 4 * as;
    b += 4 * kNR;
  }
  for (; k < kc; ++k, a += as, b += kNR) step(a, b, acc);
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) {
      float* p = c + i * ldc + 8 * v;
      _mm256_storeu_ps(p, accumulate ? _mm256_add_ps(_mm256_loadu_ps(p), acc[i][v]) : acc[i][v]);
    }
}

}  // namespace flashcore::cpu::ukernels
