// AVX2 + FMA fp32 GEMM micro-kernels for x86 CPUs without AVX-512 (AMD Zen 2/3, Intel
// before Skylake-SP and its client cores): C[MR x NV*8] (=|+=) A^T B on ymm, seed 000's
// register-tiled schedule (ukernel.hpp's k-major operands, like f32_*_avx512).
//
// Per k step: NV ymm loads of the B panel, then MR broadcasts of A(k, i) (vbroadcastss
// from memory: a load uop) each feeding NV FMAs. Two FMA pipes of 4-5 cycles latency need
// >= 10 independent accumulators; both shapes keep 12 of the 16 ymm registers:
//   6x2  12 + 2 B + 1 A, 8 loads per 12 FMAs (BLIS's Haswell tile);
//   4x3  12 + 3 B + 1 A, 7 loads per 12 FMAs; attention 1.03x over 6x2 on a Zen 3 VM,
//        GEMM-only equal (docs/results/cpu-avx2-2026-11-25.md), so `auto` takes it.
// The k loop is unrolled 4x; a kc % 4 tail runs the same step.
// The portable kernels' x86-64-v3 clone runs 4-wide FMAs (their generic vectors are 128
// bits), so this one is the 8-wide kernel those CPUs otherwise lack.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

template <int MR, int NV>
__attribute__((always_inline)) inline void step(const float* a, const float* b,
                                                __m256 (&acc)[MR][NV]) {
  __m256 bv[NV];
#pragma GCC unroll 3
  for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
  }
}

template <int MR, int NV>
__attribute__((always_inline)) inline void gemm(int64_t kc, const void* a_, int64_t as,
                                                const void* b_, void* c_, int64_t ldc,
                                                int accumulate) {
  constexpr int NR = 8 * NV;
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  float* c = static_cast<float*>(c_);
  __m256 acc[MR][NV];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    step<MR, NV>(a, b, acc);
    step<MR, NV>(a + as, b + NR, acc);
    step<MR, NV>(a + 2 * as, b + 2 * NR, acc);
    step<MR, NV>(a + 3 * as, b + 3 * NR, acc);
    a += 4 * as;
    b += 4 * NR;
  }
  for (; k < kc; ++k, a += as, b += NR) step<MR, NV>(a, b, acc);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      float* p = c + i * ldc + 8 * v;
      _mm256_storeu_ps(p, accumulate ? _mm256_add_ps(_mm256_loadu_ps(p), acc[i][v]) : acc[i][v]);
    }
}

}  // namespace

void f32_6x2_avx2(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                  int accumulate) {
  gemm<6, 2>(kc, a, as, b, c, ldc, accumulate);
}
void f32_4x3_avx2(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                  int accumulate) {
  gemm<4, 3>(kc, a, as, b, c, ldc, accumulate);
}

}  // namespace flashcore::cpu::ukernels
