// CUDA backend vs the fp64 reference, the Hopper kernels (fwd_sm90: odd lengths, causal
// Sq != Sk, GQA/MQA and its packing, layouts, windows, lse, KV splits, varlen, persistent
// kernels over many items) and which family the dispatcher picks on a 9.0 device
// (CudaSm90.DispatcherSelects). Every test skips with a message when the GPU is not sm90.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_cuda_test_util.hpp"
#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

using flashcore::DType;
using fctest::has_suffix;
using fctest::keys_by_prefix;
using fctest::cuda_fwd::Case;
using fctest::cuda_fwd::kVarlenK;
using fctest::cuda_fwd::kVarlenQ;
using fctest::cuda_fwd::run_case;
using fctest::cuda_fwd::sm90_key;
using fctest::cuda_fwd::sm90_keys;
using fctest::cuda_fwd::varlen_case;

// A case forced onto an sm90 kernel by key.
Case sm90_case(DType dt, const std::pair<std::string, int64_t>& key) {
  Case c;
  c.dtype = dt;
  c.D = key.second;
  c.impl = key.first;
  c.expect_kernel = c.impl;
  return c;
}
// Every sm90 kernel of the dtype (fails when the build has none).
std::vector<std::pair<std::string, int64_t>> all_sm90(DType dt) {
  auto ks = sm90_keys(dt);
  EXPECT_FALSE(ks.empty()) << "no fwd_sm90 kernel for " << fctest::name(dt);
  return ks;
}

// A dtype the build leaves out (FLASHCORE_CUDA_DTYPES) has no kernels to test: skipped.
class CudaSm90 : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (fctest::keys_by_prefix("fwd_sm80_" + std::string(fctest::name(GetParam())) + "_hd", false).empty())
      GTEST_SKIP() << "this build has no " << fctest::name(GetParam()) << " kernels (FLASHCORE_CUDA_DTYPES)";
  }
};

// On a 9.0 device the dispatcher picks the Hopper kernel for what it supports (and where
// it was measured faster), and the sm80 family for the rest; impl and tile_m still force
// either family. Hopper tiles: 64 rows (two CTAs per SM) where the keys are few (hd64:
// Sk < 8192; hd128: band mask and Sk < 1024) or the taller
// tiles would leave SMs idle, else the table's first (192 rows at hd64); its persistent
// variant ("_p") where Sk <= 16384 without a band mask (hd256: 2048), Sk <= 8192 with one
// (hd64's three-per-SM tile: 1024) and there are more items than resident CTAs.
// Head dims between the instantiated ones (and D != Dv) run on the sm90 kernels of the
// smallest head dim that covers both, in place: TMA zero-fills the columns past D and Dv,
// the epilogue writes Dv columns (D 80 on hd96, 48 on hd64, (192, 128) and 136 on hd192 (or
// hd256 in a build without it), (128, 64) on hd128), with masks, GQA packing, KV splits,
// lse, unaligned-to-the-tile lengths.
TEST_P(CudaSm90, CoveringHeadDims) {
  FC_REQUIRE_SM90();
  const DType dt = GetParam();
  const std::string sm90 = "fwd_sm90_" + std::string(fctest::name(dt)) + "_hd";
  struct Dims {
    int64_t d, dv;
  };
  for (const Dims& x : {Dims{80, 80}, Dims{48, 48}, Dims{192, 128}, Dims{136, 136}, Dims{128, 64}, Dims{72, 40},
                        Dims{256, 200}})
    for (int shape = 0; shape < 3; ++shape) {
      // The first plain row of the smallest head dim of this build's sm90 rows that covers D
      // and Dv, forced by key: the dispatcher takes the sm80 family for grids too small for
      // the row (DispatcherSelects covers its choice of the covering head dim).
      int64_t hd = 0;
      std::string key;
      for (const auto& [k, kd] : keys_by_prefix(sm90, false))
        if (!fctest::has_suffix(k, "_sv") && !fctest::has_suffix(k, "_p") && kd >= std::max(x.d, x.dv) &&
            (hd == 0 || kd < hd))
          hd = kd, key = k;
      if (hd == 0) continue;  // a partial build
      Case c;
      c.dtype = dt;
      c.D = x.d;
      c.Dv = x.dv;
      if (shape == 0) {  // prefill, causal, Sq != Sk
        c.B = 2, c.H = c.Hkv = 4, c.Sq = 300, c.Sk = 457, c.causal = true;
      } else if (shape == 1) {  // decode, GQA 8:1 (packed), KV splits
        c.B = 1, c.H = 8, c.Hkv = 1, c.Sq = 1, c.Sk = 5000;
      } else {  // a window
        c.B = 1, c.H = c.Hkv = 2, c.Sq = 200, c.Sk = 200, c.wl = 33, c.wr = 5;
      }
      c.impl = key;
      c.expect_kernel = key;
      run_case(c);
    }
}

TEST_P(CudaSm90, DispatcherSelects) {
  FC_REQUIRE_SM90();
  const DType dt = GetParam();
  const std::string sm90 = "fwd_sm90_" + std::string(fctest::name(dt)) + "_hd";
  for (int64_t D : {64, 96, 128, 256}) {
    if (keys_by_prefix(sm90, false, D).empty()) {  // a partial build (FLASHCORE_CUDA_HDIMS)
      std::printf("DispatcherSelects: no %s%lld kernel in this build, head dim skipped\n", sm90.c_str(),
                  static_cast<long long>(D));
      continue;
    }
    Case c;
    c.dtype = dt;
    c.sample_heads = true;
    c.D = D;
    c.H = c.Hkv = 132;  // 132 CTAs of 128 or 192 rows: no SM idle on an H100/H200
    c.Sq = 100;
    c.Sk = 300;
    c.expect_kernel = sm90 + std::to_string(D) + (D == 64 ? "_64x" : "_128x");
    run_case(c);
    if (D != 96) {  // Sk within the bounds above and more items than resident CTAs: persistent
      c.B = 3;  // hd64: 792 items of 64 rows, more than two per SM: the three-per-SM 64x64 tile
      c.expect_kernel = sm90 + std::to_string(D) + (D == 64 ? "_64x64_s2_p" : D == 128 ? "_128x128_s2_p" : "_128x64_s2_p");
      run_case(c);
    }
  }
  // The cases below name several head dims: a partial build (FLASHCORE_CUDA_HDIMS) skips them.
  auto built = [&](std::initializer_list<int64_t> dims) {
    for (int64_t d : dims)
      if (keys_by_prefix(sm90, false, d).empty()) {
        std::printf("DispatcherSelects: no %s%lld kernel in this build, its cases skipped\n", sm90.c_str(),
                    static_cast<long long>(d));
        return false;
      }
    return true;
  };
  if (built({128, 256})) {  // hd128 without a mask: persistent up to Sk <= 16384, then the one-item-per-CTA kernel
    Case c;  // 4 query blocks x 34 heads: 136 items, more than 132 SMs
    c.dtype = dt;
    c.sample_heads = true;
    c.D = 128;
    c.H = c.Hkv = 34;
    c.Sq = 512;
    c.Sk = 16384;
    c.expect_kernel = sm90 + "128_128x128_s2_p";
    c.exact_kernel = true;
    run_case(c);
    c.Sk = 16385;
    c.expect_kernel = sm90 + "128_128x128_s2";
    run_case(c);
    c.causal = true;  // with a band mask: up to Sk <= 8192
    c.Sk = 8192;
    c.expect_kernel = sm90 + "128_128x128_s2_p";
    run_case(c);
    c.Sk = 8193;
    c.expect_kernel = sm90 + "128_128x128_s2";
    run_case(c);
    c.D = 256;  // hd256: the same with a band mask
    c.Sk = 8192;
    c.expect_kernel = sm90 + "256_128x64_s2_p";
    run_case(c);
    c.causal = false;  // without one: up to Sk <= 2048
    c.Sk = 2048;
    run_case(c);
    c.Sk = 2049;
    c.expect_kernel = sm90 + "256_128x64_s2";
    run_case(c);
  }
  if (!built({64, 128})) return;
  Case c;
  c.dtype = dt;
  c.sample_heads = true;
  c.H = c.Hkv = 132;
  c.Sq = 128;
  c.Sk = 8192;  // hd64, Sk >= 8192: the 192-row tile
  c.expect_kernel = sm90 + "64_192x";
  run_case(c);
  c.Sk = 4096;  // hd64, Sk < 8192: 64-row tiles, without a mask, causal or with a window
  c.expect_kernel = sm90 + "64_64x";
  run_case(c);
  c.causal = true;
  run_case(c);
  c.B = 2;  // hd64 causal, Sk < 16384, more than two 64-row items per SM (266): 64x64, not persistent
  c.H = c.Hkv = 133;
  c.Sq = 64;
  c.Sk = 8192;
  c.exact_kernel = true;
  c.expect_kernel = sm90 + "64_64x64_s2";
  run_case(c);
  c.exact_kernel = false;
  c.expect_kernel = sm90 + "64_64x";
  c.B = 1;
  c.H = c.Hkv = 132;
  c.Sq = 128;
  c.Sk = 4096;
  c.causal = false;
  c.wl = 40;
  run_case(c);
  c.Sk = 1000;  // hd128 with a window, Sk < 1024: 64-row tiles
  c.D = 128;
  c.expect_kernel = sm90 + "128_64x";
  run_case(c);
  c.wl = -1;
  c.causal = true;  // causal, Sk < 1024: hd64 64-row tiles, hd128 the 128-row tile
  c.expect_kernel = sm90 + "128_128x";
  run_case(c);
  c.D = 64;
  c.expect_kernel = sm90 + "64_64x";
  run_case(c);
  c.causal = false;
  c.H = c.Hkv = 8;  // B1 H8 S512: 64 CTAs of 64 rows, two per SM (4 key tiles: no KV splits)
  c.Sq = c.Sk = 512;
  c.exact_kernel = true;
  c.expect_kernel = sm90 + "64_64x128_s2";
  run_case(c);
  {  // decode B1 H32/8 Sk4096 hd128: 8 packed items, 64 key tiles each: 16 KV splits
    Case d;
    d.dtype = dt;
    d.D = 128;
    d.H = 32;
    d.Hkv = 8;
    d.Sq = 1;
    d.Sk = 4096;
    d.expect_kernel = sm90 + "128_64x64_s2+gqa4+kv16";
    d.exact_kernel = true;
    run_case(d);
    d.B = 8;  // 64 items: two splits of 64 key tiles
    d.expect_kernel = sm90 + "128_64x64_s2+gqa4+kv2";
    run_case(d);
    d.Sq = 16;  // packed rows fill the 64-row tile: still one CTA per SM counted, 2 splits
    run_case(d);
    d.Sq = 1;
    d.B = 16;  // 128 items: not split
    d.expect_kernel = sm90 + "128_64x64_s2+gqa4";
    run_case(d);
    d.B = 1;
    d.Sk = 1000;  // 16 key tiles: 4 splits
    d.expect_kernel = sm90 + "128_64x64_s2+gqa4+kv4";
    run_case(d);
    d.Sk = 900;  // 15 key tiles: not split
    d.expect_kernel = sm90 + "128_64x64_s2+gqa4";
    run_case(d);
  }
  {  // varlen: the rule reads the mean lengths (32 sequences of 512: 64-row persistent tiles, three per SM)
    std::vector<int32_t> cu(33);
    for (size_t i = 0; i < cu.size(); ++i) cu[i] = int32_t(512 * i);
    varlen_case(dt, 64, "", 4, cu, cu, sm90 + "64_64x64_s2_p");
  }
  c.exact_kernel = false;
  c.H = c.Hkv = 132;
  c.Sq = 100;
  c.Sk = 200;
  if (built({96, 128})) {  // D, Dv below a row's head dim: the smallest covering sm90 row
    c.D = 80;
    c.expect_kernel = sm90 + "96_";
    run_case(c);
    c.D = 128;
    c.Dv = 64;  // D != Dv
    c.expect_kernel = sm90 + "128_";
    run_case(c);
    c.Dv = -1;
  }
  c.D = 128;
  c.expect_kernel = "fwd_sm80_";
  c.tile_m = 64;  // a forced tile stays with the sm80 family
  c.tile_n = 64;
  run_case(c);
  c.tile_m = c.tile_n = 0;
  c.impl = "fwd_sm80_" + std::string(fctest::name(dt)) + "_hd128_128x32_w4_o2";  // forced by key
  c.expect_kernel = c.impl;
  run_case(c);
}

TEST_P(CudaSm90, OddLengths) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam()))
    for (int64_t S : {1, 7, 1000, 4097})
      for (bool causal : {false, true}) {
        // the fp64 reference is slow at 4097: once per head dim, causal at hd >= 128
        if (S == 4097 && (causal != (key.second >= 128) || key.first != sm90_key(GetParam(), key.second))) continue;
        Case c = sm90_case(GetParam(), key);
        c.Sq = c.Sk = S;
        c.H = c.Hkv = S == 4097 ? 1 : 2;
        c.causal = causal;
        run_case(c);
      }
}

TEST_P(CudaSm90, CausalUnequalLengths) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam()))
    for (auto [Sq, Sk] : {std::pair<int64_t, int64_t>{100, 300}, {300, 100}, {1, 513}, {513, 1}, {129, 4000},
                          {1000, 1500}}) {
      Case c = sm90_case(GetParam(), key);
      c.Sq = Sq;
      c.Sk = Sk;
      c.causal = true;
      run_case(c);  // Sq > Sk: the first Sq - Sk rows see no key (O = 0, lse = -inf)
    }
}

TEST_P(CudaSm90, GqaLayoutsWindows) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam())) {
    Case c = sm90_case(GetParam(), key);
    c.B = 3;
    c.H = 8;
    c.Hkv = 2;
    c.Sq = 150;
    c.Sk = 390;
    run_case(c);
    c.Hkv = 1;  // MQA
    c.causal = true;
    run_case(c);
    c.bhsd = true;  // [B, H, S, D] memory order, padded rows
    c.pad = 8;
    run_case(c);
    c.scale = -0.3f;
    c.lse = false;
    run_case(c);
    c.out_pad = 2;  // output rows 4-byte aligned only: no TMA map for O (register stores)
    run_case(c);
    c.out_pad = -1;
    c.scale = 0.f;
    c.lse = true;
    c.bhsd = false;
    c.pad = 0;
    for (auto [wl, wr, causal] : {std::tuple<int64_t, int64_t, bool>{50, 10, false}, {64, -1, true}, {0, 0, false}}) {
      c.wl = wl;
      c.wr = wr;
      c.causal = causal;
      run_case(c);
    }
  }
}

// GQA packing (Sq < 64, G = H / Hkv a power of two <= 64): the G query heads of a KV head
// share a tile; every sm90 kernel (forced by key: the packing is a layout choice, the
// name shows "+gqa<G>"), decode and short prefixes, causal with Sq != Sk, lse, BHSD with
// padded rows; G = 3 (not packed) and an output without 16-byte rows (not packed) stay
// correct on the unpacked path.
TEST_P(CudaSm90, GqaPackedShortQueries) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam())) {
    Case c = sm90_case(GetParam(), key);
    c.B = 2;
    c.H = 8;
    c.Hkv = 2;
    for (auto [Sq, Sk, causal] : {std::tuple<int64_t, int64_t, bool>{1, 1, false}, {1, 777, false}, {5, 300, true},
                                  {33, 130, true}, {63, 1000, false}, {40, 20, true}}) {
      c.Sq = Sq;
      c.Sk = Sk;
      c.causal = causal;
      c.expect_kernel = key.first + "+gqa4";
      c.exact_kernel = true;
      run_case(c);
    }
    c.H = 32;  // G = 32: 64-row tiles hold two queries
    c.Hkv = 1;
    c.Sq = 3;
    c.Sk = 200;
    c.expect_kernel = key.first + "+gqa32";
    run_case(c);
    c.bhsd = true;  // [B, H, S, D] memory order, padded rows
    c.pad = 8;
    c.H = 16;
    c.Hkv = 4;
    c.causal = true;
    c.expect_kernel = key.first + "+gqa4";
    run_case(c);
    c.bhsd = false;
    c.pad = 0;
    c.out_pad = 2;  // O rows not 16-byte aligned: packed, O stored from registers
    run_case(c);
    c.out_pad = -1;
    c.expect_kernel = key.first;
    c.H = 6;  // G = 3: not packed
    c.Hkv = 2;
    run_case(c);
    // Varlen, packed (the longest sequence has 33 queries; O from registers): decode rows,
    // an empty sequence, causal with fewer keys than queries (rows that see no key).
    varlen_case(GetParam(), key.second, key.first, 8, {0, 1, 4, 4, 37, 38}, {0, 300, 301, 900, 1000, 1700},
                key.first + "+gqa4");
    varlen_case(GetParam(), key.second, key.first, 8, {0, 1, 2, 3, 4}, {0, 1, 130, 513, 1025}, key.first + "+gqa4", 3);
  }
}

// KV splits (flash-decoding: the dispatcher's choice where the items fill at most half the
// SMs and have many key tiles; forced here by "<key>+kv<N>"): every 16-bit sm90 kernel
// that is not persistent, decode with GQA packing, short queries, causal with Sq != Sk
// (rows that see no key), more splits than key tiles (empty splits), windows, MQA, BHSD
// with padded rows, O rows only 4-byte aligned, no lse, peaked scores.
TEST_P(CudaSm90, KvSplits) {
  FC_REQUIRE_SM90();
  const DType dt = GetParam();
  for (const auto& key : all_sm90(dt)) {
    if (has_suffix(key.first, "_p")) continue;
    Case c = sm90_case(dt, key);
    c.exact_kernel = true;
    auto run_kv = [&](int n, const std::string& packed = "") {
      c.impl = key.first + "+kv" + std::to_string(n);
      c.expect_kernel = key.first + packed + "+kv" + std::to_string(n);
      run_case(c);
    };
    c.B = 2;
    c.H = 8;
    c.Hkv = 2;
    c.Sq = 1;  // decode, 4 query heads per KV head packed
    c.Sk = 1000;
    run_kv(5, "+gqa4");
    run_kv(40, "+gqa4");  // more splits than the combine merges at once (16), some empty
    c.out_pad = 2;  // packed rows, O rows only 4-byte aligned
    run_kv(5, "+gqa4");
    c.out_pad = -1;
    // Varlen decode and short prefixes (packed), rows past the last sequence untouched;
    // varlen with long queries (not packed), an empty sequence.
    varlen_case(dt, key.second, key.first + "+kv5", 8, {0, 1, 2, 3, 4}, {0, 1, 130, 1025, 2000},
                key.first + "+gqa4+kv5", 3);
    varlen_case(dt, key.second, key.first + "+kv5", 8, {0, 1, 2, 3, 4}, {0, 1, 130, 1025, 2000},
                key.first + "+gqa4+kv5", 3, true);  // bounds given, in a CUDA graph
    varlen_case(dt, key.second, key.first + "+kv3", 8, {0, 1, 4, 4, 37, 38}, {0, 300, 301, 900, 1000, 1700},
                key.first + "+gqa4+kv3");
    varlen_case(dt, key.second, key.first + "+kv4", 4, kVarlenQ, kVarlenK, key.first + "+kv4", 2);
    c.Sq = 3;
    c.Sk = 130;
    c.causal = true;
    run_kv(16, "+gqa4");  // more splits than key tiles
    c.causal = false;
    c.H = c.Hkv = 2;
    for (auto [Sq, Sk, causal] : {std::tuple<int64_t, int64_t, bool>{1, 1, false}, {7, 700, true}, {300, 100, true},
                                  {100, 1500, true}, {129, 4000, false}}) {
      c.Sq = Sq;
      c.Sk = Sk;
      c.causal = causal;
      run_kv(3);
    }
    c.causal = false;
    c.B = 3;  // MQA, BHSD with padded rows, negative scale without lse, narrow O rows
    c.H = 8;
    c.Hkv = 1;
    c.Sq = 70;
    c.Sk = 900;
    c.bhsd = true;
    c.pad = 8;
    run_kv(4);
    c.scale = -0.3f;
    c.lse = false;
    c.out_pad = 2;
    run_kv(7);
    c.scale = 0.f;
    c.lse = true;
    c.out_pad = -1;
    c.bhsd = false;
    c.pad = 0;
    c.Hkv = 2;
    for (auto [wl, wr, causal] : {std::tuple<int64_t, int64_t, bool>{50, 10, false}, {64, -1, true}, {0, 0, false}}) {
      c.wl = wl;
      c.wr = wr;
      c.causal = causal;
      run_kv(6);
    }
    c.wl = c.wr = -1;
    c.B = 1;  // peaked scores
    c.H = c.Hkv = 2;
    c.Sq = 40;
    c.Sk = 2000;
    c.scale = 4.f;
    c.causal = true;
    run_kv(8);
  }
}

// Small cases for the compute-sanitizer runs (run_on_gpu.sh: memcheck, racecheck, synccheck).
TEST_P(CudaSm90, Small) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam()))
    for (auto [Sq, Sk, causal] : {std::tuple<int64_t, int64_t, bool>{1, 1, false}, {70, 70, true}, {200, 300, false},
                                  {260, 130, true}}) {
      Case c = sm90_case(GetParam(), key);
      c.B = 2;
      c.H = 4;
      c.Hkv = 2;
      c.Sq = Sq;
      c.Sk = Sk;
      c.causal = causal;
      run_case(c);
    }
}

// Variable-length batches on every sm90 kernel (TMA over the packed tensors).
TEST_P(CudaSm90, Varlen) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam())) varlen_case(GetParam(), key.second, key.first);
}

// More work items (query blocks x heads x batch) than SMs, so each persistent CTA walks
// several, of different lengths (causal, Sq != Sk), with GQA and lse; and varlen with
// many heads, where the items past a short sequence's end are skipped (every sm90 kernel,
// the persistent "_p" ones being the point). B = 3: 3 to 6 items per CTA on 132 SMs (2 with
// B = 1), so each CTA's Q buffer, ring phases and ping-pong turns carry over several items.
// An output TMA cannot map (4-byte aligned rows) and varlen batches (sequences' rows
// copied out by the threads) on every kernel too.
// The persistent kernels' causal rows run again under the other item numberings
// (FLASHCORE_SM90_ITEM_GROUP forces the group: 4, and all 192 head-batches, where the rule
// takes 1 here): each (query block, head) is computed once, whatever the items' order.
TEST_P(CudaSm90, PersistentManyItems) {
  FC_REQUIRE_SM90();
  // Causal with Sq < Sk (key tiles per item vary: odd and even counts), without a mask
  // (three per item), and causal with Sq > Sk (the first query rows see no key: items
  // without key tiles among a CTA's items).
  const int shapes[3][3] = {{400, 500, 1}, {300, 333, 0}, {500, 400, 1}};
  for (const auto& key : all_sm90(GetParam())) {
    for (const auto& sh : shapes)
      for (const char* group : {"", "4", "192"}) {
        if (group[0] != '\0' && (sh[2] == 0 || !has_suffix(key.first, "_p"))) continue;
        SCOPED_TRACE(std::string("item group ") + (group[0] != '\0' ? group : "(the rule)"));
        Case c = sm90_case(GetParam(), key);
        c.B = 3;
        c.H = 64;
        c.Hkv = 16;
        c.Sq = sh[0];
        c.Sk = sh[1];
        c.causal = sh[2] != 0;
        if (group[0] != '\0') setenv("FLASHCORE_SM90_ITEM_GROUP", group, 1);
        run_case(c);
        unsetenv("FLASHCORE_SM90_ITEM_GROUP");
      }
    // O rows 4-byte aligned only: no TMA map; the rows copied out of shared memory by the
    // threads (4-byte pieces), item after item in the persistent kernels.
    Case c = sm90_case(GetParam(), key);
    c.B = 3;
    c.H = 64;
    c.Hkv = 16;
    c.Sq = 500;
    c.Sk = 400;
    c.causal = true;
    c.out_pad = 2;
    run_case(c);
    varlen_case(GetParam(), key.second, key.first, 64);
  }
}

// Wide score spread (see CudaDtype.PeakedScores) on every sm90 kernel, causal and not.
TEST_P(CudaSm90, PeakedScores) {
  FC_REQUIRE_SM90();
  for (const auto& key : all_sm90(GetParam()))
    for (bool causal : {false, true}) {
      Case c = sm90_case(GetParam(), key);
      c.Sq = causal ? 700 : 130;
      c.Sk = 900;
      c.scale = 4.f;
      c.causal = causal;
      run_case(c);
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaSm90, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& i) { return fctest::name(i.param); });

}  // namespace
