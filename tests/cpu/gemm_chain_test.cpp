// gemm_chain (E = (A B) C, A B never materialized) against the fp64 reference: odd
// sizes, padded row strides, every storage dtype, 1 and 2 threads, every GEMM kernel
// forced by key, and the forced portable path.
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

struct GcCase {
  const char* name;
  int64_t m, k1, k2, n;
  int64_t pad = 0;
};

const GcCase kCases[] = {
    {"tiny", 1, 1, 1, 1},
    {"k1_32", 7, 32, 63, 80, 3},
    {"k2_1000", 63, 96, 1000, 64},
    {"m_1000", 1000, 64, 7, 128, 1},
    {"k1_256", 130, 256, 300, 96},
    // 17 query blocks of 96: two groups of blocks sharing the packed K2 tiles on 2 threads,
    // K2 ending inside a tile.
    {"groups", 1600, 20, 300, 24, 1},
    // Two query blocks of 100 rows (stage 1 pads them to NR, stage 2 to MR: T's padding
    // columns must stay zero), K1 over two k chunks of unequal need (300), K2 over several
    // key tiles ending inside one, odd N.
    {"blocks_pad", 200, 300, 1000, 7, 2},
    // The block shape with K2 cut short: M = 256 as two blocks of 128.
    {"m256", 256, 256, 250, 256},
};

struct GcFixture {
  GcCase c;
  DType dtype;
  HostTensor a, b, cc, ref;

  GcFixture(const GcCase& cs, DType dt, Rng& rng) : c(cs), dtype(dt) {
    a = HostTensor(dt, {c.m, c.k1}, {}, c.pad);
    b = HostTensor(dt, {c.k1, c.k2}, {}, c.pad);
    cc = HostTensor(dt, {c.k2, c.n}, {}, c.pad);
    a.fill_uniform(rng, -1, 1);
    b.fill_uniform(rng, -1, 1);
    cc.fill_uniform(rng, -1, 1);
    HostTensor af = to_f32(a), bf = to_f32(b), cf = to_f32(cc);
    ref = HostTensor(DType::f32, {c.m, c.n});
    fc::reference::gemm_chain(af.view(), bf.view(), cf.view(), ref.view());
  }

  void check(int threads, const char* impl, DType kernel_ab) {
    SCOPED_TRACE("threads " + std::to_string(threads) + ", impl " + (impl ? impl : "auto"));
    HostTensor out(dtype, {c.m, c.n}, {}, c.pad);
    fc::GemmChainParams p;
    p.threads = threads;
    p.impl = impl;
    fc::PhaseTimes times;
    fc::gemm_chain(a.view(), b.view(), cc.view(), out.view(), p, &times);
    EXPECT_TRUE(close(out, ref, tolerance(dtype, kernel_ab, Exp2Mode::exact, c.k2)));
    EXPECT_TRUE(out.padding_untouched()) << "gemm_chain wrote outside the output view";
    if (impl != nullptr) {
      EXPECT_EQ(times.kernel, impl);
    }
  }
};

class GemmChainTest : public ::testing::TestWithParam<std::tuple<GcCase, DType>> {};

TEST_P(GemmChainTest, MatchesReference) {
  const auto& [c, dt] = GetParam();
  Rng rng;
  FC_TRACE_SEED(rng);
  GcFixture f(c, dt, rng);
  for (int threads : {1, 2}) f.check(threads, nullptr, DType::f32);
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, GemmChainTest, ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kStorageTypes)),
    CaseDtypeName());

class GemmChainKernelTest : public ::testing::TestWithParam<int> {};

TEST_P(GemmChainKernelTest, ForcedKernelMatchesReference) {
  const fc::cpu::GemmUkernel& k = fc::cpu::gemm_ukernel(GetParam());
  FC_SKIP_UNLESS_RUNNABLE(k);
  Rng rng;
  FC_TRACE_SEED(rng);
  // K1 = 50: stage 1 in one kernel call per tile (an fp16-accumulating kernel writes its
  // fp16 tiles straight into the second GEMM's operand); K1 = 300: in k chunks.
  for (DType dt : kStorageTypes)
    for (int64_t k1 : {50, 300}) {
      SCOPED_TRACE("storage " + name(dt) + ", K1 " + std::to_string(k1));
      GcFixture f({"forced", 37, k1, 290, 41, 2}, dt, rng);
      f.check(2, k.key, k.ab);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, GemmChainKernelTest, ::testing::Range(0, fc::cpu::gemm_ukernel_count()),
                         [](const auto& info) { return std::string(fc::cpu::gemm_ukernel(info.param).key); });

TEST(GemmChain, ForceGeneric) {
  ForceGeneric generic(true);
  Rng rng;
  FC_TRACE_SEED(rng);
  GcFixture f({"generic", 20, 30, 70, 33}, DType::bf16, rng);
  f.check(1, nullptr, DType::f32);
}

TEST(GemmChain, ZeroSizedIsNoOp) {
  HostTensor a(DType::f32, {0, 4}), b(DType::f32, {4, 5}), c(DType::f32, {5, 6}), out(DType::f32, {0, 6});
  const auto out0 = out.snapshot();
  fc::gemm_chain(a.view(), b.view(), c.view(), out.view());
  EXPECT_EQ(out.snapshot(), out0);
}

// K2 = 0: the intermediate is empty, so E is all zeros.
TEST(GemmChain, EmptyInnerDimGivesZeros) {
  HostTensor a(DType::f32, {5, 4}), out(DType::f32, {5, 6});
  Rng rng;
  a.fill_uniform(rng, -1, 1);
  Tensor b = Tensor::contiguous(nullptr, DType::f32, {4, 0});
  Tensor c = Tensor::contiguous(nullptr, DType::f32, {0, 6});
  fc::gemm_chain(a.view(), b, c, out.view());
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << "element " << i;
}

// K1 = 0 (A is M x 0, B is 0 x K2): A B is all zeros, so E is too; every storage dtype,
// into a NaN-poisoned output. (libFuzzer found the packing clearing a null empty buffer.)
TEST(GemmChain, EmptyFirstInnerDimGivesZeros) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    HostTensor a(t, {13, 0}), b(t, {0, 15}), c(t, {15, 7}), out(t, {13, 7});
    Rng rng;
    c.fill_uniform(rng, -1, 1);
    out.poison();
    fc::gemm_chain(a.view(), b.view(), c.view(), out.view());
    for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << "dtype " << int(t) << " element " << i;
  }
}

}  // namespace
}  // namespace fctest
