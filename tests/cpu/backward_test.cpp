// attention_backward: the fp64 reference against central finite differences of the fp64
// forward reference (tiny shapes), then the CPU backward against the reference: odd sizes
// (1, 7, 1000), GQA 8:1, causal with Sq < Sk and Sq > Sk (fully masked rows: zero dq),
// windows, varlen with rows outside every sequence, D != Dv and odd D, a negative scale,
// f32/f16/bf16, BHSD and padded (strided) gradient views, every GEMM micro-kernel forced
// by key, the portable kernels forced, zero-sized problems, bitwise determinism across
// runs and thread counts, and bad arguments named before anything is written.
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/backward_fixture.hpp"
#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

// The shared case data (common/backward_fixture.hpp) and a CPU run of it.
struct BwdFixture : BwdData {
  using BwdData::BwdData;

  void run(Grads& g, fc::AttentionParams p) const {
    fc::attention_backward(q.view(), k.view(), v.view(), out.view(), dout.view(), lse.view(), g.dq.view(),
                           g.dk.view(), g.dv.view(), p);
  }

  void check(int threads, const char* impl, DType kernel_ab, bool deterministic = false) const {
    SCOPED_TRACE("threads " + std::to_string(threads) + ", impl " + (impl ? impl : "auto") +
                 (deterministic ? ", deterministic" : ""));
    Grads g = grads();
    fc::AttentionParams p = params();
    if (c.sinks) p.dsinks = g.dsinks.ptr();
    p.threads = threads;
    p.impl = impl;
    p.deterministic = deterministic;
    run(g, p);
    BwdData::check(g, tolerance(dtype, kernel_ab, Exp2Mode::exact, c.sk));
  }
};

// Together: Sq, Sk take 1, 7, ~1000; D 7 to 128; GQA 8:1 and 3:1; every mask shape.
const BwdCase kCases[] = {
    {"tiny_d32", 1, 1, 1, 1, 1, 32, 32},
    {"gqa8to1_bhsd_pad_d80", 2, 7, 63, 8, 1, 80, 80, false, -1, -1, true, 3},
    {"causal_sq_gt_sk_gqa3_d96", 1, 63, 7, 6, 2, 96, 96, true},
    {"causal_sq_lt_sk_d64", 1, 100, 300, 2, 1, 64, 64, true},
    {"window_sq_lt_sk_pad_d128", 1, 63, 1000, 2, 1, 128, 128, false, 100, 20, false, 5},
    {"causal_square_1000_d64", 1, 1000, 1000, 2, 2, 64, 64, true},
    {"window_sq_gt_sk_d40_dv24", 1, 257, 129, 3, 1, 40, 24, false, 8, 3, true, 1, 0.5f},
    {"odd_d7_dv5_negative_scale", 2, 33, 45, 2, 2, 7, 5, false, -1, -1, false, 0, -0.3f},
    {"varlen_causal_gqa2_d64", 1, 310, 410, 4, 2, 64, 64, true, -1, -1, false, 0, 0.0f,
     {0, 5, 5, 300}, {0, 17, 40, 400}},
};

class BackwardTest : public ::testing::TestWithParam<std::tuple<BwdCase, DType>> {};

TEST_P(BackwardTest, MatchesReference) {
  const auto& [c, dt] = GetParam();
  Rng rng;
  FC_TRACE_SEED(rng);
  BwdFixture f(c, dt, rng);
  f.check(2, nullptr, DType::f32);
  f.check(1, nullptr, DType::f32, true);
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackwardTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kStorageTypes)),
                         CaseDtypeName());

// Score variants (softcap: dS times 1 - tanh^2; ALiBi; sinks with their gradient), alone and
// with causal / windows (fully masked rows), GQA, varlen, odd D.
BwdCase with_variants(BwdCase c, float softcap, int alibi, bool sinks) {
  c.softcap = softcap;
  c.alibi = alibi;
  c.sinks = sinks;
  return c;
}
const BwdCase kVariantCases[] = {
    with_variants({"softcap_gqa3_d64", 1, 130, 200, 6, 2, 64, 64}, 2.5f, 0, false),
    with_variants({"alibi_bh_causal_sq_lt_sk_d48", 2, 70, 150, 4, 2, 48, 48, true}, 0.0f, 2, false),
    with_variants({"sinks_causal_sq_gt_sk_d32", 1, 63, 20, 2, 1, 32, 32, true}, 0.0f, 0, true),
    with_variants({"all_window_sq_gt_sk_d40_dv24", 1, 257, 129, 3, 1, 40, 24, false, 8, 3, true, 1, 0.5f}, 4.0f, 1, true),
    with_variants({"all_varlen_causal_gqa2_d64", 1, 310, 410, 4, 2, 64, 64, true, -1, -1, false, 0, 0.0f,
                   {0, 5, 5, 300}, {0, 17, 40, 400}}, 3.0f, 2, true),
    with_variants({"all_odd_d7_dv5_negative_scale", 2, 33, 45, 2, 2, 7, 5, false, -1, -1, false, 0, -0.3f}, 1.5f, 1, true),
};

INSTANTIATE_TEST_SUITE_P(Variants, BackwardTest,
                         ::testing::Combine(::testing::ValuesIn(kVariantCases), ::testing::ValuesIn(kStorageTypes)),
                         CaseDtypeName());

// The first kernel `auto` picks per storage dtype may hold P and dS in 16 bits (bf16 kernels).
DType auto_ab(DType storage) { return fc::cpu::select_kernels(storage, nullptr).gemm->ab; }

TEST(Backward, AutoKernelBf16Operands) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const BwdCase c{"auto_bf16", 1, 150, 200, 4, 2, 64, 48, true, -1, -1, false, 2};
  BwdFixture f(c, DType::bf16, rng);
  f.check(2, nullptr, auto_ab(DType::bf16));
}

// Every GEMM micro-kernel that sums in fp32, forced by its key; fp16-summing ones refused.
class BackwardKernelTest : public KernelTest {};

TEST_P(BackwardKernelTest, ForcedKernelMatchesReference) {
  const fc::cpu::GemmUkernel& kern = kernel();
  Rng rng;
  FC_TRACE_SEED(rng);
  const BwdCase c{"forced", 1, 70, 300, 4, 2, 80, 72, true, 150, -1, false, 2};
  if (kern.acc != DType::f32) {
    BwdFixture f(c, DType::f16, rng);
    BwdFixture::Grads g = f.grads();
    fc::AttentionParams p = bwd_params(c);
    p.impl = kern.key;
    try {
      f.run(g, p);
      FAIL() << "a kernel that sums in fp16 was taken";
    } catch (const fc::Error& e) {
      EXPECT_EQ(e.code(), fc::Status::unsupported);
      EXPECT_NE(std::string(e.what()).find("impl"), std::string::npos) << e.what();
    }
    return;
  }
  for (DType dt : kStorageTypes) {
    SCOPED_TRACE("storage " + name(dt));
    BwdFixture f(c, dt, rng);
    f.check(2, kern.key, kern.ab);
  }
  const BwdCase odd{"forced_odd_d", 1, 37, 130, 2, 1, 33, 17, false, -1, -1, true, 1};
  BwdFixture f(odd, DType::bf16, rng);
  f.check(1, kern.key, kern.ab);
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackwardKernelTest, ::testing::Range(0, fc::cpu::gemm_ukernel_count()), KernelName());

TEST(Backward, ForcedPortableKernels) {
  Rng rng;
  FC_TRACE_SEED(rng);
  ForceGeneric generic(true);
  const BwdCase c{"generic", 1, 90, 170, 4, 1, 64, 64, true};
  for (DType dt : kStorageTypes) {
    BwdFixture f(c, dt, rng);
    f.check(2, nullptr, DType::f32);
  }
}

// Deterministic mode: the same bits from every run and every thread count. Few heads (one
// KV head, GQA 4:1) so that each KV head is split into key ranges whose dq partial copies
// are summed; by default the split follows the thread count, and each run at one thread
// count still gives the same bits.
TEST(Backward, DeterministicAcrossRunsAndThreadCounts) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (DType dt : kStorageTypes) {
    SCOPED_TRACE("storage " + name(dt));
    const BwdCase c{"det", 1, 300, 700, 4, 1, 64, 64, false, 200, 50};
    BwdFixture f(c, dt, rng);
    std::vector<uint8_t> first;
    for (int threads : {1, 2, 3, 2}) {
      BwdFixture::Grads g = f.grads();
      fc::AttentionParams p = bwd_params(c);
      p.threads = threads;
      p.deterministic = true;
      f.run(g, p);
      const std::vector<uint8_t> b = bytes_of(g);
      if (first.empty())
        first = b;
      else
        EXPECT_TRUE(b == first) << "deterministic run with " << threads << " threads differs";
    }
    f.check(3, nullptr, DType::f32, true);
    for (int threads : {1, 3}) {
      std::vector<uint8_t> again;
      for (int run = 0; run < 2; ++run) {
        BwdFixture::Grads g = f.grads();
        fc::AttentionParams p = bwd_params(c);
        p.threads = threads;
        f.run(g, p);
        if (run == 0)
          again = bytes_of(g);
        else
          EXPECT_TRUE(bytes_of(g) == again) << "two default runs with " << threads << " threads differ";
      }
    }
  }
}

// Zero-sized dims: nothing to sum; gradients that exist are zero, nothing else is written.
TEST(Backward, ZeroSizedProblems) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const BwdCase cases[] = {{"sq0", 1, 0, 5, 2, 1, 8, 8}, {"sk0", 1, 5, 0, 2, 1, 8, 8}, {"b0", 0, 5, 5, 2, 1, 8, 8},
                           {"dv0", 1, 5, 6, 2, 2, 8, 0}, {"h0", 1, 5, 6, 0, 1, 8, 8}};
  for (const BwdCase& c : cases) {
    SCOPED_TRACE(c.name);
    BwdFixture f(c, DType::f32, rng);
    BwdFixture::Grads g = f.grads();
    f.run(g, bwd_params(c));
    for (const HostTensor* t : {&g.dq, &g.dk, &g.dv})
      for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(t->get(i), 0.0) << "element " << i;
  }
}

// Finite differences of L = sum(dout * O) over the fp64 forward reference (f32 tensors),
// by the fourth-order central stencil, against the fp64 backward reference (with sinks: the
// sinks' gradient too).
void check_finite_differences(const BwdCase& c) {
  SCOPED_TRACE(c.name);
  Rng rng;
  FC_TRACE_SEED(rng);
  HostTensor q(DType::f32, {c.b, c.sq, c.h, c.d}), k(DType::f32, {c.b, c.sk, c.hkv, c.d}),
      v(DType::f32, {c.b, c.sk, c.hkv, c.dv}), dout(DType::f32, {c.b, c.sq, c.h, c.dv}),
      out(DType::f32, {c.b, c.sq, c.h, c.dv}), lse(DType::f32, {c.b, c.h, c.sq});
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  dout.fill_uniform(rng, -1, 1);
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, 0.0);  // (varlen: rows past the sequences stay 0)
  const int64_t nb = c.cu_q.empty() ? c.b : int64_t(c.cu_q.size()) - 1;
  HostTensor slopes(DType::f32, {nb, c.h}), sinks(DType::f32, {c.h});
  slopes.fill_uniform(rng, 0.0, 0.5);
  sinks.fill_uniform(rng, -1.0, 1.0);
  auto params = [&] {
    fc::AttentionParams p = bwd_params(c);
    p.softcap = c.softcap;
    if (c.alibi != 0) p.alibi_slopes = slopes.ptr();
    if (c.sinks) p.sinks = sinks.ptr();
    return p;
  };
  auto loss = [&] {
    fc::AttentionParams p = params();
    p.lse = lse.ptr();
    fc::reference::attention(q.view(), k.view(), v.view(), out.view(), p);
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += dout.get(i) * out.get(i);
    return s;
  };
  loss();
  HostTensor dq(DType::f32, {c.b, c.sq, c.h, c.d}), dk(DType::f32, {c.b, c.sk, c.hkv, c.d}),
      dv(DType::f32, {c.b, c.sk, c.hkv, c.dv}), dsinks(DType::f32, {c.h});
  fc::AttentionParams bp = params();
  if (c.sinks) bp.dsinks = dsinks.ptr();
  fc::reference::attention_backward(q.view(), k.view(), v.view(), out.view(), dout.view(), lse.view(), dq.view(),
                                    dk.view(), dv.view(), bp);
  const double h = 1.0 / 64;  // exact in f32 around values in [-1, 1]
  // The loss reads O as stored in f32: each l carries up to sum |dout O| 2^-24 of rounding,
  // which the stencil's weights (1 + 8 + 8 + 1) / (12 h) carry into each difference. A small
  // gradient (a sink's, two values) can sit within that noise: the check allows it.
  double noise = 0;
  for (int64_t i = 0; i < out.numel(); ++i) noise += std::fabs(dout.get(i) * out.get(i));
  noise *= 0x1p-24 * 18 / (12 * h);
  std::vector<std::tuple<HostTensor*, HostTensor*, const char*>> wrt = {{&q, &dq, "dq"}, {&k, &dk, "dk"}, {&v, &dv, "dv"}};
  if (c.sinks) wrt.emplace_back(&sinks, &dsinks, "dsinks");
  for (auto [x, grad, label] : wrt) {
    HostTensor fd(DType::f32, x->shape());
    for (int64_t i = 0; i < x->numel(); ++i) {
      const double x0 = x->get(i);
      double l[4];
      const double steps[4] = {-2 * h, -h, h, 2 * h};
      for (int s = 0; s < 4; ++s) {
        x->set(i, x0 + steps[s]);
        l[s] = loss();
      }
      x->set(i, x0);
      fd.set(i, (l[0] - 8 * l[1] + 8 * l[2] - l[3]) / (12 * h));
    }
    double worst = 0;
    for (int64_t i = 0; i < fd.numel(); ++i) worst = std::max(worst, std::fabs(grad->get(i) - fd.get(i)));
    EXPECT_TRUE(close(*grad, fd, 1e-4) || worst <= 2 * noise) << label << ": largest difference " << worst
                                                              << ", the f32 rounding's bound " << noise;
  }
}

TEST(BackwardReference, MatchesFiniteDifferences) {
  check_finite_differences({"plain", 1, 3, 4, 1, 1, 4, 3});
  check_finite_differences({"gqa2to1_scale", 2, 3, 5, 4, 2, 3, 2, false, -1, -1, false, 0, 0.8f});
  check_finite_differences({"causal_sq_lt_sk", 1, 3, 6, 2, 1, 4, 4, true});
  check_finite_differences({"causal_sq_gt_sk_masked_rows", 1, 6, 3, 2, 2, 3, 3, true});
  check_finite_differences({"window", 1, 5, 7, 1, 1, 3, 4, false, 1, 2});
  check_finite_differences({"varlen", 1, 7, 9, 2, 1, 3, 3, true, -1, -1, false, 0, 0.0f, {0, 3, 3, 6}, {0, 4, 5, 8}});
  // Score variants: the softcap's 1 - tanh^2 (a softcap that bends: scores up to ~2), ALiBi
  // (constant slopes), the sinks' own gradient; fully masked rows with a sink (Sq > Sk).
  check_finite_differences(with_variants({"softcap", 1, 3, 5, 2, 1, 4, 3, false, -1, -1, false, 0, 2.0f}, 0.7f, 0, false));
  check_finite_differences(with_variants({"alibi_bh_causal", 2, 3, 6, 2, 1, 4, 4, true}, 0.0f, 2, false));
  check_finite_differences(with_variants({"sinks_causal_masked_rows", 1, 6, 3, 2, 2, 3, 3, true}, 0.0f, 0, true));
  check_finite_differences(with_variants({"all_window_varlen", 1, 7, 9, 2, 1, 3, 3, true, 2, -1, false, 0, 0.0f,
                                          {0, 3, 3, 6}, {0, 4, 5, 8}}, 1.0f, 2, true));
}

// ---------------------------------------------------------------- bad arguments
// Each call must fail with the named argument in its message, before anything is written.
struct BadCall {
  BwdFixture& f;
  void expect(const char* arg, fc::Status code, const std::function<void(BwdFixture::Grads&, fc::AttentionParams&,
                                                                         std::vector<fc::Tensor>&)>& spoil) {
    SCOPED_TRACE(std::string("argument ") + arg);
    BwdFixture::Grads g = f.grads();
    fc::AttentionParams p = bwd_params(f.c);
    std::vector<fc::Tensor> t = {f.q.view(), f.k.view(), f.v.view(), f.out.view(), f.dout.view(), f.lse.view(),
                                 g.dq.view(), g.dk.view(), g.dv.view()};
    spoil(g, p, t);
    const auto before = bytes_of(g);
    expect_refused(t, p, arg, code);
    EXPECT_TRUE(bytes_of(g) == before) << "an output was written";
  }
};

TEST(Backward, BadArgumentsNamed) {
  Rng rng;
  FC_TRACE_SEED(rng);
  BwdFixture f({"bad", 1, 9, 11, 4, 2, 16, 8}, DType::f32, rng);
  BadCall bad{f};
  using G = BwdFixture::Grads;
  using P = fc::AttentionParams;
  using T = std::vector<fc::Tensor>;
  const fc::Status inval = fc::Status::invalid_argument;
  bad.expect("dout", inval, [](G&, P&, T& t) { t[4].shape[3] = 9; });
  bad.expect("dout", inval, [](G&, P&, T& t) { t[4].dtype = DType::f16; });
  bad.expect("lse", inval, [](G&, P&, T& t) { t[5].shape[2] = 8; });
  bad.expect("lse", inval, [](G&, P&, T& t) { t[5].dtype = DType::bf16; });
  bad.expect("lse", inval, [](G&, P&, T& t) { t[5].rank = 4; });
  bad.expect("dq", inval, [](G&, P&, T& t) { t[6].shape[1] = 10; });
  bad.expect("dk", inval, [](G&, P&, T& t) { t[7].dtype = DType::f16; });
  bad.expect("dv", inval, [](G&, P&, T& t) { t[8].shape[2] = 4; });
  bad.expect("dq", inval, [](G&, P&, T& t) { t[6].strides[3] = 2; });  // last dim not contiguous
  bad.expect("dk", inval, [](G&, P&, T& t) { t[7].strides[1] = 0; });  // rows share memory
  bad.expect("dv", inval, [](G&, P&, T& t) { t[8].strides[2] = 4; });  // heads overlap the next head's row
  bad.expect("dq", inval, [](G&, P&, T& t) { t[6].data = t[0].data; });              // dq over q
  bad.expect("dk", inval, [](G&, P&, T& t) { t[7].data = t[6].data; });              // dk over dq
  bad.expect("dv", inval, [](G&, P&, T& t) { t[8].data = t[5].data; });              // dv over lse
  bad.expect("dq", inval, [](G&, P&, T& t) { t[6].data = t[4].data; });              // dq over dout
  bad.expect("dk", inval, [](G&, P&, T& t) { t[7].data = t[3].data; });              // dk over out
  bad.expect("params.lse", inval, [&](G&, P& p, T&) { p.lse = f.lse.ptr(); });
  bad.expect("params.window_left", inval, [](G&, P& p, T&) { p.window_left = -2; });
  bad.expect("dq", inval, [](G&, P&, T& t) { t[0].shape[3] = 15; t[1].shape[3] = 15; });  // dq's D stays 16
  bad.expect("q", inval, [](G&, P&, T& t) { t[0].data = nullptr; });
  bad.expect("q", fc::Status::unsupported, [](G&, P&, T& t) {
    for (fc::Tensor& x : t) x.device = fc::Device::cuda;
  });
  bad.expect("params.threads", inval, [](G&, P& p, T&) { p.threads = -1; });
  bad.expect("impl", inval, [](G&, P& p, T&) { p.impl = "no_such_kernel"; });
  // Varlen: cu_seqlens checked, and an output over cu_seqlens refused.
  std::vector<int32_t> cu = {0, 5, 3};
  bad.expect("params.cu_seqlens_q", inval, [&](G&, P& p, T&) {
    p.cu_seqlens_q = cu.data();
    p.cu_seqlens_k = cu.data();
    p.varlen_batch = 2;
  });
}

}  // namespace
}  // namespace fctest
