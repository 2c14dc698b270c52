// AVX512-FP16 GEMM micro-kernels (vfmadd231ph: 32 fp16 lanes per zmm, twice the fp32
// FMA rate). Operands fp16 (packing converts into it); layout as in ukernel.hpp.
//
// f16_12x2_noepi4_avx512fp16: seed 000's "noepi" trade. C is fp16 and the sums are fp16
//   all the way (no epilogue conversion); 4x k-unrolled. The pipeline (gemm_call) calls it
//   on k chunks of at most kKeyTile and adds each chunk's fp16 tile into fp32, so fp16
//   rounding accumulates over <= 128 products per lane (one k parity, below) and one pair
//   add: relative error ~ 2^-11 * sqrt(256) per chunk in the worst direction, fine for
//   softmax P (<= 1) times V at 1e-2 tolerance; a |sum| above 65504 would overflow to inf,
//   so it is for normalized operands only.
// There is no fp32-accumulating variant: AVX512-FP16 has no fp16 x fp16 -> fp32 dot
//   product (that needs AMX-FP16 or AVX10.2), and widening the operands before fp32 FMAs
//   cannot beat f32_*_avx512 on operands widened at packing, which is what `auto` does for
//   fp16 storage. (A variant with fp32 C and fp16 partial sums over 32 k steps was tried;
//   it fails the fp32-accumulation error bound of tests/ukernels and missed the lse
//   tolerance in attention, so it was removed.)
//
// Operands in k pairs (ukernel.hpp `kpairs`, as the bf16 dot kernels take them): the 32-bit
// word of A(k, i), A(k+1, i) is broadcast by a plain vbroadcastss load, and a B zmm holds 16
// columns x (k, k+1), so one vfmadd231ph does both k steps of 16 columns, the even lanes
// summing even k and the odd lanes odd k; the epilogue adds each lane pair. Per pair step:
// 12 broadcast loads + 2 B loads for 24 FMAs. The first version (k-major operands, A as an
// embedded {1to32} 16-bit broadcast: a load uop in every FMA, 26 per 24 FMAs) measured
// 88.7 % of the fp16 FMA peak GEMM-only; a probe of both inner loops on L1-resident operands
// (Sapphire Rapids host, 1 thread, session 10) ran the k-pair loop at the FMA peak. In the
// GEMM-only row (B streamed from L2) both top out at the same 342 GFLOP/s (medians of 3
// rounds 89.1 % against 83.7 % of the start-up peak, the host's noise included); attention
// S4096 D128 2 threads 351 -> 392 GFLOP/s (docs/results/cpu-x86-2026-11-22.md, session 10).
// Register use: 24 fp16 accumulators (12 rows x 2 zmm = 32 columns x 2 k parities) + 2 B +
// 1 broadcast A.
// NOT RUN ON THE DEVELOPMENT MACHINE (no AVX512-FP16 there); see docs/results/cpu-x86-*.md
// for where it was tested.
#include <immintrin.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

constexpr int kMR = 12, kNV = 2, kNR = 16 * kNV;  // NR columns; a zmm = 16 columns x 2 k

// One pair step: k and k+1 for every row; a32 = the pair words of this step (row i at a32[i]).
__attribute__((always_inline)) inline void step(const float* a32, const _Float16* b,
                                                __m512h (&acc)[kMR][kNV]) {
  __m512h bv[kNV];
#pragma GCC unroll 2
  for (int v = 0; v < kNV; ++v) bv[v] = _mm512_loadu_ph(b + 32 * v);
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i) {
    const __m512h av = _mm512_castps_ph(_mm512_set1_ps(a32[i]));
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_fmadd_ph(av, bv[v], acc[i][v]);
  }
}

}  // namespace

void f16_12x2_noepi4_avx512fp16(int64_t kc, const void* a_, int64_t as, const void* b_,
                                void* c_, int64_t ldc, int accumulate) {
  const float* a32 = static_cast<const float*>(a_);  // pair words, as per pair row
  const _Float16* b = static_cast<const _Float16*>(b_);
  _Float16* c = static_cast<_Float16*>(c_);
  __m512h acc[kMR][kNV];
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_setzero_ph();
  // kc is even (k_align 2: the packing pads an odd k with a zero pair partner).
  const int64_t pairs = kc / 2;
  int64_t k2 = 0;
  for (; k2 + 4 <= pairs; k2 += 4) {  // 4x unrolled (seed 000's noepi4)
    step(a32, b, acc);
    step(a32 + as, b + 2 * kNR, acc);
    step(a32 + 2 * as, b + 4 * kNR, acc);
    step(a32 + 3 * as, b + 6 * kNR, acc);
    a32 += 4 * as;
    b += 8 * kNR;
  }
  for (; k2 < pairs; ++k2, a32 += as, b += 2 * kNR) step(a32, b, acc);
  // Lane pair (2j, 2j+1) of acc[i][v] holds column 16 v + j's even- and odd-k sums: add the
  // high half of each 32-bit lane onto its low half, then keep the low halves.
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) {
      const __m512i w = _mm512_castph_si512(acc[i][v]);
      const __m512h sum = _mm512_add_ph(acc[i][v], _mm512_castsi512_ph(_mm512_srli_epi32(w, 16)));
      __m256h r = _mm256_castsi256_ph(_mm512_cvtepi32_epi16(_mm512_castph_si512(sum)));
      _Float16* p = c + i * ldc + 16 * v;
      if (accumulate) r = _mm256_add_ph(_mm256_loadu_ph(p), r);
      _mm256_storeu_ph(p, r);
    }
}

}  // namespace flashcore::cpu::ukernels
