// AVX512-FP16 GEMM micro-kernels (vfmadd231ph: 32 fp16 lanes per zmm, twice the fp32
// FMA rate). Operands fp16 (packing converts into it); layout as in ukernel.hpp.
//
// f16_12x2_noepi4_avx512fp16: seed 000's "noepi" trade. C is fp16 and the sums are fp16
//   all the way (no epilogue conversion); 4x k-unrolled. The pipeline (gemm_call) calls it
//   on k chunks of at most kKeyTile and adds each chunk's fp16 tile into fp32, so fp16
//   rounding accumulates over <= 256 products: relative error ~ 2^-11 * sqrt(256) per
//   chunk in the worst direction, fine for softmax P (<= 1) times V at 1e-2 tolerance;
//   a |sum| above 65504 would overflow to inf, so it is for normalized operands only.
// There is no fp32-accumulating variant: AVX512-FP16 has no fp16 x fp16 -> fp32 dot
//   product (that needs AMX-FP16 or AVX10.2), and widening the operands before fp32 FMAs
//   cannot beat f32_*_avx512 on operands widened at packing, which is what `auto` does for
//   fp16 storage. (A variant with fp32 C and fp16 partial sums over 32 k steps was tried;
//   it fails the fp32-accumulation error bound of tests/ukernels and missed the lse
//   tolerance in attention, so it was removed.)
//
// Register use: 24 fp16 accumulators (12 rows x 2 zmm = 64 columns) + 2 B; A comes as a
// memory broadcast operand. Measured 88.7 % of the fp16 FMA peak GEMM-only, 1 thread, on
// 64-byte aligned operands (docs/results/cpu-x86-2026-11-22.md, session 9; the earlier
// 55-85 % figures were on misaligned bench operands).
// NOT RUN ON THE DEVELOPMENT MACHINE (Cascade Lake has no AVX512-FP16); see
// docs/results/cpu-x86-*.md for where it was tested.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

constexpr int kMR = 12, kNV = 2, kNR = 32 * kNV;

__attribute__((always_inline)) inline void step(const _Float16* a, const _Float16* b,
                                                __m512h (&acc)[kMR][kNV]) {
  __m512h bv[kNV];
#pragma GCC unroll 2
  for (int v = 0; v < kNV; ++v) bv[v] = _mm512_loadu_ph(b + 32 * v);
  // A(k, i) enters each FMA as an embedded {1to32} memory broadcast. A separate
  // vpbroadcastw is a load plus a port-5 shuffle, and port 5 is one of the two 512-bit
  // FMA ports (12 shuffles per 24 FMAs would cap the loop at 2/3 of the peak; measured,
  // the change made no difference within the noise, so something else limits it).
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v)
      __asm__("vfmadd231ph %1%{1to32%}, %2, %0" : "+v"(acc[i][v]) : "m"(a[i]), "v"(bv[v]));
}

__attribute__((always_inline)) inline void zero(__m512h (&acc)[kMR][kNV]) {
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_setzero_ph();
}

// k steps [0, kc) with a 4x unrolled main loop; a and b advance past them.
__attribute__((always_inline)) inline void run(int64_t kc, const _Float16*& a, int64_t as,
                                               const _Float16*& b, __m512h (&acc)[kMR][kNV]) {
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    step(a, b, acc);
    a += as;
    step(a, b + kNR, acc);
    a += as;
    step(a, b + 2 * kNR, acc);
    a += as;
    step(a, b + 3 * kNR, acc);
    a += as;
    b += 4 * kNR;
  }
  for (; k < kc; ++k, a += as, b += kNR) step(a, b, acc);
}

}  // namespace

void f16_12x2_noepi4_avx512fp16(int64_t kc, const void* a_, int64_t as, const void* b_,
                                void* c_, int64_t ldc, int accumulate) {
  const _Float16* a = static_cast<const _Float16*>(a_);
  const _Float16* b = static_cast<const _Float16*>(b_);
  _Float16* c = static_cast<_Float16*>(c_);
  __m512h acc[kMR][kNV];
  zero(acc);
  run(kc, a, as, b, acc);
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) {
      _Float16* p = c + i * ldc + 32 * v;
      const __m512h r = accumulate ? _mm512_add_ph(_mm512_loadu_ph(p), acc[i][v]) : acc[i][v];
      _mm512_storeu_ph(p, r);
    }
}

}  // namespace flashcore::cpu::ukernels
