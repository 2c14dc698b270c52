// CUDA forward with the score variants (softcap, ALiBi slopes [H] or [B, H], attention sinks;
// docs/variants.md) against the fp64 reference: each variant alone and all combined, with
// causal masks, windows, GQA/MQA, varlen batches, lse on and off, fully masked rows (O = 0,
// lse = the sink), odd lengths, f16 / bf16 / f32 (TF32 and the exact FFMA kernel), several
// head dims, every sm80 key and every sm90 "_sv" key of the build forced. Automatic dispatch
// takes the "_sv" rows on Hopper for 16-bit calls at their head dims (D == Dv, or padded
// up to one), the sm80 family otherwise; a forced plain sm90 key is refused by name
// (attention_cuda_errors_test.cpp), and the CUDA backward refuses them.
// Inputs are fresh random values, outputs NaN-poisoned; every test skips with a message
// when there is no sm80+ GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_cuda_test_util.hpp"
#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

using flashcore::AttentionParams;
using flashcore::DType;
using flashcore::Status;
using fctest::DevTensor;
using fctest::HostTensor;
using fctest::keys_by_prefix;
using fctest::cuda_fwd::kSimtKey;
using fctest::cuda_fwd::lse_tol;
using fctest::cuda_fwd::out_tol;

// Which variants a case sets.
enum Var : unsigned {
  kSoftcap = 1,       // softcap (VCase::softcap)
  kAlibi = 2,         // slopes [H]
  kAlibiBatched = 4,  // slopes [B, H] (varlen: one row per sequence)
  kSinks = 8,         // sinks [H]
  kAll = kSoftcap | kAlibiBatched | kSinks,
};

std::string var_name(unsigned v) {
  std::string s;
  if (v & kSoftcap) s += "+softcap";
  if (v & kAlibi) s += "+alibi[H]";
  if (v & kAlibiBatched) s += "+alibi[B,H]";
  if (v & kSinks) s += "+sinks";
  return s.empty() ? "none" : s.substr(1);
}

// The family the dispatcher takes for a variant call (policy.cpp: pick_sm90,
// padded_head_dims): on a Hopper GPU a 16-bit call runs on the "_sv" rows when one covers D
// and Dv (each rounded up to a multiple of 8); the rest on the sm80 family.
std::string variant_family(DType dt, int64_t D, int64_t Dv) {
  if (dt == DType::f32 || !fctest::sm90_missing().empty()) return "fwd_sm80_";
  const int64_t need = std::max((D + 7) / 8 * 8, (Dv + 7) / 8 * 8);
  for (const auto& [key, hd] : keys_by_prefix("fwd_sm90_" + std::string(fctest::name(dt)) + "_hd", true))
    if (fctest::has_suffix(key, "_sv") && hd >= need) return "fwd_sm90_";
  return "fwd_sm80_";
}

struct VCase {
  DType dtype = DType::f16;
  int64_t B = 2, H = 4, Hkv = 2, Sq = 100, Sk = 130, D = 64, Dv = -1;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  unsigned vars = kAll;
  // q, k uniform in [-1, 1] give q.k a standard deviation of sqrt(D / 9); with the scale
  // 2 / sqrt(D) the scores' is 2 / 3 (up to ~3), where a softcap of 1.5 bends them.
  float softcap = 1.5f;
  float scale = 0.f;  // 0: 2 / sqrt(D)
  bool lse = true;
  bool exact_fp32 = false;
  bool fast = false;          // Exp2Mode::fast (softcap: tanh.approx.f32 on the tensor-core kernels)
  bool neg_inf_sink = false;  // head 0's sink is -inf (no sink)
  std::string impl;           // forced key
  std::string expect;         // the kernel that must run starts with this (default: variant_family)
  std::string str() const {
    return std::string(fctest::name(dtype)) + " B" + std::to_string(B) + " H" + std::to_string(H) + "/" +
           std::to_string(Hkv) + " Sq" + std::to_string(Sq) + " Sk" + std::to_string(Sk) + " D" + std::to_string(D) +
           " Dv" + std::to_string(Dv < 0 ? D : Dv) + (causal ? " causal" : "") + " w(" + std::to_string(wl) + "," +
           std::to_string(wr) + ") " + var_name(vars) + " cap " + std::to_string(softcap) + " scale " +
           std::to_string(scale) + (lse ? " lse" : "") + (exact_fp32 ? " exact" : "") + (fast ? " fast" : "") + " " + impl;
  }
};

// The variants' host arrays (slopes over nb rows when batched) and their device copies.
struct VarArrays {
  HostTensor slopes, sinks;
  VarArrays(const VCase& c, int64_t nb, fctest::Rng& rng)
      : slopes(DType::f32, (c.vars & kAlibiBatched) ? std::vector<int64_t>{nb, c.H} : std::vector<int64_t>{c.H}),
        sinks(DType::f32, {c.H}) {
    slopes.fill_uniform(rng, 0.01, 0.3);  // ALiBi's 2^(-8 (h + 1) / H) span [2^-8, 2^-1]
    sinks.fill_uniform(rng, -1.5, 2.5);
    if (c.neg_inf_sink) sinks.set(0, -std::numeric_limits<double>::infinity());
  }
  // params' variant fields, pointing at sl and sk (the device copies, or the host arrays).
  void set(AttentionParams& p, const VCase& c, flashcore::Tensor* sl, flashcore::Tensor* sk) const {
    p.softcap = (c.vars & kSoftcap) ? c.softcap : 0.f;
    p.alibi_slopes = (c.vars & (kAlibi | kAlibiBatched)) ? sl : nullptr;
    p.sinks = (c.vars & kSinks) ? sk : nullptr;
  }
};

// Rows (b, i, h) of which the reference's O is exactly 0 over every column (rows that see no
// key: causal with Sq > Sk, windows, an empty sequence) must be exactly 0 in ours.
::testing::AssertionResult masked_rows_zero(const HostTensor& o, const HostTensor& ref, int64_t dv) {
  const int64_t rows = ref.numel() / dv;
  int64_t masked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    bool zero = true;
    for (int64_t d = 0; d < dv && zero; ++d) zero = ref.get(r * dv + d) == 0.0;
    if (!zero) continue;
    ++masked;
    for (int64_t d = 0; d < dv; ++d)
      if (o.get(r * dv + d) != 0.0)
        return ::testing::AssertionFailure() << "row " << r << " sees no key, but O[" << d << "] = " << o.get(r * dv + d);
  }
  return ::testing::AssertionSuccess() << masked << " masked rows";
}

// A case a partial build (FLASHCORE_CUDA_DTYPES / _HDIMS) has no kernel for is skipped; the
// test's other cases still run.
void skip_case(const char* why) { GTEST_SKIP() << why; }
// Runs the call; false when it threw (a failure, or a skip for a kernel the build lacks).
template <class F>
bool call_or_skip(F&& call) {
  try {
    call();
    return true;
  } catch (const flashcore::Error& e) {
    if (std::string(e.what()).find("has no CUDA instance in this build") != std::string::npos)
      skip_case(e.what());
    else
      ADD_FAILURE() << "threw: " << e.what();
  }
  return false;
}

// One fixed-length case: ours (the dispatcher's kernel, or c.impl) against the reference.
void run_vcase(const VCase& c) {
  SCOPED_TRACE(c.str());
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t Dv = c.Dv < 0 ? c.D : c.Dv;
  HostTensor q(c.dtype, {c.B, c.Sq, c.H, c.D}), k(c.dtype, {c.B, c.Sk, c.Hkv, c.D}), v(c.dtype, {c.B, c.Sk, c.Hkv, Dv}),
      o(c.dtype, {c.B, c.Sq, c.H, Dv}), lse(DType::f32, {c.B, c.H, c.Sq});
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  o.poison();
  lse.poison();
  VarArrays va(c, c.B, rng);
  DevTensor dq(q), dk(k), dv(v), dout(o), dlse(lse), dslopes(va.slopes), dsinks(va.sinks);

  AttentionParams p;
  p.causal = c.causal;
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.scale = c.scale != 0.f ? c.scale : 2.0f / std::sqrt(float(c.D));
  p.exact_fp32 = c.exact_fp32;
  if (c.fast) p.exp2 = flashcore::Exp2Mode::fast;
  p.impl = c.impl.empty() ? nullptr : c.impl.c_str();
  if (c.lse) p.lse = &dlse.view();
  va.set(p, c, &dslopes.view(), &dsinks.view());
  flashcore::PhaseTimes times;
  if (!call_or_skip([&] { flashcore::attention(dq.view(), dk.view(), dv.view(), dout.view(), p, &times); })) return;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.download(o);
  dlse.download(lse);
  EXPECT_TRUE(o.padding_untouched()) << "kernel wrote outside the output view";
  const std::string expect = !c.expect.empty() ? c.expect : !c.impl.empty() ? c.impl : variant_family(c.dtype, c.D, Dv);
  EXPECT_EQ(times.kernel.rfind(expect, 0), 0u) << "kernel " << times.kernel;
  // f32: the exact FFMA kernel when asked for or when the head dims are not multiples of 4.
  const bool exact = c.dtype == DType::f32 && (c.exact_fp32 || c.impl == kSimtKey || c.D % 4 != 0 || Dv % 4 != 0);

  HostTensor ref(DType::f32, {c.B, c.Sq, c.H, Dv}), ref_lse(DType::f32, {c.B, c.H, c.Sq});
  AttentionParams rp = p;
  rp.impl = nullptr;
  rp.lse = c.lse ? &ref_lse.view() : nullptr;
  va.set(rp, c, va.slopes.ptr(), va.sinks.ptr());
  flashcore::reference::attention(fctest::to_f32(q).view(), fctest::to_f32(k).view(), fctest::to_f32(v).view(),
                                  ref.view(), rp);
  EXPECT_TRUE(fctest::close(o, ref, out_tol(c.dtype, c.Sk, exact))) << "kernel " << times.kernel;
  EXPECT_TRUE(masked_rows_zero(o, ref, Dv)) << "kernel " << times.kernel;
  if (c.lse) {
    EXPECT_TRUE(fctest::lse_close(lse, ref_lse, lse_tol(c.dtype, exact))) << "kernel " << times.kernel;
  } else {
    for (int64_t i = 0; i < lse.numel(); ++i) ASSERT_TRUE(std::isnan(lse.get(i))) << "lse written without params.lse";
  }
}

class CudaVariants : public ::testing::TestWithParam<DType> {};

// Each variant alone, then combinations, on odd lengths (Sq 100, Sk 130: partial tiles), with
// and without the causal mask, at hd64 and hd128.
TEST_P(CudaVariants, EachAloneAndCombined) {
  FC_REQUIRE_GPU();
  for (unsigned vars : {unsigned(kSoftcap), unsigned(kAlibi), unsigned(kAlibiBatched), unsigned(kSinks),
                        unsigned(kSoftcap | kAlibi), unsigned(kAlibi | kSinks), unsigned(kSoftcap | kSinks),
                        unsigned(kAll)})
    for (int64_t D : {64, 128})
      for (bool causal : {false, true}) {
        VCase c;
        c.dtype = GetParam();
        c.vars = vars;
        c.D = D;
        c.causal = causal;
        run_vcase(c);
      }
}

// Head dims with and without padding columns (D = 80 runs on hd96, 200 on hd256), Dv != D,
// and lengths 1, 7 and 333 (one key, a partial tile, several tiles).
TEST_P(CudaVariants, HeadDimsAndOddLengths) {
  FC_REQUIRE_GPU();
  for (auto [D, Dv] : {std::pair<int64_t, int64_t>{64, 64}, {80, 80}, {96, 96}, {128, 128}, {256, 256}, {200, 200},
                       {64, 128}, {128, 64}})
    for (int64_t S : {1, 7, 333}) {
      VCase c;
      c.dtype = GetParam();
      c.D = D;
      c.Dv = Dv;
      c.Sq = S;
      c.Sk = S + 3;
      c.causal = S % 2 == 1;
      run_vcase(c);
    }
}

// Fully masked rows: causal with Sq > Sk (the first Sq - Sk rows see no key: O = 0, lse =
// the sink, or -inf without sinks and for a head whose sink is -inf), Sk > Sq (ALiBi's
// distance from the bottom-right diagonal), and local windows (narrow, one-sided, causal).
TEST_P(CudaVariants, MasksAndMaskedRows) {
  FC_REQUIRE_GPU();
  for (auto [Sq, Sk] : {std::pair<int64_t, int64_t>{300, 100}, {100, 300}, {513, 1}, {1, 513}})
    for (unsigned vars : {unsigned(kAll), unsigned(kSoftcap | kAlibi)}) {
      VCase c;
      c.dtype = GetParam();
      c.Sq = Sq;
      c.Sk = Sk;
      c.causal = true;
      c.vars = vars;
      c.neg_inf_sink = Sq == 300;
      run_vcase(c);
    }
  for (auto [wl, wr, causal] : {std::tuple<int64_t, int64_t, bool>{50, 10, false}, {0, 0, false}, {64, -1, true},
                                {200, 3, false}, {-1, 5, false}, {7, -1, false}}) {
    VCase c;
    c.dtype = GetParam();
    c.Sq = 333;
    c.Sk = 517;
    c.wl = wl;
    c.wr = wr;
    c.causal = causal;
    c.D = 128;
    run_vcase(c);
  }
  // A window that leaves some rows without keys (Sq > Sk, keys only to the left).
  VCase c;
  c.dtype = GetParam();
  c.Sq = 200;
  c.Sk = 90;
  c.wl = 20;
  c.wr = 0;
  run_vcase(c);
}

// GQA and MQA (query head h reads KV head h / G; slopes and sinks are per query head), three
// batch entries with slopes [B, H]; lse off; a larger softcap and a negative scale.
TEST_P(CudaVariants, GqaMqaLseOffAndScales) {
  FC_REQUIRE_GPU();
  for (int64_t Hkv : {2, 1}) {
    VCase c;
    c.dtype = GetParam();
    c.B = 3;
    c.H = 8;
    c.Hkv = Hkv;
    c.Sq = 150;
    c.Sk = 190;
    c.causal = Hkv == 1;
    run_vcase(c);
    c.lse = false;
    run_vcase(c);
  }
  for (auto [cap, scale] : {std::pair<float, float>{30.f, 0.5f}, {0.25f, 0.125f}, {2.f, -0.3f}, {5.f, 0.f}}) {
    VCase c;
    c.dtype = GetParam();
    c.softcap = cap;
    c.scale = scale;
    c.D = 128;
    run_vcase(c);
  }
  // Without softcap the sm90 rows leave a scale from 2^-20 on to the softmax's exponent and
  // add ALiBi's term over it (ScoreFold); smaller, zero-like and negative scales are applied to
  // the scores first. Sk > Sq: tiles left of every row's diagonal take ALiBi's row term apart.
  for (float scale : {0.5f, 3.f, 2e-6f, 1e-30f, -0.3f}) {
    VCase c;
    c.dtype = GetParam();
    c.vars = kAlibi | kSinks;
    c.scale = scale;
    c.D = 128;
    c.Sq = 150;
    c.Sk = 600;
    run_vcase(c);
  }
}

// Varlen: sequences of other lengths (an empty query sequence, one with more queries than
// keys, whose first rows see no key under the causal mask), ALiBi slopes [B, H] by sequence or
// [H], sinks; rows past the last sequence stay untouched.
void varlen_vcase(DType dt, int64_t D, unsigned vars, bool causal, const std::string& impl) {
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  SCOPED_TRACE(std::string(fctest::name(dt)) + " D" + std::to_string(D) + " " + var_name(vars) +
               (causal ? " causal " : " full ") + impl);
  const std::vector<int32_t> cq = {0, 5, 135, 135, 215, 216}, ck = {0, 7, 207, 208, 250, 251};
  const int64_t nb = int64_t(cq.size()) - 1, tq = cq.back() + 3, tk = ck.back(), H = 4, Hkv = 2;
  VCase c;
  c.dtype = dt;
  c.H = H;
  c.vars = vars;
  HostTensor q(dt, {1, tq, H, D}), k(dt, {1, tk, Hkv, D}), v(dt, {1, tk, Hkv, D}), o(dt, {1, tq, H, D}),
      lse(DType::f32, {1, H, tq});
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  o.poison();
  lse.poison();
  VarArrays va(c, nb, rng);
  DevTensor dq(q), dk(k), dv(v), dout(o), dlse(lse), dslopes(va.slopes), dsinks(va.sinks);
  int32_t *dcq = nullptr, *dck = nullptr;
  ASSERT_EQ(cudaMalloc(&dcq, cq.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dck, ck.size() * 4), cudaSuccess);
  cudaMemcpy(dcq, cq.data(), cq.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dck, ck.data(), ck.size() * 4, cudaMemcpyHostToDevice);
  AttentionParams p;
  p.causal = causal;
  p.scale = 2.0f / std::sqrt(float(D));
  p.lse = &dlse.view();
  p.cu_seqlens_q = dcq;
  p.cu_seqlens_k = dck;
  p.varlen_batch = nb;
  if (!impl.empty()) p.impl = impl.c_str();
  va.set(p, c, &dslopes.view(), &dsinks.view());
  flashcore::PhaseTimes t;
  if (!call_or_skip([&] { flashcore::attention(dq.view(), dk.view(), dv.view(), dout.view(), p, &t); })) {
    cudaFree(dcq);
    cudaFree(dck);
    return;
  }
  EXPECT_EQ(t.kernel.rfind(impl.empty() ? variant_family(dt, D, D) : impl, 0), 0u) << "kernel " << t.kernel;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dcq);
  cudaFree(dck);
  dout.download(o);
  dlse.download(lse);
  HostTensor ref(DType::f32, {1, tq, H, D}), ref_lse(DType::f32, {1, H, tq});
  AttentionParams rp = p;
  rp.impl = nullptr;
  rp.lse = &ref_lse.view();
  rp.cu_seqlens_q = cq.data();
  rp.cu_seqlens_k = ck.data();
  va.set(rp, c, va.slopes.ptr(), va.sinks.ptr());
  flashcore::reference::attention(fctest::to_f32(q).view(), fctest::to_f32(k).view(), fctest::to_f32(v).view(),
                                  ref.view(), rp);
  int64_t touched = 0;  // rows past the last sequence: still NaN, then left out
  for (int64_t i = cq.back() * H * D; i < tq * H * D; ++i) {
    touched += !std::isnan(o.get(i));
    o.set(i, 0.0);
    ref.set(i, 0.0);
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t r = cq.back(); r < tq; ++r) {
      touched += !std::isnan(lse.get(h * tq + r));
      lse.set(h * tq + r, 0.0);
      ref_lse.set(h * tq + r, 0.0);
    }
  EXPECT_EQ(touched, 0) << "rows past the last sequence were written";
  const bool exact = dt == DType::f32 && impl == kSimtKey;
  EXPECT_TRUE(fctest::close(o, ref, out_tol(dt, 200, exact)));
  EXPECT_TRUE(fctest::lse_close(lse, ref_lse, lse_tol(dt, exact)));
}

TEST_P(CudaVariants, Varlen) {
  FC_REQUIRE_GPU();
  for (unsigned vars : {unsigned(kAll), unsigned(kAlibi | kSinks), unsigned(kSoftcap)})
    for (bool causal : {false, true}) varlen_vcase(GetParam(), 64, vars, causal, "");
  varlen_vcase(GetParam(), 128, kAll, true, "");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVariants, ::testing::Values(DType::f16, DType::bf16, DType::f32),
                         [](const ::testing::TestParamInfo<DType>& i) { return fctest::name(i.param); });

// Every sm90 "_sv" key of this build, forced, with every variant and without (causal and
// not, Sq != Sk, GQA, lse), on a Hopper GPU.
TEST(CudaVariantsKeys, ForcedSvKeys) {
  FC_REQUIRE_SM90();
  for (DType dt : {DType::f16, DType::bf16})
    for (const auto& [key, hd] : keys_by_prefix("fwd_sm90_" + std::string(fctest::name(dt)) + "_hd", true, 0))
      if (fctest::has_suffix(key, "_sv"))
        for (unsigned vars : {unsigned(kAll), unsigned(kSoftcap), unsigned(kAlibi | kSinks), 0u})
          for (bool causal : {false, true}) {
            VCase c;
            c.dtype = dt;
            c.D = hd;
            c.H = 8;
            c.Hkv = 2;
            c.Sq = 200;
            c.Sk = 333;
            c.causal = causal;
            c.vars = vars;
            c.impl = key;
            run_vcase(c);
          }
}

// ALiBi's key order (the tile of a block's first diagonal key first, then the later tiles, then
// the earlier ones in reverse; kernels/sm90/scheduler.cuh KeyWalk) on rows of many key tiles,
// every bf16 "_sv" key forced: the diagonal inside the keys (Sk > Sq), left of the first
// blocks' keys (Sq > Sk), and a window across it; with three KV splits too (the single-item
// keys), each of which orders its own run of tiles.
TEST(CudaVariantsKeys, AlibiKeyOrder) {
  FC_REQUIRE_SM90();
  for (const auto& [key, hd] : keys_by_prefix("fwd_sm90_bf16_hd", true, 0))
    if (fctest::has_suffix(key, "_sv"))
      for (auto [Sq, Sk, wl, wr] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{700, 1500, -1, -1},
                                    {1500, 700, -1, -1}, {900, 1000, 300, 200}})
        for (bool causal : {false, true})
          for (const std::string splits : {"", "+kv3"}) {
            if (!splits.empty() && fctest::has_suffix(key, "_p_sv")) continue;  // persistent: no splits
            VCase c;
            c.dtype = DType::bf16;
            c.D = hd;
            c.B = 1;
            c.H = 2;
            c.Hkv = 1;
            c.Sq = Sq;
            c.Sk = Sk;
            c.wl = wl;
            c.wr = wr;
            c.causal = causal;
            c.vars = kAlibi | kSinks;
            c.impl = key + splits;
            run_vcase(c);
          }
}

// Softcap under Exp2Mode::fast: the tensor-core kernels' tanh from tanh.approx.f32. Within the
// 16-bit tolerance of the exact reference (c = 1.5: a score's error <= 1.5 x 2^-10.7), and
// not bit for bit the exact mode's output (the fast form ran), on the dispatcher's kernel
// and a forced sm80 one.
TEST(CudaVariantsKeys, FastSoftcapTanh) {
  FC_REQUIRE_GPU();
  for (DType dt : {DType::f16, DType::bf16}) {
    std::vector<std::string> impls = {""};  // the dispatcher's, and the first sm80 hd128 key the device runs
    const auto sm80 = keys_by_prefix("fwd_sm80_" + std::string(fctest::name(dt)) + "_hd", true, 128);
    if (!sm80.empty()) impls.push_back(sm80.front().first);
    for (const std::string& impl : impls) {
      VCase c;
      c.dtype = dt;
      c.D = 128;
      c.Sq = 130;
      c.Sk = 300;
      c.vars = kSoftcap | kSinks;
      c.fast = true;
      c.impl = impl;
      run_vcase(c);
    }
    // The same inputs in both modes: some output element differs.
    fctest::Rng rng;
    FC_TRACE_SEED(rng);
    HostTensor q(dt, {1, 64, 2, 128}), k(dt, {1, 200, 2, 128}), v(dt, {1, 200, 2, 128}), o1(dt, {1, 64, 2, 128}),
        o2(dt, {1, 64, 2, 128});
    q.fill_uniform(rng, -1, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    DevTensor dq(q), dk(k), dv(v), d1(o1), d2(o2);
    AttentionParams p;
    p.softcap = 1.5f;
    p.scale = 2.0f / std::sqrt(128.0f);
    if (!call_or_skip([&] { flashcore::attention(dq.view(), dk.view(), dv.view(), d1.view(), p); })) continue;
    p.exp2 = flashcore::Exp2Mode::fast;
    flashcore::attention(dq.view(), dk.view(), dv.view(), d2.view(), p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    d1.download(o1);
    d2.download(o2);
    int64_t differ = 0;
    for (int64_t i = 0; i < o1.numel(); ++i) differ += o1.get(i) != o2.get(i);
    EXPECT_GT(differ, 0) << fctest::name(dt) << ": Exp2Mode::fast gave the exact mode's output bit for bit";
  }
}

// Every sm80 key of this build that the device runs, forced, with every variant (causal,
// Sq != Sk, D = its head dim, and D one chunk below it: padded columns).
TEST(CudaVariantsKeys, ForcedSm80Keys) {
  FC_REQUIRE_GPU();
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    const std::string dk = dt == DType::f32 ? "tf32" : fctest::name(dt);
    for (const auto& [key, hd] : keys_by_prefix("fwd_sm80_" + dk + "_hd", true))
      for (int64_t D : {hd, hd - 8}) {
        VCase c;
        c.dtype = dt;
        c.D = D;
        c.Sq = 97;
        c.Sk = 161;
        c.causal = true;
        c.impl = key;
        run_vcase(c);
      }
  }
}

// f32 on the exact FFMA kernel: asked for (exact_fp32), forced by key, and taken for head dims
// that are not multiples of 4; 1e-5 of the reference.
TEST(CudaVariantsKeys, ExactFp32) {
  FC_REQUIRE_GPU();
  for (unsigned vars : {unsigned(kSoftcap), unsigned(kAlibi), unsigned(kSinks), unsigned(kAll)})
    for (bool causal : {false, true}) {
      VCase c;
      c.dtype = DType::f32;
      c.vars = vars;
      c.causal = causal;
      c.exact_fp32 = true;
      c.expect = kSimtKey;
      run_vcase(c);
    }
  VCase c;
  c.dtype = DType::f32;
  c.Sq = 300;
  c.Sk = 100;
  c.causal = true;
  c.impl = kSimtKey;
  run_vcase(c);  // masked rows: O = 0, lse = the sink
  c.impl.clear();
  c.D = 30;  // not a multiple of 4: the FFMA kernel
  c.Sq = 70;
  c.expect = kSimtKey;
  run_vcase(c);
  varlen_vcase(DType::f32, 64, kAll, true, kSimtKey);
}

// The CUDA backward does not take the score variants yet: refused, naming the variant.
TEST(CudaVariantsKeys, BackwardRefused) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  HostTensor x(DType::f16, {1, 64, 2, 64}), lse(DType::f32, {1, 2, 64}), heads(DType::f32, {2});
  x.fill_uniform(rng, -1, 1);
  lse.fill_uniform(rng, 0, 1);
  heads.fill_uniform(rng, 0, 1);
  DevTensor dq(x), dk(x), dv(x), dout(x), ddout(x), dlse(lse), dheads(heads), g0(x), g1(x), g2(x);
  AttentionParams pc, pa, ps;
  pc.softcap = 30.0f;
  pa.alibi_slopes = &dheads.view();
  ps.sinks = &dheads.view();
  for (auto [params, name] : {std::pair<const AttentionParams*, const char*>{&pc, "params.softcap"},
                              {&pa, "params.alibi_slopes"}, {&ps, "params.sinks"}}) {
    try {
      flashcore::attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), ddout.view(), dlse.view(),
                                    g0.view(), g1.view(), g2.view(), *params);
      ADD_FAILURE() << "accepted " << name;
    } catch (const flashcore::Error& e) {
      EXPECT_EQ(int(e.code()), int(Status::unsupported)) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
