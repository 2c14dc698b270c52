// The CUDA backend's kernel-choice policy (src/cuda/policy.cpp) on a table of shapes, and the
// backward's and the KV cache's choices, without a GPU: built in every configuration (CPU-only
// CI too). The instances are every row of
// src/cuda/instances.inc (policy_instances.inc, written by tests/cuda/CMakeLists.txt with the
// build's own key rules), as a release build with every arch, dtype and head dim has them.
// Each row's expected kernel, GQA packing and KV split count follow the rules as written in
// policy.cpp (the comments by a row say which branch decides); they are also what the
// backend picked before the policy was moved out of backend.cpp (2026-11-29: the old and the
// new code agreed on 300,000 random problems on five devices and two instance tables).
#include <gtest/gtest.h>

#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "cuda/policy.hpp"

namespace flashcore::cuda {
namespace {

const InstanceInfo kAll[] = {
#define FC_SM80_INST FC_SM80_INSTANCE_INFO
#define FC_SM90_INST FC_SM90_INSTANCE_INFO
#include "policy_instances.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};

// Devices: multiprocessors and the opt-in shared memory per block.
constexpr DeviceFacts kH200{9, 0, 232448, 132};
constexpr DeviceFacts kA100{8, 0, 166912, 108};
constexpr DeviceFacts kSm86{8, 6, 101376, 84};

enum class Mask { none, causal, local, both };  // local: a window of 256 keys left, 0 right; both: 128 each side

struct Row {
  const char* name;
  DeviceFacts dev;
  DType dtype;
  int64_t batch, heads, kv_heads, sq, sk, d, dv;
  Mask mask;
  bool varlen;  // equal lengths: p.sq, p.sk the packed totals
  int tile_m, tile_n;
  const char* want;  // key, "simt" (the FFMA kernel), "none" (e4m3: no row), or "error:<why>"
  int pack, splits;
};

core::AttentionProblem problem(const Row& r) {
  static const int32_t cu[2] = {0, 0};  // varlen: only its presence matters to the policy
  core::AttentionProblem p;
  p.dtype = r.dtype;
  p.out_dtype = r.dtype == DType::e4m3 ? DType::bf16 : r.dtype;
  p.batch = r.batch;
  p.heads = r.heads;
  p.kv_heads = r.kv_heads;
  p.d = r.d;
  p.dv = r.dv;
  p.sq = r.varlen ? r.sq * r.batch : r.sq;
  p.sk = r.varlen ? r.sk * r.batch : r.sk;
  if (r.varlen) p.cu_q = p.cu_k = cu;
  p.causal = r.mask == Mask::causal;
  if (r.mask == Mask::local) p.window_left = 256, p.window_right = 0;
  if (r.mask == Mask::both) p.window_left = p.window_right = 128;
  p.tile_m = r.tile_m;
  p.tile_n = r.tile_n;
  return p;
}

// The policy's answer in the rows' terms.
std::string choose(const Row& r, InstanceList list, int* pack, int* splits) {
  const core::AttentionProblem p = problem(r);
  KernelChoice c;
  if (r.dtype == DType::e4m3) {
    c = choose_kernel_fp8(p, r.sq, r.sk, r.dev, list);
    if (c.inst == nullptr) return "none";
  } else {
    const Choice16 k = choose_kernel(p, r.sq, r.sk, r.dev, list);
    switch (k.sm80.why) {
      case Sm80Pick::Why::ok: break;
      case Sm80Pick::Why::no_head_dim: return "error:no_head_dim";
      case Sm80Pick::Why::no_tile: return "error:no_tile";
      case Sm80Pick::Why::no_fit: return "error:no_fit";
    }
    c = k.kernel;
    if (c.inst == nullptr) return "simt";
  }
  *pack = c.pack_shift;
  *splits = c.kv_splits;
  return c.inst->key;
}

const DType f16 = DType::f16, bf16 = DType::bf16, f32 = DType::f32, e4m3 = DType::e4m3;
const Row kRows[] = {
    // name, device, dtype, B, H, Hkv, Sq, Sk, D, Dv, mask, varlen, tile, want, pack, splits
    // 16-bit on a Hopper GPU: the sm90 rule.
    {"hd128 S4096: 128-row tile, persistent (Sk <= 16384, items > SMs)", kH200, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_f16_hd128_128x128_s2_p", 0, 1},
    {"hd128 S32768: 128-row tile, not persistent (Sk > 16384)", kH200, f16, 1, 8, 8, 32768, 32768, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_f16_hd128_128x128_s2", 0, 1},
    {"hd128 causal S2048: persistent (banded, Sk <= 8192)", kH200, f16, 4, 16, 16, 2048, 2048, 128, 128, Mask::causal, false, 0, 0, "fwd_sm90_f16_hd128_128x128_s2_p", 0, 1},
    {"hd128 causal S16384: not persistent (banded, Sk > 8192)", kH200, bf16, 1, 16, 16, 16384, 16384, 128, 128, Mask::causal, false, 0, 0, "fwd_sm90_bf16_hd128_128x128_s2", 0, 1},
    {"hd128 local window S512: 64-row tile (windowed, Sk < 1024), persistent", kH200, f16, 4, 16, 16, 512, 512, 128, 128, Mask::local, false, 0, 0, "fwd_sm90_f16_hd128_64x64_s2_p", 0, 1},
    {"hd128 window both sides S2048: 128-row tile (Sk >= 1024)", kH200, f16, 4, 16, 16, 2048, 2048, 128, 128, Mask::both, false, 0, 0, "fwd_sm90_f16_hd128_128x128_s2_p", 0, 1},
    {"hd128 B1 H4 S512: 128-row items below the SMs, 64-row tile", kH200, f16, 1, 4, 4, 512, 512, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_f16_hd128_64x64_s2", 0, 1},
    {"hd64 S1024: three-CTA 64x64 tile (items > 2 per SM), persistent (Sk <= 1024)", kH200, f16, 16, 32, 32, 1024, 1024, 64, 64, Mask::none, false, 0, 0, "fwd_sm90_f16_hd64_64x64_s2_p", 0, 1},
    {"hd64 S2048: three-CTA 64x64 tile, not persistent (Sk > 1024)", kH200, f16, 16, 32, 32, 2048, 2048, 64, 64, Mask::none, false, 0, 0, "fwd_sm90_f16_hd64_64x64_s2", 0, 1},
    {"hd64 causal S8192: 64-row tile (banded, Sk < 16384)", kH200, bf16, 2, 32, 32, 8192, 8192, 64, 64, Mask::causal, false, 0, 0, "fwd_sm90_bf16_hd64_64x64_s2", 0, 1},
    {"hd64 S16384: 192-row tile (no persistent variant)", kH200, f16, 2, 32, 32, 16384, 16384, 64, 64, Mask::none, false, 0, 0, "fwd_sm90_f16_hd64_192x128_s2", 0, 1},
    {"hd64 causal S2048 B1 H4: 128-row items below the SMs, 64-row tile", kH200, f16, 1, 4, 4, 2048, 2048, 64, 64, Mask::causal, false, 0, 0, "fwd_sm90_f16_hd64_64x128_s2", 0, 1},
    {"hd64 B1 H8 S512: few items, the two-CTA 64x128 tile", kH200, f16, 1, 8, 8, 512, 512, 64, 64, Mask::none, false, 0, 0, "fwd_sm90_f16_hd64_64x128_s2", 0, 1},
    {"hd64 B1 H8 Sq512 Sk16384: 4 KV splits", kH200, f16, 1, 8, 8, 512, 16384, 64, 64, Mask::none, false, 0, 0, "fwd_sm90_f16_hd64_64x128_s2", 0, 4},
    {"hd96 S2048: 128-row tile (no persistent variant)", kH200, f16, 4, 16, 16, 2048, 2048, 96, 96, Mask::none, false, 0, 0, "fwd_sm90_f16_hd96_128x128_s2", 0, 1},
    {"hd256 S4096: not persistent (Sk > 2048)", kH200, bf16, 2, 8, 8, 4096, 4096, 256, 256, Mask::none, false, 0, 0, "fwd_sm90_bf16_hd256_128x64_s2", 0, 1},
    {"hd256 S2048: persistent (Sk <= 2048)", kH200, bf16, 4, 16, 16, 2048, 2048, 256, 256, Mask::none, false, 0, 0, "fwd_sm90_bf16_hd256_128x64_s2_p", 0, 1},
    {"decode H32/8 Sk8192: GQA packing (4), 64-row tile, 16 KV splits", kH200, f16, 1, 32, 8, 1, 8192, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_f16_hd128_64x64_s2", 2, 16},
    {"B8 H32/8 Sq16 Sk4096: packed rows fill a 64-row tile, 2 KV splits", kH200, bf16, 8, 32, 8, 16, 4096, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_bf16_hd128_64x64_s2", 2, 2},
    {"H24/8 Sq16: G = 3 is no power of two, no packing; 128-row items cover the SMs", kH200, f16, 8, 24, 8, 16, 4096, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_f16_hd128_128x128_s2_p", 0, 1},
    {"varlen causal, mean 1024: 128-row tile, persistent", kH200, f16, 8, 16, 16, 1024, 1024, 128, 128, Mask::causal, true, 0, 0, "fwd_sm90_f16_hd128_128x128_s2_p", 0, 1},
    {"varlen decode H32/8 Sk4096: packed, split", kH200, f16, 4, 32, 8, 1, 4096, 128, 128, Mask::none, true, 0, 0, "fwd_sm90_f16_hd128_64x64_s2", 2, 4},
    // 16-bit problems the sm90 rows do not take: the sm80 family.
    {"D 128 != Dv 64: the hd128 sm90 rows (Dv zero-filled)", kH200, f16, 4, 16, 16, 2048, 2048, 128, 64, Mask::none, false, 0, 0, "fwd_sm90_f16_hd128_128x128_s2_p", 0, 1},
    {"D 80: the hd96 sm90 rows", kH200, f16, 4, 16, 16, 2048, 2048, 80, 80, Mask::none, false, 0, 0, "fwd_sm90_f16_hd96_128x128_s2", 0, 1},
    {"D 192, Dv 128 (DeepSeek prefill): the hd192 sm90 rows, persistent (banded, Sk <= 8192)", kH200, bf16, 2, 8, 8, 4096, 4096, 192, 128, Mask::causal, false, 0, 0, "fwd_sm90_bf16_hd192_128x64_s2_p", 0, 1},
    {"D 136: the hd192 sm90 rows, not persistent (Sk > 2048)", kH200, f16, 2, 8, 8, 4096, 4096, 136, 136, Mask::none, false, 0, 0, "fwd_sm90_f16_hd192_128x64_s2", 0, 1},
    {"D 48 decode: the hd64 sm90 rows, packed", kH200, f16, 1, 32, 8, 1, 8192, 48, 48, Mask::none, false, 0, 0, "fwd_sm90_f16_hd64_64x128_s2", 2, 16},
    {"D 264: no CUDA kernel", kH200, f16, 1, 8, 8, 512, 512, 264, 264, Mask::none, false, 0, 0, "error:no_head_dim", 0, 1},
    {"forced tile 64x64: sm80 family", kH200, f16, 4, 16, 16, 2048, 2048, 128, 128, Mask::none, false, 64, 64, "fwd_sm80_f16_hd128_64x64_w4_o2", 0, 1},
    {"forced tile 99x1: none", kH200, f16, 4, 16, 16, 2048, 2048, 128, 128, Mask::none, false, 99, 1, "error:no_tile", 0, 1},
    {"A100 hd128 S2048: first sm80 row", kA100, f16, 4, 16, 16, 2048, 2048, 128, 128, Mask::none, false, 0, 0, "fwd_sm80_f16_hd128_128x32_w4_o2", 0, 1},
    {"A100 hd128 causal S2048: 64-row sm80 tile (banded, Sk < 12288)", kA100, f16, 4, 16, 16, 2048, 2048, 128, 128, Mask::causal, false, 0, 0, "fwd_sm80_f16_hd128_64x64_w4_o2", 0, 1},
    {"A100 hd128 causal S16384: first sm80 row", kA100, bf16, 1, 16, 16, 16384, 16384, 128, 128, Mask::causal, false, 0, 0, "fwd_sm80_bf16_hd128_128x32_w4_o2", 0, 1},
    {"A100 hd64 B1 H4 S512: few CTAs, 64-row sm80 tile", kA100, f16, 1, 4, 4, 512, 512, 64, 64, Mask::none, false, 0, 0, "fwd_sm80_f16_hd64_64x64_w4_o2", 0, 1},
    {"A100 decode H32/8: no packing on sm80", kA100, f16, 1, 32, 8, 1, 8192, 128, 128, Mask::none, false, 0, 0, "fwd_sm80_f16_hd128_64x64_w4_o2", 0, 1},
    {"A100 hd256: 128x32 (128x64 needs 192 KiB)", kA100, f16, 4, 16, 16, 2048, 2048, 256, 256, Mask::none, false, 0, 0, "fwd_sm80_f16_hd256_128x32_w8_o1", 0, 1},
    {"sm86 hd256: 64x32 (the 128-row tiles need 128 KiB or more)", kSm86, f16, 4, 16, 16, 2048, 2048, 256, 256, Mask::none, false, 0, 0, "fwd_sm80_f16_hd256_64x32_w4_o2", 0, 1},
    // fp32: TF32 rows where they fit, else the FFMA kernel.
    {"f32 hd128 H200: TF32 64x32", kH200, f32, 4, 16, 16, 2048, 2048, 128, 128, Mask::none, false, 0, 0, "fwd_sm80_tf32_hd128_64x32_w4_o2", 0, 1},
    {"f32 hd256 H200: TF32 128x16 (192 KiB fits)", kH200, f32, 4, 16, 16, 2048, 2048, 256, 256, Mask::none, false, 0, 0, "fwd_sm80_tf32_hd256_128x16_w8_o1", 0, 1},
    {"f32 hd256 A100: TF32 32x16", kA100, f32, 4, 16, 16, 2048, 2048, 256, 256, Mask::none, false, 0, 0, "fwd_sm80_tf32_hd256_32x16_w2_o2", 0, 1},
    {"f32 D 40: the hd64 TF32 row", kH200, f32, 4, 16, 16, 2048, 2048, 40, 40, Mask::none, false, 0, 0, "fwd_sm80_tf32_hd64_128x64_w4_o2", 0, 1},
    {"f32 forced tile 99x1: none", kH200, f32, 4, 16, 16, 2048, 2048, 128, 128, Mask::none, false, 99, 1, "error:no_tile", 0, 1},
    // e4m3 (Hopper only).
    {"e4m3 hd128 S8192: 128x192, not persistent (Sk > 4096)", kH200, e4m3, 2, 16, 16, 8192, 8192, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd128_128x192_s3", 0, 1},
    {"e4m3 hd128 S4096: 128x192 persistent", kH200, e4m3, 4, 16, 16, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd128_128x192_s3_p", 0, 1},
    {"e4m3 hd128 S1024: 128x128 (Sk < 2048), persistent", kH200, e4m3, 4, 16, 16, 1024, 1024, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd128_128x128_s2_p", 0, 1},
    {"e4m3 hd128 causal S4096: 128x128 (banded, Sk < 8192), persistent", kH200, e4m3, 2, 16, 16, 4096, 4096, 128, 128, Mask::causal, false, 0, 0, "fwd_sm90_e4m3_hd128_128x128_s2_p", 0, 1},
    {"e4m3 hd128 causal S16384: 128x192, not persistent", kH200, e4m3, 1, 16, 16, 16384, 16384, 128, 128, Mask::causal, false, 0, 0, "fwd_sm90_e4m3_hd128_128x192_s3", 0, 1},
    {"e4m3 hd128 B1 H4 S1024: 128-row items leave SMs idle, 64x128", kH200, e4m3, 1, 4, 4, 1024, 1024, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd128_64x128_s2", 0, 1},
    {"e4m3 decode H32/8 Sk4096: packed rows in one tile, _vt, 8 KV splits", kH200, e4m3, 1, 32, 8, 1, 4096, 128, 128, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd128_64x128_s2_vt", 2, 8},
    {"e4m3 hd256 S2048: persistent 128x128", kH200, e4m3, 2, 16, 16, 2048, 2048, 256, 256, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd256_128x128_s2_p", 0, 1},
    {"e4m3 hd256 S8192: 128x128, not persistent", kH200, e4m3, 2, 16, 16, 8192, 8192, 256, 256, Mask::none, false, 0, 0, "fwd_sm90_e4m3_hd256_128x128_s2", 0, 1},
    {"e4m3 hd64: no row", kH200, e4m3, 2, 16, 16, 2048, 2048, 64, 64, Mask::none, false, 0, 0, "none", 0, 1},
};

TEST(CudaPolicy, TableOfShapes) {
  for (const Row& r : kRows) {
    int pack = 0, splits = 1;
    const std::string got = choose(r, kAll, &pack, &splits);
    EXPECT_EQ(got, r.want) << r.name;
    if (got == r.want && got.rfind("fwd_", 0) == 0) {
      EXPECT_EQ(pack, r.pack) << r.name << ": GQA packing (log2)";
      EXPECT_EQ(splits, r.splits) << r.name << ": KV splits";
    }
  }
}

// Every key a row expects is in the table (a renamed or dropped row shows here, not as a
// confusing mismatch).
TEST(CudaPolicy, ExpectedKeysExist) {
  for (const Row& r : kRows) {
    if (std::strncmp(r.want, "fwd_", 4) != 0) continue;
    bool found = false;
    for (const InstanceInfo& i : kAll) found = found || std::strcmp(i.key, r.want) == 0;
    EXPECT_TRUE(found) << r.want;
  }
}

// Every key follows docs/naming.md's CUDA grammar and says what its row holds.
TEST(CudaPolicy, KeysFollowTheGrammar) {
  const std::regex sm80(R"(^fwd_sm80_(f16|bf16|tf32)_hd(\d+)_(\d+)x(\d+)_w(\d+)_o(\d+)(_s(\d+))?$)");
  const std::regex sm90(R"(^fwd_sm90_(f16|bf16|e4m3)_hd(\d+)_(\d+)x(\d+)_s(\d+)(_p|_vt|_sv|_p_sv)?$)");
  for (const InstanceInfo& i : kAll) {
    std::cmatch m;
    const bool ok = std::regex_match(i.key, m, i.arch == 80 ? sm80 : sm90);
    ASSERT_TRUE(ok) << i.key;
    const char* dt = i.dtype == DType::f32 ? "tf32" : to_string(i.dtype);
    EXPECT_EQ(m[1].str(), dt) << i.key;
    EXPECT_EQ(std::stoi(m[2].str()), i.head_dim) << i.key;
    EXPECT_EQ(std::stoi(m[3].str()), i.block_m) << i.key;
    EXPECT_EQ(std::stoi(m[4].str()), i.block_n) << i.key;
    if (i.arch == 80) {
      EXPECT_EQ(std::stoi(m[5].str()), i.warps) << i.key;
      EXPECT_EQ(m[8].matched ? std::stoi(m[8].str()) : 2, i.stages) << i.key;
      EXPECT_FALSE(m[8].matched && i.stages == 2) << i.key << ": _s2 is implied";
    } else {
      EXPECT_EQ(std::stoi(m[5].str()), i.stages) << i.key;
      EXPECT_EQ(m[6].str() == "_p" || m[6].str() == "_p_sv", i.persistent) << i.key;
      EXPECT_EQ(m[6].str() == "_vt", i.vt_in) << i.key;
      EXPECT_EQ(m[6].str() == "_sv" || m[6].str() == "_p_sv", i.score_mod) << i.key;
    }
    for (const InstanceInfo& j : kAll) EXPECT_TRUE(&i == &j || std::strcmp(i.key, j.key) != 0) << i.key << " twice";
  }
}

// Builds with some axes switched off: the policy takes what is there.
TEST(CudaPolicy, FilteredTables) {
  std::vector<InstanceInfo> no90, hd128;
  for (const InstanceInfo& i : kAll) {
    if (i.arch == 80) no90.push_back(i);
    if (i.head_dim == 128) hd128.push_back(i);
  }
  int pack = 0, splits = 1;
  const Row hopper{"", kH200, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(hopper, no90, &pack, &splits), "fwd_sm80_f16_hd128_128x32_w4_o2") << "no sm90 rows: sm80 on Hopper";
  const Row hd64{"", kH200, f16, 4, 32, 32, 4096, 4096, 64, 64, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(hd64, hd128, &pack, &splits), "fwd_sm90_f16_hd128_128x128_s2_p") << "hd64 on the hd128 rows (zero-filled)";
  const Row hd256{"", kH200, f16, 4, 32, 32, 4096, 4096, 256, 256, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(hd256, hd128, &pack, &splits), "error:no_head_dim");
  const Row f32_256{"", kH200, f32, 4, 32, 32, 4096, 4096, 256, 256, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(f32_256, hd128, &pack, &splits), "simt") << "f32 without a covering row: the FFMA kernel";
  const Row fp8{"", kH200, e4m3, 4, 16, 16, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(fp8, no90, &pack, &splits), "none");
  // A 9.0 device with too little shared memory for the sm90 rows: sm80 family.
  const Row small{"", {9, 0, 70000, 132}, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(small, kAll, &pack, &splits), "fwd_sm80_f16_hd128_128x32_w4_o2");
  // No sm80 row fits the device's shared memory at all.
  const Row tiny{"", {8, 0, 16384, 108}, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1};
  EXPECT_EQ(choose(tiny, kAll, &pack, &splits), "error:no_fit");
}

TEST(CudaPolicy, Sm90Refusal) {
  const InstanceInfo* p128 = nullptr;
  for (const InstanceInfo& i : kAll)
    if (std::strcmp(i.key, "fwd_sm90_f16_hd128_128x128_s2_p") == 0) p128 = &i;
  ASSERT_NE(p128, nullptr);
  core::AttentionProblem p = problem({"", kH200, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1});
  EXPECT_EQ(sm90_refusal(p, *p128, kH200), "");
  EXPECT_NE(sm90_refusal(p, *p128, kA100).find("9.0"), std::string::npos);
  p.dv = 64;  // Dv below the head dim: zero-filled
  EXPECT_EQ(sm90_refusal(p, *p128, kH200), "");
  p.dv = 136;
  EXPECT_NE(sm90_refusal(p, *p128, kH200).find("D, Dv <= 128"), std::string::npos);
  p.dv = 128;
  p.dtype = DType::bf16;
  EXPECT_NE(sm90_refusal(p, *p128, kH200).find("not a bf16 kernel"), std::string::npos);
  p.dtype = DType::f16;
  p.batch = 65535, p.heads = 65535, p.sq = 1 << 20;  // items past 2^31
  EXPECT_NE(sm90_refusal(p, *p128, kH200).find("32 bits"), std::string::npos);
  EXPECT_EQ(persistent_variant(kAll, *p128), p128);
}

// The score variants (softcap, ALiBi, sinks): on a Hopper GPU a 16-bit call takes its head
// dim's "_sv" row (no GQA packing: slopes and sinks are per query head), which every other
// sm90 row refuses, naming the variant; fp32, and every call on another GPU, takes the sm80
// row the same shape gets without sm90 rows.
TEST(CudaPolicy, ScoreVariants) {
  std::vector<InstanceInfo> no90;
  for (const InstanceInfo& i : kAll)
    if (i.arch == 80) no90.push_back(i);
  static const float slopes[32] = {}, sinks[32] = {};
  const Row rows[] = {
      {"", kH200, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1},
      {"", kH200, bf16, 1, 32, 8, 1, 8192, 128, 128, Mask::none, false, 0, 0, "", 0, 1},  // decode: splits, no packing
      {"", kH200, f16, 2, 16, 16, 1024, 1024, 64, 64, Mask::causal, true, 0, 0, "", 0, 1},
      {"", kH200, bf16, 2, 8, 8, 512, 700, 256, 256, Mask::local, false, 0, 0, "", 0, 1},
      {"", kH200, bf16, 2, 8, 8, 512, 700, 128, 128, Mask::local, false, 0, 0, "", 0, 1},  // 64-row tile
      {"", kH200, f16, 8, 32, 32, 2048, 2048, 64, 64, Mask::none, false, 0, 0, "", 0, 1},  // three CTAs per SM
      {"", kH200, f16, 32, 32, 32, 512, 512, 64, 64, Mask::none, false, 0, 0, "", 0, 1},   // persistent 64-row
      {"", kH200, f32, 4, 32, 32, 4096, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1},
      {"", kA100, f16, 4, 32, 32, 4096, 4096, 128, 128, Mask::local, false, 0, 0, "", 0, 1},
  };
  for (const Row& r : rows)
    for (int v = 0; v < 3; ++v) {
      core::AttentionProblem p = problem(r), plain = problem(r);
      if (v == 0) p.softcap = 30.0f;
      if (v == 1) p.alibi = slopes;
      if (v == 2) p.sinks = sinks;
      const char* name = v == 0 ? "params.softcap" : v == 1 ? "params.alibi_slopes" : "params.sinks";
      SCOPED_TRACE(std::string(name) + " " + to_string(r.dtype) + " hd" + std::to_string(r.d));
      const Choice16 got = choose_kernel(p, r.sq, r.sk, r.dev, kAll);
      ASSERT_NE(got.kernel.inst, nullptr);
      EXPECT_EQ(got.kernel.pack_shift, 0);
      if (r.dev.hopper() && r.dtype != f32) {
        const std::string want = "fwd_sm90_" + std::string(to_string(r.dtype)) + "_hd" + std::to_string(r.d) + "_";
        EXPECT_EQ(std::string(got.kernel.inst->key).rfind(want, 0), 0u) << got.kernel.inst->key;
        EXPECT_TRUE(got.kernel.inst->score_mod) << got.kernel.inst->key;
        EXPECT_EQ(pick_sm90(p, r.dev, 0, kAll), got.kernel.inst);
        // The plain rule's choice (unpacked) where that tile has a variant row: its twin.
        if (const InstanceInfo* twin_of = pick_sm90(plain, r.dev, 0, kAll); twin_of != nullptr) {
          const std::string twin = std::string(twin_of->key) + "_sv";
          for (const InstanceInfo& i : kAll)
            if (twin == i.key) {
              EXPECT_EQ(std::string(got.kernel.inst->key), twin);
            }
        }
      } else {
        const Choice16 want = choose_kernel(plain, r.sq, r.sk, r.dev, no90);
        ASSERT_NE(want.kernel.inst, nullptr);
        EXPECT_EQ(std::string(got.kernel.inst->key), want.kernel.inst->key);
        EXPECT_EQ(got.kernel.kv_splits, 1);
        EXPECT_EQ(pick_sm90(p, r.dev, 0, kAll), nullptr);
      }
      for (const InstanceInfo& i : kAll)
        if (i.arch == 90 && i.dtype == r.dtype && r.dev.hopper() && !i.score_mod) {
          EXPECT_NE(sm90_refusal(p, i, r.dev).find(name), std::string::npos) << i.key;
        }
      // A call without variants never takes a "_sv" row.
      const Choice16 base = choose_kernel(plain, r.sq, r.sk, r.dev, kAll);
      ASSERT_NE(base.kernel.inst, nullptr);
      EXPECT_FALSE(base.kernel.inst->score_mod) << base.kernel.inst->key;
    }
}

TEST(CudaPolicy, GqaPackShift) {
  core::AttentionProblem p = problem({"", kH200, f16, 1, 64, 1, 1, 4096, 128, 128, Mask::none, false, 0, 0, "", 0, 1});
  EXPECT_EQ(gqa_pack_shift(p, 1), 6);    // G = 64
  EXPECT_EQ(gqa_pack_shift(p, 63), 6);
  EXPECT_EQ(gqa_pack_shift(p, 64), 0);   // a tile of one head's rows is full
  p.heads = 128;                         // G = 128: more than a 64-row tile holds
  EXPECT_EQ(gqa_pack_shift(p, 1), 0);
  p.heads = 6, p.kv_heads = 2;           // G = 3
  EXPECT_EQ(gqa_pack_shift(p, 1), 0);
  p.heads = 8, p.kv_heads = 8;           // G = 1
  EXPECT_EQ(gqa_pack_shift(p, 1), 0);
  p.kv_heads = 4;
  EXPECT_EQ(gqa_pack_shift(p, 1), 1);
  p.dtype = DType::f32;
  EXPECT_EQ(gqa_pack_shift(p, 1), 0);
}

TEST(CudaPolicy, VtPath) {
  auto key = [](const char* k) {
    for (const InstanceInfo& i : kAll)
      if (std::strcmp(i.key, k) == 0) return i;
    ADD_FAILURE() << k;
    return kAll[0];
  };
  EXPECT_EQ(vt_path(key("fwd_sm90_f16_hd128_128x128_s2"), false, false), VtPath::none);
  EXPECT_EQ(vt_path(key("fwd_sm90_e4m3_hd128_128x192_s3"), false, false), VtPath::prepass);
  EXPECT_EQ(vt_path(key("fwd_sm90_e4m3_hd128_64x128_s2_vt"), false, false), VtPath::in_kernel);
  EXPECT_EQ(vt_path(key("fwd_sm90_e4m3_hd128_128x192_s3_p"), false, false), VtPath::fused);
  EXPECT_EQ(vt_path(key("fwd_sm90_e4m3_hd128_128x192_s3_p"), true, false), VtPath::prepass);   // varlen
  EXPECT_EQ(vt_path(key("fwd_sm90_e4m3_hd128_128x192_s3_p"), false, true), VtPath::prepass);   // forced
  EXPECT_EQ(vt_path(key("fwd_sm90_e4m3_hd256_128x128_s2_p"), false, false), VtPath::prepass);  // no room for it
}

// Head dims off the multiples of 8 (16-bit): each padded to the next multiple of 8 (the
// padded problem then runs on the kernels of the smallest head dim that covers both).
TEST(CudaPolicy, PaddedHeadDims) {
  const auto dims = [&](int64_t d, int64_t dv) {
    core::AttentionProblem p;
    p.dtype = p.out_dtype = DType::bf16;
    p.d = d;
    p.dv = dv;
    return padded_head_dims(p);
  };
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(dims(59, 59), P(64, 64));
  EXPECT_EQ(dims(1, 1), P(8, 8));
  EXPECT_EQ(dims(111, 64), P(112, 64));
  EXPECT_EQ(dims(200, 255), P(200, 256));
  EXPECT_EQ(dims(7, 255), P(8, 256));
}

// In place or through padded copies (head dims off the multiples of 8): the copies where the
// padded call splits its keys; else in place up to 4096 keys on the same head dim (8192
// under a band mask), up to 1024 where in place needs a wider row; never on an sm80 row.
TEST(CudaPolicy, HeadsInPlace) {
  const auto key = [](const char* k) -> const InstanceInfo* {
    for (const InstanceInfo& i : kAll)
      if (std::strcmp(i.key, k) == 0) return &i;
    ADD_FAILURE() << k;
    return nullptr;
  };
  const KernelChoice hd64{key("fwd_sm90_bf16_hd64_64x64_s2_p")}, hd128{key("fwd_sm90_bf16_hd128_128x128_s2_p")};
  const KernelChoice hd64_split{key("fwd_sm90_bf16_hd64_64x64_s2"), 0, 4};
  const KernelChoice sm80{key("fwd_sm80_bf16_hd128_128x32_w4_o2")};
  EXPECT_TRUE(heads_in_place(hd128, hd128, 1024, false));
  EXPECT_TRUE(heads_in_place(hd128, hd128, 4096, false));
  EXPECT_FALSE(heads_in_place(hd128, hd128, 4097, false));
  EXPECT_TRUE(heads_in_place(hd128, hd128, 8192, true));
  EXPECT_FALSE(heads_in_place(hd128, hd128, 8193, true));
  EXPECT_TRUE(heads_in_place(hd128, hd64, 1024, true));
  EXPECT_FALSE(heads_in_place(hd128, hd64, 1025, true));
  EXPECT_FALSE(heads_in_place(hd64, hd64_split, 100, false));
  EXPECT_FALSE(heads_in_place(sm80, sm80, 100, false));
  EXPECT_TRUE(heads_in_place(hd128, KernelChoice{}, 100000, false));
  // The copies' width: an sm90 row's head dim where it is whole 128-byte lines.
  EXPECT_EQ(copy_width(*hd128.inst, 112), 128);
  EXPECT_EQ(copy_width(*hd64.inst, 64), 64);
  EXPECT_EQ(copy_width(*sm80.inst, 112), 112);
  EXPECT_EQ(copy_width(*key("fwd_sm90_bf16_hd96_128x128_s2"), 88), 88);
}

// The in-place row of an off-multiple head dim (the widened dims D + r): an sm90 row, wider
// than the policy's choice where that choice is an sm80 row.
TEST(CudaPolicy, ChooseInPlace) {
  std::vector<InstanceInfo> no90, no96;
  for (const InstanceInfo& i : kAll) {
    if (i.arch == 80) no90.push_back(i);
    if (i.head_dim != 96) no96.push_back(i);
  }
  const auto in_place = [](const Row& r, InstanceList list) {
    const KernelChoice c = choose_in_place(problem(r), r.sq, r.sk, r.dev, list);
    return std::string(c.inst != nullptr ? c.inst->key : "null");
  };
  int pack = 0, splits = 1;
  // D 59 (+ 7: 72) at B2 H8 S300: the choice at hd96 is the sm80 row; in place takes hd128's.
  const Row few{"", kH200, f16, 2, 8, 8, 300, 333, 72, 72, Mask::none, false, 0, 0, "", 0, 1};
  ASSERT_EQ(choose(few, kAll, &pack, &splits), "fwd_sm80_f16_hd96_64x64_w4_o2");
  EXPECT_EQ(in_place(few, kAll), "fwd_sm90_f16_hd128_64x64_s2");
  EXPECT_EQ(in_place(few, no96), "fwd_sm90_f16_hd128_64x64_s2") << "the same row without hd96 in the build";
  const Row few_causal{"", kH200, bf16, 2, 4, 4, 130, 257, 88, 88, Mask::causal, false, 0, 0, "", 0, 1};
  EXPECT_EQ(in_place(few_causal, kAll).rfind("fwd_sm90_bf16_hd128_", 0), 0u) << in_place(few_causal, kAll);
  // Where the policy's choice is an sm90 row, that row.
  const Row many{"", kH200, f16, 16, 16, 16, 1024, 1024, 72, 72, Mask::none, false, 0, 0, "", 0, 1};
  const std::string direct = choose(many, kAll, &pack, &splits);
  ASSERT_EQ(direct.rfind("fwd_sm90_f16_hd96_", 0), 0u) << direct;
  EXPECT_EQ(in_place(many, kAll), direct);
  // No sm90 row at all: none.
  EXPECT_EQ(in_place(few, no90), "null");
}

const InstanceInfo kKvc[] = {
#define FC_SM80_INST FC_SM80_INSTANCE_INFO
#define FC_SM90_INST FC_SM90_KVC_INSTANCE_INFO
#include "policy_instances_kvc.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};

// attention_with_kvcache: the smallest kvc head dim that covers D and Dv for the dtype, and
// KV splits only where (sequence, head) CTAs leave SMs idle and the cache has tiles to share.
TEST(CudaPolicy, KvCacheKernelAndSplits) {
  const InstanceList kvc(kKvc);
  // page: the paged cache's page size (0: contiguous; -1: pages no TMA row takes, e.g. 24).
  const auto key = [&](DType dt, int64_t hd, const DeviceFacts& dev, int64_t rows = 64, bool fp8 = false,
                       int64_t page = -1) {
    const InstanceInfo* i = pick_kvcache(dt, hd, rows, dev, kvc, fp8, page < 0 ? 24 : page);
    return std::string(i != nullptr ? i->key : "none");
  };
  // The keys: kvc_sm80_<q dtype>[e4m3 over an fp8 cache]_hd<D>_<BM>x<BN>_w<warps>_o<ctas>, and
  // the TMA rows kvc_sm90_<q dtype>_hd<D>_16x<BN>_s<stages> (16-bit caches, key-split form).
  const std::regex grammar(R"(^kvc_sm80_(f16|bf16)(e4m3)?_hd(\d+)_(\d+)x(\d+)_w(\d+)_o(\d+)$)");
  const std::regex grammar90(R"(^kvc_sm90_(f16|bf16)_hd(\d+)_16x(\d+)_s(\d+)$)");
  int tma_rows = 0;
  for (const InstanceInfo& i : kvc) {
    std::cmatch m;
    if (i.arch == 90) {
      ASSERT_TRUE(std::regex_match(i.key, m, grammar90)) << i.key;
      EXPECT_EQ(m[1].str(), to_string(i.dtype)) << i.key;
      EXPECT_EQ(std::stoi(m[2].str()), i.head_dim) << i.key;
      EXPECT_TRUE(i.kv_tma && !i.kv_fp8 && i.block_m < 16 * i.warps) << i.key;
      EXPECT_EQ(std::stoi(m[4].str()), i.stages) << i.key;
      // Q rows and each stage's K and V tiles in whole 128-byte rows, and a stage's 8-byte mbarrier.
      EXPECT_EQ(i.smem(), (16 + 2 * i.stages * i.block_n) * ((i.head_dim * 2 + 127) / 128 * 128) + 8 * i.stages) << i.key;
      ++tma_rows;
      continue;
    }
    ASSERT_TRUE(std::regex_match(i.key, m, grammar)) << i.key;
    EXPECT_EQ(m[1].str(), to_string(i.dtype)) << i.key;
    EXPECT_EQ(m[2].matched, i.kv_fp8) << i.key;
    EXPECT_EQ(std::stoi(m[3].str()), i.head_dim) << i.key;
    EXPECT_TRUE(!i.kv_fp8 || i.block_m < 16 * i.warps) << i.key << ": an fp8 cache's rows are key-split rows";
  }
  EXPECT_EQ(tma_rows, 6);
  // The TMA rows on Hopper for pages their boxes read (dividing or a multiple of 64 keys), in
  // the key-split form; never elsewhere, over a contiguous or e4m3 cache or past 16 rows.
  EXPECT_EQ(key(DType::f16, 128, kH200, 4, false, 0), "kvc_sm80_f16_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::bf16, 128, kH200, 1, false, 16), "kvc_sm90_bf16_hd128_16x64_s2");
  EXPECT_EQ(key(DType::f16, 64, kH200, 16, false, 64), "kvc_sm90_f16_hd64_16x64_s3");
  EXPECT_EQ(key(DType::bf16, 80, kH200, 8, false, 256), "kvc_sm90_bf16_hd96_16x64_s2");
  EXPECT_EQ(key(DType::f16, 128, kH200, 4, false, 8), "kvc_sm90_f16_hd128_16x64_s2");
  EXPECT_EQ(key(DType::f16, 128, kH200, 4, false, 24), "kvc_sm80_f16_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::f16, 128, kH200, 4, false, 96), "kvc_sm80_f16_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::f16, 128, kH200, 17, false, 0), "kvc_sm80_f16_hd128_64x64_w4_o2");
  EXPECT_EQ(key(DType::f16, 128, kA100, 4, false, 0), "kvc_sm80_f16_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::f16, 128, kH200, 4, true, 0), "kvc_sm80_f16e4m3_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::f16, 256, kH200, 4, false, 0), "kvc_sm80_f16_hd256_64x16_w4_o2");
  // An e4m3 cache: its own rows (the key-split form at every row count; head dims to 128).
  EXPECT_EQ(key(DType::f16, 128, kH200, 64, true), "kvc_sm80_f16e4m3_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::bf16, 80, kA100, 1, true), "kvc_sm80_bf16e4m3_hd96_16x64_w4_o3");
  EXPECT_EQ(key(DType::bf16, 64, kSm86, 8, true), "kvc_sm80_bf16e4m3_hd64_16x64_w4_o4");
  EXPECT_EQ(key(DType::f16, 256, kH200, 1, true), "none");
  EXPECT_EQ(key(DType::f16, 64, kH200), "kvc_sm80_f16_hd64_64x64_w4_o2");
  EXPECT_EQ(key(DType::bf16, 80, kA100), "kvc_sm80_bf16_hd96_64x64_w4_o2");
  EXPECT_EQ(key(DType::bf16, 128, kSm86), "kvc_sm80_bf16_hd128_64x64_w4_o2");
  EXPECT_EQ(key(DType::f16, 200, kSm86), "kvc_sm80_f16_hd256_64x16_w4_o2");
  EXPECT_EQ(key(DType::f32, 64, kH200), "none");
  EXPECT_EQ(key(DType::f16, 264, kH200), "none");
  // Packed rows that fit 16 (decode, G <= 16; short speculation): the key-split rows; more
  // rows, or a head dim without them (hd256): the 64-row tile.
  EXPECT_EQ(key(DType::f16, 128, kH200, 4), "kvc_sm80_f16_hd128_16x64_w4_o3");
  EXPECT_EQ(key(DType::bf16, 64, kA100, 16), "kvc_sm80_bf16_hd64_16x64_w4_o4");
  EXPECT_EQ(key(DType::bf16, 96, kSm86, 1), "kvc_sm80_bf16_hd96_16x64_w4_o3");
  EXPECT_EQ(key(DType::f16, 128, kH200, 17), "kvc_sm80_f16_hd128_64x64_w4_o2");
  EXPECT_EQ(key(DType::f16, 256, kH200, 4), "kvc_sm80_f16_hd256_64x16_w4_o2");
  const InstanceInfo& hd128 = *pick_kvcache(DType::f16, 128, 64, kH200, kvc);
  // B1 H8 decode over 5008 keys: 8 CTAs on 132 SMs -> min(264 / 8, 79 / 2, 32) = 32.
  EXPECT_EQ(kvcache_split_count(1, 8, 1, 5008, hd128, kH200), 32);
  // B32 H32 decode: 1024 CTAs fill the SMs already.
  EXPECT_EQ(kvcache_split_count(1, 32, 32, 4096, hd128, kH200), 1);
  // B4 H8 decode over 4096 keys: 32 CTAs -> min(8, 32, 32) = 8.
  EXPECT_EQ(kvcache_split_count(1, 8, 4, 4096, hd128, kH200), 8);
  // A short cache has too few tiles to share: 128 keys, 2 tiles -> 1.
  EXPECT_EQ(kvcache_split_count(1, 8, 1, 128, hd128, kH200), 1);
  EXPECT_EQ(kvcache_split_count(0, 8, 1, 4096, hd128, kH200), 1);
}

const BwdInstanceInfo kBwd[] = {
#define FC_SM80_INST FC_SM80_BWD_INSTANCE_INFO
#define FC_SM90_INST FC_SM90_BWD_INSTANCE_INFO
#include "policy_instances_bwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};

// The backward: on a 9.0 device the Hopper row of the smallest head dim that covers D and Dv
// (hd128 at D 96, over the sm80 hd96 rows), else of the smallest covering head dim the first
// sm80 row that fits the shared memory; forced keys checked; errors named.
TEST(CudaPolicy, BackwardKernel) {
  const BwdInstanceList bwd(kBwd);
  const auto key = [&](DType dt, int64_t d, int64_t dv, const DeviceFacts& dev, const char* impl = nullptr) {
    core::AttentionProblem p;
    p.dtype = dt;
    p.d = d;
    p.dv = dv;
    p.impl = impl;
    const BwdPick r = pick_bwd(p, p.sk, false, dev, bwd);
    return r.inst != nullptr ? std::string(r.inst->key) : "error:" + r.why;
  };
  EXPECT_EQ(key(DType::bf16, 128, 128, kH200), "bwd_sm90_bf16_hd128_64x128_s2");
  EXPECT_EQ(key(DType::f16, 112, 128, kH200), "bwd_sm90_f16_hd128_64x128_s2");
  EXPECT_EQ(key(DType::f16, 64, 48, kH200), "bwd_sm90_f16_hd64_64x128_s2");
  // Causal at most 1024 keys: the 64-key row of the head dim where there is one.
  const auto causal_key = [&](DType dt, int64_t d, int64_t sk, bool causal, bool deterministic = false) {
    core::AttentionProblem p;
    p.dtype = dt;
    p.d = p.dv = d;
    p.sq = p.sk = sk;
    p.causal = causal;
    return std::string(pick_bwd(p, sk, deterministic, kH200, bwd).inst->key);
  };
  EXPECT_EQ(causal_key(DType::bf16, 64, 512, true), "bwd_sm90_bf16_hd64_64x64_s2");
  EXPECT_EQ(causal_key(DType::bf16, 64, 1024, true), "bwd_sm90_bf16_hd64_64x64_s2");
  EXPECT_EQ(causal_key(DType::bf16, 64, 1025, true), "bwd_sm90_bf16_hd64_64x128_s2");
  // (deterministic: the 128-key row, which has a dQ warpgroup)
  EXPECT_EQ(causal_key(DType::bf16, 64, 512, true, true), "bwd_sm90_bf16_hd64_64x128_s2");
  EXPECT_EQ(causal_key(DType::f16, 64, 1024, true, true), "bwd_sm90_f16_hd64_64x128_s2");
  EXPECT_EQ(causal_key(DType::f16, 64, 512, false), "bwd_sm90_f16_hd64_64x128_s2");
  EXPECT_EQ(causal_key(DType::f16, 128, 512, true), "bwd_sm90_f16_hd128_64x128_s2");  // (no 64-key hd128 row)
  EXPECT_EQ(key(DType::bf16, 96, 96, kH200), "bwd_sm90_bf16_hd128_64x128_s2");  // no sm90 hd96 row
  EXPECT_EQ(key(DType::f16, 72, 80, kH200), "bwd_sm90_f16_hd128_64x128_s2");
  EXPECT_EQ(key(DType::bf16, 96, 96, kA100), "bwd_sm80_bf16_hd96_64x128_w8_o1");
  EXPECT_EQ(key(DType::bf16, 64, 64, kA100), "bwd_sm80_bf16_hd64_128x128_w8_o1_q2");  // (the query split first)
  EXPECT_EQ(key(DType::f16, 48, 64, kA100), "bwd_sm80_f16_hd64_128x128_w8_o1_q2");
  EXPECT_EQ(key(DType::bf16, 256, 256, kH200), "bwd_sm90_bf16_hd256_64x64_s2");
  EXPECT_EQ(key(DType::f16, 136, 192, kH200), "bwd_sm90_f16_hd256_64x64_s2");  // (the wide form above 128)
  EXPECT_EQ(key(DType::bf16, 128, 128, kA100), "bwd_sm80_bf16_hd128_64x128_w8_o1");
  EXPECT_EQ(key(DType::f16, 256, 256, kA100), "bwd_sm80_f16_hd256_32x64_w4_o1");
  EXPECT_EQ(key(DType::f16, 128, 128, kSm86), "bwd_sm80_f16_hd128_32x64_w4_o1");
  EXPECT_EQ(key(DType::f16, 264, 264, kH200).rfind("error:q: head dim 264", 0), 0u);
  EXPECT_EQ(key(DType::f32, 64, 64, kH200).rfind("error:q: head dim 64 (f32)", 0), 0u);
  // Forced keys: the sm90 rows on Hopper only; the dtype and head dim must match.
  EXPECT_EQ(key(DType::f16, 128, 128, kH200, "bwd_sm80_f16_hd128_64x128_w8_o1"), "bwd_sm80_f16_hd128_64x128_w8_o1");
  EXPECT_NE(key(DType::f16, 128, 128, kA100, "bwd_sm90_f16_hd128_64x128_s2").find("compute capability 9.0"),
            std::string::npos);
  EXPECT_NE(key(DType::bf16, 128, 128, kH200, "bwd_sm90_f16_hd128_64x128_s2").find("not a CUDA backward kernel for"),
            std::string::npos);
  EXPECT_NE(key(DType::f16, 128, 128, kH200, "bwd_sm90_f16_hd64_64x64_s2").find("head dim 128"), std::string::npos);
  EXPECT_NE(key(DType::f16, 128, 128, kSm86, "bwd_sm80_f16_hd128_64x128_w8_o1").find("shared memory"),
            std::string::npos);
  EXPECT_NE(key(DType::f16, 64, 64, kH200, "bwd_sm70_f16").find("of this build"), std::string::npos);
  for (const BwdInstanceInfo& i : kBwd) {
    EXPECT_TRUE(i.arch == 80 ? std::regex_match(i.key, std::regex("bwd_sm80_(f16|bf16)_hd[0-9]+_[0-9]+x[0-9]+_w[0-9]+_o1(_q2)?"))
                             : std::regex_match(i.key, std::regex("bwd_sm90_(f16|bf16)_hd[0-9]+_64x(64|128)_s2")))
        << i.key;
    EXPECT_EQ(i.ctas_per_sm(), i.arch == 90 && i.block_n == 64 && i.head_dim <= 128 ? 2 : 1) << i.key;
  }
}

// Deterministic mode in one slice on sm90 rows: the cyclic walk without a band while a
// sequence's key blocks fit the CTA slots, else in order; the sm80 rows: slices.
TEST(CudaPolicy, DeterministicOrder) {
  const BwdInstanceInfo *h90 = nullptr, *h80 = nullptr;
  for (const BwdInstanceInfo& i : kBwd) {
    if (i.arch == 90 && h90 == nullptr) h90 = &i;
    if (i.arch == 80 && h80 == nullptr) h80 = &i;
  }
  ASSERT_NE(h90, nullptr);
  ASSERT_NE(h80, nullptr);
  EXPECT_EQ(deterministic_order(*h90, -1, -1, 128, 132), 1);   // no band: the cyclic walk
  EXPECT_EQ(deterministic_order(*h90, -1, 0, 128, 132), 2);    // causal: in order
  EXPECT_EQ(deterministic_order(*h90, -1, 0, 1000, 132), 2);   // (in order at any length)
  EXPECT_EQ(deterministic_order(*h90, 100, 20, 132, 132), 2);  // a window with a right edge
  EXPECT_EQ(deterministic_order(*h90, 100, -1, 16, 132), 2);   // a left edge alone
  EXPECT_EQ(deterministic_order(*h90, -1, -1, 133, 132), 2);   // more key blocks than slots
  EXPECT_EQ(deterministic_order(*h80, -1, -1, 16, 132), 0);    // the sm80 family: slices
}

// Deterministic mode's split count: the fewest block-times over SMs times CTAs per SM, then
// the fewest slices.
TEST(CudaPolicy, DeterministicSplits) {
  EXPECT_EQ(deterministic_splits(16, 128, 1 << 20, 132), 8);  // one wave of 128 CTAs
  EXPECT_EQ(deterministic_splits(1024, 8, 8, 132), 8);        // 63 waves of 1 block beat 8 of 8
  EXPECT_EQ(deterministic_splits(1024, 8, 8, 264), 1);        // two CTAs per SM: 4 waves of 8, as many
  EXPECT_EQ(deterministic_splits(16, 128, 2, 132), 2);        // the slices' budget
  EXPECT_EQ(deterministic_splits(0, 0, 0, 0), 1);
}

}  // namespace
}  // namespace flashcore::cuda
