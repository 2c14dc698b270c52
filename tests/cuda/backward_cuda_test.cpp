// CUDA attention backward (src/cuda/bwd_backend.cpp, kernels/bwd_sm90.cuh, kernels/bwd_sm80.cuh) against the fp64
// reference backward on host copies: f16 and bf16, head dims 64 / 96 / 128 / 256 and padded
// ones (D = 80, Dv = 48), odd lengths (1, 7, 100, 1000), GQA 4:1 and 8:1, causal with Sq > Sk
// (fully masked rows: dq exactly 0) and Sq < Sk, windows, a negative scale, varlen batches
// with empty sequences and rows past the last one (with and without max_seqlen), BHSD and
// padded (strided) gradient views, NaN-poisoned gradients (every element written, padding
// untouched), every bwd_sm80 / bwd_sm90 instance the device runs forced by key, deterministic mode
// bitwise across runs (and within tolerance of the default mode), a caller's stream, and bad
// arguments named before anything runs, the gradients left as they were.
// Every test skips with a message when there is no sm80+ GPU (CI has none).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/backward_fixture.hpp"
#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

namespace fc = flashcore;
using fc::DType;
using fctest::BwdCase;
using fctest::DevTensor;
using fctest::HostTensor;

// Device int32 array.
struct DevInts {
  int32_t* p = nullptr;
  explicit DevInts(const std::vector<int32_t>& v) {
    if (v.empty()) return;
    EXPECT_EQ(cudaMalloc(&p, v.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevInts() { cudaFree(p); }
  DevInts(const DevInts&) = delete;
  DevInts& operator=(const DevInts&) = delete;
};

// The shared case data (common/backward_fixture.hpp), its device copies, and a CUDA run.
struct BwdFixture : fctest::BwdData {
  std::unique_ptr<DevTensor> qd_, kd_, vd_, doutd_, outd_, lsed_;  // device copies of the inputs
  std::unique_ptr<DevInts> cu_q, cu_k;

  BwdFixture(const BwdCase& cs, DType dt, fctest::Rng& rng) : BwdData(cs, dt, rng) {
    qd_ = std::make_unique<DevTensor>(q);
    kd_ = std::make_unique<DevTensor>(k);
    vd_ = std::make_unique<DevTensor>(v);
    doutd_ = std::make_unique<DevTensor>(dout);
    outd_ = std::make_unique<DevTensor>(out);
    lsed_ = std::make_unique<DevTensor>(lse);
    cu_q = std::make_unique<DevInts>(c.cu_q);
    cu_k = std::make_unique<DevInts>(c.cu_k);
  }

  fc::AttentionParams params() const { return fctest::bwd_params(c, cu_q->p, cu_k->p); }

  // Poisoned gradient buffers (grads()) and their device copies.
  struct DevGrads {
    Grads h;
    std::unique_ptr<DevTensor> dq, dk, dv;
    void download() {
      dq->download(h.dq);
      dk->download(h.dk);
      dv->download(h.dv);
    }
  };
  DevGrads dev_grads(int64_t grad_pad = -1) const {
    DevGrads g{grads(grad_pad), nullptr, nullptr, nullptr};
    g.dq = std::make_unique<DevTensor>(g.h.dq);
    g.dk = std::make_unique<DevTensor>(g.h.dk);
    g.dv = std::make_unique<DevTensor>(g.h.dv);
    return g;
  }

  void run(DevGrads& g, const fc::AttentionParams& p) const {
    fc::attention_backward(qd_->view(), kd_->view(), vd_->view(), outd_->view(), doutd_->view(), lsed_->view(),
                           g.dq->view(), g.dk->view(), g.dv->view(), p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    g.download();
  }

  void check(const DevGrads& g) const { BwdData::check(g.h, fctest::tolerance(dtype, fc::Exp2Mode::exact, c.sk)); }

  // One run (impl, deterministic; gradients with other padding) checked against the reference.
  void check_run(const char* impl = nullptr, bool deterministic = false, int64_t grad_pad = -1) const {
    SCOPED_TRACE(std::string("impl ") + (impl ? impl : "auto") + (deterministic ? ", deterministic" : ""));
    DevGrads g = dev_grads(grad_pad);
    fc::AttentionParams p = params();
    p.impl = impl;
    p.deterministic = deterministic;
    run(g, p);
    check(g);
  }
};

// Together: Sq, Sk take 1, 7, 100, 1000; head dims 64, 96, 128, 256 and padded ones; GQA
// 4:1 and 8:1; every mask shape; varlen with empty sequences.
const BwdCase kCases[] = {
    {"tiny_d64", 1, 1, 1, 1, 1, 64, 64},
    {"odd_7x100_d64", 2, 7, 100, 4, 4, 64, 64},
    {"gqa4_causal_sq_gt_sk_d128", 1, 100, 7, 8, 2, 128, 128, true},
    {"gqa8_causal_sq_lt_sk_d96", 1, 100, 1000, 8, 1, 96, 96, true},
    {"causal_1000_d128", 1, 1000, 1000, 2, 1, 128, 128, true},
    {"plain_1000x100_d128", 1, 1000, 100, 2, 2, 128, 128},
    {"window_d64", 1, 300, 257, 2, 2, 64, 64, false, 40, 10},
    {"window_sq_lt_sk_pad_d128", 1, 63, 1000, 2, 1, 128, 128, false, 100, 20, false, 8},
    {"bhsd_pad_d256", 2, 130, 70, 2, 1, 256, 256, false, -1, -1, true, 8},
    {"causal_d256", 1, 300, 200, 4, 1, 256, 256, true},
    {"d80_dv48_negative_scale", 1, 77, 150, 3, 1, 80, 48, false, -1, -1, false, 0, -0.3f},
    // (head dims 112 / 128: the 128-column instance, sm90 on Hopper, with zero-filled columns)
    {"gqa4_causal_d112_dv128", 2, 700, 900, 8, 2, 112, 128, true},
    {"varlen_causal_gqa2_d64", 1, 310, 410, 4, 2, 64, 64, true, -1, -1, false, 0, 0.0f,
     {0, 5, 5, 300}, {0, 17, 40, 400}},
    {"varlen_empty_maxlen_d128", 1, 200, 240, 2, 1, 128, 128, false, -1, -1, false, 0, 0.0f,
     {0, 0, 70, 70, 190}, {0, 30, 30, 30, 230}, true},
};

using CaseDtype = std::tuple<BwdCase, DType>;
class CudaBackward : public ::testing::TestWithParam<CaseDtype> {};

TEST_P(CudaBackward, MatchesReference) {
  FC_REQUIRE_GPU();
  const auto& [c, dt] = GetParam();
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  BwdFixture f(c, dt, rng);
  f.check_run();
  f.check_run(nullptr, true);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackward,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(DType::f16, DType::bf16)),
                         fctest::CaseDtypeName());

// The bwd_sm80 and bwd_sm90 keys of this build that the device runs, with their head dims.
std::vector<std::pair<std::string, int64_t>> bwd_keys(DType dt) {
  std::vector<fc::KernelInfo> ks(512);
  ks.resize(size_t(fc::list_kernels(ks.data(), int(ks.size()))));
  std::vector<std::pair<std::string, int64_t>> out;
  for (const char* family : {"bwd_sm80_", "bwd_sm90_"}) {
    const std::string prefix = std::string(family) + fctest::name(dt) + "_hd";
    for (const fc::KernelInfo& k : ks)
      if (k.available && k.key.rfind(prefix, 0) == 0) out.push_back({k.key, std::stoll(k.key.substr(prefix.size()))});
  }
  return out;
}

// Every instance forced by key, on a case of its head dim with GQA, a window, cut tiles and
// padded gradients (different strides from the inputs'); deterministic too.
TEST(CudaBackwardKernels, EveryInstanceForced) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  for (DType dt : {DType::f16, DType::bf16}) {
    const auto keys = bwd_keys(dt);
    EXPECT_FALSE(keys.empty()) << "no CUDA backward " << fctest::name(dt) << " kernel runs on this device";
    for (const auto& [key, hd] : keys) {
      SCOPED_TRACE(key);
      const BwdCase c{"forced", 2, 150, 213, 4, 2, hd, hd, false, 120, 30};
      BwdFixture f(c, dt, rng);
      f.check_run(key.c_str(), false, 16);
      f.check_run(key.c_str(), true);
    }
  }
}

// Deterministic mode: the same bits from every run. One KV head (GQA 4:1) and many key blocks,
// so that many CTAs add to each query block's dQ: on Hopper in a fixed order (no mask: the
// cyclic walk; causal and the window: in order), elsewhere in slices; head dims 64, 128, 256;
// and 17000 keys, more key blocks than an H100 / H200 has CTA slots (Hopper: the slices too);
// more items than one wave of CTAs holds; the third run on a caller's stream. One test per
// case and dtype, so that a sanitizer run can take one kernel family (--gtest_filter).
const BwdCase kDetCases[] = {
    {"det_d64", 1, 700, 1000, 4, 1, 64, 64, false},
    {"det_causal_d64", 1, 700, 1000, 4, 1, 64, 64, true},
    {"det_window_d64", 1, 700, 1000, 4, 1, 64, 64, false, 100, 20},
    {"det_d128", 1, 700, 1000, 4, 1, 128, 128, false},
    {"det_causal_d128", 1, 700, 1000, 4, 1, 128, 128, true},
    {"det_window_d128", 1, 700, 1000, 4, 1, 128, 128, false, 100, 20},
    {"det_d256", 1, 700, 1000, 4, 1, 256, 256, false},
    {"det_causal_d256", 1, 700, 1000, 4, 1, 256, 256, true},
    {"det_window_d256", 1, 700, 1000, 4, 1, 256, 256, false, 100, 20},
    {"det_long_d64", 1, 100, 17000, 2, 1, 64, 64, false},
    // More (batch, KV head) items than one wave holds: 40 key blocks of 128 keys each, 6 items
    // (GQA: two query heads per KV head), 132 SMs.
    {"det_waves_d64", 3, 300, 5000, 4, 2, 64, 64, false},
    {"det_waves_causal_d128", 3, 600, 5000, 4, 2, 128, 128, true},
};

class CudaBackwardDeterministic : public ::testing::TestWithParam<CaseDtype> {};

TEST_P(CudaBackwardDeterministic, BitwiseAcrossRuns) {
  FC_REQUIRE_GPU();
  const auto& [c, dt] = GetParam();
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  BwdFixture f(c, dt, rng);
  std::vector<uint8_t> first;
  for (int run = 0; run < 3; ++run) {
    BwdFixture::DevGrads g = f.dev_grads();
    fc::AttentionParams p = f.params();
    p.deterministic = true;
    p.stream = run == 2 ? stream : nullptr;
    f.run(g, p);
    if (run == 0) {
      f.check(g);
      first = fctest::bytes_of(g.h);
    } else {
      EXPECT_TRUE(fctest::bytes_of(g.h) == first) << "deterministic run " << run << " differs from the first";
    }
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackwardDeterministic,
                         ::testing::Combine(::testing::ValuesIn(kDetCases), ::testing::Values(DType::f16, DType::bf16)),
                         fctest::CaseDtypeName());

// Zero-sized dims: the gradients that exist are zero.
TEST(CudaBackwardKernels, ZeroSizedProblems) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  const BwdCase cases[] = {{"sq0", 1, 0, 5, 2, 1, 64, 64}, {"sk0", 1, 5, 0, 2, 1, 64, 64},
                           {"b0", 0, 5, 5, 2, 1, 64, 64},  {"h0", 1, 5, 6, 0, 1, 64, 64},
                           {"dv0", 1, 5, 6, 2, 2, 64, 0}};
  for (const BwdCase& c : cases) {
    SCOPED_TRACE(c.name);
    BwdFixture f(c, DType::f16, rng);
    BwdFixture::DevGrads g = f.dev_grads();
    f.run(g, f.params());
    for (const HostTensor* t : {&g.h.dq, &g.h.dk, &g.h.dv})
      for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(t->get(i), 0.0) << "element " << i;
  }
}

// ---------------------------------------------------------------- bad arguments
// Each call must fail naming the argument before anything runs: the gradients keep their
// poison (downloaded and compared byte for byte).
TEST(CudaBackwardErrors, BadArgumentsNamed) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  BwdFixture f({"bad", 1, 9, 11, 4, 2, 64, 64}, DType::f16, rng);
  using T = std::vector<fc::Tensor>;
  auto expect = [&](const char* arg, fc::Status code, const std::function<void(fc::AttentionParams&, T&)>& spoil) {
    SCOPED_TRACE(std::string("argument ") + arg);
    BwdFixture::DevGrads g = f.dev_grads();
    fc::AttentionParams p = f.params();
    T t = {f.qd_->view(), f.kd_->view(), f.vd_->view(), f.outd_->view(), f.doutd_->view(), f.lsed_->view(),
           g.dq->view(), g.dk->view(), g.dv->view()};
    spoil(p, t);
    const auto before = fctest::bytes_of(g.h);
    fctest::expect_refused(t, p, arg, code);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    g.download();
    EXPECT_TRUE(fctest::bytes_of(g.h) == before) << "a gradient was written";
  };
  const fc::Status inval = fc::Status::invalid_argument, unsup = fc::Status::unsupported;
  HostTensor host_dq(DType::f16, {1, 9, 4, 64});
  expect("dq", inval, [&](fc::AttentionParams&, T& t) { t[6].data = host_dq.view().data; });  // host memory
  expect("dout", inval, [](fc::AttentionParams&, T& t) {  // rows 2-byte aligned only
    t[4].data = static_cast<uint16_t*>(t[4].data) + 1;
    t[4].shape[3] = 56;
    t[3].shape[3] = 56;
    t[2].shape[3] = 56;
    t[8].shape[3] = 56;
  });
  expect("dk", inval, [](fc::AttentionParams&, T& t) { t[7].data = static_cast<uint16_t*>(t[7].data) + 1; });
  expect("q", unsup, [](fc::AttentionParams&, T& t) {  // head dim not a multiple of 8
    for (int i : {0, 1, 6, 7}) t[i].shape[3] = 60;
  });
  expect("params.impl", unsup, [](fc::AttentionParams& p, T&) { p.impl = "bwd_sm80_f16_hd32_1x1_w1"; });
  expect("params.impl", unsup, [](fc::AttentionParams& p, T&) { p.impl = "bwd_sm80_bf16_hd64_64x128_w8_o1"; });
  expect("lse", inval, [](fc::AttentionParams&, T& t) { t[5].shape[2] = 8; });
  expect("dv", inval, [](fc::AttentionParams&, T& t) { t[8].data = t[7].data; });  // dv over dk
  // f32 storage runs on the CPU backend only.
  HostTensor q32(DType::f32, {1, 9, 4, 64}), k32(DType::f32, {1, 11, 2, 64}), dq32(DType::f32, {1, 9, 4, 64}),
      dk32(DType::f32, {1, 11, 2, 64});
  DevTensor dq32d(q32), dk32d(k32), ddq32(dq32), ddk32(dk32), dv32(k32), ddv32(dk32), do32(q32), o32(q32);
  {
    SCOPED_TRACE("f32");
    try {
      fc::attention_backward(dq32d.view(), dk32d.view(), dv32.view(), o32.view(), do32.view(), f.lsed_->view(),
                             ddq32.view(), ddk32.view(), ddv32.view(), f.params());
      ADD_FAILURE() << "accepted";
    } catch (const fc::Error& e) {
      EXPECT_EQ(e.code(), unsup) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("q", 0), 0u) << e.what();
    }
  }
}

}  // namespace
