// The bad inputs of merge_states and attention_with_kvcache through the C++ API: each is
// refused with flashcore::Error naming the argument, and every output (out, lse, and the
// caches of an append) keeps its bytes; cache_seqlens is never written.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
using fc::Status;

// ---------------------------------------------------------------- merge_states

// Three valid parts (B=2, S=3, H=4, D=8; f16 parts, f32 output) whose views each case then
// breaks in one way.
struct MergeCall {
  HostTensor o0{DType::f16, {2, 3, 4, 8}}, o1{DType::f16, {2, 3, 4, 8}}, o2{DType::f16, {2, 3, 4, 8}};
  HostTensor l0{DType::f32, {2, 4, 3}}, l1{DType::f32, {2, 4, 3}}, l2{DType::f32, {2, 4, 3}};
  HostTensor out{DType::f32, {2, 3, 4, 8}}, lse{DType::f32, {2, 4, 3}};
  std::vector<Tensor> ov, lv;
  Tensor outv, lsev;
  int64_t n = 3;
  fc::MergeStatesParams p;
  bool pair = false;

  MergeCall() {
    Rng rng;
    for (HostTensor* t : {&o0, &o1, &o2, &l0, &l1, &l2}) t->fill_uniform(rng, -1, 1);
    ov = {o0.view(), o1.view(), o2.view()};
    lv = {l0.view(), l1.view(), l2.view()};
    outv = out.view();
    lsev = lse.view();
  }
  void run() {
    if (pair) fc::merge_states(ov[0], lv[0], ov[1], lv[1], outv, lsev, p);
    else fc::merge_states(ov.data(), lv.data(), n, outv, lsev, p);
  }
};

struct MergeCase {
  const char* name;
  std::function<void(MergeCall&)> breakit;
  Status status;
  const char* needle;
};

const MergeCase kMergeCases[] = {
    {"no_parts", [](MergeCall& c) { c.n = 0; }, Status::invalid_argument, "n:"},
    {"part_head_dim", [](MergeCall& c) { c.ov[1].shape[3] = 4; }, Status::invalid_argument, "out_parts[1]"},
    {"pair_names_out_b", [](MergeCall& c) { c.pair = true; c.ov[1].shape[2] = 2; }, Status::invalid_argument, "out_b"},
    {"part_rank", [](MergeCall& c) { c.ov[2].rank = 3; }, Status::invalid_argument, "out_parts[2]"},
    {"parts_mixed_dtype", [](MergeCall& c) { c.ov[2].dtype = DType::bf16; }, Status::invalid_argument,
     "out_parts[2]: dtype"},
    {"lse_part_dtype", [](MergeCall& c) { c.lv[0].dtype = DType::f16; }, Status::invalid_argument, "lse_parts[0]"},
    {"pair_names_lse_a", [](MergeCall& c) { c.pair = true; c.lv[0].shape[1] = 3; }, Status::invalid_argument, "lse_a"},
    {"lse_part_seq", [](MergeCall& c) { c.lv[1].shape[2] = 2; }, Status::invalid_argument, "lse_parts[1]"},
    {"out_dtype_i32", [](MergeCall& c) { c.outv.dtype = DType::i32; }, Status::unsupported, "out: dtype i32"},
    {"lse_dtype", [](MergeCall& c) { c.lsev.dtype = DType::bf16; }, Status::invalid_argument, "lse: must be f32"},
    {"lse_shape", [](MergeCall& c) { c.lsev.shape[1] = 5; }, Status::invalid_argument, "lse: dim 1"},
    {"out_null", [](MergeCall& c) { c.outv.data = nullptr; }, Status::invalid_argument, "out: data is a null"},
    {"out_overlaps_part", [](MergeCall& c) {
       c.ov[1] = c.outv;  // part 1 read from out's memory one element later
       c.ov[1].dtype = DType::f16;
       c.ov[1].data = static_cast<char*>(c.outv.data) + 4;
     }, Status::invalid_argument, "out: overlaps out_parts[1]"},
    {"out_is_part_other_dtype", [](MergeCall& c) { c.outv = c.ov[0]; c.outv.dtype = DType::bf16; },
     Status::invalid_argument, "out: overlaps out_parts[0]"},
    {"out_overlaps_lse_part", [](MergeCall& c) { c.lv[2].data = c.outv.data; }, Status::invalid_argument,
     "out: overlaps lse_parts[2]"},
    {"lse_overlaps_out", [](MergeCall& c) { c.lsev.data = static_cast<float*>(c.outv.data) + 7; },
     Status::invalid_argument, "lse: overlaps out"},
    {"lse_overlaps_part", [](MergeCall& c) { c.lsev.data = c.ov[1].data; }, Status::invalid_argument,
     "lse: overlaps out_parts[1]"},
    {"out_self_overlap", [](MergeCall& c) { c.outv.strides[2] = 0; }, Status::invalid_argument, "out: shape"},
    {"part_device", [](MergeCall& c) { c.ov[1].device = fc::Device::cuda; }, Status::invalid_argument,
     "out_parts[1]: is on cuda"},
    {"threads", [](MergeCall& c) { c.p.threads = -1; }, Status::invalid_argument, "params.threads"},
};

class MergeStatesErrorTest : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeStatesErrorTest, RefusedBeforeAnyWrite) {
  MergeCall c;
  GetParam().breakit(c);
  expect_error([&] { c.run(); }, GetParam().status, GetParam().needle,
               {&c.out, &c.lse, &c.o0, &c.o1, &c.o2, &c.l0, &c.l1, &c.l2});
}

INSTANTIATE_TEST_SUITE_P(Api, MergeStatesErrorTest, ::testing::ValuesIn(kMergeCases),
                         [](const auto& info) { return std::string(info.param.name); });

// CUDA tensors: the CUDA backend's merge (tests/cuda), or refused by a build without it.
TEST(MergeStatesError, CudaTensorsWithoutCuda) {
#if defined(FC_BUILD_CUDA)
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  MergeCall c;
  for (Tensor* t : {&c.ov[0], &c.ov[1], &c.ov[2], &c.lv[0], &c.lv[1], &c.lv[2], &c.outv, &c.lsev})
    t->device = fc::Device::cuda;
  expect_error([&] { c.run(); }, Status::unsupported, "out: CUDA tensors given, but this flashcore was built without CUDA",
               {&c.out, &c.lse});
#endif
}

TEST(MergeStatesError, ValidCallAndInPlacePass) {
  MergeCall c;
  EXPECT_NO_THROW(c.run());
  c.outv = c.ov[0];  // in place: out is exactly part 0, lse lse part 2
  c.lsev = c.lv[2];
  EXPECT_NO_THROW(c.run());
}

// ---------------------------------------------------------------- attention_with_kvcache

// A valid paged call with an append (B=2, Sq=1, H=4, Hkv=2, D=16, page 8 of 6 pages;
// cache_seqlens {5, 9} + 2 new keys: pages [4] and [0, 2]), which each case breaks.
struct KvCall {
  HostTensor q{DType::f32, {2, 1, 4, 16}}, out{DType::f32, {2, 1, 4, 16}}, lse{DType::f32, {2, 4, 1}};
  HostTensor kc{DType::f32, {6, 8, 2, 16}}, vc{DType::f32, {6, 8, 2, 16}};
  HostTensor kn{DType::f32, {2, 2, 2, 16}}, vn{DType::f32, {2, 2, 2, 16}};
  HostTensor lens{DType::i32, {2}}, table{DType::i32, {2, 3}};
  Tensor qv, ov, lv, kcv, vcv, knv, vnv, lensv, tablev;
  fc::KvCacheOptions opt;
  fc::AttentionParams p;

  KvCall() {
    Rng rng;
    for (HostTensor* t : {&q, &kc, &vc, &kn, &vn}) t->fill_uniform(rng, -1, 1);
    lens.set(0, 5);
    lens.set(1, 9);
    const int32_t ids[] = {4, -1, -1, 0, 2, -1};
    for (int i = 0; i < 6; ++i) table.set(i, ids[i]);
    qv = q.view(); ov = out.view(); lv = lse.view(); kcv = kc.view(); vcv = vc.view();
    knv = kn.view(); vnv = vn.view(); lensv = lens.view(); tablev = table.view();
    opt.block_table = &tablev;
    opt.k_new = &knv;
    opt.v_new = &vnv;
    p.lse = &lv;
  }
  void run() { fc::attention_with_kvcache(qv, kcv, vcv, lensv, ov, opt, p); }
  void contiguous() {  // [B, S_max = 12, Hkv, D] views of the page memory
    opt.block_table = nullptr;
    for (Tensor* t : {&kcv, &vcv}) {
      t->shape[0] = 2;
      t->shape[1] = 12;
      t->strides[0] = 12 * 2 * 16;
    }
  }
};

struct KvErrCase {
  const char* name;
  std::function<void(KvCall&)> breakit;
  Status status;
  const char* needle;
};

void set_i32(Tensor& t, int64_t i, int32_t v) { static_cast<int32_t*>(t.data)[i] = v; }

// The caches (and, with `news`, k_new / v_new) read as e4m3: an fp8 cache of the same shape
// in the first quarter of each buffer's bytes.
void fp8_cache(KvCall& c, bool news = true) {
  c.kcv.dtype = c.vcv.dtype = DType::e4m3;
  if (news) c.knv.dtype = c.vnv.dtype = DType::e4m3;
}
const float kHeadFactors[4] = {1.0f, 0.5f, 2.0f, 1.0f};  // [B = 2, Hkv = 2]

const KvErrCase kKvCases[] = {
    {"negative_length", [](KvCall& c) { set_i32(c.lensv, 1, -1); }, Status::invalid_argument, "cache_seqlens: entry 1 is -1"},
    {"too_few_pages", [](KvCall& c) { set_i32(c.lensv, 1, 15); }, Status::invalid_argument,
     "block_table: entry [1, 2] = -1 is not a page of k_cache (0 .. 5), used by sequence 1"},
    {"past_max_pages", [](KvCall& c) { set_i32(c.lensv, 0, 23); }, Status::invalid_argument,
     "block_table: sequence 0 (cache_seqlens[0] = 23 + S_new = 2) needs 4 pages of 8 rows, but the table has "
     "max_pages = 3"},
    {"page_id_out_of_range", [](KvCall& c) { set_i32(c.tablev, 3, 6); }, Status::invalid_argument,
     "block_table: entry [1, 0] = 6 is not a page of k_cache (0 .. 5)"},
    {"page_id_negative", [](KvCall& c) { set_i32(c.tablev, 4, -1); }, Status::invalid_argument,
     "block_table: entry [1, 1] = -1"},
    {"shared_append_slot", [](KvCall& c) { set_i32(c.tablev, 0, 2); set_i32(c.lensv, 0, 1); },
     Status::invalid_argument, "sequences 0 and 1 both append to page 2 row 1"},
    {"page_size_not_multiple_of_8", [](KvCall& c) { c.kcv.shape[1] = c.vcv.shape[1] = 6; }, Status::invalid_argument,
     "k_cache: page_size (dim 1) must be a positive multiple of 8, got 6"},
    {"contiguous_length_past_s_max", [](KvCall& c) { c.contiguous(); c.opt.k_new = c.opt.v_new = nullptr; set_i32(c.lensv, 0, 13); },
     Status::invalid_argument, "cache_seqlens: sequence 0 (cache_seqlens[0] = 13) passes the cache's S_max = 12"},
    {"contiguous_append_past_s_max", [](KvCall& c) { c.contiguous(); set_i32(c.lensv, 1, 11); },
     Status::invalid_argument, "k_new: sequence 1"},
    {"seqlens_dtype", [](KvCall& c) { c.lensv.dtype = DType::f32; }, Status::invalid_argument,
     "cache_seqlens: must be int32"},
    {"seqlens_batch", [](KvCall& c) { c.lensv.shape[0] = 1; }, Status::invalid_argument, "cache_seqlens: dim 0"},
    {"table_dtype", [](KvCall& c) { c.tablev.dtype = DType::f32; }, Status::invalid_argument, "block_table: must be int32"},
    {"table_batch", [](KvCall& c) { c.tablev.shape[0] = 1; }, Status::invalid_argument, "block_table: dim 0"},
    {"k_new_alone", [](KvCall& c) { c.opt.v_new = nullptr; }, Status::invalid_argument, "v_new: is null"},
    {"k_new_heads", [](KvCall& c) { c.knv.shape[2] = 1; }, Status::invalid_argument, "k_new: dim 2 (Hkv)"},
    {"k_new_dtype", [](KvCall& c) { c.knv.dtype = DType::f16; }, Status::invalid_argument, "k_new: dtype f16"},
    {"v_new_length", [](KvCall& c) { c.vnv.shape[1] = 1; }, Status::invalid_argument, "v_new: dim 1 (S_new)"},
    {"k_cache_head_dim", [](KvCall& c) { c.kcv.shape[3] = 8; }, Status::invalid_argument, "k_cache: dim 3 (D)"},
    {"hnd_names_layout", [](KvCall& c) { c.opt.layout = fc::KvLayout::hnd; }, Status::invalid_argument,
     "k_cache (HND, as NHD)"},
    {"v_cache_pages", [](KvCall& c) { c.vcv.shape[0] = 5; }, Status::invalid_argument, "v_cache: dim 0 (pages)"},
    {"layout_code", [](KvCall& c) { c.opt.layout = static_cast<fc::KvLayout>(7); }, Status::invalid_argument, "layout"},
    {"varlen", [](KvCall& c) { static const int32_t cu[] = {0, 1, 2}; c.p.cu_seqlens_q = cu; c.p.cu_seqlens_k = cu; },
     Status::invalid_argument, "params.cu_seqlens_q"},
    {"out_overlaps_cache", [](KvCall& c) { c.ov.data = c.kcv.data; }, Status::invalid_argument, "out: overlaps k_cache"},
    {"out_overlaps_seqlens", [](KvCall& c) { c.lensv.data = c.ov.data; }, Status::invalid_argument,
     "out: overlaps cache_seqlens"},
    {"lse_overlaps_table", [](KvCall& c) { c.tablev.data = c.lv.data; }, Status::invalid_argument,
     "params.lse: overlaps block_table"},
    {"cache_overlaps_k_new", [](KvCall& c) { c.knv.data = static_cast<float*>(c.kcv.data) + 16; },
     Status::invalid_argument, "k_cache: overlaps k_new"},
    {"cache_overlaps_q", [](KvCall& c) { c.qv.data = c.vcv.data; }, Status::invalid_argument, "v_cache: overlaps q"},
    {"caches_overlap", [](KvCall& c) { c.vcv.data = static_cast<float*>(c.kcv.data) + 8; }, Status::invalid_argument,
     "v_cache: overlaps k_cache"},
    {"cache_self_overlap", [](KvCall& c) { c.kcv.strides[0] = 0; }, Status::invalid_argument, "k_cache: shape"},
    // fp8 (e4m3) caches: both caches e4m3, the new keys in the cache's dtype, k's and v's
    // factors only.
    {"fp8_cache_v_not_e4m3", [](KvCall& c) { c.kcv.dtype = DType::e4m3; }, Status::invalid_argument,
     "v_cache: dtype f32 differs from k_cache's e4m3"},
    {"fp8_cache_k_new_dtype", [](KvCall& c) { fp8_cache(c, false); }, Status::invalid_argument,
     "k_new: dtype f32 differs from the cache's e4m3"},
    {"fp8_cache_q_descale", [](KvCall& c) { fp8_cache(c); c.p.q_descale = 2.0f; }, Status::invalid_argument,
     "params.q_descale: applies to fp8 (e4m3) inputs only"},
    {"fp8_cache_q_descale_heads", [](KvCall& c) { fp8_cache(c); c.p.q_descale_heads = kHeadFactors; },
     Status::invalid_argument, "params.q_descale_heads"},
    {"fp8_cache_k_descale_zero", [](KvCall& c) { fp8_cache(c); c.p.k_descale = 0.0f; }, Status::invalid_argument,
     "params.k_descale: must be finite and > 0"},
    {"k_descale_without_fp8_cache", [](KvCall& c) { c.p.k_descale = 2.0f; }, Status::invalid_argument,
     "params.k_descale: applies to fp8 (e4m3) inputs only"},
    {"v_descale_heads_without_fp8_cache", [](KvCall& c) { c.p.v_descale_heads = kHeadFactors; },
     Status::invalid_argument, "params.v_descale_heads: per-head descales apply to fp8"},
};

class KvCacheErrorTest : public ::testing::TestWithParam<KvErrCase> {};

TEST_P(KvCacheErrorTest, RefusedBeforeAnyWrite) {
  KvCall c;
  GetParam().breakit(c);
  expect_error([&] { c.run(); }, GetParam().status, GetParam().needle, {&c.out, &c.lse, &c.kc, &c.vc, &c.lens});
}

INSTANTIATE_TEST_SUITE_P(Api, KvCacheErrorTest, ::testing::ValuesIn(kKvCases),
                         [](const auto& info) { return std::string(info.param.name); });

// One sequence whose table lists a page twice and whose append reaches both entries.
TEST(KvCacheError, SequenceAppendingTwiceToOnePage) {
  KvCall c;
  HostTensor kn(DType::f32, {2, 9, 2, 16}), vn(DType::f32, {2, 9, 2, 16});
  c.knv = kn.view();
  c.vnv = vn.view();
  set_i32(c.lensv, 0, 0);
  set_i32(c.lensv, 1, 0);
  const int32_t ids[] = {4, 4, -1, 0, 2, -1};
  for (int i = 0; i < 6; ++i) set_i32(c.tablev, i, ids[i]);
  expect_error([&] { c.run(); }, Status::invalid_argument, "sequence 0 appends twice to page 4 row 0",
               {&c.out, &c.lse, &c.kc, &c.vc});
}

// The valid call; a cache read without an append may share memory between k and v; with an
// append, k_cache and v_cache may be interleaved views of one tensor ([pages, 2, rows, Hkv,
// D]: k the first half of every page pair, v the second).
TEST(KvCacheError, ValidCallsPass) {
  KvCall c;
  EXPECT_NO_THROW(c.run());
  KvCall same;
  same.opt.k_new = same.opt.v_new = nullptr;
  same.vcv = same.kcv;
  EXPECT_NO_THROW(same.run());
  KvCall inter;
  for (Tensor* t : {&inter.kcv, &inter.vcv}) {
    t->shape[0] = 3;
    t->strides[0] = 2 * 8 * 2 * 16;
  }
  inter.vcv.data = static_cast<float*>(inter.kcv.data) + 8 * 2 * 16;
  const int32_t ids[] = {2, -1, -1, 0, 1, -1};
  for (int i = 0; i < 6; ++i) set_i32(inter.tablev, i, ids[i]);
  EXPECT_NO_THROW(inter.run());
  KvCall fp8;  // an e4m3 cache with k's and v's factors, per tensor and per head
  fp8_cache(fp8);
  fp8.p.k_descale = 0.5f;
  fp8.p.v_descale = 4.0f;
  fp8.p.k_descale_heads = fp8.p.v_descale_heads = kHeadFactors;
  EXPECT_NO_THROW(fp8.run());
}

// attention (not over a cache) keeps k and v in q's dtype: an e4m3 k under f32 q is refused.
TEST(KvCacheError, Fp8KeysOnlyForACache) {
  KvCall c;
  Tensor kv = c.kcv;
  kv.dtype = DType::e4m3;
  kv.shape[0] = 2;
  Tensor vv = kv;
  expect_error([&] { fc::attention(c.qv, kv, vv, c.ov, c.p); }, Status::invalid_argument,
               "k: dtype e4m3 differs from q's f32", {&c.out, &c.lse});
}

// CUDA tensors: the CUDA backend's attention_with_kvcache (tests/cuda), or refused by a
// build without it.
TEST(KvCacheError, CudaTensorsWithoutCuda) {
#if defined(FC_BUILD_CUDA)
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  KvCall c;
  for (Tensor* t : {&c.qv, &c.ov, &c.lv, &c.kcv, &c.vcv, &c.knv, &c.vnv, &c.lensv, &c.tablev})
    t->device = fc::Device::cuda;
  expect_error([&] { c.run(); }, Status::unsupported, "q: CUDA tensors given, but this flashcore was built without CUDA",
               {&c.out, &c.lse, &c.kc, &c.vc, &c.lens});
#endif
}

}  // namespace
}  // namespace fctest
