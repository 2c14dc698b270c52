// AVX512-BF16 GEMM micro-kernel (vdpbf16ps): C[MR x NV*16] fp32 (=|+=) A B, bf16 operands
// in k pairs (ukernel.hpp, list entry `kpairs, kpairs`):
//   A(k, i) at a[(k / 2) * 2 * as + 2 * i + k % 2]  (a pair of one row is one 32-bit word)
//   B(k, j) at b[(k / 2) * 2 * NR + 2 * j + k % 2]  (a pair row of 16 columns is one zmm)
// vdpbf16ps adds, per fp32 lane j, a.lo * b.lo + a.hi * b.hi: with A's pair word of row i
// broadcast (vpbroadcastd from memory, a load-port uop) and B's pair row loaded, one
// instruction does two k steps of 16 columns. The register tile is the fp32 family's
// (gemm_f32_avx512.cpp): 12 x 2 zmm = 24 accumulators + 2 B vectors + 1 broadcast.
// Called only when dispatch found AVX512-BF16. No STL and no shared inline templates here.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/simd/avx512.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

template <int MR, int NV>
__attribute__((always_inline)) inline void pair_step(const uint16_t* a, const uint16_t* b,
                                                     __m512 (&acc)[MR][NV]) {
  __m512bh bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + 32 * v);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    int32_t word;
    std::memcpy(&word, a + 2 * i, 4);
    const __m512bh ai = (__m512bh)_mm512_set1_epi32(word);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
  }
}

template <int MR, int NV>
__attribute__((always_inline)) inline void gemm(int64_t kc, const void* a_, int64_t as,
                                                const void* b_, void* c_, int64_t ldc,
                                                int accumulate) {
  constexpr int NR = 16 * NV;
  const uint16_t* a = static_cast<const uint16_t*>(a_);
  const uint16_t* b = static_cast<const uint16_t*>(b_);
  float* c = static_cast<float*>(c_);
  __m512 acc[MR][NV];
  avx512::zero_tile<MR, NV>(acc);
  // kc is even (k_align 2): kc / 2 pair rows, unrolled 2x.
  const int64_t pairs = kc / 2;
  int64_t p = 0;
  for (; p + 2 <= pairs; p += 2) {
    pair_step<MR, NV>(a, b, acc);
    pair_step<MR, NV>(a + 2 * as, b + 2 * NR, acc);
    a += 4 * as;
    b += 4 * NR;
  }
  for (; p < pairs; ++p, a += 2 * as, b += 2 * NR) pair_step<MR, NV>(a, b, acc);
  avx512::store_c_tile<MR, NV>(c, ldc, acc, accumulate);
}

}  // namespace

void bf16_12x2_avx512bf16(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                          int64_t ldc, int accumulate) {
  gemm<12, 2>(kc, a, as, b, c, ldc, accumulate);
}

}  // namespace flashcore::cpu::ukernels
