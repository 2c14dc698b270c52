// SVE GEMM micro-kernels of gemm_sve.inc (interface: cpu/ukernels/ukernel.hpp; building
// blocks and the vector-length story: sve_gemm.hpp).
//
// Register budget at MR x NV: MR*NV accumulators + NV B vectors + the A broadcasts in
// flight must fit in 32 Z registers. All shapes here use 24 accumulators, so each k step
// is 24 FMLAs (12 cycles on A64FX's two FMA pipes) against NV + MR loads (two load pipes),
// which leaves room to issue every A broadcast well ahead of the FMLA that needs it.
#include "cpu/sve/sve_gemm.hpp"

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
using namespace flashcore::cpu::sve;

void f32_12x2_sve(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                  int accumulate) {
  static_assert(f32_12x2_sve_shape.mr == 12);
  svfloat32_t
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23;
  gemm_panel<2, 1, Swp::none>(
      kc, static_cast<const float*>(a), as, static_cast<const float*>(b), f32_12x2_sve_shape.nr,
      static_cast<float*>(c), ldc, accumulate, svcntw(),
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23);
}

void f32_8x3_sve(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                 int accumulate) {
  static_assert(f32_8x3_sve_shape.mr == 8);
  svfloat32_t
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23;
  gemm_panel<3, 1, Swp::none>(
      kc, static_cast<const float*>(a), as, static_cast<const float*>(b), f32_8x3_sve_shape.nr,
      static_cast<float*>(c), ldc, accumulate, svcntw(),
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23);
}

void f32_6x4_sve(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                 int accumulate) {
  static_assert(f32_6x4_sve_shape.mr == 6);
  svfloat32_t
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23;
  gemm_panel<4, 1, Swp::none>(
      kc, static_cast<const float*>(a), as, static_cast<const float*>(b), f32_6x4_sve_shape.nr,
      static_cast<float*>(c), ldc, accumulate, svcntw(),
      r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19,
      r20, r21, r22, r23);
}

}  // namespace flashcore::cpu::ukernels
