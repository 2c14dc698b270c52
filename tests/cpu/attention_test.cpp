// attention on the CPU backend against the fp64 reference: every strategy x storage
// dtype x exp2 mode over shapes that together cover the project's odd sizes
// (Sq, Sk in {1, 7, 63, 1000}; D in {32, 64, 80, 96, 128, 256}), GQA 8:1 and 6:2,
// causal and windowed masks with Sq < Sk and Sq > Sk (fully masked rows), BSHD and
// BHSD strides with padded rows, lse, varlen, zero-sized problems, 1 and 2 threads,
// every GEMM micro-kernel forced by key, and the forced portable path. Decode shapes
// (group * Sq <= 32 query rows per KV head: the row-op path, K/V read in place) with GQA,
// causal Sq != Sk, windows, odd D, BHSD rows read in place, split over keys, varlen. The
// score variants on all of these paths (variants_test.cpp has their other tests).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/attention_fixture.hpp"
#include "core/dtype.hpp"
#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

// Together: Sq, Sk each take 1, 7, 63, 1000; D takes 32, 64, 80, 96, 128, 256.
const AttnCase kCases[] = {
    {"tiny_d32", 1, 1, 1, 1, 1, 32, 32},
    {"gqa8to1_bhsd_d80", 2, 7, 63, 8, 1, 80, 80, false, -1, -1, true, 3},
    {"gqa6to2_causal_sq_gt_sk_d96", 1, 63, 7, 6, 2, 96, 96, true},
    {"window_sq_lt_sk_d128", 1, 63, 1000, 2, 1, 128, 128, false, 100, 20, false, 5},
    {"causal_sq_gt_sk_bhsd_d64", 1, 1000, 63, 1, 1, 64, 64, true, -1, -1, true},
    {"causal_sq_lt_sk_d256", 2, 7, 1000, 2, 2, 256, 256, true},
    {"square_d32_dv64", 1, 1000, 1000, 1, 1, 32, 64, false, -1, -1, false, 0, 0.3f},
    {"window_sq_gt_sk_d64", 1, 200, 63, 2, 2, 64, 48, false, 8, 3, true, 1, 0.5f},
    {"causal_window_square_d96", 1, 130, 130, 3, 1, 96, 96, true, 17, -1},
    // Scores that climb along the keys: past the online strategy's rescale slack (2^8)
    // within a 256-key tile (ramp 40: ~25 per tile for a typical row) and below it from tile to tile (ramp 1.5, the
    // reference max kept while P grows above 1).
    {"rising_scores_d64", 1, 50, 1000, 2, 1, 64, 64, false, -1, -1, false, 0, 0.0f, 40.0},
    {"rising_slowly_causal_d32", 1, 40, 1100, 1, 1, 32, 32, true, -1, -1, false, 0, 0.0f, 1.5},
    // Decode path (the query rows of a GQA group, group * Sq <= 32, in one block).
    {"gqa4to1_decode_sq1_d128", 2, 1, 1000, 8, 2, 128, 128},
    {"gqa8to1_decode_sq4_causal_d64", 1, 4, 777, 8, 1, 64, 64, true, -1, -1, false, 3},
    {"mqa_decode_sq3_causal_bhsd_d64", 1, 3, 700, 4, 1, 64, 64, true, -1, -1, true},
    {"decode_sq2_window_d7_dv5", 1, 2, 1000, 2, 2, 7, 5, false, 50, 0, false, 0, 0.7f},
    {"decode_split_sq1_d96", 1, 1, 1000, 4, 1, 96, 96},
    {"decode_sq16_causal_d256", 1, 16, 300, 2, 1, 256, 256, true},
    {"gqa2to1_decode_kvblocks_d64", 3, 1, 500, 12, 6, 64, 64},   // 12 rows: 6 kv heads per block
    {"gqa3to1_decode_sq5_causal_d32_dv40", 1, 5, 300, 15, 5, 32, 40, true, -1, -1, false, 2},
};

class AttentionTest : public ::testing::TestWithParam<std::tuple<AttnCase, DType>> {};

TEST_P(AttentionTest, MatchesReference) {
  const auto& [c, dt] = GetParam();
  Rng rng;
  FC_TRACE_SEED(rng);
  AttnFixture f(c, dt, rng);
  int run = 0;
  for (Strategy s : kStrategies)
    for (Exp2Mode e : kExpModes) f.check(s, e, 1 + (run++ % 2), nullptr, DType::f32);
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, AttentionTest, ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kStorageTypes)),
    CaseDtypeName());

// Score variants (softcap, ALiBi, sinks), alone and combined with causal (Sq > Sk: fully
// masked rows, O = 0 and lse = the sink), windows, GQA, BHSD, a negative scale, varlen (slopes
// per sequence, a sequence without queries, one without keys); the GEMM path, the decode path
// and decode split over keys.
const AttnCase kVariantCases[] = {
    with_variants({"softcap_gemm_d64", 1, 70, 300, 2, 1, 64, 64}, 5.0f, 0, false),
    with_variants({"alibi_h_causal_sq_lt_sk_gqa2_d48", 2, 50, 200, 4, 2, 48, 48, true}, 0.0f, 1, false),
    with_variants({"alibi_bh_window_sq_gt_sk_bhsd_d32_dv40", 2, 130, 60, 2, 2, 32, 40, false, 8, 3, true, 3}, 0.0f, 2, false),
    with_variants({"sinks_causal_sq_gt_sk_masked_rows_d64", 1, 100, 40, 3, 1, 64, 64, true}, 0.0f, 0, true),
    with_variants({"all_gqa4_causal_window_d80", 1, 90, 333, 8, 2, 80, 80, true, 50, -1}, 8.0f, 2, true),
    with_variants({"all_negative_scale_d24", 1, 40, 77, 2, 1, 24, 24, false, -1, -1, false, 0, -0.3f}, 3.0f, 1, true),
    // Decode path (group * Sq <= 32 query rows per KV head); split over keys at 2 threads.
    with_variants({"decode_all_gqa4_d128", 2, 1, 700, 8, 2, 128, 128}, 10.0f, 1, true),
    with_variants({"decode_causal_window_sq4_d64_dv48", 1, 4, 500, 8, 1, 64, 48, true, 100, -1}, 0.0f, 2, true),
    with_variants({"decode_split_sinks_d96", 1, 1, 1000, 4, 1, 96, 96}, 0.0f, 0, true),
    with_variants({"decode_window_sq2_softcap_d7_dv5", 1, 2, 1000, 2, 2, 7, 5, false, 50, 0}, 2.0f, 2, false),
    // Varlen: slopes per sequence, a sequence without queries and (decode) one without keys.
    with_variants({"varlen_all_causal_gqa2_d64", 1, 130, 240, 4, 2, 64, 64, true}, 4.0f, 2, true, {0, 5, 5, 60, 130},
            {0, 9, 13, 100, 240}),
    with_variants({"varlen_decode_all_d32", 1, 4, 700, 4, 2, 32, 32}, 6.0f, 2, true, {0, 1, 1, 3, 4},
            {0, 300, 301, 700, 700}),
};

INSTANTIATE_TEST_SUITE_P(
    Variants, AttentionTest,
    ::testing::Combine(::testing::ValuesIn(kVariantCases), ::testing::ValuesIn(kStorageTypes)), CaseDtypeName());

// Every GEMM micro-kernel of the build, forced by its key, through every strategy.
class AttentionKernelTest : public ::testing::TestWithParam<int> {};

TEST_P(AttentionKernelTest, ForcedKernelMatchesReference) {
  const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(GetParam());
  FC_SKIP_UNLESS_RUNNABLE(k);
  Rng rng;
  FC_TRACE_SEED(rng);
  const AttnCase c{"forced", 1, 70, 300, 4, 2, 80, 72, true, 150, -1, false, 2};
  for (DType dt : kStorageTypes) {
    SCOPED_TRACE("storage " + name(dt));
    AttnFixture f(c, dt, rng);
    int run = 0;
    for (Strategy s : kStrategies) f.check(s, Exp2Mode::exact, 1 + (run++ % 2), k.key, k.ab);
  }
  // Odd head dims: K and Q packed with a zero partner for the last key of a pair (bf16
  // k-pair layouts) or zero k rows past D, V with a partial last panel.
  const AttnCase odd{"forced_odd_d", 1, 70, 130, 2, 1, 33, 17};
  for (DType dt : kStorageTypes) {
    SCOPED_TRACE("odd d, storage " + name(dt));
    AttnFixture f(odd, dt, rng);
    f.check(Strategy::online, Exp2Mode::exact, 2, k.key, k.ab);
  }
  // Row-major A kernels (AMX) take 256-row query blocks once a group's K and V pass 1 MiB
  // (geometry.cpp, kRowsQueryBlock): 2600 keys x (128 + 96) bf16 = 1.1 MiB, 300 queries =
  // one whole block and a partial one, GQA, causal with Sq != Sk.
  if (k.a_layout == fc::cpu::Layout::rows) {
    const AttnCase tall{"forced_tall_blocks", 1, 300, 2600, 2, 1, 128, 96, true};
    AttnFixture f(tall, DType::bf16, rng);
    f.check(Strategy::online, Exp2Mode::exact, 2, k.key, k.ab);
    f.check(Strategy::two_pass, Exp2Mode::fast, 1, k.key, k.ab);
    // bf16 K read in place by stage 1 (attention.cpp, k_inplace: Sk a multiple of the key
    // block, D of the k step): BSHD, BHSD and padded rows, GQA, causal with Sq != Sk.
    for (int layout = 0; layout < 3; ++layout) {
      SCOPED_TRACE("K in place, layout " + std::to_string(layout));
      const AttnCase inplace{"forced_k_in_place", 2, 100, 320, 4, 2, 64, 64, layout != 1, -1, -1,
                             layout == 1, layout == 2 ? 24 : 0};
      AttnFixture fi(inplace, DType::bf16, rng);
      int run = 0;
      for (Strategy s : kStrategies) fi.check(s, Exp2Mode::exact, 1 + (run++ % 2), k.key, k.ab);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, AttentionKernelTest,
                         ::testing::Range(0, fc::cpu::gemm_ukernel_count()),
                         [](const auto& info) { return std::string(fc::cpu::gemm_ukernel(info.param).key); });

// Kernel pairs "k1+k2" (Q K^T on k1, P V on k2; `auto` picks one for fp16 storage on
// AVX512-FP16, auto_table.inc): every runnable P V kernel behind an fp32 kernel of another
// tile shape, so that the query block, key tile, P layout and V panels must follow both.
TEST(Attention, KernelPairsMatchReference) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const AttnCase c{"pair", 1, 100, 300, 4, 2, 72, 40, true, -1, -1, false, 1};
  int pairs = 0;
  for (int j = 0; j < fc::cpu::gemm_ukernel_count(); ++j) {
    const fc::cpu::GemmUkernel& k2 = fc::cpu::gemm_ukernel(j);
    if (!fc::cpu::isa_available(k2.isa)) continue;
    const fc::cpu::GemmUkernel* k1 = nullptr;
    for (int i = 0; i < fc::cpu::gemm_ukernel_count() && k1 == nullptr; ++i) {
      const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(i);
      if (fc::cpu::isa_available(k.isa) && k.ab == DType::f32 && k.acc == DType::f32 &&
          (k.mr != k2.mr || k.nr != k2.nr))
        k1 = &k;
    }
    ASSERT_NE(k1, nullptr);
    const std::string impl = std::string(k1->key) + "+" + k2.key;
    SCOPED_TRACE("pair " + impl);
    for (DType dt : {DType::f16, DType::bf16}) {
      AttnFixture f(c, dt, rng);
      int run = 0;
      for (Strategy s : kStrategies) f.check(s, Exp2Mode::exact, 1 + (run++ % 2), impl.c_str(), k2.ab);
    }
    ++pairs;
  }
  EXPECT_GT(pairs, 0);
}

// `auto` takes its fp16 P V kernel (an fp16-summing pair on AVX512-FP16 CPUs) only when
// no |v| passes 128; one value of 300 (or an inf) must send the call to fp32 sums. On
// CPUs without such a pair the same call runs one fp32 kernel anyway.
TEST(Attention, AutoPairKeepsFp32SumsForLargeV) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const AttnCase c{"large_v", 1, 150, 400, 2, 1, 64, 64};
  AttnFixture f(c, DType::f16, rng);
  f.v.set(5 * c.dv + 3, 300.0);  // key 5, column 3: its sums would pass fp16's range
  HostTensor vf = to_f32(f.v), qf = to_f32(f.q), kf = to_f32(f.k);
  fc::AttentionParams rp = f.params();
  rp.lse = f.ref_lse.ptr();
  fc::reference::attention(qf.view(), kf.view(), vf.view(), f.ref_out.view(), rp);
  for (Strategy s : kStrategies) {
    f.check(s, Exp2Mode::exact, 2, nullptr, DType::f32);
    HostTensor out(DType::f16, {c.b, c.sq, c.h, c.dv});
    fc::AttentionParams p = f.params();
    p.strategy = s;
    fc::PhaseTimes times;
    fc::attention(f.q.view(), f.k.view(), f.v.view(), out.view(), p, &times);
    // every kernel that ran sums in fp32
    size_t at = 0;
    while (at <= times.kernel.size()) {
      const size_t plus = std::min(times.kernel.find('+', at), times.kernel.size());
      const std::string key = times.kernel.substr(at, plus - at);
      for (int i = 0; i < fc::cpu::gemm_ukernel_count(); ++i) {
        if (key == fc::cpu::gemm_ukernel(i).key) {
          EXPECT_EQ(fc::cpu::gemm_ukernel(i).acc, DType::f32) << times.kernel;
        }
      }
      at = plus + 1;
    }
  }
}

TEST(Attention, ForceGenericRunsPortableKernels) {
  ForceGeneric generic(true);
  Rng rng;
  FC_TRACE_SEED(rng);
  const AttnCase c{"generic", 1, 33, 77, 2, 1, 64, 64, true};
  for (DType dt : kStorageTypes) {
    SCOPED_TRACE("storage " + name(dt));
    AttnFixture f(c, dt, rng);
    HostTensor out(dt, {c.b, c.sq, c.h, c.dv});
    fc::PhaseTimes times;
    fc::attention(f.q.view(), f.k.view(), f.v.view(), out.view(), f.params(), &times);
    EXPECT_TRUE(close(out, f.ref_out, tolerance(dt, Exp2Mode::exact, c.sk)));
    const fc::cpu::CpuConfig cfg = fc::cpu::select_kernels(dt, nullptr);
    EXPECT_EQ(cfg.gemm->isa, fc::cpu::Isa::generic) << times.kernel;
    EXPECT_EQ(cfg.vec->isa, fc::cpu::Isa::generic) << cfg.vec->key;
    EXPECT_EQ(times.kernel, cfg.gemm->key);
  }
}

// Windows wider than any sequence (INT64_MAX as "unbounded") equal no window; the mask
// arithmetic must not overflow on them (found by the fuzzer, UBSan in the asan build).
TEST(Attention, HugeWindowIsUnbounded) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t big = std::numeric_limits<int64_t>::max();
  const AttnCase plain{"plain", 1, 9, 20, 2, 1, 32, 32};
  AttnFixture f(plain, DType::f32, rng);
  for (Strategy s : kStrategies) {
    SCOPED_TRACE("strategy " + name(s));
    HostTensor out(DType::f32, {1, 9, 2, 32});
    fc::AttentionParams p;
    p.window_left = big;
    p.window_right = big;
    p.strategy = s;
    fc::attention(f.q.view(), f.k.view(), f.v.view(), out.view(), p);
    EXPECT_TRUE(close(out, f.ref_out, tolerance(DType::f32, Exp2Mode::exact, 20)));
  }
}

// FLASHCORE_FORCE_GENERIC=1 in the environment selects the portable kernels from the
// start (ctest runs this, with a few reference comparisons, as cpu_force_generic_env).
TEST(Attention, ForceGenericEnvironment) {
  const char* env = std::getenv("FLASHCORE_FORCE_GENERIC");
  if (env == nullptr || std::string(env) != "1")
    GTEST_SKIP() << "runs under FLASHCORE_FORCE_GENERIC=1 (the ctest entry cpu_force_generic_env)";
  EXPECT_TRUE(fc::force_generic());
  for (DType dt : kStorageTypes) {
    const fc::cpu::CpuConfig cfg = fc::cpu::select_kernels(dt, nullptr);
    EXPECT_EQ(cfg.gemm->isa, fc::cpu::Isa::generic) << cfg.gemm->key;
    EXPECT_EQ(cfg.vec->isa, fc::cpu::Isa::generic) << cfg.vec->key;
  }
}

// Varlen: sequences packed along S (B = 1) against the reference of each sequence alone.
void check_varlen(const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t nseq = int64_t(cu_q.size()) - 1;
  const int64_t tq = cu_q.back() + 3, tk = cu_k.back() + 2;  // spare rows at the end
  const int64_t h = 4, hkv = 2, d = 64;
  for (DType dt : kStorageTypes)
    for (bool causal : {false, true}) {
      SCOPED_TRACE("storage " + name(dt) + (causal ? ", causal" : ""));
      HostTensor q(dt, {1, tq, h, d}), k(dt, {1, tk, hkv, d}), v(dt, {1, tk, hkv, d});
      q.fill_uniform(rng, -3, 3);
      k.fill_uniform(rng, -3, 3);
      v.fill_uniform(rng, -1, 1);
      HostTensor qf = to_f32(q), kf = to_f32(k), vf = to_f32(v);
      // Per-sequence reference into slices of one packed output (rows past the last
      // sequence stay NaN in both, and must stay untouched in ours).
      HostTensor ref(DType::f32, {1, tq, h, d}), ref_lse(DType::f32, {1, h, tq});
      for (int64_t s = 0; s < nseq; ++s) {
        auto slice = [](const HostTensor& t, int64_t off, int64_t len) {
          Tensor r = t.view();
          r.data = static_cast<char*>(r.data) + off * r.strides[1] * int64_t(fc::dtype_size(r.dtype));
          r.shape[1] = len;
          return r;
        };
        Tensor lse_s = ref_lse.view();
        lse_s.data = static_cast<float*>(lse_s.data) + cu_q[size_t(s)];
        lse_s.shape[2] = cu_q[size_t(s) + 1] - cu_q[size_t(s)];
        fc::AttentionParams p;
        p.causal = causal;
        p.lse = &lse_s;
        const int64_t lq = cu_q[size_t(s) + 1] - cu_q[size_t(s)], lk = cu_k[size_t(s) + 1] - cu_k[size_t(s)];
        fc::reference::attention(slice(qf, cu_q[size_t(s)], lq), slice(kf, cu_k[size_t(s)], lk),
                                 slice(vf, cu_k[size_t(s)], lk), slice(ref, cu_q[size_t(s)], lq), p);
      }
      int run = 0;
      for (Strategy st : kStrategies) {
        SCOPED_TRACE("strategy " + name(st));
        HostTensor out(dt, {1, tq, h, d}), lse(DType::f32, {1, h, tq});
        fc::AttentionParams p;
        p.causal = causal;
        p.strategy = st;
        p.threads = 1 + run++ % 2;
        p.lse = lse.ptr();
        p.cu_seqlens_q = cu_q.data();
        p.cu_seqlens_k = cu_k.data();
        p.varlen_batch = nseq;
        if (run % 2 == 0) {  // every other strategy with bounds of the longest sequences (k's one loose)
          for (size_t i = 1; i < cu_q.size(); ++i) {
            p.max_seqlen_q = std::max<int64_t>(p.max_seqlen_q, cu_q[i] - cu_q[i - 1]);
            p.max_seqlen_k = std::max<int64_t>(p.max_seqlen_k, cu_k[i] - cu_k[i - 1] + 1);
          }
          p.max_seqlen_q = std::max<int64_t>(p.max_seqlen_q, 1);
          p.max_seqlen_k = std::min<int64_t>(p.max_seqlen_k, k.view().shape[1]);
        }
        fc::attention(q.view(), k.view(), v.view(), out.view(), p);
        // Compare the rows the sequences cover; the spare rows must still be poison.
        const int64_t covered = cu_q.back() * h * d;
        double num = 0, den = 0;
        bool finite = true;
        for (int64_t i = 0; i < covered; ++i) {
          const double o = out.get(i), r = ref.get(i);
          finite &= std::isfinite(o);
          num += (o - r) * (o - r);
          den += r * r;
        }
        EXPECT_TRUE(finite);
        EXPECT_LE(std::sqrt(num / den), tolerance(dt, Exp2Mode::exact, 64));
        for (int64_t i = covered; i < out.numel(); ++i)
          ASSERT_TRUE(std::isnan(out.get(i))) << "varlen wrote past the last sequence, element " << i;
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t i = 0; i < cu_q.back(); ++i) {
            const double r = ref_lse.get(hh * tq + i), o = lse.get(hh * tq + i);
            if (std::isinf(r)) EXPECT_EQ(o, r);
            else EXPECT_NEAR(o, r, 1e-3 * (1 + std::abs(r))) << "lse h=" << hh << " i=" << i;
          }
      }
    }
}

TEST(Attention, VarlenMatchesPerSequenceReference) {
  check_varlen({0, 5, 5, 22, 86}, {0, 9, 13, 43, 107});
}

// Decode-sized varlen (group 2 x max Sq 3 = 6 rows: the row-op path), sequences of 0-3
// queries, one with no keys.
TEST(Attention, VarlenDecodeMatchesPerSequenceReference) {
  check_varlen({0, 1, 1, 4, 6, 7}, {0, 300, 301, 601, 1100, 1100});
}

// Which path runs: decode shapes on the row ops (the portable set when forced), others on
// the GEMM micro-kernel.
TEST(Attention, DecodeShapesRunTheRowOps) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (bool generic : {false, true}) {
    ForceGeneric force(generic);
    SCOPED_TRACE(generic ? "portable forced" : "auto");
    const fc::cpu::CpuConfig cfg = fc::cpu::select_kernels(DType::f32, nullptr);
    if (generic) {
      EXPECT_EQ(cfg.rows->isa, fc::cpu::Isa::generic) << cfg.rows->key;
    }
    for (const AttnCase& c : {AttnCase{"decode", 1, 2, 600, 16, 1, 64, 64, true},
                              AttnCase{"prefill", 1, 33, 600, 2, 1, 64, 64, true}}) {
      SCOPED_TRACE(c.name);
      AttnFixture f(c, DType::f32, rng);
      HostTensor out(DType::f32, {c.b, c.sq, c.h, c.dv});
      fc::PhaseTimes times;
      fc::AttentionParams p = f.params();
      p.threads = 2;
      fc::attention(f.q.view(), f.k.view(), f.v.view(), out.view(), p, &times);
      EXPECT_TRUE(close(out, f.ref_out, tolerance(DType::f32, Exp2Mode::exact, c.sk)));
      EXPECT_EQ(times.kernel, c.sq == 2 ? cfg.rows->key : cfg.gemm->key);
    }
  }
}

// Every row-op set of the build against plain loops: odd sizes, lanes beyond one vector,
// strided rows, accumulation into a poisoned-border output; the 16-bit-row forms (bf16,
// fp16) where a set has them, bit for bit against its fp32 form on the same (rounded) values.
TEST(RowOps, MatchLoops) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int r = 0; r < fc::cpu::rowops_count(); ++r) {
    const fc::cpu::RowOps& ops = fc::cpu::rowops(r);
    if (!fc::cpu::isa_available(ops.isa)) {
      std::printf("skipped %s: this CPU lacks %s\n", ops.key, fc::cpu::isa_name(ops.isa));
      continue;
    }
    SCOPED_TRACE(ops.key);
    for (const fc::DType rows_dt : {fc::DType::f32, fc::DType::bf16, fc::DType::f16})
    for (auto [kc, d, mq] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 3},
                             {9, 128, 1}, {17, 64, 16}, {33, 80, 17}, {256, 7, 40},
                             {40, 130, 2}, {15, 256, 8}, {100, 33, 5}, {21, 128, 4},
                             {13, 40, 4}, {6, 64, 6}, {11, 16, 7}}) {
      SCOPED_TRACE(std::string(fc::to_string(rows_dt)) + " rows, kc " + std::to_string(kc) + " d " + std::to_string(d) +
                   " mq " + std::to_string(mq));
      const int64_t xs = d + 5, n = d + 3, vs = n + 2, ldo = n + 4, ldt = mq + 3, ldp = mq + 2;
      std::vector<float> x(size_t(kc * xs)), y(size_t(d * mq)), q(size_t(mq * d)), v(size_t(kc * vs)),
          pm(size_t(kc * ldp)), t(size_t(kc * ldt), std::nanf("")), o(size_t(mq * ldo), std::nanf(""));
      for (float& e : x) e = float(rng.uniform(-1, 1));
      for (float& e : y) e = float(rng.uniform(-1, 1));
      for (float& e : v) e = float(rng.uniform(-1, 1));
      for (float& e : pm) e = float(rng.uniform(0, 1));
      for (int64_t i = 0; i < mq; ++i)
        for (int64_t j = 0; j < n; ++j) o[size_t(i * ldo + j)] = float(rng.uniform(-1, 1));
      for (int64_t i = 0; i < mq; ++i)
        for (int64_t e = 0; e < d; ++e) q[size_t(i * d + e)] = y[size_t(e * mq + i)];
      std::vector<float> o0 = o;
      // (16-bit rows: the same values rounded to the row dtype, the fp32 form's results bit for bit)
      if (rows_dt != fc::DType::f32) {
        const auto dot16 = ops.dot16(rows_dt);
        const auto axpy16 = ops.axpy16(rows_dt);
        if (dot16 == nullptr || axpy16 == nullptr) continue;
        std::vector<uint16_t> xb(x.size()), vb(v.size());
        fc::core::convert_row(x.data(), int64_t(x.size()), xb.data(), rows_dt);
        fc::core::convert_row(xb.data(), rows_dt, int64_t(x.size()), x.data());
        fc::core::convert_row(v.data(), int64_t(v.size()), vb.data(), rows_dt);
        fc::core::convert_row(vb.data(), rows_dt, int64_t(v.size()), v.data());
        std::vector<float> t32 = t, o32 = o;
        ops.dot(kc, d, x.data(), xs, q.data(), y.data(), mq, t32.data(), ldt);
        ops.axpy(kc, mq, pm.data(), ldp, v.data(), vs, n, o32.data(), ldo);
        dot16(kc, d, xb.data(), xs, q.data(), y.data(), mq, t.data(), ldt);
        axpy16(kc, mq, pm.data(), ldp, vb.data(), vs, n, o.data(), ldo);
        for (size_t i = 0; i < t.size(); ++i)
          ASSERT_TRUE(std::memcmp(&t[i], &t32[i], 4) == 0) << "the 16-bit dot differs from dot at " << i;
        for (size_t i = 0; i < o.size(); ++i)
          ASSERT_TRUE(std::memcmp(&o[i], &o32[i], 4) == 0) << "the 16-bit axpy differs from axpy at " << i;
      } else {
        ops.dot(kc, d, x.data(), xs, q.data(), y.data(), mq, t.data(), ldt);
        ops.axpy(kc, mq, pm.data(), ldp, v.data(), vs, n, o.data(), ldo);
      }
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = mq; i < ldt; ++i)
          ASSERT_TRUE(std::isnan(t[size_t(k * ldt + i)])) << "dot wrote k=" << k << " i=" << i;
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < mq; ++i) {
          double ref = 0, mag = 0;
          for (int64_t e = 0; e < d; ++e) {
            ref += double(x[size_t(k * xs + e)]) * y[size_t(e * mq + i)];
            mag += std::abs(double(x[size_t(k * xs + e)]) * y[size_t(e * mq + i)]);
          }
          ASSERT_NEAR(t[size_t(k * ldt + i)], ref, 1e-6 * (1 + mag)) << "dot k=" << k << " i=" << i;
        }
      for (int64_t i = 0; i < mq; ++i)
        for (int64_t j = 0; j < ldo; ++j) {
          if (j >= n) {  // the border of each output row is not the op's
            ASSERT_TRUE(std::isnan(o[size_t(i * ldo + j)])) << "axpy wrote i=" << i << " j=" << j;
            continue;
          }
          double ref = o0[size_t(i * ldo + j)], mag = std::abs(ref);
          for (int64_t k = 0; k < kc; ++k) {
            ref += double(pm[size_t(k * ldp + i)]) * v[size_t(k * vs + j)];
            mag += std::abs(double(pm[size_t(k * ldp + i)]) * v[size_t(k * vs + j)]);
          }
          ASSERT_NEAR(o[size_t(i * ldo + j)], ref, 1e-6 * (1 + mag)) << "axpy i=" << i << " j=" << j;
        }
    }
  }
}

// A zero-sized batch or query dim is a no-op: every output byte stays as it was.
TEST(Attention, ZeroSizedIsNoOp) {
  for (auto [b, sq] : {std::pair<int64_t, int64_t>{0, 5}, {2, 0}}) {
    SCOPED_TRACE("B=" + std::to_string(b) + " Sq=" + std::to_string(sq));
    HostTensor q(DType::f32, {b, sq, 2, 32}), k(DType::f32, {b, 9, 2, 32}), v(DType::f32, {b, 9, 2, 32});
    HostTensor out(DType::f32, {b, sq, 2, 32}), lse(DType::f32, {b, 2, sq});
    const auto out0 = out.snapshot(), lse0 = lse.snapshot();
    for (Strategy s : kStrategies) {
      fc::AttentionParams p;
      p.strategy = s;
      p.lse = lse.ptr();
      fc::attention(q.view(), k.view(), v.view(), out.view(), p);
      EXPECT_EQ(out.snapshot(), out0);
      EXPECT_EQ(lse.snapshot(), lse0);
    }
  }
}

// No keys at all: every row is fully masked, O = 0 and lse = -inf (K/V may be null).
TEST(Attention, NoKeysGivesZeros) {
  for (DType dt : kStorageTypes)
    for (Strategy s : kStrategies) {
      SCOPED_TRACE("storage " + name(dt) + ", strategy " + name(s));
      Tensor k = Tensor::contiguous(nullptr, dt, {1, 0, 1, 32});
      Tensor v = Tensor::contiguous(nullptr, dt, {1, 0, 1, 40});
      HostTensor q(dt, {1, 7, 3, 32}), out(dt, {1, 7, 3, 40}), lse(DType::f32, {1, 3, 7});
      Rng rng;
      q.fill_uniform(rng, -1, 1);
      fc::AttentionParams p;
      p.strategy = s;
      p.lse = lse.ptr();
      fc::attention(q.view(), k, v, out.view(), p);
      for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << "element " << i;
      for (int64_t i = 0; i < lse.numel(); ++i)
        ASSERT_EQ(lse.get(i), -std::numeric_limits<double>::infinity()) << "lse " << i;
    }
}

}  // namespace
}  // namespace fctest
