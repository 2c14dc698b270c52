// Every bad input of DESIGN.md 'Errors' through the C++ API: flashcore::Error with the
// right Status, a message that names the argument, and an output left bit-for-bit as
// it was (the check runs before any kernel).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
using fc::Status;

// A valid attention call (B=2, Sq=5, Sk=6, H=4, Hkv=2, D=16) whose views each case
// then breaks in one way.
struct AttnCall {
  HostTensor q{DType::f32, {2, 5, 4, 16}}, k{DType::f32, {2, 6, 2, 16}}, v{DType::f32, {2, 6, 2, 16}};
  HostTensor out{DType::f32, {2, 5, 4, 16}}, lse{DType::f32, {2, 4, 5}};
  Tensor qv, kv, vv, ov, lv;
  fc::AttentionParams p;
  bool reference = false;

  AttnCall() {
    Rng rng;
    q.fill_uniform(rng, -1, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    qv = q.view(); kv = k.view(); vv = v.view(); ov = out.view(); lv = lse.view();
    p.lse = &lv;
  }
  void run() {
    if (reference) fc::reference::attention(qv, kv, vv, ov, p);
    else fc::attention(qv, kv, vv, ov, p);
  }
  void expect(Status st, const std::string& needle) {
    expect_error([&] { run(); }, st, needle, {&out, &lse});
  }
};

struct AttnCase {
  const char* name;
  std::function<void(AttnCall&)> breakit;
  Status status;
  const char* needle;
};

const int32_t kCuGood[] = {0, 2, 5};
const int32_t kCuNonZero[] = {1, 2, 5};
const int32_t kCuDecreasing[] = {0, 3, 2};
const int32_t kCuTooLong[] = {0, 2, 7};
const float kHeadDescales[] = {1.0f, 2.0f, 3.0f, 4.0f};

void varlen(AttnCall& c, const int32_t* cq, const int32_t* ck) {
  for (Tensor* t : {&c.qv, &c.kv, &c.vv, &c.ov}) t->shape[0] = 1;
  c.lv.shape[0] = 1;
  c.p.cu_seqlens_q = cq;
  c.p.cu_seqlens_k = ck;
  c.p.varlen_batch = 2;
}

const Status kInvalid = Status::invalid_argument, kUnsupported = Status::unsupported;

const AttnCase kAttnCases[] = {
    {"q_rank3", [](AttnCall& c) { c.qv.rank = 3; }, kInvalid, "q: expected rank 4"},
    {"k_rank5", [](AttnCall& c) { c.kv.rank = 5; }, kInvalid, "k: expected rank 4"},
    {"out_rank0", [](AttnCall& c) { c.ov.rank = 0; }, kInvalid, "out: expected rank 4"},
    {"k_batch", [](AttnCall& c) { c.kv.shape[0] = 1; }, kInvalid, "k: dim 0 (B)"},
    {"out_heads", [](AttnCall& c) { c.ov.shape[2] = 3; }, kInvalid, "out: dim 2 (H)"},
    {"k_head_dim", [](AttnCall& c) { c.kv.shape[3] = 8; }, kInvalid, "k: dim 3 (D)"},
    {"v_seq_k", [](AttnCall& c) { c.vv.shape[1] = 4; }, kInvalid, "v: dim 1 (Sk)"},
    {"v_kv_heads", [](AttnCall& c) { c.vv.shape[2] = 1; }, kInvalid, "v: dim 2 (Hkv)"},
    {"out_dv", [](AttnCall& c) { c.ov.shape[3] = 8; }, kInvalid, "out: dim 3 (Dv)"},
    {"out_seq_q", [](AttnCall& c) { c.ov.shape[1] = 4; }, kInvalid, "out: dim 1 (Sq)"},
    {"heads_not_multiple", [](AttnCall& c) { c.kv.shape[2] = c.vv.shape[2] = 3; }, kInvalid, "k: kv heads Hkv = 3"},
    {"zero_kv_heads", [](AttnCall& c) { c.kv.shape[2] = c.vv.shape[2] = 0; }, kInvalid, "k: kv heads Hkv = 0"},
    {"head_dim_zero", [](AttnCall& c) { c.qv.shape[3] = c.kv.shape[3] = 0; }, kInvalid, "q: head dim"},
    {"negative_shape", [](AttnCall& c) { c.qv.shape[1] = -5; }, kInvalid, "q: shape"},
    {"huge_shape", [](AttnCall& c) { c.kv.shape[1] = int64_t(1) << 41; }, kInvalid, "k: shape"},
    // Zero strides keep the span small while the element count overflows int64 (found
    // by the fuzzer: Tensor::numel was undefined behaviour here).
    {"too_many_elements",
     [](AttnCall& c) {
       for (int i = 0; i < 3; ++i) { c.vv.shape[i] = int64_t(1) << 40; c.vv.strides[i] = 0; }
     },
     kInvalid, "v: shape"},
    {"q_null", [](AttnCall& c) { c.qv.data = nullptr; }, kInvalid, "q: data is a null pointer"},
    {"v_null", [](AttnCall& c) { c.vv.data = nullptr; }, kInvalid, "v: data is a null pointer"},
    {"out_null", [](AttnCall& c) { c.ov.data = nullptr; }, kInvalid, "out: data is a null pointer"},
    {"dtype_i32", [](AttnCall& c) { for (Tensor* t : {&c.qv, &c.kv, &c.vv, &c.ov}) t->dtype = DType::i32; },
     kUnsupported, "q: dtype i32"},
    {"dtype_unknown", [](AttnCall& c) { c.qv.dtype = static_cast<DType>(42); }, kInvalid, "q: unknown dtype"},
    {"k_dtype_differs", [](AttnCall& c) { c.kv.dtype = DType::f16; }, kInvalid, "k: dtype f16"},
    {"out_dtype_differs", [](AttnCall& c) { c.ov.dtype = DType::bf16; }, kInvalid, "out: dtype bf16"},
    {"q_last_dim_strided", [](AttnCall& c) { c.qv.strides[3] = 2; }, kInvalid, "q: the last dim must be contiguous"},
    {"k_negative_stride", [](AttnCall& c) { c.kv.strides[1] = -c.kv.strides[1]; }, kInvalid, "k: stride"},
    {"out_aliases_q", [](AttnCall& c) { c.ov.data = c.qv.data; }, kInvalid, "out: overlaps q"},
    {"out_overlaps_v",
     [](AttnCall& c) { c.ov.data = static_cast<float*>(c.vv.data) + 100; }, kInvalid, "out: overlaps"},
    {"lse_rank", [](AttnCall& c) { c.lv.rank = 2; }, kInvalid, "params.lse: expected rank 3"},
    {"lse_shape", [](AttnCall& c) { c.lv.shape[2] = 4; }, kInvalid, "params.lse: dim 2 (Sq)"},
    {"lse_heads", [](AttnCall& c) { c.lv.shape[1] = 2; }, kInvalid, "params.lse: dim 1 (H)"},
    {"lse_dtype", [](AttnCall& c) { c.lv.dtype = DType::f16; }, kInvalid, "params.lse: must be f32"},
    {"lse_aliases_out", [](AttnCall& c) { c.lv.data = c.ov.data; }, kInvalid, "params.lse: overlaps out"},
    {"lse_aliases_k", [](AttnCall& c) { c.lv.data = c.kv.data; }, kInvalid, "params.lse: overlaps k"},
    {"window_left", [](AttnCall& c) { c.p.window_left = -2; }, kInvalid, "params.window_left"},
    {"window_right", [](AttnCall& c) { c.p.window_right = -7; }, kInvalid, "params.window_right"},
    {"scale_nan", [](AttnCall& c) { c.p.scale = std::numeric_limits<float>::quiet_NaN(); }, kInvalid, "params.scale"},
    {"scale_inf", [](AttnCall& c) { c.p.scale = std::numeric_limits<float>::infinity(); }, kInvalid, "params.scale"},
    {"strategy_code", [](AttnCall& c) { c.p.strategy = static_cast<Strategy>(9); }, kInvalid, "params.strategy"},
    {"exp2_code", [](AttnCall& c) { c.p.exp2 = static_cast<Exp2Mode>(5); }, kInvalid, "params.exp2"},
    {"threads_negative", [](AttnCall& c) { c.p.threads = -1; }, kInvalid, "params.threads"},
    {"descale_not_fp8", [](AttnCall& c) { c.p.q_descale = 2.0f; }, kInvalid, "params.q_descale"},
    {"descale_nan", [](AttnCall& c) { c.p.k_descale = std::numeric_limits<float>::quiet_NaN(); }, kInvalid,
     "params.k_descale"},
    {"descale_negative", [](AttnCall& c) { c.p.v_descale = -1.0f; }, kInvalid, "params.v_descale"},
    {"descale_zero", [](AttnCall& c) { c.p.q_descale = 0.0f; }, kInvalid, "params.q_descale"},
    {"descale_heads_not_fp8", [](AttnCall& c) { c.p.k_descale_heads = kHeadDescales; }, kInvalid,
     "params.k_descale_heads: per-head descales apply to fp8"},
    {"cu_seqlens_k_missing", [](AttnCall& c) { varlen(c, kCuGood, nullptr); }, kInvalid, "params.cu_seqlens_k"},
    {"cu_seqlens_q_missing", [](AttnCall& c) { varlen(c, nullptr, kCuGood); }, kInvalid, "params.cu_seqlens_q"},
    {"cu_seqlens_start", [](AttnCall& c) { varlen(c, kCuNonZero, kCuGood); }, kInvalid, "params.cu_seqlens_q: must start at 0"},
    {"cu_seqlens_decreasing", [](AttnCall& c) { varlen(c, kCuGood, kCuDecreasing); }, kInvalid,
     "params.cu_seqlens_k: must be non-decreasing"},
    {"cu_seqlens_too_long", [](AttnCall& c) { varlen(c, kCuTooLong, kCuGood); }, kInvalid, "params.cu_seqlens_q: last entry 7"},
    {"varlen_batch_zero", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); c.p.varlen_batch = 0; }, kInvalid,
     "params.varlen_batch"},
    {"varlen_batch_without_cu", [](AttnCall& c) { c.p.varlen_batch = 2; }, kInvalid, "params.varlen_batch"},
    {"varlen_batch_dim", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); for (Tensor* t : {&c.qv, &c.kv, &c.vv, &c.ov}) t->shape[0] = 2; c.lv.shape[0] = 2; },
     kInvalid, "q: varlen input must have B = 1"},
    {"max_seqlen_q_alone", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); c.p.max_seqlen_q = 3; }, kInvalid,
     "params.max_seqlen_k: max_seqlen_q and max_seqlen_k must be given together"},
    {"max_seqlen_negative", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); c.p.max_seqlen_q = -1; c.p.max_seqlen_k = 3; },
     kInvalid, "params.max_seqlen_q: must be in 1 .."},
    {"max_seqlen_k_past_rows", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); c.p.max_seqlen_q = 3; c.p.max_seqlen_k = 1000; },
     kInvalid, "params.max_seqlen_k: must be in 1 .."},
    {"max_seqlen_below_longest", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); c.p.max_seqlen_q = 2; c.p.max_seqlen_k = 3; },
     kInvalid, "params.max_seqlen_q: is below the longest sequence (3)"},
    {"max_seqlen_without_cu", [](AttnCall& c) { c.p.max_seqlen_q = c.p.max_seqlen_k = 2; }, kInvalid,
     "params.max_seqlen_q: is set but cu_seqlens_q/k are null"},
    // Arrays read by pointer live inside an output: the kernel would rewrite them mid-run.
    {"cu_seqlens_q_in_out",
     [](AttnCall& c) {
       int32_t* cu = static_cast<int32_t*>(c.ov.data);
       cu[0] = 0; cu[1] = 2; cu[2] = 5;
       varlen(c, cu, kCuGood);
     },
     kInvalid, "out: overlaps params.cu_seqlens_q"},
    {"cu_seqlens_k_in_lse",
     [](AttnCall& c) {
       int32_t* cu = static_cast<int32_t*>(c.lv.data) + 3;
       cu[0] = 0; cu[1] = 2; cu[2] = 5;
       varlen(c, kCuGood, cu);
     },
     kInvalid, "params.lse: overlaps params.cu_seqlens_k"},
    {"varlen_batch_huge", [](AttnCall& c) { varlen(c, kCuGood, kCuGood); c.p.varlen_batch = int64_t(1) << 50; },
     kInvalid, "params.varlen_batch"},
    // Outputs whose elements overlap: rows would race.
    {"out_zero_stride", [](AttnCall& c) { c.ov.strides[1] = 0; }, kInvalid, "out: shape [2, 5, 4, 16] with strides"},
    {"out_heads_overlap", [](AttnCall& c) { c.ov.strides[2] = 8; }, kInvalid, "makes elements overlap"},
    {"lse_zero_stride", [](AttnCall& c) { c.lv.strides[1] = 0; }, kInvalid, "params.lse: shape"},
    {"threads_too_many", [](AttnCall& c) { c.p.threads = 1 << 20; }, kInvalid, "params.threads: must be <="},
    {"tile_on_cpu", [](AttnCall& c) { c.p.tile_m = c.p.tile_n = 64; }, kInvalid, "params.tile_m: forces a CUDA"},
    {"dv_zero_with_lse", [](AttnCall& c) { c.vv.shape[3] = c.ov.shape[3] = 0; }, kInvalid, "v: Dv = 0 with params.lse"},
    {"k_on_cuda", [](AttnCall& c) { c.kv.device = fc::Device::cuda; }, kInvalid, "k: is on cuda"},
    {"device_unknown", [](AttnCall& c) { c.qv.device = static_cast<fc::Device>(7); }, kInvalid, "q: unknown device"},
};

class AttentionErrorTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionErrorTest, RefusedBeforeAnyKernel) {
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference::attention" : "attention");
    AttnCall c;
    c.reference = reference;
    GetParam().breakit(c);
    c.expect(GetParam().status, GetParam().needle);
  }
}

INSTANTIATE_TEST_SUITE_P(Api, AttentionErrorTest, ::testing::ValuesIn(kAttnCases),
                         [](const auto& info) { return std::string(info.param.name); });

// e4m3 q/k/v: the CPU backend refuses them (unsupported, output untouched); the fp64
// reference decodes them exactly and applies the descales: the same answer as the
// reference on f32 copies holding decoded value * descale (to f32 rounding of those).
TEST(AttentionError, E4m3CpuRefusedReferenceDequantizes) {
  Rng rng;
  FC_TRACE_SEED(rng);
  HostTensor q(DType::e4m3, {2, 5, 4, 16}), k(DType::e4m3, {2, 9, 2, 16}), v(DType::e4m3, {2, 9, 2, 16});
  HostTensor out(DType::f16, {2, 5, 4, 16}), lse(DType::f32, {2, 4, 5});
  q.fill_uniform(rng, -100, 100);
  k.fill_uniform(rng, -100, 100);
  v.fill_uniform(rng, -3, 3);
  fc::AttentionParams p;
  p.q_descale = 0.013f;
  p.k_descale = 0.021f;
  p.v_descale = 5.5f;
  p.causal = true;
  expect_error([&] { fc::attention(q.view(), k.view(), v.view(), out.view(), p); }, Status::unsupported,
               "q: dtype e4m3", {&out});
  HostTensor bad_out(DType::e4m3, {2, 5, 4, 16});
  expect_error([&] { fc::reference::attention(q.view(), k.view(), v.view(), bad_out.view(), p); },
               Status::invalid_argument, "out: fp8 attention writes bf16 or f16", {&bad_out});

  HostTensor ref(DType::f32, {2, 5, 4, 16}), ref_lse(DType::f32, {2, 4, 5});
  p.lse = lse.ptr();
  ASSERT_NO_THROW(fc::reference::attention(q.view(), k.view(), v.view(), ref.view(), p));
  HostTensor q32(DType::f32, q.shape()), k32(DType::f32, k.shape()), v32(DType::f32, v.shape());
  for (int64_t i = 0; i < q.numel(); ++i) q32.set(i, q.get(i) * double(p.q_descale));
  for (int64_t i = 0; i < k.numel(); ++i) k32.set(i, k.get(i) * double(p.k_descale));
  for (int64_t i = 0; i < v.numel(); ++i) v32.set(i, v.get(i) * double(p.v_descale));
  fc::AttentionParams p32;
  p32.causal = true;
  p32.lse = ref_lse.ptr();
  HostTensor want(DType::f32, {2, 5, 4, 16});
  fc::reference::attention(q32.view(), k32.view(), v32.view(), want.view(), p32);
  EXPECT_TRUE(close(ref, want, 1e-6));
  EXPECT_TRUE(lse_close(lse, ref_lse, 1e-6));

  // Per-head factors: entry b * Hkv + hk multiplies into the per-tensor descale; query head
  // h reads KV head h / 2 here (H 4, Hkv 2). The factors differ per batch and head, so a
  // wrong index changes the answer.
  const float qh[] = {0.5f, 2.0f, 1.5f, 0.25f}, kh[] = {3.0f, 0.75f, 1.25f, 2.0f}, vh[] = {0.1f, 4.0f, 0.6f, 1.7f};
  p.q_descale_heads = qh;
  p.k_descale_heads = kh;
  p.v_descale_heads = vh;
  ASSERT_NO_THROW(fc::reference::attention(q.view(), k.view(), v.view(), ref.view(), p));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 9; ++s)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 16; ++d) {
          const int64_t i = ((b * 9 + s) * 2 + h) * 16 + d, e = b * 2 + h;
          k32.set(i, k.get(i) * double(p.k_descale) * double(kh[e]));
          v32.set(i, v.get(i) * double(p.v_descale) * double(vh[e]));
        }
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 5; ++s)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t d = 0; d < 16; ++d) {
          const int64_t i = ((b * 5 + s) * 4 + h) * 16 + d;
          q32.set(i, q.get(i) * double(p.q_descale) * double(qh[b * 2 + h / 2]));
        }
  fc::reference::attention(q32.view(), k32.view(), v32.view(), want.view(), p32);
  EXPECT_TRUE(close(ref, want, 1e-6));
  EXPECT_TRUE(lse_close(lse, ref_lse, 1e-6));
  // A misaligned per-head array is refused, naming it.
  p.v_descale_heads = reinterpret_cast<const float*>(reinterpret_cast<const char*>(vh) + 2);
  expect_error([&] { fc::reference::attention(q.view(), k.view(), v.view(), ref.view(), p); },
               Status::invalid_argument, "params.v_descale_heads: must be 4-byte aligned", {});
  // The stored values are e4m3 codes (rounded to nearest even, saturating at 448).
  HostTensor s(DType::e4m3, {4});
  s.set(0, 1000.0);
  s.set(1, 0.3);
  s.set(2, -0.0009765625);  // 2^-10: half the smallest subnormal, ties to even (0)
  s.set(3, 17.0);          // between 16 and 18: ties to even (16)
  EXPECT_EQ(s.get(0), 448.0);
  EXPECT_EQ(s.get(1), 0.3125);
  EXPECT_EQ(s.get(2), 0.0);
  EXPECT_EQ(s.get(3), 16.0);
}

TEST(AttentionError, ValidCallPasses) {
  AttnCall c;
  c.run();
  EXPECT_TRUE(std::isfinite(c.out.get(0)));
}

TEST(AttentionError, UnknownImpl) {
  AttnCall c;
  c.p.impl = "f32_99x99_nonesuch";
  c.expect(kInvalid, "impl: no CPU micro-kernel named 'f32_99x99_nonesuch'");
}

TEST(AttentionError, UnknownKernelOfPair) {
  AttnCall c;
  c.p.impl = "f32_4x8_generic+f16_9x9_nonesuch";
  c.expect(kInvalid, "impl: no CPU micro-kernel named 'f16_9x9_nonesuch'");
}

TEST(AttentionError, ImplOfMissingIsa) {
  for (int i = 0; i < fc::cpu::gemm_ukernel_count(); ++i) {
    const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(i);
    if (fc::cpu::isa_available(k.isa)) continue;
    AttnCall c;
    c.p.impl = k.key;
    c.expect(kUnsupported, std::string("impl: kernel '") + k.key + "' needs ISA");
    return;
  }
  GTEST_SKIP() << "this CPU runs every kernel of the build";
}

TEST(AttentionError, CudaTensorsWithoutCuda) {
#if defined(FC_BUILD_CUDA)
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  AttnCall c;
  for (Tensor* t : {&c.qv, &c.kv, &c.vv, &c.ov, &c.lv}) t->device = fc::Device::cuda;
  c.expect(kUnsupported, "q: CUDA tensors given, but this flashcore was built without CUDA");
#endif
}

// ---------------------------------------------------------------- softmax_v
struct SvCall {
  HostTensor s{DType::f32, {5, 9}}, v{DType::f32, {9, 8}}, out{DType::f32, {5, 8}};
  Tensor sv, vv, ov;
  fc::SoftmaxVParams p;
  SvCall() {
    Rng rng;
    s.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    sv = s.view(); vv = v.view(); ov = out.view();
  }
};

struct SvCase {
  const char* name;
  std::function<void(SvCall&)> breakit;
  Status status;
  const char* needle;
};

const SvCase kSvCases[] = {
    {"s_rank3", [](SvCall& c) { c.sv.rank = 3; }, kInvalid, "s: expected rank 2"},
    {"v_rank1", [](SvCall& c) { c.vv.rank = 1; }, kInvalid, "v: expected rank 2"},
    {"s_dtype_f16", [](SvCall& c) { c.sv.dtype = DType::f16; }, kUnsupported, "s: scores must be f32 or i32"},
    {"v_dtype_i32", [](SvCall& c) { c.vv.dtype = c.ov.dtype = DType::i32; }, kUnsupported, "v: dtype i32"},
    {"out_dtype", [](SvCall& c) { c.ov.dtype = DType::f16; }, kInvalid, "out: dtype f16"},
    {"v_length", [](SvCall& c) { c.vv.shape[0] = 8; }, kInvalid, "v: dim 0 (L)"},
    {"out_rows", [](SvCall& c) { c.ov.shape[0] = 4; }, kInvalid, "out: dim 0 (M)"},
    {"out_cols", [](SvCall& c) { c.ov.shape[1] = 7; }, kInvalid, "out: dim 1 (d)"},
    {"s_not_contiguous", [](SvCall& c) { c.sv.strides[0] = 18; c.sv.strides[1] = 2; }, kInvalid,
     "s: the last dim must be contiguous"},
    {"v_negative_stride", [](SvCall& c) { c.vv.strides[0] = -8; }, kInvalid, "v: stride"},
    {"s_null", [](SvCall& c) { c.sv.data = nullptr; }, kInvalid, "s: data is a null pointer"},
    {"out_aliases_v", [](SvCall& c) { c.ov.data = c.vv.data; }, kInvalid, "out: overlaps"},
    {"out_aliases_s", [](SvCall& c) { c.ov.data = static_cast<float*>(c.sv.data) + 3; }, kInvalid, "out: overlaps s"},
    {"scale_nan", [](SvCall& c) { c.p.scale = std::nanf(""); }, kInvalid, "params.scale"},
    {"strategy_code", [](SvCall& c) { c.p.strategy = static_cast<Strategy>(-1); }, kInvalid, "params.strategy"},
    {"threads_negative", [](SvCall& c) { c.p.threads = -3; }, kInvalid, "params.threads"},
    {"impl_unknown", [](SvCall& c) { c.p.impl = "nope"; }, kInvalid, "impl: no CPU micro-kernel named 'nope'"},
    {"impl_pair", [](SvCall& c) { c.p.impl = "f32_4x8_generic+f32_4x16_generic"; }, kInvalid,
     "impl: 'f32_4x8_generic+f32_4x16_generic' names a kernel pair, which only attention takes"},
    {"s_on_cuda", [](SvCall& c) { for (Tensor* t : {&c.sv, &c.vv, &c.ov}) t->device = fc::Device::cuda; },
     kUnsupported, "s: softmax_v runs on the CPU"},
};

class SoftmaxVErrorTest : public ::testing::TestWithParam<SvCase> {};

TEST_P(SoftmaxVErrorTest, RefusedBeforeAnyKernel) {
  SvCall c;
  GetParam().breakit(c);
  expect_error([&] { fc::softmax_v(c.sv, c.vv, c.ov, c.p); }, GetParam().status, GetParam().needle, {&c.out});
}

INSTANTIATE_TEST_SUITE_P(Api, SoftmaxVErrorTest, ::testing::ValuesIn(kSvCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------- gemm_chain
struct GcCall {
  HostTensor a{DType::f32, {5, 6}}, b{DType::f32, {6, 7}}, c{DType::f32, {7, 8}}, out{DType::f32, {5, 8}};
  Tensor av, bv, cv, ov;
  fc::GemmChainParams p;
  GcCall() {
    Rng rng;
    a.fill_uniform(rng, -1, 1);
    b.fill_uniform(rng, -1, 1);
    c.fill_uniform(rng, -1, 1);
    av = a.view(); bv = b.view(); cv = c.view(); ov = out.view();
  }
};

struct GcCase {
  const char* name;
  std::function<void(GcCall&)> breakit;
  Status status;
  const char* needle;
};

const GcCase kGcCases[] = {
    {"a_rank1", [](GcCall& c) { c.av.rank = 1; }, kInvalid, "a: expected rank 2"},
    {"b_inner", [](GcCall& c) { c.bv.shape[0] = 5; }, kInvalid, "b: dim 0 (K1)"},
    {"c_inner", [](GcCall& c) { c.cv.shape[0] = 6; }, kInvalid, "c: dim 0 (K2)"},
    {"out_cols", [](GcCall& c) { c.ov.shape[1] = 9; }, kInvalid, "out: dim 1 (N)"},
    {"out_rows", [](GcCall& c) { c.ov.shape[0] = 4; }, kInvalid, "out: dim 0 (M)"},
    {"c_dtype", [](GcCall& c) { c.cv.dtype = DType::bf16; }, kInvalid, "c: dtype bf16"},
    {"dtype_i32", [](GcCall& c) { for (Tensor* t : {&c.av, &c.bv, &c.cv, &c.ov}) t->dtype = DType::i32; },
     kUnsupported, "a: dtype i32"},
    {"b_null", [](GcCall& c) { c.bv.data = nullptr; }, kInvalid, "b: data is a null pointer"},
    {"c_last_dim_strided", [](GcCall& c) { c.cv.strides[1] = 3; }, kInvalid, "c: the last dim must be contiguous"},
    {"a_negative_stride", [](GcCall& c) { c.av.strides[0] = -6; }, kInvalid, "a: stride"},
    {"out_aliases_a", [](GcCall& c) { c.ov.data = c.av.data; }, kInvalid, "out: overlaps a"},
    {"out_aliases_c", [](GcCall& c) { c.ov.data = static_cast<float*>(c.cv.data) + 50; }, kInvalid, "out: overlaps c"},
    {"threads_negative", [](GcCall& c) { c.p.threads = -1; }, kInvalid, "params.threads"},
    {"impl_unknown", [](GcCall& c) { c.p.impl = "f32_1x1_bogus"; }, kInvalid, "impl: no CPU micro-kernel"},
    {"a_on_cuda", [](GcCall& c) { for (Tensor* t : {&c.av, &c.bv, &c.cv, &c.ov}) t->device = fc::Device::cuda; },
     kUnsupported, "a: gemm_chain runs on the CPU"},
};

class GemmChainErrorTest : public ::testing::TestWithParam<GcCase> {};

TEST_P(GemmChainErrorTest, RefusedBeforeAnyKernel) {
  GcCall c;
  GetParam().breakit(c);
  expect_error([&] { fc::gemm_chain(c.av, c.bv, c.cv, c.ov, c.p); }, GetParam().status, GetParam().needle,
               {&c.out});
}

INSTANTIATE_TEST_SUITE_P(Api, GemmChainErrorTest, ::testing::ValuesIn(kGcCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------- pre-packed operands
// Valid packed calls (gemm_chain's B and C, softmax_v's V packed once with the automatic
// kernel), which each case breaks in one way; `call` picks the entry point.
enum class PkCallKind { gemm_chain, softmax_v, pack_gemm_chain, pack_softmax_v };

struct PkCall {
  GcCall gc;
  SvCall sv;
  fc::PackedOperands bc = fc::pack_gemm_chain(gc.bv, gc.cv);
  fc::PackedOperands v = fc::pack_softmax_v(sv.vv);
  void run(PkCallKind kind) {
    switch (kind) {
      case PkCallKind::gemm_chain: fc::gemm_chain(gc.av, bc, gc.ov, gc.p); break;
      case PkCallKind::softmax_v: fc::softmax_v(sv.sv, v, sv.ov, sv.p); break;
      case PkCallKind::pack_gemm_chain: bc = fc::pack_gemm_chain(gc.bv, gc.cv, gc.p); break;
      case PkCallKind::pack_softmax_v: v = fc::pack_softmax_v(sv.vv, sv.p); break;
    }
  }
};

// A GEMM kernel this machine runs other than `key` (null when there is none).
const char* other_kernel(const std::string& key) {
  for (int i = 0; i < fc::cpu::gemm_ukernel_count(); ++i) {
    const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(i);
    if (fc::cpu::isa_available(k.isa) && key != k.key && k.ab == DType::f32) return k.key;
  }
  return nullptr;
}

struct PkCase {
  const char* name;
  PkCallKind kind;
  std::function<void(PkCall&)> breakit;
  Status status;
  const char* needle;
};

using K = PkCallKind;
const PkCase kPkCases[] = {
    {"chain_a_k1", K::gemm_chain, [](PkCall& c) { c.gc.av.shape[1] = 5; }, kInvalid, "a: dim 1 (K1) is 5 but packed says 6"},
    {"chain_out_cols", K::gemm_chain, [](PkCall& c) { c.gc.ov.shape[1] = 7; }, kInvalid, "out: dim 1 (N) is 7 but packed says 8"},
    {"chain_out_rows", K::gemm_chain, [](PkCall& c) { c.gc.ov.shape[0] = 4; }, kInvalid, "out: dim 0 (M)"},
    {"chain_a_dtype", K::gemm_chain, [](PkCall& c) { c.gc.av.dtype = c.gc.ov.dtype = DType::f16; }, kInvalid,
     "packed: dtype f32 differs from a's f16"},
    {"chain_out_dtype", K::gemm_chain, [](PkCall& c) { c.gc.ov.dtype = DType::bf16; }, kInvalid, "out: dtype bf16"},
    {"chain_a_null", K::gemm_chain, [](PkCall& c) { c.gc.av.data = nullptr; }, kInvalid, "a: data is a null pointer"},
    {"chain_empty", K::gemm_chain, [](PkCall& c) { c.bc = fc::PackedOperands(); }, kInvalid,
     "packed: is empty (make it with pack_gemm_chain)"},
    {"chain_packed_for_softmax_v", K::gemm_chain, [](PkCall& c) { c.bc = c.v; }, kInvalid,
     "packed: was packed for softmax_v (pack_softmax_v), not for gemm_chain"},
    {"chain_impl_other", K::gemm_chain, [](PkCall& c) { c.gc.p.impl = other_kernel(c.bc.kernel()); }, kInvalid,
     "params.impl: names kernel"},
    {"chain_out_aliases_a", K::gemm_chain, [](PkCall& c) { c.gc.ov.data = c.gc.av.data; }, kInvalid, "out: overlaps a"},
    {"chain_threads", K::gemm_chain, [](PkCall& c) { c.gc.p.threads = -1; }, kInvalid, "params.threads"},
    {"softmax_s_length", K::softmax_v, [](PkCall& c) { c.sv.sv.shape[1] = 8; }, kInvalid, "s: dim 1 (L) is 8 but packed says 9"},
    {"softmax_out_cols", K::softmax_v, [](PkCall& c) { c.sv.ov.shape[1] = 7; }, kInvalid, "out: dim 1 (d) is 7 but packed says 8"},
    {"softmax_out_dtype", K::softmax_v, [](PkCall& c) { c.sv.ov.dtype = DType::f16; }, kInvalid,
     "out: dtype f16 differs from packed's f32"},
    {"softmax_s_dtype", K::softmax_v, [](PkCall& c) { c.sv.sv.dtype = DType::bf16; }, kUnsupported, "s: scores must be"},
    {"softmax_s_null", K::softmax_v, [](PkCall& c) { c.sv.sv.data = nullptr; }, kInvalid, "s: data is a null pointer"},
    {"softmax_packed_for_chain", K::softmax_v, [](PkCall& c) { c.v = c.bc; }, kInvalid,
     "packed: was packed for gemm_chain (pack_gemm_chain), not for softmax_v"},
    {"softmax_impl_other", K::softmax_v, [](PkCall& c) { c.sv.p.impl = other_kernel(c.v.kernel()); }, kInvalid,
     "params.impl: names kernel"},
    {"softmax_scale", K::softmax_v, [](PkCall& c) { c.sv.p.scale = std::nanf(""); }, kInvalid, "params.scale"},
    {"pack_chain_c_inner", K::pack_gemm_chain, [](PkCall& c) { c.gc.cv.shape[0] = 6; }, kInvalid, "c: dim 0 (K2)"},
    {"pack_chain_b_null", K::pack_gemm_chain, [](PkCall& c) { c.gc.bv.data = nullptr; }, kInvalid, "b: data is a null pointer"},
    {"pack_chain_dtype_i32", K::pack_gemm_chain, [](PkCall& c) { c.gc.bv.dtype = c.gc.cv.dtype = DType::i32; },
     kUnsupported, "b: dtype i32"},
    {"pack_chain_c_dtype", K::pack_gemm_chain, [](PkCall& c) { c.gc.cv.dtype = DType::f16; }, kInvalid, "c: dtype f16"},
    {"pack_chain_impl", K::pack_gemm_chain, [](PkCall& c) { c.gc.p.impl = "nope"; }, kInvalid, "impl: no CPU micro-kernel"},
    {"pack_chain_cuda", K::pack_gemm_chain, [](PkCall& c) { c.gc.bv.device = c.gc.cv.device = fc::Device::cuda; },
     kUnsupported, "b: gemm_chain runs on the CPU"},
    {"pack_softmax_v_rank", K::pack_softmax_v, [](PkCall& c) { c.sv.vv.rank = 3; }, kInvalid, "v: expected rank 2"},
    {"pack_softmax_v_strided", K::pack_softmax_v, [](PkCall& c) { c.sv.vv.strides[1] = 2; }, kInvalid,
     "v: the last dim must be contiguous"},
    {"pack_softmax_threads", K::pack_softmax_v, [](PkCall& c) { c.sv.p.threads = -2; }, kInvalid, "params.threads"},
};

class PackedErrorTest : public ::testing::TestWithParam<PkCase> {};

TEST_P(PackedErrorTest, RefusedBeforeAnyKernel) {
  PkCall c;
  const PkCase& cs = GetParam();
  if (std::string(cs.name).find("impl_other") != std::string::npos && other_kernel(c.bc.kernel()) == nullptr)
    GTEST_SKIP() << "this machine runs only one f32 GEMM kernel";
  cs.breakit(c);
  // A failed pack leaves the packed objects as they were.
  const std::string bc0 = c.bc.describe(), v0 = c.v.describe();
  expect_error([&] { c.run(cs.kind); }, cs.status, cs.needle, {&c.gc.out, &c.sv.out});
  EXPECT_EQ(c.bc.describe(), bc0);
  EXPECT_EQ(c.v.describe(), v0);
}

INSTANTIATE_TEST_SUITE_P(Api, PackedErrorTest, ::testing::ValuesIn(kPkCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Packed for a SIMD kernel, then the portable kernels forced: the call is refused (the
// packed layout is not the portable kernel's).
TEST(PackedError, ForceGenericAfterPacking) {
  PkCall c;
  if (fc::cpu::select_kernels(DType::f32, nullptr).gemm->isa == fc::cpu::Isa::generic)
    GTEST_SKIP() << "the automatic kernel is the portable one on this machine";
  ForceGeneric generic(true);
  expect_error([&] { c.run(K::gemm_chain); }, kInvalid, "packed: was packed for kernel", {&c.gc.out});
  expect_error([&] { c.run(K::softmax_v); }, kInvalid, "portable kernels are forced", {&c.sv.out});
}

}  // namespace
}  // namespace fctest
