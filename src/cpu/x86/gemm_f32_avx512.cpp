// AVX-512 fp32 GEMM micro-kernels: C[MR x NV*16] (=|+=) A^T B, seed 000's register-tiled
// family on zmm (see ukernel.hpp for the operand layout).
//
// Schedule per k step: NV vector loads of the B panel, then MR broadcasts of A(k, i)
// (vbroadcastss from memory: a load-port uop, no shuffle port) each feeding NV FMAs into
// the MR*NV accumulators. Two FMA ports of 4-cycle latency need >= 8 independent
// accumulators; all shapes here have 24-28, and registers are 32: 14x2 uses 28 + 2 + 1,
// 8x3 and 6x4 24 + NV + 1. The k loop is unrolled 4x (the seeds' "4k" kernels) so the
// loop branch and pointer updates are amortized; a kc % 4 tail runs the same step.
// Loads per FMA: (NV + MR) / (MR*NV), i.e. 0.57 for 14x2, 0.46 for 8x3, 0.42 for 6x4:
// below the 1 load : 1 FMA port balance of Skylake-SP and later cores.
#include <immintrin.h>

#include <cstdint>

#include "cpu/simd/avx512.hpp"
#include "cpu/x86/gemm_12x2_asm.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

template <int MR, int NV>
__attribute__((always_inline)) inline void step(const float* a, const float* b,
                                                __m512 (&acc)[MR][NV]) {
  __m512 bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
  }
}

template <int MR, int NV>
__attribute__((always_inline)) inline void gemm(int64_t kc, const void* a_, int64_t as,
                                                const void* b_, void* c_, int64_t ldc,
                                                int accumulate) {
  constexpr int NR = 16 * NV;
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  float* c = static_cast<float*>(c_);
  __m512 acc[MR][NV];
  avx512::zero_tile<MR, NV>(acc);
  // a advances by its stride after every step, so each step addresses A(k, 0..MR-1) at
  // constant offsets from one register.
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    step<MR, NV>(a, b, acc);
    a += as;
    step<MR, NV>(a, b + NR, acc);
    a += as;
    step<MR, NV>(a, b + 2 * NR, acc);
    a += as;
    step<MR, NV>(a, b + 3 * NR, acc);
    a += as;
    b += 4 * NR;
  }
  for (; k < kc; ++k, a += as, b += NR) step<MR, NV>(a, b, acc);
  avx512::store_c_tile<MR, NV>(c, ldc, acc, accumulate);
}

}  // namespace

void f32_14x2_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                     int accumulate) {
  gemm<14, 2>(kc, a, as, b, c, ldc, accumulate);
}
void f32_12x2_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                     int accumulate) {
  gemm<12, 2>(kc, a, as, b, c, ldc, accumulate);
}

// f32_12x2_pf_avx512: the 12x2 tile in inline assembly (gemm_12x2_asm.hpp: two k steps per
// iteration, the A row 4 k steps ahead prefetched).
//
// Why: gemm_chain reads its A operands with large strides (the B tile's rows, 480 B apart;
// the intermediate's rows, 528 B apart), so every k step starts a new cache line of A that
// comes from L2; the hardware prefetchers left the FMA loop waiting for it. And GCC 12's
// schedule of the intrinsics kernel above for 12x2 keeps an accumulator on the stack and
// adds register moves in the unrolled loop. Measured on the 2-core AVX-512 VM, one thread,
// gemm_chain's stage loops on L2-resident operands (K1 = N = 256, 120-key tile, 128-row
// block; % of the FMA loop measured in the same process): stage 1 87.5 -> 93.4 %,
// stage 2 85.3 -> 94.3 % (assembly with one k step per iteration and no prefetch: 88 / 90 %;
// the intrinsics kernel with the same prefetch: 89 / 90 %).
//
// f32_8x2_pf_avx512: its first 8 rows, the tail kernel of a row range that leaves 1-8
// rows after whole 12-row blocks (gemm_tails.inc).
#define FC_PF_KERNEL(name, STEP, C_ROWS)                                                      \
  FC_X86_12X2_KERNEL(name, kc, 4,                                                             \
                     FC_X86_KLOOP("vfmadd231ps", STEP)                                        \
                     FC_X86_ADD_STORE(C_ROWS, FC_X86_F32_ADD_ROW, FC_X86_F32_STORE_ROW))
FC_PF_KERNEL(f32_12x2_pf_avx512, FC_X86_12X2_STEP, FC_X86_12X2_C_ROWS)
FC_PF_KERNEL(f32_8x2_pf_avx512, FC_X86_8X2_STEP, FC_X86_8X2_C_ROWS)
#undef FC_PF_KERNEL
void f32_8x3_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                    int accumulate) {
  gemm<8, 3>(kc, a, as, b, c, ldc, accumulate);
}
void f32_6x4_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                    int accumulate) {
  gemm<6, 4>(kc, a, as, b, c, ldc, accumulate);
}

}  // namespace flashcore::cpu::ukernels
