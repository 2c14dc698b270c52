// attention_with_kvcache on the CPU against the fp64 reference run on the same keys laid out
// contiguously, sequence by sequence: paged caches (page sizes 8..256, pages in a random
// permutation, unused table entries holding ids far outside the cache, unused slots NaN)
// and contiguous ones, NHD and HND, ragged cache_seqlens including 0 and 1, appends of
// k_new / v_new that cross page boundaries (the cache then holds exactly them at the right
// slots and nothing else changed), decode and Sq > 1 causal (speculative verification,
// chunked prefill on the GEMM path), windows, GQA 8:1, lse, f32 / f16 / bf16, 1 and 2
// threads (B x Hkv below the threads: split over keys), the forced portable kernels; fp8
// (e4m3) caches with per-tensor and per-head dequantization factors.
#include <limits>

#include "common/kvcache_fixture.hpp"

namespace fctest {
namespace {

// page 0 = contiguous. Lengths include 0 and 1; appends start on and cross page boundaries.
const KvCase kCases[] = {
    {"decode_page8_gqa8to1_bf16", DType::bf16, 8, false, 4, 1, 8, 1, 64, {0, 1, 8, 37}, 1},
    {"decode_page16_bf16", DType::bf16, 16, false, 3, 1, 32, 8, 128, {15, 16, 300}, 1},
    {"decode_page64_hnd_f16", DType::f16, 64, true, 2, 1, 4, 2, 80, {64, 129}, 1},
    {"decode_page256_f32", DType::f32, 256, false, 2, 1, 4, 1, 32, {255, 600}, 1},
    {"no_append_page16_f32", DType::f32, 16, false, 3, 1, 4, 2, 40, {0, 1, 50}, 0},
    {"split_over_keys_page16_f16", DType::f16, 16, false, 1, 1, 8, 1, 64, {1000}, 1, false, -1, -1, 2},
    {"one_thread_page8_bf16", DType::bf16, 8, true, 2, 1, 8, 2, 64, {9, 70}, 1, false, -1, -1, 1},
    {"speculative_causal_page16_bf16", DType::bf16, 16, false, 3, 4, 8, 2, 64, {13, 0, 33}, 4, true},
    {"append_crosses_pages_page8_f32", DType::f32, 8, false, 2, 3, 4, 4, 16, {6, 21}, 11, true},
    {"window_page16_f16", DType::f16, 16, false, 2, 2, 8, 1, 64, {100, 40}, 2, true, 20, 0},
    {"prefill_chunk_gemm_page64_bf16", DType::bf16, 64, false, 2, 40, 2, 2, 64, {100, 0}, 40, true},
    {"prefill_chunk_gemm_contig_f32", DType::f32, 0, false, 2, 40, 4, 2, 32, {70, 5}, 40, true},
    {"contiguous_nhd_decode_bf16", DType::bf16, 0, false, 3, 1, 16, 4, 64, {0, 1, 77}, 1},
    {"contiguous_hnd_window_f16", DType::f16, 0, true, 2, 2, 4, 2, 96, {30, 3}, 2, false, 4, 4},
    {"online_page16_f32", DType::f32, 16, false, 2, 1, 4, 1, 64, {500, 17}, 1, false, -1, -1, 2,
     Strategy::online},
    // Score variants: ALiBi's distances from each sequence's own length (bottom-right).
    {"variants_speculative_page16_f32", DType::f32, 16, false, 3, 3, 4, 2, 32, {40, 0, 17}, 3, true, -1, -1, 2,
     Strategy::automatic, true},
    {"variants_decode_page8_bf16", DType::bf16, 8, false, 2, 1, 8, 2, 64, {100, 1}, 1, false, -1, -1, 2,
     Strategy::automatic, true},
    {"variants_split_over_keys_page16_f16", DType::f16, 16, false, 1, 1, 8, 1, 64, {1000}, 1, false, -1, -1, 2,
     Strategy::automatic, true},
    // Stale NaN slots before a sliding window (decode; speculative, causal, contiguous).
    {"stale_nan_window_decode_page16_bf16", DType::bf16, 16, false, 2, 1, 8, 2, 64, {200, 70}, 1, false, 30, 0, 2,
     Strategy::automatic, false, true},
    {"stale_nan_window_speculative_contig_f16", DType::f16, 0, false, 2, 4, 8, 2, 64, {300, 90}, 4, true, 40, 0, 2,
     Strategy::automatic, false, true},
    // Hostile values: NaN in V at keys some rows see and others do not, and huge scores.
    {"hidden_nan_speculative_page16_f16", DType::f16, 16, false, 2, 4, 8, 2, 64, {40, 100}, 4, true, -1, -1, 2,
     Strategy::automatic, false, false, true},
    {"hidden_nan_window_speculative_contig_bf16", DType::bf16, 0, false, 2, 4, 4, 2, 64, {300, 90}, 4, true, 40, 0,
     2, Strategy::automatic, false, false, true},
    {"huge_decode_page16_f16", DType::f16, 16, false, 3, 1, 8, 2, 64, {15, 300, 70}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, true},
    {"huge_speculative_page16_bf16", DType::bf16, 16, false, 1, 2, 8, 1, 64, {500}, 2, true, -1, -1, 2,
     Strategy::automatic, false, false, false, true},
    // fp8 (e4m3) caches under 16-bit and fp32 q: per-tensor factors (1), per-head too (2).
    {"fp8_decode_page16_bf16", DType::bf16, 16, false, 3, 1, 8, 2, 64, {15, 1, 300}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 1},
    {"fp8_heads_decode_gqa8to1_page8_f16", DType::f16, 8, false, 4, 1, 8, 1, 64, {0, 1, 8, 37}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 2},
    {"fp8_heads_speculative_causal_page16_bf16", DType::bf16, 16, false, 3, 4, 8, 2, 64, {13, 0, 33}, 4, true, -1,
     -1, 2, Strategy::automatic, false, false, false, false, 2},
    {"fp8_heads_prefill_gemm_page64_bf16", DType::bf16, 64, false, 2, 40, 4, 2, 64, {100, 0}, 40, true, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 2},
    {"fp8_heads_contig_hnd_window_f32", DType::f32, 0, true, 2, 2, 4, 2, 32, {30, 3}, 2, false, 4, 4, 2,
     Strategy::automatic, false, false, false, false, 2},
    {"fp8_split_over_keys_page16_f16", DType::f16, 16, false, 1, 1, 8, 1, 64, {1000}, 1, false, -1, -1, 2,
     Strategy::automatic, false, false, false, false, 1},
    {"fp8_variants_decode_page8_bf16", DType::bf16, 8, false, 2, 1, 8, 2, 64, {100, 1}, 1, false, -1, -1, 2,
     Strategy::automatic, true, false, false, false, 2},
    {"fp8_hidden_nan_speculative_page16_bf16", DType::bf16, 16, false, 2, 4, 8, 2, 64, {40, 100}, 4, true, -1, -1, 2,
     Strategy::automatic, false, false, true, false, 1},
};

class KvCacheTest : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvCacheTest, MatchesReferenceOnContiguousKeys) {
  Rng rng;
  FC_TRACE_SEED(rng);
  KvFixture f(GetParam(), rng);
  f.check(GetParam().threads, GetParam().strategy);
}

INSTANTIATE_TEST_SUITE_P(Cpu, KvCacheTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The portable kernels (row ops and GEMM) through the paged source.
TEST(KvCache, ForcedPortableKernels) {
  ForceGeneric generic(true);
  Rng rng;
  FC_TRACE_SEED(rng);
  for (const KvCase& c : {kCases[1], kCases[10], kCases[25]}) {
    SCOPED_TRACE(c.name);
    KvFixture f(c, rng);
    f.check(2, Strategy::automatic);
  }
}

// A sequence with no key (length 0, nothing appended): O = 0 and lse = -inf, and every
// length 0 (no key in the whole call) too.
TEST(KvCache, EmptySequencesGiveZeroRows) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const KvCase c{"empty", DType::f32, 8, false, 2, 2, 4, 2, 16, {0, 0}, 0};
  KvFixture f(c, rng);
  f.check(2, Strategy::automatic);
  for (int64_t i = 0; i < f.ref_lse.numel(); ++i) ASSERT_EQ(f.ref_lse.get(i), -std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace fctest
