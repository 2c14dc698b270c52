// The CUDA backend's host-side pieces (the persistent kernels' FastDiv item decode and item
// order: no GPU needed), the kernel listing (CudaKernels), and merge_states on device tensors
// against the CPU's (CudaMergeStates).
// The GPU parts skip with a message when there is no sm80+ GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention_cuda_test_util.hpp"
#include "common/test_util.hpp"
#include "cuda/kernels/item_order.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

using flashcore::Device;
using flashcore::DType;
using flashcore::Error;
using flashcore::Status;
using fctest::DevTensor;
using fctest::HostTensor;
using fctest::sm90_missing;

// The sm90 persistent kernels' item decode (params.hpp FastDiv), host form (the device form
// differs only in __umulhi): every divisor the decode can meet up to 4096 against plain
// division at the ends of the range and on random numerators, then random divisors.
TEST(CudaHost, FastDiv) {
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  auto check = [&](int d) {
    const flashcore::cuda::FastDiv f(d);
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(d) - 1, int64_t(d), int64_t(d) + 1, int64_t(INT32_MAX) - 1,
                      int64_t(INT32_MAX)}) {
      if (n > INT32_MAX) continue;
      ASSERT_EQ(f(int(n)), int(n) / d) << n << " / " << d;
    }
    for (int i = 0; i < 64; ++i) {
      const int n = int(rng.integer(0, INT32_MAX));
      ASSERT_EQ(f(n), n / d) << n << " / " << d;
    }
  };
  for (int d = 1; d <= 4096; ++d) check(d);
  for (int i = 0; i < 4096; ++i) check(int(rng.integer(1, INT32_MAX)));
}

// The persistent kernels' item numbering (params.hpp ItemOrder) and its choice per launch
// (item_order.hpp): every group size that divides the head-batches numbers each (query
// block, head-batch) exactly once, group 1 is one head's blocks after another and every
// group's blocks come heaviest first; the choice keeps group 1 without a band mask and where
// it balances, takes every head's last block first where group 1 would load some CTAs with
// heavy blocks round after round, and never picks the worse balanced of the two.
TEST(CudaHost, PersistentItemOrder) {
  using flashcore::cuda::ItemOrder;
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  for (int t = 0; t < 200; ++t) {
    const int n_mb = int(rng.integer(1, 70)), hbs = int(rng.integer(1, 40));
    std::vector<int> divisors;
    for (int g = 1; g <= hbs; ++g)
      if (hbs % g == 0) divisors.push_back(g);
    const int g = divisors[size_t(rng.integer(0, int64_t(divisors.size()) - 1))];
    const ItemOrder order(g, n_mb);
    std::vector<int> seen(size_t(n_mb * hbs), 0);
    int last_blk = -1;
    for (int w = 0; w < n_mb * hbs; ++w) {
      int blk, hb;
      order.decode(w, n_mb, blk, hb);
      ASSERT_TRUE(blk >= 0 && blk < n_mb && hb >= 0 && hb < hbs) << w << " of " << n_mb << " x " << hbs << ", group " << g;
      ++seen[size_t(blk * hbs + hb)];
      if (g == 1) {
        ASSERT_TRUE(hb == w / n_mb && blk == w % n_mb) << w;
      }
      if (w % (g * n_mb) != 0) {
        ASSERT_GE(blk, last_blk) << "blocks out of order within a group at item " << w;
      }
      last_blk = blk;
    }
    for (int v : seen) ASSERT_EQ(v, 1) << n_mb << " x " << hbs << ", group " << g;
  }
  using flashcore::cuda::persistent_item_group;
  flashcore::core::BandMask none, causal;
  causal.right = 0;
  // Cost per block index (counted from the last) under causal Sq = Sk, block_m 128.
  auto costs = [](int n_mb, int bn) {
    std::vector<int64_t> c(static_cast<size_t>(n_mb));
    for (int blk = 0; blk < n_mb; ++blk) c[size_t(blk)] = 1 + ((n_mb - blk) * 128 + bn - 1) / bn;
    return c;
  };
  using flashcore::cuda::widest_item_group;
  constexpr int64_t kKiB = 1024, kL2 = 50 * kKiB * kKiB;  // H100 / H200
  const int64_t kv_hd128_s8192 = 8192 * 256 * 2;         // K and V bytes of one head, f16
  EXPECT_EQ(persistent_item_group(none, 8192, 8192, 0, 128, 64, 16, 132, 2 * kv_hd128_s8192, kL2), 1);
  // H200, 2026-11-26 (d28ba79): f16 hd256 B2 H8 S8192 causal (128x64 tiles): 513 TFLOP/s with group 1,
  // 631 with every head's last block first; hd128 B4 H16 S4096 (128x128): 575 against 517.
  EXPECT_EQ(persistent_item_group(causal, 8192, 8192, 0, 128, 64, 16, 132, 2 * kv_hd128_s8192, kL2), 16);
  EXPECT_EQ(persistent_item_group(causal, 4096, 4096, 0, 128, 128, 64, 132, kv_hd128_s8192 / 2, kL2), 1);
  // The widest group: B Hi where it fits the CTAs (a head's next block in the same round) or
  // its K and V half of L2; else the largest divisor that does. H100, 2026-11-27 (ff9fac4): f16 hd64
  // B32 H32 S512 causal (64x64, 3 CTAs per SM) ran 248 us with group 1024, 135 with group 1.
  EXPECT_EQ(widest_item_group(32, 132, 2 * kv_hd128_s8192, kL2), 32);
  EXPECT_EQ(widest_item_group(1024, 396, 512 * 128 * 2, kL2), 256);
  EXPECT_EQ(widest_item_group(1024, 396, 512 * 128 * 2, 0), 256);
  EXPECT_EQ(widest_item_group(1024, 100, 4 * kKiB, kL2), 1024);  // 4 MiB of K and V in all
  EXPECT_EQ(widest_item_group(7, 4, 0, 0), 1);
  const int g512 = persistent_item_group(causal, 512, 512, 0, 64, 64, 1024, 396, 512 * 128 * 2, kL2);
  EXPECT_TRUE(g512 == 1 || g512 == 256) << g512;
  for (int t = 0; t < 50; ++t) {
    const int n_mb = int(rng.integer(2, 130)), hbs = int(rng.integer(2, 64)), bn = rng.integer(0, 1) ? 64 : 128;
    const int ctas = int(rng.integer(2, 264));
    const int64_t kv = rng.integer(1, 8) * kKiB * kKiB;
    const int wide = widest_item_group(hbs, ctas, kv, kL2);
    int widest = 1;  // by search
    for (int d = 1; d <= hbs; ++d)
      if (hbs % d == 0 && (d <= ctas || d * kv <= kL2 / 2)) widest = d;
    ASSERT_EQ(wide, widest) << hbs << " head-batches on " << ctas << " CTAs, " << kv << " bytes";
    const int g = persistent_item_group(causal, n_mb * 128, n_mb * 128, 0, 128, bn, hbs, ctas, kv, kL2);
    ASSERT_TRUE(g == 1 || g == wide) << g;
    const auto c = costs(n_mb, bn);
    if (int64_t(n_mb) * hbs <= ctas) {
      EXPECT_EQ(g, 1) << "one round";
      continue;
    }
    const double b1 = flashcore::cuda::item_balance(c, hbs, 1, ctas), bw = flashcore::cuda::item_balance(c, hbs, wide, ctas);
    EXPECT_GE(g == 1 ? b1 : bw, std::max(b1, bw) - 0.03) << n_mb << " x " << hbs << " on " << ctas;
  }
}

TEST(CudaKernels, Listed) {
  std::vector<flashcore::KernelInfo> ks(256);
  ks.resize(size_t(flashcore::list_kernels(ks.data(), int(ks.size()))));
  int n = 0;
  for (const auto& k : ks) n += k.key.rfind("fwd_sm80_", 0) == 0;
  EXPECT_GT(n, 0) << "the CUDA build lists no fwd_sm80 kernel";
  FC_REQUIRE_GPU();
  for (const auto& k : ks) {
    if (k.key.rfind("fwd_sm80_", 0) == 0) {
      EXPECT_TRUE(k.available) << k.key;
    }
  }
  if (!sm90_missing().empty()) return;
  int n90 = 0;
  for (const auto& k : ks)
    if (k.key.rfind("fwd_sm90_", 0) == 0) {
      ++n90;
      EXPECT_TRUE(k.available) << k.key;
    }
  EXPECT_GT(n90, 0) << "an sm90 device, but the build lists no fwd_sm90 kernel";
}


// merge_states on device tensors (src/cuda/merge_states.cu) against the CPU's merge of the
// same parts: f32 / f16 / bf16 parts and outputs, strided views, rows whose parts are all
// -inf (their O poisoned: not read), a NaN lse, +inf, and in place into a part; host
// pointers and too many parts refused by name.
TEST(CudaMergeStates, MatchesCpu) {
  FC_REQUIRE_GPU();
  fctest::Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t n = 3, B = 2, S = 5, H = 3, D = 80;
  for (DType pt : {DType::f32, DType::f16, DType::bf16})
    for (DType ot : {DType::f32, pt}) {
      SCOPED_TRACE(fctest::name(pt) + " parts, " + fctest::name(ot) + " out");
      std::vector<HostTensor> outs, lses;
      for (int64_t i = 0; i < n; ++i) {
        outs.emplace_back(pt, std::vector<int64_t>{B, S, H, D}, std::vector<int>{0, 2, 1, 3}, 3);
        lses.emplace_back(DType::f32, std::vector<int64_t>{B, H, S}, std::vector<int>{}, 1);
        outs.back().fill_uniform(rng, -1, 1);
        lses.back().fill_uniform(rng, -20, 20);
      }
      for (int64_t i = 0; i < n; ++i) {  // row (0, 0, 0): all -inf; (0, 0, 1): NaN in part 1; (1, 2, 4): +inf in part 2
        lses[size_t(i)].set(0, -INFINITY);
        for (int64_t j = 0; j < D; ++j) outs[size_t(i)].set(j, NAN);
      }
      lses[1].set(1, NAN);
      lses[2].set((1 * H + 2) * S + 4, INFINITY);
      lses[0].set(2, -INFINITY);  // (0, 0, 2): part 0 saw no key
      for (int64_t j = 0; j < D; ++j) outs[0].set((2 * H) * D + j, NAN);
      std::vector<flashcore::Tensor> ho, hl;
      for (int64_t i = 0; i < n; ++i) {
        ho.push_back(outs[size_t(i)].view());
        hl.push_back(lses[size_t(i)].view());
      }
      HostTensor want(ot, {B, S, H, D}), want_lse(DType::f32, {B, H, S});
      flashcore::merge_states(ho.data(), hl.data(), n, want.view(), want_lse.view());

      std::vector<std::unique_ptr<DevTensor>> dev_o, dev_l;
      std::vector<flashcore::Tensor> dov, dlv;
      for (int64_t i = 0; i < n; ++i) {
        dev_o.push_back(std::make_unique<DevTensor>(outs[size_t(i)]));
        dev_l.push_back(std::make_unique<DevTensor>(lses[size_t(i)]));
        dov.push_back(dev_o.back()->view());
        dlv.push_back(dev_l.back()->view());
      }
      HostTensor got(ot, {B, S, H, D}, {}, 2), got_lse(DType::f32, {B, H, S});
      got.poison();
      got_lse.poison();
      DevTensor dgot(got), dgot_lse(got_lse);
      flashcore::merge_states(dov.data(), dlv.data(), n, dgot.view(), dgot_lse.view());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      dgot.download(got);
      dgot_lse.download(got_lse);
      EXPECT_TRUE(got.padding_untouched());
      const double tol = ot == DType::f32 ? 1e-5 : ot == DType::f16 ? 1e-3 : 8e-3;
      auto same = [&](double a, double b) {
        return (std::isnan(a) && std::isnan(b)) || a == b || std::abs(a - b) <= tol * (1 + std::abs(b));
      };
      for (int64_t i = 0; i < want.numel(); ++i) ASSERT_TRUE(same(got.get(i), want.get(i))) << "out element " << i;
      for (int64_t i = 0; i < want_lse.numel(); ++i)
        ASSERT_TRUE(same(got_lse.get(i), want_lse.get(i))) << "lse element " << i;
      if (ot != pt) continue;
      // In place into part 1 (its own view) and lse part 2.
      flashcore::merge_states(dov.data(), dlv.data(), n, dov[1], dlv[2]);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      dev_o[1]->download(outs[1]);
      dev_l[2]->download(lses[2]);
      for (int64_t i = 0; i < want.numel(); ++i) ASSERT_TRUE(same(outs[1].get(i), want.get(i))) << "in place " << i;
      for (int64_t i = 0; i < want_lse.numel(); ++i)
        ASSERT_TRUE(same(lses[2].get(i), want_lse.get(i))) << "in place lse " << i;
    }
}

TEST(CudaMergeStates, RefusedByName) {
  FC_REQUIRE_GPU();
  HostTensor o(DType::f16, {1, 2, 2, 16}), l(DType::f32, {1, 2, 2}), out(DType::f16, {1, 2, 2, 16}),
      lse(DType::f32, {1, 2, 2});
  DevTensor dout(out), dlse(lse), dl(l), d_o(o);
  flashcore::Tensor host_o = o.view();
  host_o.device = Device::cuda;  // a host pointer given as device memory
  const flashcore::Tensor parts_host[] = {host_o, d_o.view()}, lses2[] = {dl.view(), dl.view()};
  try {
    flashcore::merge_states(parts_host, lses2, 2, dout.view(), dlse.view());
    ADD_FAILURE() << "a host pointer was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("out_parts[0]"), std::string::npos) << e.what();
  }
  std::vector<flashcore::Tensor> many(49, d_o.view()), many_l(49, dl.view());
  try {
    flashcore::merge_states(many.data(), many_l.data(), 49, dout.view(), dlse.view());
    ADD_FAILURE() << "49 parts were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("at most 48 parts"), std::string::npos) << e.what();
  }
}

}  // namespace
