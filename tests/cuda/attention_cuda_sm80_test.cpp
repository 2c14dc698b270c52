// CUDA backend vs the fp64 reference, the sm80 kernels: every feature (dtypes f16, bf16
// and f32 on TF32 tensor cores, head dims incl. padded ones, odd and unequal lengths,
// causal bottom-right, windows, GQA/MQA, varlen, lse, strided layouts, forced tiles; CudaDtype),
// the exact fp32 FFMA path and when f32 falls back to it (CudaF32), the caller's stream
// (CudaStream), on fresh random inputs with NaN-poisoned outputs.
// Every test skips with a message when there is no sm80+ GPU (CI has none).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
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
using fctest::DevTensor;
using fctest::HostTensor;
using fctest::keys_by_prefix;
using fctest::cuda_fwd::Case;
using fctest::cuda_fwd::kSimtKey;
using fctest::cuda_fwd::kVarlenK;
using fctest::cuda_fwd::kVarlenQ;
using fctest::cuda_fwd::out_tol;
using fctest::cuda_fwd::run_case;
using fctest::cuda_fwd::varlen_case;

// Dtype part of the tensor-core kernel keys: fwd_sm80_<key>_hd...
std::string key_dtype(DType d) { return d == DType::f32 ? "tf32" : fctest::name(d); }

// A dtype the build leaves out (FLASHCORE_CUDA_DTYPES) has no sm80 kernels to test: skipped.
class CudaDtype : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (keys_by_prefix("fwd_sm80_" + key_dtype(GetParam()) + "_hd", false).empty())
      GTEST_SKIP() << "this build has no fwd_sm80_" << key_dtype(GetParam()) << " kernels (FLASHCORE_CUDA_DTYPES)";
  }
};

TEST_P(CudaDtype, HeadDimsAndOddLengths) {
  FC_REQUIRE_GPU();
  for (int64_t D : {64, 96, 128, 256})
    for (int64_t S : {1, 7, 1000})
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = GetParam();
        c.D = D;
        c.Sq = c.Sk = S;
        c.causal = causal;
        run_case(c);
      }
}

TEST_P(CudaDtype, Long4097) {
  FC_REQUIRE_GPU();
  for (int64_t D : {64, 128}) {
    Case c;
    c.dtype = GetParam();
    c.H = c.Hkv = 1;
    c.D = D;
    c.Sq = c.Sk = 4097;
    c.causal = D == 128;
    run_case(c);
  }
}

TEST_P(CudaDtype, PaddedHeadDims) {
  FC_REQUIRE_GPU();
  for (auto [D, Dv] : {std::pair<int64_t, int64_t>{8, 8}, {40, 40}, {72, 72}, {80, 80}, {112, 112}, {200, 200},
                       {64, 128}, {128, 64}, {248, 256}}) {
    Case c;
    c.dtype = GetParam();
    c.D = D;
    c.Dv = Dv;
    c.Sq = 77;
    c.Sk = 131;
    run_case(c);
  }
}

TEST_P(CudaDtype, CausalUnequalLengths) {
  FC_REQUIRE_GPU();
  for (auto [Sq, Sk] : {std::pair<int64_t, int64_t>{100, 300}, {300, 100}, {1, 513}, {513, 1}, {129, 4000}}) {
    Case c;
    c.dtype = GetParam();
    c.Sq = Sq;
    c.Sk = Sk;
    c.causal = true;
    c.D = 128;
    run_case(c);  // Sq > Sk: the first Sq - Sk rows see no key (O = 0, lse = -inf)
  }
}

TEST_P(CudaDtype, LocalWindows) {
  FC_REQUIRE_GPU();
  for (auto [wl, wr, causal] : {std::tuple<int64_t, int64_t, bool>{50, 10, false}, {0, 0, false}, {64, -1, true},
                                {200, 3, false}, {-1, 5, false}, {7, -1, false}}) {
    Case c;
    c.dtype = GetParam();
    c.Sq = 333;
    c.Sk = 517;
    c.wl = wl;
    c.wr = wr;
    c.causal = causal;
    run_case(c);
  }
}

TEST_P(CudaDtype, GqaMqaAndLayouts) {
  FC_REQUIRE_GPU();
  Case c;
  c.dtype = GetParam();
  c.B = 3;
  c.H = 8;
  c.Hkv = 2;
  c.Sq = 150;
  c.Sk = 190;
  run_case(c);
  c.Hkv = 1;
  c.causal = true;
  run_case(c);
  c.bhsd = true;
  c.pad = 8;
  c.D = 128;
  run_case(c);
  c.scale = -0.3f;  // a negative scale flips which key dominates: not folded into exp2
  run_case(c);
}

TEST_P(CudaDtype, ForcedTiles) {
  FC_REQUIRE_GPU();
  const std::string prefix = "fwd_sm80_" + key_dtype(GetParam()) + "_hd";
  int ran = 0;
  for (const auto& [key, d] : keys_by_prefix(prefix, true)) {
    // key: fwd_sm80_<dt>_hd<D>_<M>x<N>_w<warps>: once by key, once by tile_m/tile_n.
    const std::string rest = key.substr(prefix.size());
    Case c;
    c.dtype = GetParam();
    c.D = d;
    c.Sq = 300;
    c.Sk = 301;
    c.causal = true;
    c.impl = key;
    run_case(c);
    c.impl.clear();
    const size_t u = rest.find('_'), x = rest.find('x');
    c.tile_m = std::stoi(rest.substr(u + 1));
    c.tile_n = std::stoi(rest.substr(x + 1));
    c.causal = false;
    c.wl = 40;
    run_case(c);
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no " << prefix << "* kernel listed";
}

// Scores spread wide (scale 4 on uniform inputs: about 15 log2 units of spread at hd64),
// so a row's max keeps moving over the key tiles, by more and by less than the softmax's
// lazy-rescale slack (parts/softmax.cuh): every sm80 kernel at hd64 and hd128, by key.
TEST_P(CudaDtype, PeakedScores) {
  FC_REQUIRE_GPU();
  const std::string prefix = "fwd_sm80_" + key_dtype(GetParam()) + "_hd";
  int ran = 0;
  for (const auto& [key, d] : keys_by_prefix(prefix, true)) {
    if (d != 64 && d != 128) continue;
    Case c;
    c.dtype = GetParam();
    c.D = d;
    c.Sq = 130;
    c.Sk = 900;
    c.scale = 4.f;
    c.impl = key;
    run_case(c);
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no " << prefix << "64/128 kernel listed";
}

TEST_P(CudaDtype, Varlen) {
  FC_REQUIRE_GPU();
  varlen_case(GetParam(), 64, "");
  varlen_case(GetParam(), 64, "", 4, kVarlenQ, kVarlenK, "", 2, true);  // bounds given, in a CUDA graph
}

// f32 runs every test above on TF32 tensor cores (fwd_sm80_tf32_*).
INSTANTIATE_TEST_SUITE_P(Cuda, CudaDtype, ::testing::Values(DType::f16, DType::bf16, DType::f32),
                         [](const auto& i) { return fctest::name(i.param); });

// The exact FFMA kernel (exact_fp32, or forced by key) at fp32 accuracy, and the
// default f32 path: TF32, or FFMA where TF32 cannot run (head dims or row strides not
// multiples of 4 elements). run_case checks which kernel ran.
TEST(CudaF32, FfmaExactAndTf32Default) {
  FC_REQUIRE_GPU();
  for (bool exact : {true, false})
    for (int64_t D : {1, 33, 64, 128, 256}) {
      Case c;
      c.dtype = DType::f32;
      c.exact_fp32 = exact;
      c.D = D;
      c.Sq = 131;
      c.Sk = 1000;
      c.causal = D == 64;
      c.H = 4;
      c.Hkv = 2;
      run_case(c);
    }
  Case c;
  c.dtype = DType::f32;
  c.Sq = c.Sk = 4097;
  c.H = c.Hkv = 1;
  c.wl = 100;
  for (bool exact : {true, false}) {
    c.exact_fp32 = exact;
    run_case(c);
  }
  c = Case{};
  c.dtype = DType::f32;
  c.Sq = 70;
  c.Sk = 90;
  c.pad = 1;  // rows not 16-byte aligned: FFMA
  run_case(c);
  c.pad = 0;
  c.impl = kSimtKey;  // forced by key
  run_case(c);
}

TEST(CudaStream, CallersStream) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  HostTensor q(DType::f16, {2, 500, 4, 128}), k(DType::f16, {2, 700, 4, 128}), v(DType::f16, {2, 700, 4, 128}),
      o(DType::f16, {2, 500, 4, 128});
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  o.poison();
  DevTensor dq(q), dk(k), dv(v), dout(o);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  AttentionParams p;
  p.stream = s;
  p.causal = true;
  flashcore::attention(dq.view(), dk.view(), dv.view(), dout.view(), p);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
  dout.download(o);
  HostTensor ref(DType::f32, {2, 500, 4, 128});
  p.stream = nullptr;
  flashcore::reference::attention(fctest::to_f32(q).view(), fctest::to_f32(k).view(), fctest::to_f32(v).view(),
                                  ref.view(), p);
  EXPECT_TRUE(fctest::close(o, ref, out_tol(DType::f16, 700)));
}

}  // namespace
