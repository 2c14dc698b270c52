// softmax_v (O = softmax(scale * S) V from given scores) against the fp64 reference:
// f32 and i32 scores, row- and column-major S, every strategy x V dtype x exp2 mode,
// odd sizes, padded strides, rows of -inf scores, and every GEMM kernel forced by key.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

struct SvCase {
  const char* name;
  int64_t m, l, d;
  DType s_dtype = DType::f32;
  bool colmajor = false;
  int64_t pad = 0;
  float scale = 1.0f;
  bool masked = false;  // some -inf scores and one all -inf row (f32 only)
};

const SvCase kCases[] = {
    {"tiny_d32", 1, 1, 32},
    {"colmajor_d80", 7, 63, 80, DType::f32, true},
    {"i32_d64", 63, 1000, 64, DType::i32, false, 0, 0.01f},
    {"i32_colmajor_d96", 1000, 7, 96, DType::i32, true, 3, 0.02f},
    {"padded_masked_d128", 130, 300, 128, DType::f32, false, 5, 0.7f, true},
    {"colmajor_masked_d256", 5, 1000, 256, DType::f32, true, 1, 1.0f, true},
};

struct SvFixture {
  SvCase c;
  DType dtype;
  HostTensor s, v, ref;

  SvFixture(const SvCase& cs, DType dt, Rng& rng) : c(cs), dtype(dt) {
    s = HostTensor(c.s_dtype, {c.m, c.l}, c.colmajor ? std::vector<int>{1, 0} : std::vector<int>{}, c.pad);
    v = HostTensor(dt, {c.l, c.d}, {}, c.pad);
    if (c.s_dtype == DType::i32) s.fill_int(rng, -600, 600);
    else s.fill_uniform(rng, -6, 6);
    if (c.masked) {
      const double ninf = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < s.numel(); i += 3) s.set(i, ninf);
      for (int64_t j = 0; j < c.l; ++j) s.set((c.m / 2) * c.l + j, ninf);
    }
    v.fill_uniform(rng, -1, 1);
    HostTensor vf = to_f32(v);
    ref = HostTensor(DType::f32, {c.m, c.d});
    fc::SoftmaxVParams p;
    p.scale = c.scale;
    fc::reference::softmax_v(s.view(), vf.view(), ref.view(), p);
  }

  void check(Strategy st, Exp2Mode e, int threads, const char* impl, DType kernel_ab) {
    SCOPED_TRACE("strategy " + name(st) + ", exp " + name(e) + ", threads " +
                 std::to_string(threads) + ", impl " + (impl ? impl : "auto"));
    HostTensor out(dtype, {c.m, c.d}, {}, c.pad);
    fc::SoftmaxVParams p;
    p.scale = c.scale;
    p.strategy = st;
    p.exp2 = e;
    p.threads = threads;
    p.impl = impl;
    fc::PhaseTimes times;
    fc::softmax_v(s.view(), v.view(), out.view(), p, &times);
    EXPECT_TRUE(close(out, ref, tolerance(dtype, kernel_ab, e, c.l)));
    EXPECT_TRUE(out.padding_untouched()) << "softmax_v wrote outside the output view";
    if (impl != nullptr) {
      EXPECT_EQ(times.kernel, impl);
    }
    if (c.masked) {  // the all -inf row gives exact zeros
      for (int64_t j = 0; j < c.d; ++j) ASSERT_EQ(out.get((c.m / 2) * c.d + j), 0.0) << "column " << j;
    }
  }
};

class SoftmaxVTest : public ::testing::TestWithParam<std::tuple<SvCase, DType>> {};

TEST_P(SoftmaxVTest, MatchesReference) {
  const auto& [c, dt] = GetParam();
  Rng rng;
  FC_TRACE_SEED(rng);
  SvFixture f(c, dt, rng);
  int run = 0;
  for (Strategy s : kStrategies)
    for (Exp2Mode e : kExpModes) f.check(s, e, 1 + (run++ % 2), nullptr, DType::f32);
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, SoftmaxVTest, ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kStorageTypes)),
    CaseDtypeName());

class SoftmaxVKernelTest : public ::testing::TestWithParam<int> {};

TEST_P(SoftmaxVKernelTest, ForcedKernelMatchesReference) {
  const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(GetParam());
  FC_SKIP_UNLESS_RUNNABLE(k);
  Rng rng;
  FC_TRACE_SEED(rng);
  const SvCase cases[] = {{"f32", 45, 333, 72, DType::f32, true, 1, 1.0f, true},
                          {"i32", 45, 333, 72, DType::i32, false, 0, 0.01f}};
  for (const SvCase& c : cases)
    for (DType dt : kStorageTypes) {
      SCOPED_TRACE(std::string("scores ") + c.name + ", storage " + name(dt));
      SvFixture f(c, dt, rng);
      int run = 0;
      for (Strategy s : kStrategies) f.check(s, Exp2Mode::exact, 1 + (run++ % 2), k.key, k.ab);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, SoftmaxVKernelTest, ::testing::Range(0, fc::cpu::gemm_ukernel_count()),
                         [](const auto& info) { return std::string(fc::cpu::gemm_ukernel(info.param).key); });

// Which path runs: up to 64 rows the row ops read V in place (the portable set when
// forced), more rows the GEMM micro-kernel on V packed once per call.
TEST(SoftmaxV, FewRowsRunTheRowOps) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (bool generic : {false, true}) {
    ForceGeneric force(generic);
    SCOPED_TRACE(generic ? "portable forced" : "auto");
    const fc::cpu::CpuConfig cfg = fc::cpu::select_kernels(DType::f32, nullptr);
    for (int64_t m : {12, 64, 65}) {
      SCOPED_TRACE("M " + std::to_string(m));
      SvFixture f({"rows", m, 1000, 72, DType::f32, false, 0, 0.5f}, DType::f32, rng);
      for (Strategy s : kStrategies) f.check(s, Exp2Mode::exact, 2, nullptr, DType::f32);
      HostTensor out(DType::f32, {m, 72});
      fc::PhaseTimes times;
      fc::SoftmaxVParams p;
      p.scale = 0.5f;
      fc::softmax_v(f.s.view(), f.v.view(), out.view(), p, &times);
      EXPECT_EQ(times.kernel, m <= 64 ? cfg.rows->key : cfg.gemm->key);
    }
  }
}

TEST(SoftmaxV, ForceGeneric) {
  ForceGeneric generic(true);
  Rng rng;
  FC_TRACE_SEED(rng);
  SvFixture f({"generic", 20, 100, 40, DType::f32, true}, DType::f32, rng);
  f.check(Strategy::automatic, Exp2Mode::exact, 2, nullptr, DType::f32);
}

TEST(SoftmaxV, ZeroRowsIsNoOp) {
  HostTensor s(DType::f32, {0, 9}), v(DType::f32, {9, 16}), out(DType::f32, {0, 16});
  const auto out0 = out.snapshot();
  fc::softmax_v(s.view(), v.view(), out.view());
  EXPECT_EQ(out.snapshot(), out0);
}

}  // namespace
}  // namespace fctest
