// AVX512-FP16 GEMM micro-kernels (vfmadd231ph: 32 fp16 lanes per zmm, twice the fp32
// FMA rate). Operands fp16 (packing converts into it); layout as in ukernel.hpp.
//
// f16_12x2_noepi4_avx512fp16: seed 000's "noepi" trade. C is fp16 and the sums are fp16
//   all the way (no epilogue conversion); 4 k (two pair steps) per loop iteration. The pipeline (gemm_call) calls it
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
// (Sapphire Rapids host, 1 thread, 2026-11-25) ran the k-pair loop at the FMA peak. In the
// GEMM-only row (B streamed from L2) both top out at the same 342 GFLOP/s (medians of 3
// rounds 89.1 % against 83.7 % of the start-up peak, the host's noise included); attention
// S4096 D128 2 threads 351 -> 392 GFLOP/s (docs/results/cpu-x86-2026-11-22.md, 2026-11-25,
// 0c3b530).
// Register use: 24 fp16 accumulators (12 rows x 2 zmm = 32 columns x 2 k parities) + 2 B +
// 2 broadcast A.
#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"
#include "cpu/x86/gemm_12x2_asm.hpp"

namespace flashcore::cpu::ukernels {

// The k loop is gemm_12x2_asm.hpp's (one step per k pair, A pair words 4 bytes apart, a B
// pair row 2 zmm); the epilogue folds each lane pair: add the high half of each 32-bit lane
// onto its low half (vpsrld + vaddph), keep the low halves (vpmovdw), then add C's fp16 row
// (accumulate) and store 32 fp16.
// Why assembly (as f32_12x2_pf_avx512): GCC 12's schedule of the intrinsics version kept
// 9 of the broadcast offsets on the stack (a reload per broadcast) and added register moves
// between FMAs, and it had no prefetch of A, whose rows gemm_chain reads far apart.
#define FC_NOEPI_FOLD_ROW(x, y)                                                               \
  "vpsrld $16, %%zmm" #x ", %%zmm26\n\t"                                                      \
  "vpsrld $16, %%zmm" #y ", %%zmm27\n\t"                                                      \
  "vaddph %%zmm26, %%zmm" #x ", %%zmm" #x "\n\t"                                              \
  "vaddph %%zmm27, %%zmm" #y ", %%zmm" #y "\n\t"                                              \
  "vpmovdw %%zmm" #x ", %%ymm" #x "\n\t"                                                      \
  "vpmovdw %%zmm" #y ", %%ymm" #y "\n\t"
#define FC_NOEPI_ADD_ROW(x, y) FC_X86_12X2_ADD_ROW(x, y, "vaddph", "ymm", 32)
#define FC_NOEPI_STORE_ROW(x, y) FC_X86_12X2_STORE_ROW(x, y, "vmovdqu16", "ymm", 32)

// f16_8x2_noepi4_avx512fp16: its first 8 rows, the tail kernel of a row range that leaves
// 1-8 rows after whole 12-row blocks (gemm_tails.inc).
// kc is even (k_align 2: the packing pads an odd k with a zero pair partner); A is read as
// pair words, as per pair row.
#define FC_NOEPI_KERNEL(name, STEP, C_ROWS)                                                   \
  FC_X86_12X2_KERNEL(name, kc / 2, 2,                                                         \
                     FC_X86_KLOOP("vfmadd231ph", STEP) C_ROWS(FC_NOEPI_FOLD_ROW)              \
                     FC_X86_ADD_STORE(C_ROWS, FC_NOEPI_ADD_ROW, FC_NOEPI_STORE_ROW))
FC_NOEPI_KERNEL(f16_12x2_noepi4_avx512fp16, FC_X86_12X2_STEP, FC_X86_12X2_C_ROWS)
FC_NOEPI_KERNEL(f16_8x2_noepi4_avx512fp16, FC_X86_8X2_STEP, FC_X86_8X2_C_ROWS)
#undef FC_NOEPI_KERNEL

// The fp32-C forms (gemm_c32.inc): the same k loop and fold, the fp16 sums widened
// (vcvtph2ps) and added into (accumulate) or stored as an fp32 C, ldc in fp32 elements.
// The values of the noepi kernel's fp16 tile added into fp32 by VecOps::add_f16_tile,
// without the tile's store and reload.
#define FC_C32_WIDEN_ROW(x, y)                                                                \
  "vcvtph2ps %%ymm" #x ", %%zmm" #x "\n\t"                                                    \
  "vcvtph2ps %%ymm" #y ", %%zmm" #y "\n\t"
#define FC_C32_KERNEL(name, STEP, C_ROWS)                                                     \
  FC_X86_12X2_KERNEL(name, kc / 2, 4,                                                         \
                     FC_X86_KLOOP("vfmadd231ph", STEP) C_ROWS(FC_NOEPI_FOLD_ROW)              \
                     C_ROWS(FC_C32_WIDEN_ROW)                                                 \
                     FC_X86_ADD_STORE(C_ROWS, FC_X86_F32_ADD_ROW, FC_X86_F32_STORE_ROW))
FC_C32_KERNEL(f16_12x2_noepi4_c32_avx512fp16, FC_X86_12X2_STEP, FC_X86_12X2_C_ROWS)
FC_C32_KERNEL(f16_8x2_noepi4_c32_avx512fp16, FC_X86_8X2_STEP, FC_X86_8X2_C_ROWS)
#undef FC_C32_KERNEL
#undef FC_C32_WIDEN_ROW
#undef FC_NOEPI_FOLD_ROW
#undef FC_NOEPI_ADD_ROW
#undef FC_NOEPI_STORE_ROW

}  // namespace flashcore::cpu::ukernels
