// SVE GEMM micro-kernels with fp16 operands (gemm_sve.inc; interface in
// cpu/ukernels/ukernel.hpp, building blocks in sve_gemm.hpp).
//
//   f16_12x2_sve         fp16 A and B, fp32 C and fp32 accumulation. Base SVE (A64FX) has
//                        no widening fp16 FMLA, so operands are widened and the FMLAs run
//                        in fp32: products and sums are as exact as the fp32 kernels'.
//                        B rows are widened in the k loop (LD1H into 32-bit lanes + FCVT:
//                        2 FCVT per 24 FMLA, so at most 92.3% of the FMA pipes' slots go
//                        to FMLAs). A is widened once per chunk of k into a small [k][12]
//                        fp32 buffer, read by 3 LD1RQW per k and lane-indexed FMLAs.
//   f16_12x2_noepi4_sve  seed 000's "no epilogue" kernel: fp16 FMLAs accumulating in fp16 C
//                        registers, k unrolled 4x (kc % 4 == 0). About 3 decimal digits:
//                        each FMLA rounds to fp16 (2^-11 relative), so a sum over kc terms
//                        carries up to ~kc * 2^-11 relative error. Flush-to-zero of fp16
//                        subnormals (FPCR.FZ16) is set while it runs, as the seed does:
//                        softmax probabilities under 6.1e-5 would otherwise take the slow
//                        subnormal path on A64FX.
#include "cpu/sve/sve_gemm.hpp"

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::sve {
namespace {

// FPCR.FZ16 (bit 19) on for the lifetime of the object, the previous FPCR restored after.
// The "memory" clobbers keep the kernel's loads after the set and its stores before the
// restore (the compiler does not otherwise know that FPCR orders FP arithmetic).
class Fz16Scope {
 public:
  Fz16Scope() {
    __asm__ volatile("mrs %0, fpcr" : "=r"(saved_) : : "memory");
    if ((saved_ & kFz16) == 0) __asm__ volatile("msr fpcr, %0" : : "r"(saved_ | kFz16) : "memory");
  }
  ~Fz16Scope() {
    if ((saved_ & kFz16) == 0) __asm__ volatile("msr fpcr, %0" : : "r"(saved_) : "memory");
  }
  Fz16Scope(const Fz16Scope&) = delete;
  Fz16Scope& operator=(const Fz16Scope&) = delete;

 private:
  static constexpr uint64_t kFz16 = uint64_t(1) << 19;
  uint64_t saved_ = 0;
};

// A rows k0..k0+n of a K x MR fp16 panel (stride as) -> dst[k][MR] in fp32.
FC_SVE_INLINE void widen_a(int64_t n, const uint16_t* a, int64_t as, int64_t mr, float* dst) {
  const int64_t vl = int64_t(svcntw());
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < mr; i += vl) {
      const svbool_t pg = svwhilelt_b32(i, mr);
      svst1(pg, dst + k * mr + i, vload(pg, a + k * as + i));
    }
}

}  // namespace
}  // namespace flashcore::cpu::sve

namespace flashcore::cpu::ukernels {
using namespace flashcore::cpu::sve;

void f16_12x2_sve(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                  int accumulate) {
  constexpr int64_t kMr = f16_12x2_sve_shape.mr, kNr = f16_12x2_sve_shape.nr;
  static_assert(kMr == 12);
  // 256 k of widened A: 12 KiB of stack, stays in L1 beside the B panel it meets.
  constexpr int64_t kChunk = 256;
  float abuf[kChunk * kMr];
  const uint16_t* a16 = static_cast<const uint16_t*>(a);
  const uint16_t* b16 = static_cast<const uint16_t*>(b);
  svfloat32_t
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23;
  for (int64_t k0 = 0; k0 < kc; k0 += kChunk) {
    const int64_t n = kc - k0 < kChunk ? kc - k0 : kChunk;
    widen_a(n, a16 + k0 * as, as, kMr, abuf);
    gemm_panel<2, 1, Swp::widen_halves>(
        n, abuf, kMr, b16 + k0 * kNr, kNr, static_cast<float*>(c), ldc, accumulate || k0 > 0,
        svcntw(),
        r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
        r20, r21, r22, r23);
  }
}

void f16_12x2_noepi4_sve(int64_t kc, const void* a, int64_t as, const void* b, void* c,
                         int64_t ldc, int accumulate) {
  static_assert(f16_12x2_noepi4_sve_shape.mr == 12 && f16_12x2_noepi4_sve_shape.k_align == 4);
  const Fz16Scope fz16;
  svfloat16_t
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23;
  gemm_panel<2, 4, Swp::pingpong>(
      kc, static_cast<const float16_t*>(a), as, static_cast<const float16_t*>(b),
      f16_12x2_noepi4_sve_shape.nr, static_cast<float16_t*>(c), ldc, accumulate, svcnth(),
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23);
}

}  // namespace flashcore::cpu::ukernels
