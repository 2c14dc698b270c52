// attention_with_kvcache on CUDA tensors against the fp64 reference over each sequence's keys
// (tests/common/kvcache_fixture.hpp, the CPU tests' fixture): paged caches (page sizes 8 to
// 256, pages in a random permutation, unused table entries far outside the cache, unused
// slots NaN) and contiguous ones, NHD and HND, lengths 0 and 1, appends that cross pages
// (the caches then hold exactly the new keys at their slots, nothing else changed), decode,
// speculative causal queries, windows, GQA 8:1 (a KV head's query heads packed into one
// tile), head dims 64 to 256 (80: on the hd96 instance), KV splits with their combine, CUDA graph capture, bad arguments refused by
// name, and page ids and lengths past the cache that the device never reads past; e4m3
// caches under f16 / bf16 q with per-tensor and per-head dequantization factors (decode,
// speculative and prefill rows, windows, KV splits, NaN in the cache). Every test skips
// with a message when there is no sm80+ GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "common/kvcache_fixture.hpp"
#include "cuda_test_util.hpp"

namespace fctest {
namespace {

// The call on device copies of the fixture's tensors; the kernel that ran goes to *kernel.
KvFixture::Runner gpu_runner(std::string* kernel, bool capture = false, bool check_contents = false) {
  return [kernel, capture, check_contents](KvFixture& f, HostTensor& kc, HostTensor& vc, HostTensor& out,
                                           HostTensor& lse, fc::AttentionParams p) {
    DevTensor q(f.q), dkc(kc), dvc(vc), lens(f.seqlens), dout(out), dlse(lse);
    std::optional<DevTensor> table, kn, vn, kdh, vdh;
    if (p.k_descale_heads != nullptr) {  // per-head factors: device arrays on this path
      p.k_descale_heads = static_cast<const float*>(kdh.emplace(f.kdh).view().data);
      p.v_descale_heads = static_cast<const float*>(vdh.emplace(f.vdh).view().data);
    }
    fc::KvCacheOptions opt;
    opt.layout = f.c.hnd ? fc::KvLayout::hnd : fc::KvLayout::nhd;
    opt.check_contents = check_contents;
    if (f.c.page > 0) opt.block_table = &table.emplace(f.table).view();
    if (f.c.s_new > 0) {
      opt.k_new = &kn.emplace(f.k_new).view();
      opt.v_new = &vn.emplace(f.v_new).view();
    }
    p.lse = &dlse.view();
    fc::PhaseTimes times;
    if (capture) {  // captured into a graph (no host sync in the call), then replayed once
      run_captured([&](cudaStream_t s) {
        p.stream = s;
        EXPECT_NO_THROW(
            fc::attention_with_kvcache(q.view(), dkc.view(), dvc.view(), lens.view(), dout.view(), opt, p, &times));
      });
    } else {
      fc::attention_with_kvcache(q.view(), dkc.view(), dvc.view(), lens.view(), dout.view(), opt, p, &times);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dkc.download(kc);
    dvc.download(vc);
    dout.download(out);
    dlse.download(lse);
    *kernel = times.kernel;
  };
}

// page 0 = contiguous. Lengths include 0 and 1; appends start on and cross page boundaries.
const KvCase kCases[] = {
    {"decode_page8_gqa8to1_bf16", DType::bf16, 8, false, 4, 1, 8, 1, 64, {0, 1, 8, 37}, 1},
    {"decode_page16_f16", DType::f16, 16, false, 3, 1, 32, 8, 128, {15, 16, 300}, 1},
    {"decode_page64_hnd_f16", DType::f16, 64, true, 2, 1, 4, 2, 80, {64, 129}, 1},
    {"decode_page256_hd256_bf16", DType::bf16, 256, false, 2, 1, 4, 1, 256, {255, 600}, 1},
    {"no_append_page16_bf16", DType::bf16, 16, false, 3, 1, 4, 2, 96, {0, 1, 50}, 0},
    {"long_decode_splits_page16_f16", DType::f16, 16, false, 1, 1, 8, 1, 128, {5000}, 1},
    {"speculative_causal_page16_bf16", DType::bf16, 16, false, 3, 4, 8, 2, 64, {13, 0, 33}, 4, true},
    {"append_crosses_pages_page8_f16", DType::f16, 8, false, 2, 3, 4, 4, 64, {6, 21}, 11, true},
    {"window_page16_f16", DType::f16, 16, false, 2, 2, 8, 1, 64, {100, 40}, 2, true, 20, 0},
    {"prefill_chunk_page64_bf16", DType::bf16, 64, false, 2, 90, 2, 2, 64, {100, 0}, 90, true},
    {"contiguous_nhd_decode_bf16", DType::bf16, 0, false, 3, 1, 16, 4, 64, {0, 1, 77}, 1},
    {"contiguous_hnd_window_f16", DType::f16, 0, true, 2, 2, 4, 2, 96, {30, 3}, 2, false, 4, 4},
    {"contiguous_long_splits_bf16", DType::bf16, 0, false, 2, 1, 4, 4, 128, {3000, 17}, 1},
    {"empty_sequences_page8_f16", DType::f16, 8, false, 2, 2, 4, 2, 64, {0, 0}, 0},
    // Pages larger than the 64-key tile and between (the TMA rows' boxes: one per tile, or a
    // page each), and a size neither divides (24: the cp.async rows).
    {"decode_page256_f16", DType::f16, 256, false, 2, 1, 8, 2, 128, {255, 600}, 1},
    {"decode_page32_hnd_gqa8to1_bf16", DType::bf16, 32, true, 3, 1, 8, 1, 128, {31, 32, 97}, 1},
    {"decode_page24_f16", DType::f16, 24, false, 2, 1, 4, 2, 64, {23, 50}, 1},
    // Stale NaN slots before a sliding window (decode; speculative, causal, contiguous).
    {"stale_nan_window_decode_page16_bf16", DType::bf16, 16, false, 2, 1, 8, 2, 64, {200, 70}, 1, false, 30, 0, 2,
     Strategy::automatic, false, true},
    {"stale_nan_window_speculative_contig_f16", DType::f16, 0, false, 2, 4, 8, 2, 128, {300, 90}, 4, true, 40, 0,
     2, Strategy::automatic, false, true},
    // Hostile values: NaN in V at keys some rows see and others do not (the causal mask's
    // newest key, a window's first key), and huge scores (computed again exactly): the
    // key-split form (packed rows <= 16), the 64-row form (prefill chunks), KV splits.
    {"hidden_nan_speculative_page16_f16", DType::f16, 16, false, 2, 4, 8, 2, 64, {40, 100}, 4, true, -1, -1, 2,
     Strategy::automatic, false, false, true},
    {"hidden_nan_window_speculative_contig_bf16", DType::bf16, 0, false, 2, 4, 4, 2, 128, {300, 90}, 4, true, 40, 0,
     2, Strategy::automatic, false, false, true},
    {"hidden_nan_prefill_page64_f16", DType::f16, 64, false, 2, 90, 2, 2, 64, {100, 0}, 90, true, -1, -1, 2,
     Strategy::automatic, false, false, true},
    {"hidden_nan_long_splits_page16_f16", DType::f16, 16, false, 1, 3, 8, 2, 128, {4000}, 3, true, -1, -1, 2,
     Strategy::automatic, false, false, true},
    {"huge_decode_page16_f16", DType::f16, 16, false, 3, 1, 8, 2, 128, {15, 300, 70}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, true},
    {"huge_speculative_splits_page16_bf16", DType::bf16, 16, false, 1, 2, 8, 1, 64, {5000}, 2, true, -1, -1, 2,
     Strategy::automatic, false, false, false, true},
    {"huge_prefill_page64_bf16", DType::bf16, 64, false, 2, 70, 4, 2, 128, {50, 130}, 70, true, -1, -1, 2,
     Strategy::automatic, false, false, false, true},
    // e4m3 caches (k_new / v_new e4m3 too): per-tensor factors (1), per-head as well (2).
    {"fp8_decode_page16_bf16", DType::bf16, 16, false, 3, 1, 8, 2, 64, {15, 1, 300}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 1},
    {"fp8_heads_decode_gqa8to1_page8_f16", DType::f16, 8, false, 4, 1, 8, 1, 128, {0, 1, 8, 37}, 1, false, -1, -1,
     2, Strategy::automatic, false, false, false, false, 2},
    {"fp8_heads_speculative_causal_page16_bf16", DType::bf16, 16, false, 3, 4, 8, 2, 64, {13, 0, 33}, 4, true, -1,
     -1, 2, Strategy::automatic, false, false, false, false, 2},
    {"fp8_heads_prefill_page64_f16", DType::f16, 64, false, 2, 40, 4, 2, 128, {100, 0}, 40, true, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 2},
    {"fp8_heads_contig_hnd_window_d80_bf16", DType::bf16, 0, true, 2, 2, 4, 2, 80, {30, 3}, 2, false, 4, 4, 2,
     Strategy::automatic, false, false, false, false, 2},
    {"fp8_long_splits_page256_f16", DType::f16, 256, false, 1, 1, 8, 1, 128, {5000}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 1},
    {"fp8_contig_long_splits_bf16", DType::bf16, 0, false, 2, 1, 4, 4, 96, {3000, 17}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 2},
    {"fp8_stale_nan_window_decode_page16_f16", DType::f16, 16, false, 2, 1, 8, 2, 64, {200, 70}, 1, false, 30, 0, 2,
     Strategy::automatic, false, true, false, false, 1},
    {"fp8_hidden_nan_speculative_page16_bf16", DType::bf16, 16, false, 2, 4, 8, 2, 64, {40, 100}, 4, true, -1, -1, 2,
     Strategy::automatic, false, false, true, false, 1},
    {"fp8_hidden_nan_long_splits_page16_f16", DType::f16, 16, false, 1, 3, 8, 2, 128, {4000}, 3, true, -1, -1, 2,
     Strategy::automatic, false, false, true, false, 2},
};

class CudaKvCache : public ::testing::TestWithParam<KvCase> {};

TEST_P(CudaKvCache, MatchesReferenceOnContiguousKeys) {
  FC_REQUIRE_GPU();
  Rng rng;
  FC_TRACE_SEED(rng);
  KvFixture f(GetParam(), rng);
  f.out_pad = 2;
  std::string kernel;
  f.check(1, Strategy::automatic, gpu_runner(&kernel));
  SCOPED_TRACE("kernel " + kernel);
  EXPECT_EQ(kernel.find("e4m3_") != std::string::npos, GetParam().fp8 != 0) << "an e4m3 cache's own rows";
  // On Hopper the TMA rows (kvc_sm90) take a paged 16-bit cache whose pages their boxes read,
  // where the packed rows fit the key-split tile and a row has its head dim; the cp.async
  // rows the rest.
  const KvCase& c = GetParam();
  const int64_t g = c.h / c.hkv;
  const bool packed = c.sq < 64 && g >= 2 && g <= 64 && (g & (g - 1)) == 0;
  const int64_t rows = packed ? c.sq * g : c.sq;
  const bool tma = sm90_missing().empty() && c.fp8 == 0 && rows <= 16 && c.d <= 128 &&
                   c.page > 0 && (c.page % 64 == 0 || 64 % c.page == 0);
  EXPECT_EQ(kernel.rfind(tma ? "kvc_sm90_" : "kvc_sm80_", 0), 0u);
  // A long cache over few (sequence, head) CTAs is split over the keys; a group of 2 to 64
  // query heads (a power of two) over fewer than 64 queries shares its KV head's tile rows.
  if (c.lens[0] >= 3000) {
    EXPECT_NE(kernel.find("+kv"), std::string::npos);
  }
  EXPECT_EQ(kernel.find("+gqa" + std::to_string(g)) != std::string::npos, packed);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaKvCache, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The whole call (append, attention, split combine) captured in a CUDA graph.
TEST(CudaKvCacheGraph, CapturedCallMatches) {
  FC_REQUIRE_GPU();
  Rng rng;
  FC_TRACE_SEED(rng);
  const KvCase fp8{"fp8_append_crosses_pages_page8_f16", DType::f16, 8, false, 2, 3, 4, 4, 64, {6, 21}, 11, true,
                   -1, -1, 2, Strategy::automatic, false, false, false, false, 2};
  for (const KvCase& c : {kCases[5], kCases[7], fp8}) {
    SCOPED_TRACE(c.name);
    KvFixture f(c, rng);
    f.out_pad = 2;
    std::string kernel;
    f.check(1, Strategy::automatic, gpu_runner(&kernel, true));
  }
}

// Lengths and page ids are not read on the host: ones past the cache must not make the
// kernels address memory outside it (run under compute-sanitizer memcheck). The result of
// such a call is unspecified; the call returns and the device stays usable.
TEST(CudaKvCacheUnchecked, BadLengthsAndPagesStayInBounds) {
  FC_REQUIRE_GPU();
  Rng rng;
  FC_TRACE_SEED(rng);
  const KvCase c{"bad", DType::f16, 16, false, 2, 1, 4, 2, 64, {20, 40}, 1};
  KvFixture f(c, rng);
  f.seqlens.set(0, 1e6);   // past max_pages * page_size
  f.seqlens.set(1, -50);   // negative
  f.table.set(0, 1 << 30); // a used page id outside the cache
  f.table.set(1, -3);
  HostTensor kc(c.dtype, f.k_cache.shape()), vc(c.dtype, f.v_cache.shape());
  HostTensor out(c.dtype, {c.b, c.sq, c.h, c.d}), lse(DType::f32, {c.b, c.h, c.sq});
  std::string kernel;
  gpu_runner(&kernel)(f, kc, vc, out, lse, f.params());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// KvCacheOptions::check_contents: bad lengths and page ids in device arrays refused by name
// as on the CPU, with out, lse and the caches untouched; good ones pass.
TEST(CudaKvCacheChecked, BadContentsRefusedByName) {
  FC_REQUIRE_GPU();
  Rng rng;
  FC_TRACE_SEED(rng);
  const KvCase c{"checked", DType::f16, 16, false, 2, 1, 4, 2, 64, {20, 40}, 1};
  struct Bad {
    const char* needle;
    std::function<void(KvFixture&)> breakit;
  };
  const Bad bads[] = {
      {"cache_seqlens", [](KvFixture& f) { f.seqlens.set(1, -3); }},
      {"block_table", [](KvFixture& f) { f.table.set(0, 1 << 30); }},
      {"block_table", [](KvFixture& f) { f.seqlens.set(0, 1e6); }},  // more pages than max_pages
      {"", [](KvFixture&) {}},                                         // nothing wrong: passes
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.needle);
    KvFixture f(c, rng);
    b.breakit(f);
    HostTensor out(c.dtype, {c.b, c.sq, c.h, c.d}), lse(DType::f32, {c.b, c.h, c.sq});
    out.poison();
    lse.poison();
    DevTensor q(f.q), kc(f.k_cache), vc(f.v_cache), lens(f.seqlens), table(f.table), kn(f.k_new), vn(f.v_new),
        dout(out), dlse(lse);
    fc::KvCacheOptions opt;
    opt.block_table = &table.view();
    opt.k_new = &kn.view();
    opt.v_new = &vn.view();
    opt.check_contents = true;
    fc::AttentionParams p = f.params();
    p.lse = &dlse.view();
    if (b.needle[0] == '\0') {
      EXPECT_NO_THROW(fc::attention_with_kvcache(q.view(), kc.view(), vc.view(), lens.view(), dout.view(), opt, p));
      continue;
    }
    try {
      fc::attention_with_kvcache(q.view(), kc.view(), vc.view(), lens.view(), dout.view(), opt, p);
      ADD_FAILURE() << "no error";
    } catch (const fc::Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.needle), std::string::npos) << e.what();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor out2(c.dtype, {c.b, c.sq, c.h, c.d}), kc2(c.dtype, f.k_cache.shape());
    dout.download(out2);
    kc.download(kc2);
    for (int64_t i = 0; i < out2.numel(); ++i) ASSERT_TRUE(std::isnan(out2.get(i))) << "out written";
    for (int64_t i = 0; i < kc2.numel(); ++i) {
      const double a = kc2.get(i), w = f.k_cache.get(i);
      ASSERT_TRUE(a == w || (std::isnan(a) && std::isnan(w))) << "k_cache written";
    }
  }
}

// Bad arguments of the CUDA path are refused by name before anything runs.
TEST(CudaKvCacheErrors, RefusedByName) {
  FC_REQUIRE_GPU();
  Rng rng;
  const KvCase base{"err", DType::f16, 16, false, 2, 1, 4, 2, 64, {20, 40}, 1};
  struct Bad {
    const char* needle;
    std::function<void(KvFixture&, fc::AttentionParams&)> breakit;
  };
  const Bad bads[] = {
      {"params.softcap", [](KvFixture&, fc::AttentionParams& p) { p.softcap = 5.0f; }},
      {"params.impl", [](KvFixture&, fc::AttentionParams& p) { p.impl = "fwd_sm80_f16_hd64_64x64_w4_o2"; }},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.needle);
    KvFixture f(base, rng);
    fc::AttentionParams p = f.params();
    b.breakit(f, p);
    HostTensor kc(base.dtype, f.k_cache.shape()), vc(base.dtype, f.v_cache.shape());
    HostTensor out(base.dtype, {base.b, base.sq, base.h, base.d}), lse(DType::f32, {base.b, base.h, base.sq});
    std::string kernel;
    try {
      gpu_runner(&kernel)(f, kc, vc, out, lse, p);
      ADD_FAILURE() << "no error";
    } catch (const fc::Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.needle), std::string::npos) << e.what();
    }
  }
  // e4m3 caches: head dims that are not whole 16-byte chunks of e4m3, or past the rows' 128.
  for (const auto& [d, needle] : {std::pair<int64_t, const char*>{72, "multiples of 16"}, {256, "up to 128"}}) {
    const KvCase c{"fp8_bad_d", DType::f16, 16, false, 1, 1, 4, 2, d, {20}, 0, false, -1, -1, 2,
                   Strategy::automatic, false, false, false, false, 1};
    SCOPED_TRACE(needle);
    KvFixture f(c, rng);
    HostTensor kc(DType::e4m3, f.k_cache.shape()), vc(DType::e4m3, f.v_cache.shape());
    HostTensor out(DType::f16, {1, 1, 4, d}), lse(DType::f32, {1, 4, 1});
    out.poison();
    std::string kernel;
    try {
      gpu_runner(&kernel)(f, kc, vc, out, lse, f.params());
      ADD_FAILURE() << "no error";
    } catch (const fc::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  // fp32 caches: not taken on CUDA.
  const KvCase f32c{"f32", DType::f32, 16, false, 1, 1, 4, 2, 64, {20}, 0};
  KvFixture f(f32c, rng);
  HostTensor kc(DType::f32, f.k_cache.shape()), vc(DType::f32, f.v_cache.shape());
  HostTensor out(DType::f32, {1, 1, 4, 64}), lse(DType::f32, {1, 4, 1});
  std::string kernel;
  try {
    gpu_runner(&kernel)(f, kc, vc, out, lse, f.params());
    ADD_FAILURE() << "no error";
  } catch (const fc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("f16 or bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fctest
