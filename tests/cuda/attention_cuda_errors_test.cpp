// Bad inputs to the CUDA backend's forward (host pointers, misaligned rows, unknown tiles and
// keys, bad cu_seqlens, unsupported head dims, the score variants on an sm90 key, a TF32 key
// with exact_fp32, an sm90 key on a problem it does not take): refused before any launch with an
// error naming the argument, the output untouched. (fp8's: attention_cuda_fp8_test.cpp.)
// Every test skips with a message when there is no sm80+ GPU (CudaSm90Errors: no sm90 GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "attention_cuda_test_util.hpp"
#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

using flashcore::AttentionParams;
using flashcore::Device;
using flashcore::DType;
using flashcore::Status;
using fctest::DevTensor;
using fctest::HostTensor;
using fctest::cuda_fwd::expect_refused;
using fctest::cuda_fwd::sm90_key;

TEST(CudaErrors, RefusedBeforeLaunch) {
  FC_REQUIRE_GPU();
  if (fctest::keys_by_prefix("fwd_sm80_f16_hd64_", false).empty())
    GTEST_SKIP() << "no fwd_sm80_f16_hd64 key in this build (FLASHCORE_CUDA_DTYPES / _HDIMS)";
  fctest::Rng rng;
  HostTensor q(DType::f16, {1, 64, 2, 64}), k(DType::f16, {1, 64, 2, 64}), v(DType::f16, {1, 64, 2, 64}),
      o(DType::f16, {1, 64, 2, 64});
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  o.poison();
  DevTensor dq(q), dk(k), dv(v), dout(o);
  AttentionParams p;

  // A host pointer given as a Device::cuda tensor.
  flashcore::Tensor hq = q.view();
  hq.device = Device::cuda;
  expect_refused(hq, dk.view(), dv.view(), dout, o, p, Status::invalid_argument, "q");

  // Misaligned pointer (one element in) for the 16-byte copies.
  flashcore::Tensor mk = dk.view();
  mk.data = static_cast<uint16_t*>(mk.data) + 1;
  mk.shape[1] = 63;
  flashcore::Tensor mv = dv.view();
  mv.shape[1] = 63;
  expect_refused(dq.view(), mk, mv, dout, o, p, Status::invalid_argument, "k");

  // Unsupported tile, unknown kernel key.
  AttentionParams pt;
  pt.tile_m = 48;
  pt.tile_n = 48;
  expect_refused(dq.view(), dk.view(), dv.view(), dout, o, pt, Status::unsupported, "params.tile_m");
  AttentionParams pi;
  pi.impl = "fwd_sm80_f16_hd64_7x7";
  expect_refused(dq.view(), dk.view(), dv.view(), dout, o, pi, Status::unsupported, "params.impl");

  // Bad device-resident cu_seqlens (decreasing).
  int32_t* dcu = nullptr;
  const int32_t bad_cu[3] = {0, 40, 30};
  ASSERT_EQ(cudaMalloc(&dcu, sizeof bad_cu), cudaSuccess);
  cudaMemcpy(dcu, bad_cu, sizeof bad_cu, cudaMemcpyHostToDevice);
  AttentionParams pv;
  pv.cu_seqlens_q = dcu;
  pv.cu_seqlens_k = dcu;
  pv.varlen_batch = 2;
  expect_refused(dq.view(), dk.view(), dv.view(), dout, o, pv, Status::invalid_argument, "cu_seqlens_q");
  // Host cu_seqlens with device tensors.
  pv.cu_seqlens_q = bad_cu;
  expect_refused(dq.view(), dk.view(), dv.view(), dout, o, pv, Status::invalid_argument, "cu_seqlens_q");
  cudaFree(dcu);
}

// Head dims past 256 are refused; a forced 16-bit key with a head dim off the multiples of
// 8 that is not an sm90 row reading the heads in place (the padded copies take the problem
// without a key: attention_cuda_head_pad_test.cpp) names params.impl.
TEST(CudaErrors, UnsupportedHeadDims) {
  FC_REQUIRE_GPU();
  for (int64_t D : {264, 259}) {
    SCOPED_TRACE(D);
    HostTensor q(DType::bf16, {1, 16, 1, D}), o(DType::bf16, {1, 16, 1, D});
    o.poison();
    DevTensor dq(q), dout(o);
    expect_refused(dq.view(), dq.view(), dq.view(), dout, o, {}, Status::unsupported, "head dim");
  }
  const auto hd64 = fctest::keys_by_prefix("fwd_sm80_bf16_hd64_", false);
  const std::string key = hd64.empty() ? std::string() : hd64.front().first;
  if (key.empty()) GTEST_SKIP() << "no fwd_sm80_bf16_hd64 key in this build";
  HostTensor q(DType::bf16, {1, 16, 1, 20}), o(DType::bf16, {1, 16, 1, 20});
  o.poison();
  DevTensor dq(q), dout(o);
  flashcore::AttentionParams p;
  p.impl = key.c_str();
  expect_refused(dq.view(), dq.view(), dq.view(), dout, o, p, Status::unsupported, "params.impl");
}

// The score variants run on the sm90 "_sv" rows and the sm80 family: a plain sm90 key forced
// with one of them is refused before a launch, naming params.impl (and, on an sm90 device,
// the variant); without a forced key the dispatcher takes the "_sv" kernel on Hopper and an
// sm80 kernel elsewhere.
TEST(CudaErrors, ScoreVariantsOnSvAndSm80) {
  FC_REQUIRE_GPU();
  const std::string key = sm90_key(DType::f16, 64);
  HostTensor q(DType::f16, {1, 64, 2, 64}), o(DType::f16, {1, 64, 2, 64}), heads(DType::f32, {2});
  o.poison();
  fctest::Rng rng;
  q.fill_uniform(rng, -1, 1);
  heads.fill_uniform(rng, 0, 1);
  DevTensor dq(q), dout(o), dheads(heads);
  flashcore::Tensor on_gpu = dheads.view();
  AttentionParams pc, pa, ps;
  pc.softcap = 30.0f;
  pa.alibi_slopes = &on_gpu;
  ps.sinks = &on_gpu;
  const bool hopper = fctest::sm90_missing().empty();
  if ((hopper && key.empty()) || fctest::keys_by_prefix("fwd_sm80_f16_hd64_", false).empty())
    GTEST_SKIP() << "this build has no f16 hd64 kernel for the variants (FLASHCORE_CUDA_DTYPES / _HDIMS)";
  const std::pair<AttentionParams*, const char*> cases[] = {
      {&pc, "params.softcap"}, {&pa, "params.alibi_slopes"}, {&ps, "params.sinks"}};
  for (auto [params, name] : cases) {
    SCOPED_TRACE(name);
    if (key.empty()) break;
    params->impl = key.c_str();
    expect_refused(dq.view(), dq.view(), dq.view(), dout, o, *params, Status::unsupported, "params.impl");
    if (hopper) expect_refused(dq.view(), dq.view(), dq.view(), dout, o, *params, Status::unsupported, name);
    params->impl = nullptr;
  }
  for (auto [params, name] : cases) {  // (after the refusals: these write the output)
    SCOPED_TRACE(name);
    flashcore::PhaseTimes times;
    ASSERT_NO_THROW(flashcore::attention(dq.view(), dq.view(), dq.view(), dout.view(), *params, &times));
    EXPECT_EQ(times.kernel.rfind(hopper ? "fwd_sm90_f16_hd64_" : "fwd_sm80_f16_hd64_", 0), 0u) << "kernel " << times.kernel;
    if (hopper) {
      EXPECT_TRUE(fctest::has_suffix(times.kernel, "_sv")) << "kernel " << times.kernel;
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor back(DType::f16, {1, 64, 2, 64}), ref(DType::f32, {1, 64, 2, 64});
    dout.download(back);
    AttentionParams rp = *params;
    if (rp.alibi_slopes != nullptr) rp.alibi_slopes = heads.ptr();
    if (rp.sinks != nullptr) rp.sinks = heads.ptr();
    const HostTensor qf = fctest::to_f32(q);
    flashcore::reference::attention(qf.view(), qf.view(), qf.view(), ref.view(), rp);
    EXPECT_TRUE(fctest::close(back, ref, fctest::cuda_fwd::out_tol(DType::f16, 64)));
  }
}

TEST(CudaF32, Tf32KeyWithExactRefused) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  HostTensor q(DType::f32, {1, 64, 2, 64}), o(DType::f32, {1, 64, 2, 64});
  q.fill_uniform(rng, -1, 1);
  o.poison();
  DevTensor dq(q), dout(o);
  AttentionParams p;
  p.exact_fp32 = true;
  const auto tf32 = fctest::keys_by_prefix("fwd_sm80_tf32_hd64_", false);
  if (tf32.empty()) GTEST_SKIP() << "no fwd_sm80_tf32_hd64 key in this build (FLASHCORE_CUDA_DTYPES / _HDIMS)";
  p.impl = tf32.front().first.c_str();
  expect_refused(dq.view(), dq.view(), dq.view(), dout, o, p, Status::invalid_argument, "exact_fp32");
}

// An sm90 key forced onto a problem it does not take (D or Dv past its head dim, bad KV
// split counts) is refused, naming params.impl; one whose head dim covers D and Dv runs.
TEST(CudaSm90Errors, ForcedKeyRefused) {
  FC_REQUIRE_SM90();
  const std::string key = sm90_key(DType::f16, 128), k64 = sm90_key(DType::f16, 64);
  if (key.empty() || k64.empty())
    GTEST_SKIP() << "this build has no f16 hd64 / hd128 sm90 kernel (FLASHCORE_CUDA_DTYPES / _HDIMS)";
  fctest::Rng rng;
  HostTensor q(DType::f16, {1, 64, 2, 96}), o(DType::f16, {1, 64, 2, 96});
  q.fill_uniform(rng, -1, 1);
  o.poison();
  DevTensor dq(q), dout(o);
  AttentionParams p;
  p.impl = k64.c_str();
  expect_refused(dq.view(), dq.view(), dq.view(), dout, o, p, Status::unsupported, "params.impl");  // D = 96 > 64

  HostTensor q2(DType::f16, {1, 64, 2, 128}), v2(DType::f16, {1, 64, 2, 64}), o2(DType::f16, {1, 64, 2, 64});
  q2.fill_uniform(rng, -1, 1);
  v2.fill_uniform(rng, -1, 1);
  o2.poison();
  DevTensor dq2(q2), dv2(v2), dout2(o2);
  expect_refused(dq2.view(), dq2.view(), dv2.view(), dout2, o2, p, Status::unsupported, "params.impl");  // D 128 > 64
  p.impl = key.c_str();  // the hd128 kernel takes D 128, Dv 64 (Dv's columns zero-filled)
  EXPECT_NO_THROW(flashcore::attention(dq2.view(), dq2.view(), dv2.view(), dout2.view(), p));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // KV splits: a count out of 1 .. 64 or not a number, a persistent kernel.
  HostTensor q3(DType::f16, {1, 64, 2, 64}), o3(DType::f16, {1, 64, 2, 64});
  q3.fill_uniform(rng, -1, 1);
  o3.poison();
  DevTensor dq3(q3), dout3(o3);
  for (const std::string& bad : {k64 + "+kv0", k64 + "+kv65", k64 + "+kvx", k64 + "+kv", std::string("fwd_sm90_f16_hd64_64x64_s2_p+kv2")}) {
    SCOPED_TRACE(bad);
    p.impl = bad.c_str();
    expect_refused(dq3.view(), dq3.view(), dq3.view(), dout3, o3, p, Status::unsupported, "params.impl");
  }
}

// ---- fp8 (e4m3) forward on the Hopper kernel (CudaFp8) ------------------------------
// q/k/v in e4m3 (random finite codes from uniform values, per-tensor descales), output
// f16 or bf16, against the fp64 reference on the same e4m3 tensors (decoded exactly,
// descales applied), outputs NaN-poisoned. Tolerance: the kernel rounds P (in [0, 64],
// times 4) to e4m3 for P V: relative rounding error <= 2^-4 per element, about 2.7%
// rms, independent across keys, so rel_err(O) is about that rms whatever Sk (the error

}  // namespace
