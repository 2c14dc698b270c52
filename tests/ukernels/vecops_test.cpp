// One test per softmax vector-op set, generated from vecops.inc like the GEMM tests:
// col_max, exp2_pack into f32 / f16 / bf16 in both exp2 modes (with -inf scores and
// fully masked columns), exp2_pack into the bf16 kernels' P layouts (k pairs, rows),
// pack (the same layouts without the exponential), scale_rows, add_f16_tile and f16_tile_as,
// each against the portable bodies or exact conversions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "core/dtype.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "cpu/ukernels/vecops_portable.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
namespace cpu = flashcore::cpu;

#define FC_VECOPS(key_, isa_) &cpu::ukernels::key_,
const cpu::VecOps* const kVecOps[] = {
#include "cpu/ukernels/vecops.inc"
};
#undef FC_VECOPS

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query counts are multiples of any vector length up to 2048-bit SVE (64 floats); the
// row strides are larger than the rows.
constexpr int64_t kMq[] = {64, 128};
constexpr int64_t kKc[] = {1, 7, 256};
constexpr int64_t kExtra = 16;

class VecOpsTest : public ::testing::TestWithParam<const cpu::VecOps*> {
 protected:
  void SetUp() override {
    const cpu::VecOps& v = *GetParam();
    if (!cpu::isa_available(v.isa))
      GTEST_SKIP() << v.key << " needs ISA " << cpu::isa_name(v.isa) << ", which this CPU lacks";
  }
  const cpu::VecOps& ops() const { return *GetParam(); }
};

// Visits element (k, i), k < kend, i < mq, of a block the op under test wrote at
// pack_index(layout, k, i, ldd) into `got` (n elements of es bytes, filled with 0xFF
// before): check(k, i, at), stopping at the first fatal failure; then every byte of the
// elements not visited must still be 0xFF (nothing written outside the layout).
template <class Check>
void walk_layout(cpu::Layout layout, int64_t kend, int64_t mq, int64_t ldd, int64_t n, size_t es,
                 const std::vector<uint8_t>& got, Check&& check) {
  std::vector<bool> mine(size_t(n), false);
  for (int64_t k = 0; k < kend; ++k)
    for (int64_t i = 0; i < mq; ++i) {
      const int64_t at = cpu::pack_index(layout, k, i, ldd);
      ASSERT_LT(at, n);
      mine[size_t(at)] = true;
      check(k, i, at);
      if (::testing::Test::HasFatalFailure()) return;
    }
  for (int64_t e = 0; e < n; ++e) {
    if (mine[size_t(e)]) continue;
    for (size_t byte = size_t(e) * es; byte < size_t(e + 1) * es; ++byte)
      ASSERT_EQ(got[byte], 0xFF) << "wrote element " << e << " outside the layout";
  }
}

// Scores with some -inf entries (masked keys) and, in column 1, only -inf.
std::vector<float> scores(Rng& rng, int64_t kc, int64_t mq, int64_t ldt) {
  std::vector<float> t(size_t(kc * ldt), std::numeric_limits<float>::quiet_NaN());
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t i = 0; i < mq; ++i)
      t[size_t(k * ldt + i)] = (i == 1 || rng.uniform(0, 1) < 0.1) ? kNegInf : float(rng.uniform(-20, 20));
  return t;
}

TEST_P(VecOpsTest, ColMax) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t mq : kMq)
    for (int64_t kc : kKc) {
      SCOPED_TRACE("mq " + std::to_string(mq) + ", kc " + std::to_string(kc));
      const int64_t ldt = mq + kExtra;
      const std::vector<float> t = scores(rng, kc, mq, ldt);
      std::vector<float> mx(static_cast<size_t>(mq)), want(static_cast<size_t>(mq));
      for (int64_t i = 0; i < mq; ++i) mx[size_t(i)] = i % 3 == 0 ? kNegInf : float(rng.uniform(-10, 10));
      want = mx;
      cpu::portable::col_max(kc, mq, t.data(), ldt, want.data());
      ops().col_max(kc, mq, t.data(), ldt, mx.data());
      for (int64_t i = 0; i < mq; ++i) ASSERT_EQ(mx[size_t(i)], want[size_t(i)]) << "query " << i;
    }
}

TEST_P(VecOpsTest, Exp2Pack) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (DType dst_type : {DType::f32, DType::f16, DType::bf16})
    for (Exp2Mode mode : kExpModes)
      for (int64_t mq : kMq)
        for (int64_t kc : kKc) {
          SCOPED_TRACE("dst " + name(dst_type) + ", exp " + name(mode) + ", mq " + std::to_string(mq) +
                       ", kc " + std::to_string(kc));
          const int64_t ldt = mq + kExtra, ldd = mq + kExtra;
          const std::vector<float> t = scores(rng, kc, mq, ldt);
          const float c = 1.3f;
          // cm = c * row max as the pipelines fold it (0 for an all -inf column); every
          // third query's reference lies up to 8 below its max, as the online strategy's
          // (its rescale slack, geometry.hpp): exp2 arguments up to +8, P up to 256.
          std::vector<float> cm(size_t(mq), kNegInf);
          cpu::portable::col_max(kc, mq, t.data(), ldt, cm.data());
          for (int64_t i = 0; i < mq; ++i) {
            float& x = cm[size_t(i)];
            x = x == kNegInf ? 0.0f : c * x - (i % 3 == 1 ? float(rng.uniform(0, 8)) : 0.0f);
          }
          const size_t es = fc::dtype_size(dst_type);
          std::vector<uint8_t> got(size_t(kc * ldd) * es, 0xFF), want(size_t(kc * ldd) * es, 0xFF);
          std::vector<float> sum(static_cast<size_t>(mq)), want_sum(static_cast<size_t>(mq));
          for (int64_t i = 0; i < mq; ++i) sum[size_t(i)] = want_sum[size_t(i)] = float(rng.uniform(0, 2));
          cpu::portable::exp2_pack(kc, mq, t.data(), ldt, c, cm.data(), want.data(), ldd, dst_type,
                                   cpu::Layout::kmajor, mode, want_sum.data());
          ops().exp2_pack(kc, mq, t.data(), ldt, c, cm.data(), got.data(), ldd, dst_type,
                          cpu::Layout::kmajor, mode, sum.data());
          // Two correct kernels may differ by their exp2 error plus one rounding step of
          // the stored type; f16 values under 2^-14 may flush or stay subnormal. Fast exp2
          // is <= 1.8e-3 (portable, AVX-512) but FEXPA alone on SVE is ~5.4e-3 (the SVE
          // kernels' bound, src/cpu/sve/vecops_sve.cpp), so two fast kernels may differ by up to ~7.2e-3.
          const double rel = (mode == Exp2Mode::exact ? 1e-5 : 8e-3) +
                             (dst_type == DType::f32 ? 0.0 : dst_type == DType::f16 ? 0x1p-10 : 0x1p-7);
          const double abs_tol = dst_type == DType::f16 ? 0x1p-14 : 1e-30;
          for (int64_t k = 0; k < kc; ++k) {
            for (int64_t i = 0; i < mq; ++i) {
              const int64_t idx = k * ldd + i;
              const double g = fc::core::load_as_f32(got.data(), idx, dst_type);
              const double w = fc::core::load_as_f32(want.data(), idx, dst_type);
              if (t[size_t(k * ldt + i)] == kNegInf) {
                ASSERT_EQ(g, 0.0) << "masked score must give exactly 0 at key " << k << ", query " << i;
                continue;
              }
              ASSERT_TRUE(std::abs(g - w) <= rel * w + abs_tol)
                  << "key " << k << ", query " << i << ": got " << g << ", want " << w;
            }
            // Bytes between mq and ldd are not the kernel's.
            for (size_t byte = size_t(k * ldd + mq) * es; byte < size_t((k + 1) * ldd) * es; ++byte)
              ASSERT_EQ(got[byte], 0xFF) << "wrote past mq in row " << k;
          }
          for (int64_t i = 0; i < mq; ++i)
            ASSERT_NEAR(sum[size_t(i)], want_sum[size_t(i)], rel * want_sum[size_t(i)] + double(kc) * abs_tol)
                << "sum of query " << i;
        }
}

// The k-pair and row layouts hold the same values as the k-major pack (portable, k-major:
// the reference here), each at pack_index(layout, k, i, ldd); the partner of an odd last key
// is zero, and nothing outside the layout's [kc x mq] elements is written. kc = 32 and 256
// take the AVX-512 row path (kc % 32 == 0), 7 and 62 the others.
TEST_P(VecOpsTest, Exp2PackLayouts) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (cpu::Layout layout : {cpu::Layout::kpairs, cpu::Layout::rows})
    for (DType dst_type : {DType::bf16, DType::f16, DType::f32})
      for (Exp2Mode mode : kExpModes)
        for (int64_t mq : kMq)
          for (int64_t kc : {7, 32, 62, 256}) {
            SCOPED_TRACE(std::string(cpu::layout_name(layout)) + ", dst " + name(dst_type) + ", exp " +
                         name(mode) + ", mq " + std::to_string(mq) + ", kc " + std::to_string(kc));
            const int64_t ldt = mq + kExtra, kc2 = (kc + 1) / 2 * 2;
            const int64_t ldd = layout == cpu::Layout::rows ? kc + kExtra : mq + kExtra;
            const int64_t n = layout == cpu::Layout::rows ? mq * ldd : kc2 * ldd;
            const std::vector<float> t = scores(rng, kc, mq, ldt);
            const float c = 0.7f;
            std::vector<float> cm(size_t(mq), kNegInf);
            cpu::portable::col_max(kc, mq, t.data(), ldt, cm.data());
            for (float& x : cm) x = x == kNegInf ? 0.0f : c * x;
            const size_t es = fc::dtype_size(dst_type);
            std::vector<uint8_t> want(size_t(kc * mq) * es), got(size_t(n) * es, 0xFF);
            std::vector<float> sum(size_t(mq), 0.5f), want_sum(size_t(mq), 0.5f);
            cpu::portable::exp2_pack(kc, mq, t.data(), ldt, c, cm.data(), want.data(), mq, dst_type,
                                     cpu::Layout::kmajor, mode, want_sum.data());
            ops().exp2_pack(kc, mq, t.data(), ldt, c, cm.data(), got.data(), ldd, dst_type, layout,
                            mode, sum.data());
            const double rel = (mode == Exp2Mode::exact ? 1e-5 : 8e-3) +
                               (dst_type == DType::f32 ? 0.0 : dst_type == DType::f16 ? 0x1p-10 : 0x1p-7);
            const double abs_tol = dst_type == DType::f16 ? 0x1p-14 : 1e-30;  // f16 subnormals
            const int64_t kend = layout == cpu::Layout::kpairs ? kc2 : kc;
            ASSERT_NO_FATAL_FAILURE(walk_layout(layout, kend, mq, ldd, n, es, got, [&](int64_t k, int64_t i, int64_t at) {
              const double g = fc::core::load_as_f32(got.data(), at, dst_type);
              if (k >= kc) {
                ASSERT_EQ(g, 0.0) << "pair partner of the last key, query " << i;
                return;
              }
              const double w = fc::core::load_as_f32(want.data(), k * mq + i, dst_type);
              if (t[size_t(k * ldt + i)] == kNegInf) {
                ASSERT_EQ(g, 0.0) << "masked score must give exactly 0 at key " << k << ", query " << i;
                return;
              }
              ASSERT_TRUE(std::abs(g - w) <= rel * w + abs_tol)
                  << "key " << k << ", query " << i << ": got " << g << ", want " << w;
            }));
            for (int64_t i = 0; i < mq; ++i)
              ASSERT_NEAR(sum[size_t(i)], want_sum[size_t(i)], rel * want_sum[size_t(i)] + double(kc) * abs_tol + 1e-6)
                  << "sum of query " << i;
          }
}

// pack (no exponential): any fp32 value stored as the dtype, rounded to nearest even, at
// pack_index(layout, k, i, ldd), bit for bit as core's conversions give it; the partner of
// an odd last key is zero and nothing outside the layout's elements is written. Values of
// either sign over 2^-60 .. 2^15 (no bf16 subnormals: vcvtne2ps2bf16 flushes them).
TEST_P(VecOpsTest, Pack) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (cpu::Layout layout : {cpu::Layout::kmajor, cpu::Layout::kpairs, cpu::Layout::rows})
    for (DType dst_type : {DType::bf16, DType::f16, DType::f32})
      for (int64_t mq : kMq)
        for (int64_t kc : {7, 32, 62, 256}) {
          SCOPED_TRACE(std::string(cpu::layout_name(layout)) + ", dst " + name(dst_type) + ", mq " +
                       std::to_string(mq) + ", kc " + std::to_string(kc));
          const int64_t ldt = mq + kExtra, kc2 = (kc + 1) / 2 * 2;
          const int64_t ldd = layout == cpu::Layout::rows ? kc + kExtra : mq + kExtra;
          const int64_t n = layout == cpu::Layout::rows ? mq * ldd : kc2 * ldd;
          std::vector<float> t(size_t(kc * ldt), std::numeric_limits<float>::quiet_NaN());
          for (int64_t k = 0; k < kc; ++k)
            for (int64_t i = 0; i < mq; ++i)
              t[size_t(k * ldt + i)] = float((rng.uniform(0, 1) < 0.5 ? -1 : 1) * std::exp2(rng.uniform(-60, 15)));
          const size_t es = fc::dtype_size(dst_type);
          std::vector<uint8_t> got(size_t(n) * es, 0xFF), one(es);
          ops().pack(kc, mq, t.data(), ldt, got.data(), ldd, dst_type, layout);
          const int64_t kend = layout == cpu::Layout::kpairs ? kc2 : kc;
          ASSERT_NO_FATAL_FAILURE(walk_layout(layout, kend, mq, ldd, n, es, got, [&](int64_t k, int64_t i, int64_t at) {
            const float x = k < kc ? t[size_t(k * ldt + i)] : 0.0f;
            fc::core::store_from_f32(one.data(), 0, dst_type, x);
            ASSERT_EQ(std::memcmp(got.data() + size_t(at) * es, one.data(), es), 0)
                << "key " << k << ", query " << i << ": got " << fc::core::load_as_f32(got.data(), at, dst_type)
                << " for " << x;
          }));
        }
}

TEST_P(VecOpsTest, ScaleRows) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t mq : kMq)
    for (int64_t n : {16, 37, 128}) {
      SCOPED_TRACE("mq " + std::to_string(mq) + ", n " + std::to_string(n));
      const int64_t ld = n + 7;
      std::vector<float> o(static_cast<size_t>(mq * ld)), alpha(static_cast<size_t>(mq));
      for (float& x : o) x = float(rng.uniform(-5, 5));
      for (int64_t i = 0; i < mq; ++i) alpha[size_t(i)] = i % 5 == 0 ? 0.0f : float(rng.uniform(0, 1));
      std::vector<float> want = o;
      cpu::portable::scale_rows(mq, n, want.data(), ld, alpha.data());
      ops().scale_rows(mq, n, o.data(), ld, alpha.data());
      for (size_t e = 0; e < o.size(); ++e) ASSERT_EQ(o[e], want[e]) << "element " << e;
    }
}

// An fp16 C tile (values of every magnitude class: normal, subnormal, zero, inf) into
// fp32, stored and accumulated, against the exact conversion; the fp32 tile's padding
// columns (ldc > nr) stay untouched.
TEST_P(VecOpsTest, AddF16Tile) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t mr : {1, 12, 32})
    for (int64_t nr : {16, 32, 64}) {
      SCOPED_TRACE("mr " + std::to_string(mr) + ", nr " + std::to_string(nr));
      const int64_t ldc = nr + 5;
      std::vector<uint16_t> tile(static_cast<size_t>(mr * nr));
      for (size_t e = 0; e < tile.size(); ++e) {
        const float x = e % 7 == 3 ? float(rng.uniform(-1, 1)) * 1e-6f : float(rng.uniform(-300, 300));
        tile[e] = e % 11 == 5 ? uint16_t(0x7C00u) : e % 13 == 1 ? uint16_t(0x8000u) : fc::core::f32_to_f16(x);
      }
      for (int accumulate : {0, 1}) {
        std::vector<float> c(static_cast<size_t>(mr * ldc));
        for (float& x : c) x = float(rng.uniform(-5, 5));
        const std::vector<float> before = c;
        std::vector<float> want = c;
        cpu::portable::add_f16_tile(mr, nr, tile.data(), want.data(), ldc, accumulate);
        ops().add_f16_tile(mr, nr, tile.data(), c.data(), ldc, accumulate);
        ASSERT_EQ(c, want);
        for (int64_t i = 0; i < mr; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t e = size_t(i * ldc + j);
            if (j >= nr) {
              ASSERT_EQ(c[e], before[e]) << "padding " << i << "," << j;
              continue;
            }
            const float v = fc::core::f16_to_f32(tile[size_t(i * nr + j)]);
            ASSERT_EQ(c[e], accumulate ? before[e] + v : v) << "element " << i << "," << j;
          }
      }
    }
}

// An fp16 C tile as a GEMM's A operand (its rows as k) in every layout: each element at
// its pack_index, bits unchanged; the destination's other elements (the padding columns
// of ld > nr, the rows layout's k past mr) stay untouched.
TEST_P(VecOpsTest, F16TileAs) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (cpu::Layout layout : {cpu::Layout::kmajor, cpu::Layout::kpairs, cpu::Layout::rows})
    for (int64_t mr : {2, 12, 32})
      for (int64_t nr : {16, 32, 64}) {
        SCOPED_TRACE("layout " + std::string(cpu::layout_name(layout)) + ", mr " + std::to_string(mr) +
                     ", nr " + std::to_string(nr));
        const int64_t ld = layout == cpu::Layout::rows ? mr + 3 : nr + 5;
        std::vector<uint16_t> tile(static_cast<size_t>(mr * nr));
        for (uint16_t& x : tile) x = uint16_t(rng.uniform(0, 65535));
        const int64_t rows = layout == cpu::Layout::rows ? nr : mr;
        std::vector<uint16_t> dst(static_cast<size_t>(rows * ld + 2 * ld + 64));
        for (uint16_t& x : dst) x = uint16_t(rng.uniform(0, 65535));
        std::vector<uint16_t> want = dst;
        for (int64_t i = 0; i < mr; ++i)
          for (int64_t j = 0; j < nr; ++j) want[size_t(cpu::pack_index(layout, i, j, ld))] = tile[size_t(i * nr + j)];
        ops().f16_tile_as(mr, nr, tile.data(), dst.data(), ld, layout);
        ASSERT_EQ(dst, want);
      }
}

// Finished output rows (O / l in the output dtype): every value class (normal, results in
// the f16 subnormal range, past the f16 range, inf, NaN, zeros of both signs), odd lengths,
// scale 0 and 1, against core's scalar conversion; nothing past n is written.
TEST_P(VecOpsTest, StoreRow) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t n : {0, 1, 7, 16, 33, 64, 1000})
      for (float scale : {1.0f, 0.37f, 0.0f}) {
        SCOPED_TRACE(std::string(fc::to_string(dt)) + " n " + std::to_string(n) + " scale " + std::to_string(scale));
        std::vector<float> row(static_cast<size_t>(n));
        for (size_t e = 0; e < row.size(); ++e) {
          switch (e % 9) {
            case 0: row[e] = float(rng.uniform(-1, 1)) * 1e-6f; break;  // f16 subnormal results
            case 1: row[e] = float(rng.uniform(-1, 1)) * 2e5f; break;   // past f16's range
            case 2: row[e] = e % 2 ? INFINITY : -INFINITY; break;
            case 3: row[e] = std::nanf(""); break;
            case 4: row[e] = e % 2 ? 0.0f : -0.0f; break;
            default: row[e] = float(rng.uniform(-300, 300));
          }
        }
        const size_t es = dt == DType::f32 ? 4 : 2, guard = 64;
        std::vector<uint8_t> got(size_t(n) * es + guard, 0xA5), want(size_t(n) * es + guard, 0xA5);
        cpu::portable::store_row(row.data(), n, scale, want.data(), dt);
        ops().store_row(row.data(), n, scale, got.data(), dt);
        for (size_t e = size_t(n) * es; e < got.size(); ++e) ASSERT_EQ(got[e], 0xA5) << "byte " << e << " past n";
        for (int64_t j = 0; j < n; ++j) {
          const float g = fc::core::load_as_f32(got.data(), j, dt), w = fc::core::load_as_f32(want.data(), j, dt);
          if (std::isnan(w)) {
            ASSERT_TRUE(std::isnan(g)) << "element " << j;  // NaN payloads may differ (vcvtps2ph)
            continue;
          }
          ASSERT_EQ(std::memcmp(got.data() + j * es, want.data() + j * es, es), 0)
              << "element " << j << ": " << g << " vs " << w << " from " << row[size_t(j)];
        }
      }
}

INSTANTIATE_TEST_SUITE_P(VecOps, VecOpsTest, ::testing::ValuesIn(kVecOps),
                         [](const auto& info) { return std::string(info.param->key); });

// core::convert_row widens fp16 rows (the decode path's K and V, packing): on x86 with
// F16C by vcvtph2ps, else bit by bit. Every fp16 value, in rows of odd lengths (vector
// body and scalar tail), against the scalar f16_to_f32; NaNs only as NaNs (vcvtph2ps sets
// the quiet bit).
TEST(ConvertRow, F16AllValues) {
  std::vector<uint16_t> h(65536 + 7);
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(i);
  std::vector<float> got(h.size() + 1);
  for (int64_t start : {0, 3}) {
    std::fill(got.begin(), got.end(), 12345.0f);
    const int64_t n = int64_t(h.size()) - start;
    fc::core::convert_row(h.data() + start, DType::f16, n, got.data());
    ASSERT_EQ(got[size_t(n)], 12345.0f) << "wrote past n";
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t x = h[size_t(start + i)];
      const float want = fc::core::f16_to_f32(x), g = got[size_t(i)];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(g)) << "fp16 bits " << x;
        continue;
      }
      ASSERT_EQ(std::memcmp(&g, &want, 4), 0) << "fp16 bits " << x << ": " << g << " vs " << want;
    }
  }
}

// The e4m3 rows (an fp8 KV cache): convert_row and, on x86, each vector widening the CPU
// has (AVX-512, AVX2 + F16C): every byte, twice over in an odd-length row (vector body and
// scalar tail), against the scalar e4m3_to_f32 (normals, subnormals, both zeros, NaN).
TEST(ConvertRow, E4m3AllValues) {
  std::vector<uint8_t> b(2 * 256 + 5);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i);
  const int64_t n = int64_t(b.size());
  std::vector<std::pair<const char*, std::function<void(float*)>>> ways = {
      {"convert_row", [&](float* d) { fc::core::convert_row(b.data(), DType::e4m3, n, d); }}};
#if defined(__x86_64__)
  if (fc::core::have_e4m3_avx512()) ways.push_back({"avx512", [&](float* d) { fc::core::e4m3_row_avx512(b.data(), n, d); }});
  if (fc::core::have_e4m3_avx2()) ways.push_back({"avx2", [&](float* d) { fc::core::e4m3_row_avx2(b.data(), n, d); }});
#endif
  for (const auto& [name, widen] : ways) {
    SCOPED_TRACE(name);
    std::vector<float> got(b.size() + 1, 12345.0f);
    widen(got.data());
    ASSERT_EQ(got[size_t(n)], 12345.0f) << "wrote past n";
    for (int64_t i = 0; i < n; ++i) {
      const float want = fc::core::e4m3_to_f32(b[size_t(i)]), g = got[size_t(i)];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(g)) << "e4m3 bits " << int(b[size_t(i)]);
        continue;
      }
      ASSERT_EQ(std::memcmp(&g, &want, 4), 0) << "e4m3 bits " << int(b[size_t(i)]) << ": " << g << " vs " << want;
    }
  }
}

// The backward's tile ops (sets that have them): P in place and as bf16 A(k = query, i = key)
// rows, with per-row key bounds (NaN and Inf planted where masked, a row with no key), then
// dS twice; every element against an fp64 exp2 / the fp32 expression rounded by
// core::f32_to_bf16, nothing written outside either layout.
TEST_P(VecOpsTest, BackwardTiles) {
  const cpu::VecOps& v = ops();
  if (v.bwd_probs == nullptr || v.bwd_dscores == nullptr) GTEST_SKIP() << v.key << " has no backward tile ops";
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t m = 64, n = 48, ld = n + 16, ldp = m + 32;
  const float c = 0.125f * fc::core::kLog2e;
  // bf16 as the vector ops round it: nearest even, fp32 subnormals to zero
  auto bf16 = [](float x) {
    return std::fabs(x) < 0x1p-126f ? uint16_t(std::signbit(x) ? 0x8000 : 0) : fc::core::f32_to_bf16(x);
  };
  for (const fc::Exp2Mode mode : {fc::Exp2Mode::exact, fc::Exp2Mode::fast}) {
    SCOPED_TRACE(mode == fc::Exp2Mode::exact ? "exact" : "fast");
    std::vector<int64_t> lo(static_cast<size_t>(m)), hi(static_cast<size_t>(m));
    std::vector<float> sub(static_cast<size_t>(m)), s(static_cast<size_t>(m * ld), std::numeric_limits<float>::quiet_NaN());
    for (int64_t i = 0; i < m; ++i) {
      lo[size_t(i)] = rng.integer(-20, n + 5);
      hi[size_t(i)] = rng.integer(lo[size_t(i)] - 3, n + 20);
      if (i == 5) lo[size_t(i)] = hi[size_t(i)] = 0;  // no key
      if (i == 6) lo[size_t(i)] = -1, hi[size_t(i)] = n + 1;  // every key
      sub[size_t(i)] = float(rng.uniform(-5, 5));
      for (int64_t j = 0; j < n; ++j) {
        const bool live = j >= lo[size_t(i)] && j < hi[size_t(i)];
        s[size_t(i * ld + j)] = live ? float(rng.uniform(-40, 40)) : (j % 2 ? kNegInf : -kNegInf);
        if (!live && j % 3 == 0) s[size_t(i * ld + j)] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    const std::vector<float> s0 = s;
    std::vector<uint8_t> pt(static_cast<size_t>(n * ldp * 2), 0xFF);
    v.bwd_probs(m, n, s.data(), ld, c, sub.data(), lo.data(), hi.data(), mode, pt.data(), ldp);
    const double tol = mode == fc::Exp2Mode::exact ? 1e-4 : 2e-3;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float got = s[size_t(i * ld + j)];
        if (j >= lo[size_t(i)] && j < hi[size_t(i)]) {
          const double want = std::exp2(double(c) * s0[size_t(i * ld + j)] - sub[size_t(i)]);
          if (want < 0x1p-120) {
            ASSERT_LE(got, 0x1p-119) << i << "," << j;
          } else {
            ASSERT_NEAR(got, want, tol * want) << i << "," << j;
          }
        } else {
          ASSERT_EQ(got, 0.0f) << "masked " << i << "," << j;
        }
      }
    walk_layout(cpu::Layout::rows, m, n, ldp, n * ldp, 2, pt, [&](int64_t k, int64_t i, int64_t at) {
      uint16_t g;
      std::memcpy(&g, pt.data() + at * 2, 2);
      ASSERT_EQ(g, bf16(s[size_t(k * ld + i)])) << "P^T query " << k << " key " << i;
    });
    // dS from this P and a random dP (NaN in the stride gap: never read)
    std::vector<float> dp(static_cast<size_t>(m * ld), std::numeric_limits<float>::quiet_NaN()), d(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      d[size_t(i)] = float(rng.uniform(-2, 2));
      for (int64_t j = 0; j < n; ++j) dp[size_t(i * ld + j)] = float(rng.uniform(-3, 3));
    }
    const int64_t ldr = n + 32;
    std::vector<uint8_t> dst(static_cast<size_t>(n * ldp * 2), 0xFF), dsr(static_cast<size_t>(m * ldr * 2), 0xFF);
    v.bwd_dscores(m, n, s.data(), dp.data(), ld, d.data(), dst.data(), ldp, dsr.data(), ldr);
    auto want_ds = [&](int64_t i, int64_t j) {
      return bf16(s[size_t(i * ld + j)] * (dp[size_t(i * ld + j)] - d[size_t(i)]));
    };
    walk_layout(cpu::Layout::rows, m, n, ldp, n * ldp, 2, dst, [&](int64_t k, int64_t i, int64_t at) {
      uint16_t g;
      std::memcpy(&g, dst.data() + at * 2, 2);
      ASSERT_EQ(g, want_ds(k, i)) << "dS^T query " << k << " key " << i;
    });
    walk_layout(cpu::Layout::rows, n, m, ldr, m * ldr, 2, dsr, [&](int64_t k, int64_t i, int64_t at) {
      uint16_t g;
      std::memcpy(&g, dsr.data() + at * 2, 2);
      ASSERT_EQ(g, want_ds(i, k)) << "dS query " << i << " key " << k;
    });
  }
}

TEST(VecOpsList, MatchesDispatchTable) {
  ASSERT_EQ(cpu::vecops_count(), int(std::size(kVecOps)));
  for (int i = 0; i < cpu::vecops_count(); ++i) EXPECT_EQ(&cpu::vecops(i), kVecOps[i]);
}

}  // namespace
}  // namespace fctest
