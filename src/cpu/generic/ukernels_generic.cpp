// Portable micro-kernels: plain C++ compiled with the baseline flags. The accumulator
// block lives in a local array the compiler keeps in vector registers (MR x NR fp32 =
// 16 SSE registers for 4x16, 12 for 6x8); the k loop is a rank-1 update per step, as in seed 000.
#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"
#include "cpu/ukernels/vecops_portable.hpp"

namespace flashcore::cpu::ukernels {
namespace {

template <int MR, int NR>
void gemm_f32(int64_t kc, const void* a_, int64_t a_stride, const void* b_, void* c_, int64_t ldc,
              int accumulate) {
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  float* c = static_cast<float*>(c_);
  float acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
  for (int64_t k = 0; k < kc; ++k) {
    const float* ak = a + k * a_stride;
    const float* bk = b + k * NR;
    // Full unrolling keeps acc in registers (GCC does not do it by itself for these sizes).
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const float ai = ak[i];
#pragma GCC unroll 16
      for (int j = 0; j < NR; ++j) acc[i][j] += ai * bk[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate)
      for (int j = 0; j < NR; ++j) ci[j] += acc[i][j];
    else
      for (int j = 0; j < NR; ++j) ci[j] = acc[i][j];
  }
}

}  // namespace

void f32_4x16_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                      int accumulate) {
  gemm_f32<4, 16>(kc, a, as, b, c, ldc, accumulate);
}
void f32_4x8_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                     int accumulate) {
  gemm_f32<4, 8>(kc, a, as, b, c, ldc, accumulate);
}
void f32_6x8_generic(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,
                     int accumulate) {
  gemm_f32<6, 8>(kc, a, as, b, c, ldc, accumulate);
}

const VecOps vecops_generic = {"vecops_generic", Isa::generic, portable::col_max,
                               portable::exp2_pack, portable::scale_rows};

}  // namespace flashcore::cpu::ukernels
