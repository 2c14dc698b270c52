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

// f32_12x2_pf_avx512: the 12x2 tile in inline assembly, two k steps per iteration, and one
// prefetcht0 per k step of the A row 4 k steps ahead.
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
// Per k step: 2 loads of B, 12 broadcasts of A (vbroadcastss from memory: load ports
// only), 24 FMAs; registers: acc(i, v) in zmm(2i + v), B in zmm24-25, broadcasts alternate
// zmm26 / zmm27. A prefetch past the last row of A is harmless (prefetches never fault).

// The assembly's repeated parts, written once: one k step (12 broadcasts of the A row at
// address form A, 24 FMAs with the B row in zmm24-25), and one C row's add or store.
#define FC_PF_ROW(off, A, bc, x, y)                                                           \
  "vbroadcastss " #off A ", %%zmm" #bc "\n\t"                                                 \
  "vfmadd231ps %%zmm24, %%zmm" #bc ", %%zmm" #x "\n\t"                                        \
  "vfmadd231ps %%zmm25, %%zmm" #bc ", %%zmm" #y "\n\t"
#define FC_PF_KSTEP(A)                                                                        \
  FC_PF_ROW(0, A, 26, 0, 1) FC_PF_ROW(4, A, 27, 2, 3) FC_PF_ROW(8, A, 26, 4, 5)               \
  FC_PF_ROW(12, A, 27, 6, 7) FC_PF_ROW(16, A, 26, 8, 9) FC_PF_ROW(20, A, 27, 10, 11)          \
  FC_PF_ROW(24, A, 26, 12, 13) FC_PF_ROW(28, A, 27, 14, 15) FC_PF_ROW(32, A, 26, 16, 17)      \
  FC_PF_ROW(36, A, 27, 18, 19) FC_PF_ROW(40, A, 26, 20, 21) FC_PF_ROW(44, A, 27, 22, 23)
#define FC_PF_C_ROWS(ROW)                                                                     \
  ROW(0, 1) ROW(2, 3) ROW(4, 5) ROW(6, 7) ROW(8, 9) ROW(10, 11) ROW(12, 13) ROW(14, 15)        \
  ROW(16, 17) ROW(18, 19) ROW(20, 21) ROW(22, 23)
#define FC_PF_ADD_ROW(x, y)                                                                   \
  "vaddps (%[p]), %%zmm" #x ", %%zmm" #x "\n\t"                                               \
  "vaddps 64(%[p]), %%zmm" #y ", %%zmm" #y "\n\t"                                             \
  "add %[ldc], %[p]\n\t"
#define FC_PF_STORE_ROW(x, y)                                                                 \
  "vmovups %%zmm" #x ", (%[c])\n\t"                                                           \
  "vmovups %%zmm" #y ", 64(%[c])\n\t"                                                         \
  "add %[ldc], %[c]\n\t"

void f32_12x2_pf_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                        int accumulate) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  char* pc = static_cast<char*>(c);
  const char* pf;      // A row k + 4 (the lea's scale); then C's rows for the adds
  int64_t pairs;       // iterations of two k steps
  const int64_t as_bytes = as * 4, ldc_bytes = ldc * 4, acc = accumulate;
  asm volatile(
      // acc(i, v) in zmm(2i + v) = 0
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\t"  "vmovaps %%zmm0, %%zmm2\n\t"  "vmovaps %%zmm0, %%zmm3\n\t"
      "vmovaps %%zmm0, %%zmm4\n\t"  "vmovaps %%zmm0, %%zmm5\n\t"  "vmovaps %%zmm0, %%zmm6\n\t"
      "vmovaps %%zmm0, %%zmm7\n\t"  "vmovaps %%zmm0, %%zmm8\n\t"  "vmovaps %%zmm0, %%zmm9\n\t"
      "vmovaps %%zmm0, %%zmm10\n\t"  "vmovaps %%zmm0, %%zmm11\n\t"  "vmovaps %%zmm0, %%zmm12\n\t"
      "vmovaps %%zmm0, %%zmm13\n\t"  "vmovaps %%zmm0, %%zmm14\n\t"  "vmovaps %%zmm0, %%zmm15\n\t"
      "vmovaps %%zmm0, %%zmm16\n\t"  "vmovaps %%zmm0, %%zmm17\n\t"  "vmovaps %%zmm0, %%zmm18\n\t"
      "vmovaps %%zmm0, %%zmm19\n\t"  "vmovaps %%zmm0, %%zmm20\n\t"  "vmovaps %%zmm0, %%zmm21\n\t"
      "vmovaps %%zmm0, %%zmm22\n\t"  "vmovaps %%zmm0, %%zmm23\n\t"
      "lea (%[a], %[as], 4), %[p]\n\t"  // p = A row k + 4
      "mov %[k], %[n]\n\t"
      "shr $1, %[n]\n\t"
      "jz 2f\n\t"
      // two k steps per iteration: B rows k and k+1, A rows a and a + as
      "1:\n\t"
      "vmovups 0(%[b]), %%zmm24\n\t"  "vmovups 64(%[b]), %%zmm25\n\t"
      "prefetcht0 (%[p])\n\t"
      FC_PF_KSTEP("(%[a])")
      "vmovups 128(%[b]), %%zmm24\n\t"  "vmovups 192(%[b]), %%zmm25\n\t"
      "prefetcht0 (%[p], %[as], 1)\n\t"
      FC_PF_KSTEP("(%[a], %[as], 1)")
      "add $256, %[b]\n\t"
      "lea (%[a], %[as], 2), %[a]\n\t"
      "lea (%[p], %[as], 2), %[p]\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      // odd kc: one more step
      "2:\n\t"
      "test $1, %[k]\n\t"
      "jz 3f\n\t"
      "vmovups (%[b]), %%zmm24\n\t"  "vmovups 64(%[b]), %%zmm25\n\t"
      FC_PF_KSTEP("(%[a])")
      // accumulate: acc += C (rows ldc bytes apart, read through p); then C rows = acc
      "3:\n\t"
      "test %[accumulate], %[accumulate]\n\t"
      "jz 4f\n\t"
      "mov %[c], %[p]\n\t"
      FC_PF_C_ROWS(FC_PF_ADD_ROW)
      "4:\n\t"
      FC_PF_C_ROWS(FC_PF_STORE_ROW)
      // Clean upper state for the caller's SSE code (the compiler does not know this
      // asm used zmm registers, so it would not add the vzeroupper itself).
      "vzeroupper\n\t"
      : [a] "+r"(pa), [b] "+r"(pb), [c] "+r"(pc), [p] "=&r"(pf), [n] "=&r"(pairs)
      : [k] "r"(kc), [as] "r"(as_bytes), [ldc] "r"(ldc_bytes), [accumulate] "r"(acc)
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
        "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "cc",
        "memory");
}
#undef FC_PF_ROW
#undef FC_PF_KSTEP
#undef FC_PF_C_ROWS
#undef FC_PF_ADD_ROW
#undef FC_PF_STORE_ROW
void f32_8x3_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                    int accumulate) {
  gemm<8, 3>(kc, a, as, b, c, ldc, accumulate);
}
void f32_6x4_avx512(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                    int accumulate) {
  gemm<6, 4>(kc, a, as, b, c, ldc, accumulate);
}

}  // namespace flashcore::cpu::ukernels
