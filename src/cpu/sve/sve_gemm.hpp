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
// A(k, i) (LD1RW / LD1RH) and issues NV FMLAs. The k-loop schedule (Swp below) is chosen
// per kernel from what tools/mca_report.py models for A64FX (docs/results/sve-mca-*.md).
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
FC_SVE_INLINE svuint32_t vload_raw(svbool_t pg, const uint16_t* p) { return svld1uh_u32(pg, p); }
FC_SVE_INLINE svfloat32_t widen(svuint32_t raw) {
  return svcvt_f32_f16_x(svptrue_b8(), svreinterpret_f16(raw));
}
FC_SVE_INLINE svfloat32_t vload(svbool_t pg, const uint16_t* p) { return widen(vload_raw(pg, p)); }
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

// B row k: NV vectors (slots past NV repeat the first; they are never used).
template <int kNv, class TB, class V>
FC_SVE_INLINE void b_row(svbool_t p0, svbool_t p1, svbool_t p2, svbool_t p3, const TB* bk,
                         int64_t vl, V& b0, V& b1, V& b2, V& b3) {
  b0 = vload(p0, bk);
  b1 = kNv > 1 ? vload(p1, bk + vl) : b0;
  b2 = kNv > 2 ? vload(p2, bk + 2 * vl) : b0;
  b3 = kNv > 3 ? vload(p3, bk + 3 * vl) : b0;
}

// The MR*NV FMLAs of one k step.
template <int kNv, class TA, class V, class... Vs>
FC_SVE_INLINE void k_fmas(const TA* ak, V b0, V b1, V b2, V b3, V& r0, Vs&... rs) {
  V av;
  int e = 0;
  acc_fma<kNv>(e++, ak, av, b0, b1, b2, b3, r0);
  (acc_fma<kNv>(e++, ak, av, b0, b1, b2, b3, rs), ...);
}

// C[MR x NR] (=|+=) A^T B for one panel, in passes of NV vectors (one pass at 512 bits).
// TA/TB are the element types of A and B as the k loop reads them (uint16_t B = fp16
// widened to fp32 lanes); kKu is the k unroll of the entry (k_align: kc % kKu == 0).
//
// Software pipelined by one k step: B row k+1 is loaded (and widened) while the FMLAs of
// row k issue, so the load latency (11 cycles on A64FX, + 9 for FCVT) is not exposed at
// the start of each step. The two B register sets alternate (ping-pong) over an even
// unroll, so the rotation costs no register moves (which would take FMA-pipe slots). The
// last steps are peeled so that nothing past the panel is read.
// One FMLA of the split-halves step (Swp::widen_halves, NV = 2, MR = 12, fp32 A): element
// e of the accumulator pack takes part in half e % 2; its A value is lane (e/2) % 4 of the
// 128-bit segments of aq[(e/2) / 4] (LD1RQW), which the indexed FMLA reads directly.
template <int kHalf>
FC_SVE_INLINE void fma_half(int e, svfloat32_t a0, svfloat32_t a1, svfloat32_t a2,
                            svfloat32_t b, svfloat32_t& r) {
  if (e % 2 != kHalf) return;
  const int i = e / 2;
  const svfloat32_t aq = i < 4 ? a0 : i < 8 ? a1 : a2;
  switch (i % 4) {
    case 0: r = svmla_lane(r, b, aq, 0); break;
    case 1: r = svmla_lane(r, b, aq, 1); break;
    case 2: r = svmla_lane(r, b, aq, 2); break;
    default: r = svmla_lane(r, b, aq, 3); break;
  }
}
template <int kHalf, class... Vs>
FC_SVE_INLINE void fmas_half(svfloat32_t a0, svfloat32_t a1, svfloat32_t a2, svfloat32_t b,
                             Vs&... rs) {
  int e = 0;
  (fma_half<kHalf>(e++, a0, a1, a2, b, rs), ...);
}
// Widen fp16 bits into the register of `old` (a dead value): the merging FCVT writes its
// tied destination, so no MOVPRFX or move is needed.
FC_SVE_INLINE svfloat32_t widen_into(svfloat32_t old, svuint32_t raw) {
  return svcvt_f32_f16_m(old, svptrue_b8(), svreinterpret_f16(raw));
}

// k-loop schedules: none (the compiler's order; enough for the fp32 kernels in the model),
// pingpong (B row k+1 loaded during row k, two register sets), widen_halves (fp16 B
// widened half a step ahead, fp32 A by lane; f16_12x2_sve only).
enum class Swp { none, pingpong, widen_halves };

template <int kNv, int kKu, Swp kSwp, class TA, class TB, class TC, class V, class... Vs>
FC_SVE_INLINE void gemm_panel(int64_t kc, const TA* a, int64_t as, const TB* b, int64_t nr,
                              TC* c, int64_t ldc, int accumulate, int64_t vl, V& r0,
                              Vs&... rs) {
  static_assert(kNv >= 1 && kNv <= 4 && (1 + sizeof...(Vs)) % kNv == 0);
  constexpr int kU = kKu % 2 == 0 ? kKu : 2 * kKu;  // even unroll
  for (int64_t j0 = 0; j0 < nr; j0 += kNv * vl) {
    const Cols cols{j0, nr, vl};
    {
      int e = 0;
      acc_begin<kNv>(cols, c + j0, ldc, accumulate, e++, r0);
      (acc_begin<kNv>(cols, c + j0, ldc, accumulate, e++, rs), ...);
    }
    if (kc > 0) {
      const svbool_t p0 = lanes(cols, 0, b), p1 = lanes(cols, 1, b);
      const svbool_t p2 = lanes(cols, 2, b), p3 = lanes(cols, 3, b);
      const TA* ak = a;
      const TB* bk = b + j0;
      V b0, b1, b2, b3, n0, n1, n2, n3;
      if constexpr (kSwp == Swp::widen_halves) {
        // fp16 B, fp32 A rows of 12 (a [k][12] buffer). Each step issues the 12 FMLAs of
        // B vector 0, then the 12 of vector 1, with A read by lane (3 LD1RQW, no
        // broadcasts). Vector 0 is dead after the first half, so the next row's vector 0
        // is widened into its register while the second half runs, and vector 1 likewise
        // at the top of the next step: B is widened a half step ahead with no moves, and
        // its raw loads run a full step ahead.
        static_assert(kNv == 2 && kKu == 1 && sizeof...(Vs) == 23);
        const float* af = ak;
        const svbool_t pq = svptrue_b32();
        svuint32_t w0 = vload_raw(p0, bk), w1 = vload_raw(p1, bk + vl);
        b0 = widen(w0), b1 = widen(w1);
        for (int64_t k = 1; k < kc; ++k) {
          const svfloat32_t a0 = svld1rq(pq, af), a1 = svld1rq(pq, af + 4),
                            a2 = svld1rq(pq, af + 8);
          w0 = vload_raw(p0, bk + nr), w1 = vload_raw(p1, bk + nr + vl);
          // GCC would otherwise interleave the halves and sink loads and FCVTs to the end
          // of the loop (measured: 17 instead of 13 modeled cycles per step). Empty asm
          // statements pin the order: the loads stay at the top (memory clobber), and
          // the second half reads b1 through an asm that follows the FCVT of b0.
          __asm__ volatile("" ::: "memory");
          fmas_half<0>(a0, a1, a2, b0, r0, rs...);
          b0 = widen_into(b0, w0);
          __asm__ volatile("" : "+w"(b0), "+w"(b1));
          fmas_half<1>(a0, a1, a2, b1, r0, rs...);
          b1 = widen_into(b1, w1);
          af += as, bk += nr;
        }
        const svfloat32_t a0 = svld1rq(pq, af), a1 = svld1rq(pq, af + 4), a2 = svld1rq(pq, af + 8);
        fmas_half<0>(a0, a1, a2, b0, r0, rs...);
        fmas_half<1>(a0, a1, a2, b1, r0, rs...);
        int e = 0;
        acc_end<kNv>(cols, c + j0, ldc, e++, r0);
        (acc_end<kNv>(cols, c + j0, ldc, e++, rs), ...);
        continue;
      }
      if constexpr (kSwp == Swp::none) {
        for (int64_t k = 0; k < kc; k += kKu)
          for (int u = 0; u < kKu; ++u) {
            b_row<kNv>(p0, p1, p2, p3, bk, vl, b0, b1, b2, b3);
            k_fmas<kNv>(ak, b0, b1, b2, b3, r0, rs...);
            ak += as, bk += nr;
          }
        int e = 0;
        acc_end<kNv>(cols, c + j0, ldc, e++, r0);
        (acc_end<kNv>(cols, c + j0, ldc, e++, rs), ...);
        continue;
      }
      b_row<kNv>(p0, p1, p2, p3, bk, vl, b0, b1, b2, b3);
      int64_t k = 0;
      for (; k + kU < kc; k += kU) {
        for (int u = 0; u < kU; u += 2) {
          b_row<kNv>(p0, p1, p2, p3, bk + nr, vl, n0, n1, n2, n3);
          k_fmas<kNv>(ak, b0, b1, b2, b3, r0, rs...);
          ak += as, bk += nr;
          b_row<kNv>(p0, p1, p2, p3, bk + nr, vl, b0, b1, b2, b3);
          k_fmas<kNv>(ak, n0, n1, n2, n3, r0, rs...);
          ak += as, bk += nr;
        }
      }
      // The last 1..kU steps (kc - k, a multiple of kKu).
      for (int u = 0; u < kU; u += 2) {
        const bool more = k + u + 1 < kc;
        if (more) b_row<kNv>(p0, p1, p2, p3, bk + nr, vl, n0, n1, n2, n3);
        k_fmas<kNv>(ak, b0, b1, b2, b3, r0, rs...);
        if (!more) break;
        ak += as, bk += nr;
        const bool more2 = k + u + 2 < kc;
        if (more2) b_row<kNv>(p0, p1, p2, p3, bk + nr, vl, b0, b1, b2, b3);
        k_fmas<kNv>(ak, n0, n1, n2, n3, r0, rs...);
        if (!more2) break;
        ak += as, bk += nr;
      }
    }
    int e = 0;
    acc_end<kNv>(cols, c + j0, ldc, e++, r0);
    (acc_end<kNv>(cols, c + j0, ldc, e++, rs), ...);
  }
}

// The list's columns as constants, so a kernel's tile cannot drift from its entry.
struct Shape { int64_t mr, nr, k_align; };
#define FC_GEMM_UKERNEL(key, isa, ab, acc, mr, nr, ka, al, bl) \
  [[maybe_unused]] constexpr Shape key##_shape{mr, nr, ka};
#include "cpu/ukernels/gemm_sve.inc"
#undef FC_GEMM_UKERNEL

}  // namespace
}  // namespace flashcore::cpu::sve
