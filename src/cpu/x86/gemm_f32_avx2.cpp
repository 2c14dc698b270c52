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
// The k loop is inline assembly with the 12 accumulators pinned to ymm0-11, B in ymm12-14
// and the A broadcast in ymm15. The intrinsics version it replaced (4x unrolled, 12
// accumulators in an array) left GCC 12 one ymm short: it reloaded B as FMA memory operands
// (12 B loads per k step instead of 3) and spilled address registers inside the loop, and
// ran at 84 % of the AVX2 peak in the GEMM-only suite on a Zen 3 VM; a standalone copy of it
// at 35 GFLOP/s against 100 for this loop (docs/results/cpu-avx2-2026-11-25.md).
// The portable kernels' x86-64-v3 clone runs 4-wide FMAs (their generic vectors are 128
// bits), so this one is the 8-wide kernel those CPUs otherwise lack.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

// Pieces of the k loop's assembly. Accumulator (i, v) of an MR x NV tile is ymm(i*NV + v).
#define FC_B3 "vmovups (%[b]), %%ymm12\n\t" "vmovups 32(%[b]), %%ymm13\n\t" "vmovups 64(%[b]), %%ymm14\n\t"
#define FC_B2 "vmovups (%[b]), %%ymm12\n\t" "vmovups 32(%[b]), %%ymm13\n\t"
#define FC_BCAST(off) "vbroadcastss " #off "(%[a]), %%ymm15\n\t"
#define FC_FMA(bv, acc) "vfmadd231ps %%ymm" #bv ", %%ymm15, %%ymm" #acc "\n\t"
#define FC_ROW3(off, r0, r1, r2) FC_BCAST(off) FC_FMA(12, r0) FC_FMA(13, r1) FC_FMA(14, r2)
#define FC_ROW2(off, r0, r1) FC_BCAST(off) FC_FMA(12, r0) FC_FMA(13, r1)
#define FC_ZERO12                                                                                  \
  "vxorps %%xmm0, %%xmm0, %%xmm0\n\t" "vmovaps %%ymm0, %%ymm1\n\t" "vmovaps %%ymm0, %%ymm2\n\t"    \
  "vmovaps %%ymm0, %%ymm3\n\t" "vmovaps %%ymm0, %%ymm4\n\t" "vmovaps %%ymm0, %%ymm5\n\t"           \
  "vmovaps %%ymm0, %%ymm6\n\t" "vmovaps %%ymm0, %%ymm7\n\t" "vmovaps %%ymm0, %%ymm8\n\t"           \
  "vmovaps %%ymm0, %%ymm9\n\t" "vmovaps %%ymm0, %%ymm10\n\t" "vmovaps %%ymm0, %%ymm11\n\t"
#define FC_STORE12                                                                                 \
  "vmovaps %%ymm0, (%[t])\n\t" "vmovaps %%ymm1, 32(%[t])\n\t" "vmovaps %%ymm2, 64(%[t])\n\t"       \
  "vmovaps %%ymm3, 96(%[t])\n\t" "vmovaps %%ymm4, 128(%[t])\n\t" "vmovaps %%ymm5, 160(%[t])\n\t"   \
  "vmovaps %%ymm6, 192(%[t])\n\t" "vmovaps %%ymm7, 224(%[t])\n\t" "vmovaps %%ymm8, 256(%[t])\n\t"  \
  "vmovaps %%ymm9, 288(%[t])\n\t" "vmovaps %%ymm10, 320(%[t])\n\t" "vmovaps %%ymm11, 352(%[t])\n\t"
// One k loop: zero the accumulators, run kc steps of STEP (which ends by moving a on by as
// floats and b on by one panel row), store the 12 accumulators to t (96 floats, 32-byte
// aligned) in row-major order.
#define FC_K_LOOP(STEP, b_row_bytes)                                                               \
  __asm__ volatile(FC_ZERO12 "test %[n], %[n]\n\t" "jle 2f\n\t"                                    \
                   "1:\n\t" STEP "add %[asb], %[a]\n\t" "add $" #b_row_bytes ", %[b]\n\t"          \
                   "dec %[n]\n\t" "jnz 1b\n\t"                                                     \
                   "2:\n\t" FC_STORE12                                                             \
                   : [a] "+r"(a), [b] "+r"(b), [n] "+r"(n)                                         \
                   : [asb] "r"(as * 4), [t] "r"(t)                                                 \
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",      \
                     "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc")

template <int MR, int NV>
void k_loop(int64_t n, const float* a, int64_t as, const float* b, float* t);
template <>
void k_loop<4, 3>(int64_t n, const float* a, int64_t as, const float* b, float* t) {
  FC_K_LOOP(FC_B3 FC_ROW3(0, 0, 1, 2) FC_ROW3(4, 3, 4, 5) FC_ROW3(8, 6, 7, 8)
                FC_ROW3(12, 9, 10, 11), 96);
}
template <>
void k_loop<6, 2>(int64_t n, const float* a, int64_t as, const float* b, float* t) {
  FC_K_LOOP(FC_B2 FC_ROW2(0, 0, 1) FC_ROW2(4, 2, 3) FC_ROW2(8, 4, 5) FC_ROW2(12, 6, 7)
                FC_ROW2(16, 8, 9) FC_ROW2(20, 10, 11), 64);
}

template <int MR, int NV>
__attribute__((always_inline)) inline void gemm(int64_t kc, const void* a, int64_t as,
                                                const void* b, void* c_, int64_t ldc,
                                                int accumulate) {
  static_assert(MR * NV == 12, "the loop keeps 12 accumulators in ymm0-11");
  alignas(32) float t[MR * NV * 8];
  k_loop<MR, NV>(kc, static_cast<const float*>(a), as, static_cast<const float*>(b), t);
  float* c = static_cast<float*>(c_);
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      float* p = c + i * ldc + 8 * v;
      const __m256 x = _mm256_load_ps(t + (i * NV + v) * 8);
      _mm256_storeu_ps(p, accumulate ? _mm256_add_ps(_mm256_loadu_ps(p), x) : x);
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
