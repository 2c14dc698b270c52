// Portable row ops of the decode path (RowOps in ukernel.hpp): plain loops over the query
// lanes (dot) and the value columns (axpy) that the compiler vectorizes, compiled for the
// baseline ISA and, on x86-64, also for x86-64-v3 (FC_PORTABLE_CLONES, like the portable
// GEMM kernels). Also the row ops of ISAs without their own set (SVE today).
#include <cstdint>

#include "core/clones.hpp"
#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu::ukernels {
namespace {

// Keys in groups of kKeys, so that each query lane has kKeys independent sums.
constexpr int64_t kKeys = 4;
constexpr int64_t kMaxLanes = 64;

FC_PORTABLE_CLONES void dot(int64_t kc, int64_t d, const float* x, int64_t xs, const float* /*q*/, const float* y,
         int64_t mq, float* t, int64_t ldt) {
  for (int64_t i0 = 0; i0 < mq; i0 += kMaxLanes) {
    const int64_t n = mq - i0 < kMaxLanes ? mq - i0 : kMaxLanes;
    int64_t k = 0;
    for (; k + kKeys <= kc; k += kKeys) {
      float acc[kKeys][kMaxLanes] = {};
      for (int64_t e = 0; e < d; ++e) {
        const float* ye = y + e * mq + i0;
        for (int64_t r = 0; r < kKeys; ++r) {
          const float xe = x[(k + r) * xs + e];
          for (int64_t i = 0; i < n; ++i) acc[r][i] += xe * ye[i];
        }
      }
      for (int64_t r = 0; r < kKeys; ++r)
        for (int64_t i = 0; i < n; ++i) t[(k + r) * ldt + i0 + i] = acc[r][i];
    }
    for (; k < kc; ++k) {
      float acc[kMaxLanes] = {};
      for (int64_t e = 0; e < d; ++e) {
        const float xe = x[k * xs + e];
        const float* ye = y + e * mq + i0;
        for (int64_t i = 0; i < n; ++i) acc[i] += xe * ye[i];
      }
      for (int64_t i = 0; i < n; ++i) t[k * ldt + i0 + i] = acc[i];
    }
  }
}

FC_PORTABLE_CLONES void axpy(int64_t kc, int64_t mq, const float* p, int64_t ldp, const float* v, int64_t vs,
          int64_t n, float* o, int64_t ldo) {
  for (int64_t i = 0; i < mq; ++i) {
    float* oi = o + i * ldo;
    for (int64_t k = 0; k < kc; ++k) {
      const float pk = p[k * ldp + i];
      const float* vk = v + k * vs;
      for (int64_t j = 0; j < n; ++j) oi[j] += pk * vk[j];
    }
  }
}

}  // namespace

const RowOps rowops_generic = {"rowops_generic", Isa::generic, dot, axpy, nullptr, nullptr, nullptr, nullptr};

}  // namespace flashcore::cpu::ukernels
