// The score variants (softcap, ALiBi, attention sinks) on the CPU forward against the fp64
// reference: each alone and combined with causal (Sq < Sk and Sq > Sk: fully masked rows,
// which give O = 0 and lse = the sink), windows, GQA, varlen (slopes per sequence), lse,
// a negative scale; the GEMM path, the decode path and decode split over keys; every strategy,
// both exp2 modes, f32/f16/bf16, 1 and 2 threads; every runnable GEMM kernel forced; no keys
// at all; bad arguments named before anything is written. And every head dim 1..256 on a
// plain case (GEMM and decode paths).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct VarCase {
  const char* name;
  int64_t b, sq, sk, h, hkv, d, dv;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int alibi = 0;  // 0: none, 1: slopes [H], 2: slopes [B, H] (varlen: per sequence)
  bool sinks = false;
  float scale = 0.0f;
  std::vector<int32_t> cu_q = {}, cu_k = {};  // varlen (b = 1, sq / sk the packed rows)
};

// Inputs, slopes and sinks, and the fp64 truth (once per case and dtype).
struct VarFixture {
  VarCase c;
  DType dtype;
  HostTensor q, k, v, slopes, sinks, ref_out, ref_lse;

  // ref_threads: the reference's threads (0: all cores; 1 for the many tiny calls of a loop,
  // where waking a team costs more than the work)
  VarFixture(const VarCase& cs, DType dt, Rng& rng, int ref_threads = 0) : c(cs), dtype(dt) {
    q = HostTensor(dt, {c.b, c.sq, c.h, c.d});
    k = HostTensor(dt, {c.b, c.sk, c.hkv, c.d});
    v = HostTensor(dt, {c.b, c.sk, c.hkv, c.dv});
    q.fill_uniform(rng, -3, 3);
    k.fill_uniform(rng, -3, 3);
    v.fill_uniform(rng, -1, 1);
    const int64_t nb = c.cu_q.empty() ? c.b : int64_t(c.cu_q.size()) - 1;
    if (c.alibi != 0) {
      slopes = c.alibi == 1 ? HostTensor(DType::f32, {c.h}) : HostTensor(DType::f32, {nb, c.h});
      slopes.fill_uniform(rng, 0.0, 0.5);
    }
    if (c.sinks) {  // about the rows' own lse (scores of std ~3): sometimes ahead, sometimes not
      sinks = HostTensor(DType::f32, {c.h});
      sinks.fill_uniform(rng, -3, 8);
    }
    HostTensor qf = to_f32(q), kf = to_f32(k), vf = to_f32(v);
    ref_out = HostTensor(DType::f32, {c.b, c.sq, c.h, c.dv});
    ref_lse = HostTensor(DType::f32, {c.b, c.h, c.sq});
    fc::AttentionParams p = params();
    p.lse = ref_lse.ptr();
    p.threads = ref_threads;
    fc::reference::attention(qf.view(), kf.view(), vf.view(), ref_out.view(), p);
  }

  fc::AttentionParams params() const {
    fc::AttentionParams p;
    p.scale = c.scale;
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softcap = c.softcap;
    if (c.alibi != 0) p.alibi_slopes = &slopes.view();
    if (c.sinks) p.sinks = &sinks.view();
    if (!c.cu_q.empty()) {
      p.cu_seqlens_q = c.cu_q.data();
      p.cu_seqlens_k = c.cu_k.data();
      p.varlen_batch = int64_t(c.cu_q.size()) - 1;
    }
    return p;
  }

  // One run: fresh poisoned outputs, then every property it must have.
  void check(Strategy s, Exp2Mode e, int threads, const char* impl = nullptr, DType kernel_ab = DType::f32) {
    SCOPED_TRACE("strategy " + name(s) + ", exp " + name(e) + ", threads " + std::to_string(threads) + ", impl " +
                 (impl ? impl : "auto"));
    HostTensor out(dtype, {c.b, c.sq, c.h, c.dv});
    HostTensor lse(DType::f32, {c.b, c.h, c.sq}, {}, 1);
    fc::AttentionParams p = params();
    p.strategy = s;
    p.exp2 = e;
    p.threads = threads;
    p.impl = impl;
    p.lse = lse.ptr();
    fc::PhaseTimes times;
    fc::attention(q.view(), k.view(), v.view(), out.view(), p, &times);
    const double tol = tolerance(dtype, kernel_ab, e, c.sk);
    EXPECT_TRUE(close(out, ref_out, tol));
    EXPECT_TRUE(lse_close(lse, ref_lse, tol));
    EXPECT_TRUE(lse.padding_untouched()) << "attention wrote outside the lse view";
    if (s != Strategy::automatic) {
      EXPECT_EQ(times.strategy, fc::to_string(s));
    }
    // Rows that see no key: O exactly 0, lse exactly the sink (-inf without sinks).
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t h = 0; h < c.h; ++h)
        for (int64_t i = 0; i < c.sq; ++i) {
          if (!masked(b, h, i)) continue;
          ASSERT_EQ(lse.get((b * c.h + h) * c.sq + i), c.sinks ? sinks.get(h) : -kInf) << "row " << i;
          for (int64_t d = 0; d < c.dv; ++d)
            ASSERT_EQ(out.get(((b * c.sq + i) * c.h + h) * c.dv + d), 0.0) << "masked row b=" << b << " i=" << i;
        }
  }

  // Whether query row i of (b, h) sees no key (a masked band, no keys; not varlen's cases).
  bool masked(int64_t b, int64_t h, int64_t i) const {
    (void)b;
    (void)h;
    if (!c.cu_q.empty()) return false;
    const int64_t off = c.sk - c.sq;
    const int64_t right = c.causal ? (c.window_right < 0 ? 0 : std::min<int64_t>(c.window_right, 0)) : c.window_right;
    const int64_t lo = c.window_left < 0 ? 0 : std::max<int64_t>(0, i + off - c.window_left);
    const int64_t hi = right < 0 ? c.sk : std::min(c.sk, i + off + right + 1);
    return hi <= lo;
  }
};

const VarCase kCases[] = {
    {"softcap_gemm_d64", 1, 70, 300, 2, 1, 64, 64, false, -1, -1, 5.0f},
    {"alibi_h_causal_sq_lt_sk_gqa2_d48", 2, 50, 200, 4, 2, 48, 48, true, -1, -1, 0.0f, 1},
    {"alibi_bh_window_sq_gt_sk_d32_dv40", 2, 130, 60, 2, 2, 32, 40, false, 8, 3, 0.0f, 2},
    {"sinks_causal_sq_gt_sk_masked_rows_d64", 1, 100, 40, 3, 1, 64, 64, true, -1, -1, 0.0f, 0, true},
    {"all_gqa4_causal_window_d80", 1, 90, 333, 8, 2, 80, 80, true, 50, -1, 8.0f, 2, true},
    {"all_negative_scale_d24", 1, 40, 77, 2, 1, 24, 24, false, -1, -1, 3.0f, 1, true, -0.3f},
    // Decode path (group * Sq <= 32 query rows per KV head); split over keys at 2 threads.
    {"decode_all_gqa4_d128", 2, 1, 700, 8, 2, 128, 128, false, -1, -1, 10.0f, 1, true},
    {"decode_causal_window_sq4_d64_dv48", 1, 4, 500, 8, 1, 64, 48, true, 100, -1, 0.0f, 2, true},
    {"decode_split_sinks_d96", 1, 1, 1000, 4, 1, 96, 96, false, -1, -1, 0.0f, 0, true},
    {"decode_window_sq2_softcap_d7_dv5", 1, 2, 1000, 2, 2, 7, 5, false, 50, 0, 2.0f, 2, false},
    // Varlen: slopes per sequence, a sequence without queries and (decode) one without keys.
    {"varlen_all_causal_gqa2_d64", 1, 130, 240, 4, 2, 64, 64, true, -1, -1, 4.0f, 2, true, 0.0f,
     {0, 5, 5, 60, 130}, {0, 9, 13, 100, 240}},
    {"varlen_decode_all_d32", 1, 4, 700, 4, 2, 32, 32, false, -1, -1, 6.0f, 2, true, 0.0f,
     {0, 1, 1, 3, 4}, {0, 300, 301, 700, 700}},
};

struct VarName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return std::string(std::get<0>(info.param).name) + "_" + name(std::get<1>(info.param));
  }
};

class VariantsTest : public ::testing::TestWithParam<std::tuple<VarCase, DType>> {};

TEST_P(VariantsTest, MatchesReference) {
  const auto& [c, dt] = GetParam();
  Rng rng;
  FC_TRACE_SEED(rng);
  VarFixture f(c, dt, rng);
  int run = 0;
  for (Strategy s : kStrategies)
    for (Exp2Mode e : kExpModes) f.check(s, e, 1 + (run++ % 2));
}

INSTANTIATE_TEST_SUITE_P(Cpu, VariantsTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kStorageTypes)),
                         VarName());

// Every runnable GEMM micro-kernel forced by its key (P in its operand dtype, its layouts).
TEST(Variants, ForcedKernelsMatchReference) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const VarCase c{"forced", 1, 70, 300, 4, 2, 80, 72, true, 150, -1, 6.0f, 2, true};
  for (DType dt : kStorageTypes) {
    VarFixture f(c, dt, rng);
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
      const VarCase c{"head_dim", 1, sq, 37, 2, 1, d, dv, true};
      VarFixture f(c, dt, rng, 1);
      f.check(Strategy::automatic, Exp2Mode::exact, 1);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Bad variant arguments: named, Status as stated, the output untouched.
TEST(Variants, BadArgumentsNamed) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const VarCase c{"bad", 2, 9, 11, 4, 2, 16, 8, false, -1, -1, 0.0f, 2, true};
  VarFixture f(c, DType::f32, rng);
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
