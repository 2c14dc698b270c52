// Building blocks of the SVE GEMM micro-kernels (included only by the SVE translation
// units, which are compiled with -march=armv8.2-a+sve; everything here has internal linkage).
//
// Vector-length agnostic with a fixed tile: a kernel's NR (columns of C, in elements) is
// the width of its MR x NV-vector tile at 512-bit vectors (A64FX, the tuning target), so
// the kernel tables, the packing and the tests see one NR on every machine. At other
// lengths the kernel covers those NR columns in passes of NV vectors each (two passes at
// 256 bits, four at 128; a predicated tail where NV*VL does not divide NR), re-reading the
// small A panel from L1 for each pass. At 512 bits there is exactly one pass with every
// predicate all-true, which is the loop the llvm-mca report (tools/mca_report.py) models.
//
// The MR*NV accumulators are named locals of the kernel, passed by reference as one pack
// (sizeless types may not live in arrays or structs; GCC 12 also spills ACLE tuple types,
// so plain vectors it is). One k step loads NV B vectors, then for each row i broadcasts
// A(k, i) (LD1RW / LD1RH) and issues NV FMLAs; instruction order is left to the compiler,
// whose schedule tools/mca_report.py checks.
#pragma once

#include <arm_sve.h>

#include <cstdint>

#define FC_SVE_INLINE inline __attribute__((always_inline))

namespace flashcore::cpu::sve {
namespace {

// Predicates of one pass: lanes of vector v that fall inside the NR columns.
struct Cols {  // plain integers only (no sizeless members)
  int64_t j0, nr, vl;
};
FC_SVE_INLINE svbool_t lanes(const Cols& c, int64_t v, const float*) {
  return svwhilelt_b32(c.j0 + v * c.vl, c.nr);
}
FC_SVE_INLINE svbool_t lanes(const Cols& c, int64_t v, const float16_t*) {
  return svwhilelt_b16(c.j0 + v * c.vl, c.nr);
}
FC_SVE_INLINE svbool_t lanes(const Cols& c, int64_t v, const uint16_t*) {  // fp16 -> fp32 lanes
  return svwhilelt_b32(c.j0 + v * c.vl, c.nr);
}

FC_SVE_INLINE svfloat32_t vload(svbool_t pg, const float* p) { return svld1(pg, p); }
FC_SVE_INLINE svfloat16_t vload(svbool_t pg, const float16_t* p) { return svld1(pg, p); }
// fp16 into fp32 lanes: LD1H into 32-bit containers, then FCVT of each container's low half
// (base SVE has no widening FMLA, so fp32 accumulation needs fp32 operands).
FC_SVE_INLINE svfloat32_t vload(svbool_t pg, const uint16_t* p) {
  return svcvt_f32_f16_x(svptrue_b8(), svreinterpret_f16(svld1uh_u32(pg, p)));
}
FC_SVE_INLINE void vstore(svbool_t pg, float* p, svfloat32_t v) { svst1(pg, p, v); }
FC_SVE_INLINE void vstore(svbool_t pg, float16_t* p, svfloat16_t v) { svst1(pg, p, v); }
FC_SVE_INLINE void vzero(svfloat32_t& v) { v = svdup_n_f32(0.0f); }
FC_SVE_INLINE void vzero(svfloat16_t& v) { v = svdup_n_f16(0.0f); }
FC_SVE_INLINE svfloat32_t bcast(const float* p) { return svdup_n_f32(*p); }        // LD1RW
FC_SVE_INLINE svfloat16_t bcast(const float16_t* p) { return svdup_n_f16(*p); }    // LD1RH

// The accumulators are one flat pack of MR*NV vectors, row-major: element e is row e / NV,
// vector e % NV. Folds over the pack with a running index unroll completely at -O2, so
// every index below is a constant in the generated code.
template <int kNv, class T, class V>
FC_SVE_INLINE void acc_begin(const Cols& c, const T* cp, int64_t ldc, int accumulate, int e,
                             V& r) {
  if (accumulate)
    r = vload(lanes(c, e % kNv, cp), cp + (e / kNv) * ldc + (e % kNv) * c.vl);
  else
    vzero(r);
}
template <int kNv, class T, class V>
FC_SVE_INLINE void acc_end(const Cols& c, T* cp, int64_t ldc, int e, V r) {
  vstore(lanes(c, e % kNv, cp), cp + (e / kNv) * ldc + (e % kNv) * c.vl, r);
}

// One FMLA of a k step: broadcast A(k, row) at the row's first vector, then
// acc += A(k, row) * B(k, vector).
template <int kNv, class TA, class V>
FC_SVE_INLINE void acc_fma(int e, const TA* ak, V& av, V b0, V b1, V b2, V b3, V& r) {
  const int v = e % kNv;
  if (v == 0) av = bcast(ak + e / kNv);
  // Lanes past NR hold zeros of B (zeroing loads) and are never stored, so an all-true
  // predicate is safe and keeps the FMLA unconditional.
  r = svmla_x(svptrue_b8(), r, v == 0 ? b0 : v == 1 ? b1 : v == 2 ? b2 : b3, av);
}

// C[MR x NR] (=|+=) A^T B for one panel, in passes of NV vectors (one pass at 512 bits).
// TA/TB are the element types of A and B as the k loop reads them (uint16_t B = fp16
// widened to fp32 lanes); kKu is the k unroll (k_align of the entry: kc % kKu == 0).
template <int kNv, int kKu, class TA, class TB, class TC, class V, class... Vs>
FC_SVE_INLINE void gemm_panel(int64_t kc, const TA* a, int64_t as, const TB* b, int64_t nr,
                              TC* c, int64_t ldc, int accumulate, int64_t vl, V& r0,
                              Vs&... rs) {
  static_assert(kNv >= 1 && kNv <= 4 && (1 + sizeof...(Vs)) % kNv == 0);
  for (int64_t j0 = 0; j0 < nr; j0 += kNv * vl) {
    const Cols cols{j0, nr, vl};
    {
      int e = 0;
      acc_begin<kNv>(cols, c + j0, ldc, accumulate, e++, r0);
      (acc_begin<kNv>(cols, c + j0, ldc, accumulate, e++, rs), ...);
    }
    const svbool_t p0 = lanes(cols, 0, b), p1 = lanes(cols, 1, b);
    const svbool_t p2 = lanes(cols, 2, b), p3 = lanes(cols, 3, b);
    const TA* ak = a;
    const TB* bk = b + j0;
    for (int64_t k = 0; k < kc; k += kKu) {
      for (int u = 0; u < kKu; ++u) {
        // Unused B slots (kNv < 4) get a harmless copy of the first vector.
        const V b0 = vload(p0, bk);
        const V b1 = kNv > 1 ? vload(p1, bk + vl) : b0;
        const V b2 = kNv > 2 ? vload(p2, bk + 2 * vl) : b0;
        const V b3 = kNv > 3 ? vload(p3, bk + 3 * vl) : b0;
        V av;
        int e = 0;
        acc_fma<kNv>(e++, ak, av, b0, b1, b2, b3, r0);
        (acc_fma<kNv>(e++, ak, av, b0, b1, b2, b3, rs), ...);
        ak += as;
        bk += nr;
      }
    }
    int e = 0;
    acc_end<kNv>(cols, c + j0, ldc, e++, r0);
    (acc_end<kNv>(cols, c + j0, ldc, e++, rs), ...);
  }
}

// The list's columns as constants, so a kernel's tile cannot drift from its entry.
struct Shape { int64_t mr, nr, k_align; };
#define FC_GEMM_UKERNEL(key, isa, ab, acc, mr, nr, ka) \
  [[maybe_unused]] constexpr Shape key##_shape{mr, nr, ka};
#include "cpu/ukernels/gemm_sve.inc"
#undef FC_GEMM_UKERNEL

}  // namespace
}  // namespace flashcore::cpu::sve
