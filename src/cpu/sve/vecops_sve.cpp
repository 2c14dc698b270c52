// SVE softmax vector ops (VecOps in cpu/ukernels/ukernel.hpp) with exp2 from FEXPA.
//
// FEXPA (svexpa) takes a 32-bit pattern whose bits [5:0] index a table of the fractions of
// 2^(j/64) and whose bits [13:6] become the exponent field of the result, so
// FEXPA(n + 127*64) = 2^(n/64) for n = round(64 x) in [-126*64, 128*64). n lands in those
// bits by one addition: adding kShift = 1.5*2^17 + 127 to x gives a float in [2^17, 2^18),
// whose ulp is 2^-6, so its low mantissa bits hold round(64 x) + 127*64 (+ the constant's
// own bits, which are zero below bit 14).
//   fast:  FEXPA alone. Rounding x to 1/64 leaves |x - n/64| <= 1/128: relative error
//          <= 2^(1/128) - 1 = 5.4e-3 (the seeds' trade: ~7 correct bits).
//   exact: 2^x = FEXPA(n) * 2^r, r = x - n/64 in [-1/128, 1/128], and 2^r = e^(r ln2) with
//          |r ln2| <= 5.5e-3 is 1 + r ln2 + (r ln2)^2/2 within 2.7e-8; with the roundings
//          of the table entry, the FMAs and the product the result is within ~1.3e-7
//          relative (<= 2e-7), with one FMA more than fast mode plus two for r.
// Results under 2^-126 (and every x < -126, including -inf from masked scores) are 0; a
// NaN x (a NaN score, or inf - inf) gives NaN, which marks its row as NaN downstream;
// exp2_pack stores fp16 probabilities under 2^-14 (fp16's smallest normal) as 0 too, like
// the portable ops, and adds to the row sums exactly the value it stored.
#include <arm_sve.h>

#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"
#include "cpu/ukernels/vecops_portable.hpp"

namespace flashcore::cpu::sve {
namespace {

constexpr float kShift = 196608.0f + 127.0f;     // 1.5 * 2^17 + exponent bias
constexpr float kMinX = -126.0f;                 // below: result under FLT_MIN, stored as 0
constexpr float kMinHalf = 6.103515625e-05f;     // 2^-14, smallest normal fp16
constexpr float kC1 = 0.6931471805599453f;       // ln 2
constexpr float kC2 = 0.2402265069591007f;       // (ln 2)^2 / 2

template <bool kFast>
inline __attribute__((always_inline)) svfloat32_t exp2_v(svbool_t pg, svfloat32_t x) {
  const svfloat32_t y = svadd_x(pg, x, kShift);
  const svfloat32_t e = svexpa(svreinterpret_u32(y));
  svfloat32_t p;
  if constexpr (kFast) {
    p = svsel(svcmpuo(pg, x, x), x, e);  // NaN stays NaN: FEXPA would read its bits as 2^-127
  } else {  // r is NaN for a NaN x, and so is p
    const svfloat32_t r = svsub_x(pg, x, svsub_x(pg, y, kShift));  // x - n/64, exact
    const svfloat32_t q = svmul_x(pg, r, svmla_x(pg, svdup_n_f32(kC1), r, kC2));
    p = svmla_x(pg, e, e, q);                                        // e * (1 + q)
  }
  return svsel(svcmplt(pg, x, kMinX), svdup_n_f32(0.0f), p);
}

void col_max(int64_t kc, int64_t mq, const float* t, int64_t ldt, float* mx) {
  for (int64_t i = 0; i < mq; i += int64_t(svcntw())) {
    const svbool_t pg = svwhilelt_b32(i, mq);
    svfloat32_t m = svld1(pg, mx + i);
    for (int64_t k = 0; k < kc; ++k) m = svmax_m(pg, m, svld1(pg, t + k * ldt + i));
    svst1(pg, mx + i, m);
  }
}

// One column strip of vector width: the negated scaled max and the row sums stay in
// registers while the strip walks down the keys.
template <bool kFast>
void exp2_pack_t(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
                 void* dst, int64_t ldd, DType dst_type, float* sum) {
  for (int64_t i = 0; i < mq; i += int64_t(svcntw())) {
    const svbool_t pg = svwhilelt_b32(i, mq);
    const svfloat32_t ncm = svneg_x(pg, svld1(pg, cm + i));
    svfloat32_t s = svld1(pg, sum + i);
    if (dst_type == DType::f32) {
      float* d = static_cast<float*>(dst) + i;
      for (int64_t k = 0; k < kc; ++k) {
        const svfloat32_t p = exp2_v<kFast>(pg, svmla_x(pg, ncm, svld1(pg, t + k * ldt + i), c));
        svst1(pg, d + k * ldd, p);
        s = svadd_m(pg, s, p);
      }
    } else {  // f16: narrowing FCVT into the low half of each 32-bit lane, stored by ST1H
      uint16_t* d = static_cast<uint16_t*>(dst) + i;
      for (int64_t k = 0; k < kc; ++k) {
        svfloat32_t p = exp2_v<kFast>(pg, svmla_x(pg, ncm, svld1(pg, t + k * ldt + i), c));
        p = svsel(svcmplt(pg, p, kMinHalf), svdup_n_f32(0.0f), p);
        const svfloat16_t h = svcvt_f16_f32_x(pg, p);
        svst1h(pg, d + k * ldd, svreinterpret_u32(h));
        s = svadd_m(pg, s, svcvt_f32_f16_x(pg, h));
      }
    }
    svst1(pg, sum + i, s);
  }
}

void exp2_pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, float c, const float* cm,
               void* dst, int64_t ldd, DType dst_type, Layout layout, Exp2Mode mode, float* sum) {
  if ((dst_type != DType::f32 && dst_type != DType::f16) || layout != Layout::kmajor) {
    // No SVE kernel takes bf16 operands (base SVE has no BFCVT) or packs other than
    // k-major: the portable ops.
    ukernels::vecops_generic.exp2_pack(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, layout, mode,
                                       sum);
    return;
  }
  if (mode == Exp2Mode::fast)
    exp2_pack_t<true>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, sum);
  else
    exp2_pack_t<false>(kc, mq, t, ldt, c, cm, dst, ldd, dst_type, sum);
}

void scale_rows(int64_t mq, int64_t n, float* o, int64_t ld, const float* alpha) {
  for (int64_t i = 0; i < mq; ++i) {
    float* row = o + i * ld;
    const float a = alpha[i];
    for (int64_t j = 0; j < n; j += int64_t(svcntw())) {
      const svbool_t pg = svwhilelt_b32(j, n);
      svst1(pg, row + j, svmul_x(pg, svld1(pg, row + j), a));
    }
  }
}

// Each fp16 value loaded zero-extended into a 32-bit lane (ld1h), whose low half fcvt
// converts.
void add_f16_tile(int64_t mr, int64_t nr, const uint16_t* tile, float* c, int64_t ldc, int accumulate) {
  for (int64_t i = 0; i < mr; ++i, tile += nr, c += ldc)
    for (int64_t j = 0; j < nr; j += int64_t(svcntw())) {
      const svbool_t pg = svwhilelt_b32(j, nr);
      svfloat32_t x = svcvt_f32_f16_x(pg, svreinterpret_f16_u32(svld1uh_u32(pg, tile + j)));
      if (accumulate) x = svadd_x(pg, x, svld1(pg, c + j));
      svst1(pg, c + j, x);
    }
}

// The portable loops (compiled with this TU's SVE flags).
void pack(int64_t kc, int64_t mq, const float* t, int64_t ldt, void* dst, int64_t ldd, DType dst_type,
          Layout layout) {
  portable::pack(kc, mq, t, ldt, dst, ldd, dst_type, layout);
}
void store_row(const float* row, int64_t n, float scale, void* dst, DType dt) {
  portable::store_row(row, n, scale, dst, dt);
}
void f16_tile_as(int64_t mr, int64_t nr, const uint16_t* tile, uint16_t* dst, int64_t ld, Layout layout) {
  portable::f16_tile_as(mr, nr, tile, dst, ld, layout);
}

}  // namespace
}  // namespace flashcore::cpu::sve

namespace flashcore::cpu::ukernels {
const VecOps vecops_sve = {"vecops_sve", Isa::sve, &sve::col_max, &sve::exp2_pack, &sve::pack,
                           &sve::scale_rows, &sve::add_f16_tile, &sve::f16_tile_as, &sve::store_row, nullptr, nullptr};
}  // namespace flashcore::cpu::ukernels
