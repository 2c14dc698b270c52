// The score variants (softcap, ALiBi, attention sinks) on the CPU forward beyond the cases of
// attention_test.cpp (its Variants/AttentionTest instances: every strategy, dtype and exp2
// mode): every runnable GEMM kernel forced; no keys at all (lse = the sink); bad arguments
// named before anything is written. And every head dim 1..256 on a plain case (GEMM and
// decode paths).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/attention_fixture.hpp"
#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

// Every runnable GEMM micro-kernel forced by its key (P in its operand dtype, its layouts).
TEST(Variants, ForcedKernelsMatchReference) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const AttnCase c = with_variants({"forced", 1, 70, 300, 4, 2, 80, 72, true, 150, -1}, 6.0f, 2, true);
  for (DType dt : kStorageTypes) {
    AttnFixture f(c, dt, rng);
    for (int i = 0; i < fc::cpu::gemm_ukernel_count(); ++i) {
      const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(i);
      if (!fc::cpu::isa_available(k.isa)) continue;
      SCOPED_TRACE(std::string("storage ") + name(dt) + ", kernel " + k.key);
      f.check(Strategy::online, Exp2Mode::exact, 2, k.key, k.ab);
    }
  }
}

// No keys at all (Sk = 0): O = 0 and lse = the sink of each head.
TEST(Variants, NoKeysGivesTheSink) {
  for (Strategy s : kStrategies) {
    SCOPED_TRACE("strategy " + name(s));
    Rng rng;
    HostTensor q(DType::f32, {1, 7, 3, 32}), out(DType::f32, {1, 7, 3, 40}), lse(DType::f32, {1, 3, 7}),
        sinks(DType::f32, {3}), slopes(DType::f32, {3});
    q.fill_uniform(rng, -1, 1);
    sinks.fill_uniform(rng, -2, 2);
    slopes.fill_uniform(rng, 0, 1);
    const Tensor k = Tensor::contiguous(nullptr, DType::f32, {1, 0, 1, 32});
    const Tensor v = Tensor::contiguous(nullptr, DType::f32, {1, 0, 1, 40});
    fc::AttentionParams p;
    p.strategy = s;
    p.lse = lse.ptr();
    p.sinks = sinks.ptr();
    p.alibi_slopes = slopes.ptr();
    p.softcap = 1.0f;
    fc::attention(q.view(), k, v, out.view(), p);
    for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << "element " << i;
    for (int64_t i = 0; i < lse.numel(); ++i) ASSERT_EQ(lse.get(i), sinks.get(i / 7)) << "lse " << i;
  }
}

// Every head dim 1..256 on a plain causal case (Sq > Sk: masked rows too), small shapes: the
// GEMM path in f32 for every D, and in turn per D one of f16, bf16, Dv = 257 - D and the
// decode path. One thread (the calls are tiny: a thread team's wake-up would dominate).
TEST(Attention, EveryHeadDim) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t d = 1; d <= 256; ++d) {
    const std::tuple<int64_t, int64_t, DType> turns[] = {
        {40, d, DType::f16}, {40, d, DType::bf16}, {40, 257 - d, DType::f32}, {2, d, DType::f32}};
    for (const auto& [sq, dv, dt] : {std::tuple<int64_t, int64_t, DType>{40, d, DType::f32}, turns[d % 4]}) {
      SCOPED_TRACE("D " + std::to_string(d) + ", Dv " + std::to_string(dv) + ", Sq " + std::to_string(sq) + ", " +
                   name(dt));
      const AttnCase c{"head_dim", 1, sq, 37, 2, 1, d, dv, true};
      AttnFixture f(c, dt, rng, 1);
      f.check(Strategy::automatic, Exp2Mode::exact, 1);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Bad variant arguments: named, Status as stated, the output untouched.
TEST(Variants, BadArgumentsNamed) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const AttnCase c = with_variants({"bad", 2, 9, 11, 4, 2, 16, 8}, 0.0f, 2, true);
  AttnFixture f(c, DType::f32, rng);
  HostTensor out(DType::f32, {c.b, c.sq, c.h, c.dv}), lse(DType::f32, {c.b, c.h, c.sq});
  auto expect = [&](const char* arg, fc::Status code, const std::function<void(fc::AttentionParams&)>& spoil) {
    SCOPED_TRACE(arg);
    fc::AttentionParams p = f.params();
    p.lse = lse.ptr();
    spoil(p);
    const auto before = out.snapshot(), lse_before = lse.snapshot();
    try {
      fc::attention(f.q.view(), f.k.view(), f.v.view(), out.view(), p);
      ADD_FAILURE() << "accepted";
    } catch (const fc::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(arg, 0), 0u) << e.what();
    }
    EXPECT_TRUE(out.snapshot() == before && lse.snapshot() == lse_before) << "an output was written";
  };
  const fc::Status inval = fc::Status::invalid_argument;
  HostTensor wrong_h(DType::f32, {3}), wrong_b(DType::f32, {3, 4}), rank3(DType::f32, {1, 2, 4}),
      half(DType::f16, {4});
  Tensor on_gpu = f.sinks.view();
  on_gpu.device = fc::Device::cuda;
  expect("params.softcap", inval, [](fc::AttentionParams& p) { p.softcap = -1.0f; });
  expect("params.softcap", inval, [](fc::AttentionParams& p) { p.softcap = std::nanf(""); });
  expect("params.softcap", inval, [](fc::AttentionParams& p) { p.softcap = std::numeric_limits<float>::infinity(); });
  expect("params.alibi_slopes", inval, [&](fc::AttentionParams& p) { p.alibi_slopes = wrong_h.ptr(); });
  expect("params.alibi_slopes", inval, [&](fc::AttentionParams& p) { p.alibi_slopes = wrong_b.ptr(); });
  expect("params.alibi_slopes", inval, [&](fc::AttentionParams& p) { p.alibi_slopes = rank3.ptr(); });
  expect("params.alibi_slopes", inval, [&](fc::AttentionParams& p) { p.alibi_slopes = half.ptr(); });
  expect("params.sinks", inval, [&](fc::AttentionParams& p) { p.sinks = f.slopes.ptr(); });  // [B, H]
  expect("params.sinks", inval, [&](fc::AttentionParams& p) { p.sinks = wrong_h.ptr(); });
  expect("params.sinks", inval, [&](fc::AttentionParams& p) { p.sinks = &on_gpu; });
  // outputs over the arrays the kernels read
  Tensor sinks_over_out = f.sinks.view();
  sinks_over_out.data = out.view().data;
  expect("out", inval, [&](fc::AttentionParams& p) { p.sinks = &sinks_over_out; });
  Tensor slopes_over_lse = f.slopes.view();
  slopes_over_lse.data = lse.view().data;
  expect("params.lse", inval, [&](fc::AttentionParams& p) { p.alibi_slopes = &slopes_over_lse; });
}

}  // namespace
}  // namespace fctest
