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
// One row of C (at %[cp], which then moves on by ldc) into or out of its accumulators.
#define FC_LD(off, r) "vmovups " #off "(%[cp]), %%ymm" #r "\n\t"
#define FC_ST(off, r) "vmovups %%ymm" #r ", " #off "(%[cp])\n\t"
#define FC_NEXT "add %[ldcb], %[cp]\n\t"
#define FC_C3(OP, r0, r1, r2) OP(0, r0) OP(32, r1) OP(64, r2) FC_NEXT
#define FC_C2(OP, r0, r1) OP(0, r0) OP(32, r1) FC_NEXT
// The kernel: the accumulators start as C (accumulate) or zero, run kc steps of STEP
// (which ends by moving a on by as floats and b on by one panel row) and are stored to C.
// (Going through a stack tile and adding C afterwards, the first version, cost 24 more
// loads and 12 stores per call: ~4 % at the pipelines' k chunks of 128-129.)
#define FC_KERNEL(CROWS, STEP, b_row_bytes)                                                        \
  __asm__ volatile("mov %[c], %[cp]\n\t" "test %[acc], %[acc]\n\t" "jz 3f\n\t"                     \
                   CROWS(FC_LD) "jmp 4f\n\t"                                                       \
                   "3:\n\t" FC_ZERO12                                                              \
                   "4:\n\t" "test %[n], %[n]\n\t" "jle 2f\n\t"                                     \
                   "1:\n\t" STEP "add %[asb], %[a]\n\t" "add $" #b_row_bytes ", %[b]\n\t"          \
                   "dec %[n]\n\t" "jnz 1b\n\t"                                                     \
                   "2:\n\t" "mov %[c], %[cp]\n\t" CROWS(FC_ST)                                     \
                   : [a] "+r"(a), [b] "+r"(b), [n] "+r"(kc), [cp] "=&r"(cp)                        \
                   : [asb] "r"(as * 4), [ldcb] "r"(ldc * 4), [c] "r"(c), [acc] "r"(acc)            \
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",      \
                     "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc")
#define FC_CROWS_4X3(OP) FC_C3(OP, 0, 1, 2) FC_C3(OP, 3, 4, 5) FC_C3(OP, 6, 7, 8) FC_C3(OP, 9, 10, 11)
#define FC_CROWS_6X2(OP) \
  FC_C2(OP, 0, 1) FC_C2(OP, 2, 3) FC_C2(OP, 4, 5) FC_C2(OP, 6, 7) FC_C2(OP, 8, 9) FC_C2(OP, 10, 11)

}  // namespace

void f32_6x2_avx2(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                  int accumulate) {
  void* cp;
  const int64_t acc = accumulate;
  FC_KERNEL(FC_CROWS_6X2,
            FC_B2 FC_ROW2(0, 0, 1) FC_ROW2(4, 2, 3) FC_ROW2(8, 4, 5) FC_ROW2(12, 6, 7)
                FC_ROW2(16, 8, 9) FC_ROW2(20, 10, 11),
            64);
}
void f32_4x3_avx2(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                  int accumulate) {
  void* cp;
  const int64_t acc = accumulate;
  FC_KERNEL(FC_CROWS_4X3, FC_B3 FC_ROW3(0, 0, 1, 2) FC_ROW3(4, 3, 4, 5) FC_ROW3(8, 6, 7, 8)
                              FC_ROW3(12, 9, 10, 11),
            96);
}

}  // namespace flashcore::cpu::ukernels
