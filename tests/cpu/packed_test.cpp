// Pre-packed operands (pack_gemm_chain / pack_softmax_v and the calls that take them)
// against the fp64 reference and against the unpacked calls: fresh random inputs,
// poisoned outputs, odd sizes, several calls on one packed object with different A / S
// (and M), every GEMM kernel this machine runs, and packing that copies (the source
// tensors may change afterwards). Bad input is in tests/api/errors_test.cpp.
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

// Runs `call` into a freshly poisoned output and checks it against `ref`; returns the
// output for bitwise comparisons.
template <class Call>
HostTensor run_poisoned(DType dt, std::vector<int64_t> shape, int64_t pad, const HostTensor& ref,
                        double tol, const Call& call) {
  HostTensor out(dt, std::move(shape), {}, pad);
  out.poison();
  call(out.view());
  EXPECT_TRUE(close(out, ref, tol));
  EXPECT_TRUE(out.padding_untouched()) << "wrote outside the output view";
  return out;
}

// ---------------------------------------------------------------- gemm_chain
struct PcCase {
  const char* name;
  int64_t k1, k2, n;
  int64_t pad;
  std::vector<int64_t> ms;  // one packed B, C serves A of each of these row counts
};

const PcCase kChainCases[] = {
    {"tiny", 1, 1, 1, 0, {1, 2}},
    {"sevens", 7, 7, 7, 3, {7, 1, 13}},
    // K2 over three 120-key tiles, the last ending inside; N not a multiple of NR.
    {"tiles", 50, 250, 41, 1, {130, 37, 130}},
    // The block shape with K2 cut short (M = 256: two blocks of 128, K2 split).
    {"m256", 64, 500, 96, 0, {256, 255}},
};

class PackedGemmChainTest : public ::testing::TestWithParam<std::tuple<PcCase, DType>> {};

struct ChainOperands {
  HostTensor b, c, bf, cf;
  ChainOperands(const PcCase& cs, DType dt, Rng& rng)
      : b(dt, {cs.k1, cs.k2}, {}, cs.pad), c(dt, {cs.k2, cs.n}, {}, cs.pad) {
    b.fill_uniform(rng, -1, 1);
    c.fill_uniform(rng, -1, 1);
    bf = to_f32(b);
    cf = to_f32(c);
  }
};

// For each M of the case: a fresh A, the packed call and the unpacked call (same kernel,
// same threads), both against the reference; the two must agree bit for bit (the same
// tiles through the same kernel in the same order).
void check_chain(const PcCase& cs, DType dt, const char* impl, DType kernel_ab, Rng& rng) {
  ChainOperands ops(cs, dt, rng);
  fc::GemmChainParams p;
  p.impl = impl;
  p.threads = 2;
  const fc::PackedOperands packed = fc::pack_gemm_chain(ops.b.view(), ops.c.view(), p);
  ASSERT_FALSE(packed.empty());
  EXPECT_STREQ(packed.op(), "gemm_chain");
  EXPECT_EQ(packed.dtype(), dt);
  EXPECT_EQ(packed.dim(0), cs.k1);
  EXPECT_EQ(packed.dim(1), cs.k2);
  EXPECT_EQ(packed.dim(2), cs.n);
  if (impl != nullptr) {
    EXPECT_STREQ(packed.kernel(), impl);
  }
  const double tol = tolerance(dt, kernel_ab, Exp2Mode::exact, cs.k2);
  int call = 0;
  for (int64_t m : cs.ms) {
    SCOPED_TRACE("M " + std::to_string(m) + ", call " + std::to_string(call));
    HostTensor a(dt, {m, cs.k1}, {}, cs.pad);
    a.fill_uniform(rng, -1, 1);
    HostTensor ref(DType::f32, {m, cs.n});
    fc::reference::gemm_chain(to_f32(a).view(), ops.bf.view(), ops.cf.view(), ref.view());
    p.threads = 1 + call++ % 2;
    p.impl = impl;
    fc::PhaseTimes times;
    const HostTensor packed_out = run_poisoned(dt, {m, cs.n}, cs.pad, ref, tol, [&](const Tensor& o) {
      fc::gemm_chain(a.view(), packed, o, p, &times);
    });
    EXPECT_EQ(times.kernel, packed.kernel());
    p.impl = packed.kernel();
    const HostTensor unpacked_out = run_poisoned(dt, {m, cs.n}, cs.pad, ref, tol, [&](const Tensor& o) {
      fc::gemm_chain(a.view(), ops.b.view(), ops.c.view(), o, p);
    });
    EXPECT_EQ(packed_out.snapshot(), unpacked_out.snapshot()) << "packed and unpacked calls differ";
  }
}

TEST_P(PackedGemmChainTest, MatchesUnpackedAndReference) {
  Rng rng;
  FC_TRACE_SEED(rng);
  check_chain(std::get<0>(GetParam()), std::get<1>(GetParam()), nullptr, DType::f32, rng);
}

// ---------------------------------------------------------------- softmax_v
struct PsCase {
  const char* name;
  int64_t l, d;
  std::vector<int64_t> ms;
  DType s_dtype = DType::f32;
  bool colmajor = false;
  int64_t pad = 0;
  float scale = 1.0f;
};

const PsCase kSoftmaxCases[] = {
    {"tiny", 1, 1, {1, 2}},
    {"sevens", 7, 7, {7, 1}, DType::f32, true, 3},
    // Seed 000's M = 12 (the row ops' range unpacked, the GEMM kernel packed), keys over
    // several 256-key tiles ending inside one, d not a multiple of NR; then M > 64.
    {"seed_rows", 1000, 72, {12, 65, 12}, DType::f32, false, 1, 0.5f},
    {"i32", 300, 40, {130, 5}, DType::i32, true, 0, 0.02f},
};

class PackedSoftmaxVTest : public ::testing::TestWithParam<std::tuple<PsCase, DType>> {};

struct SoftmaxOperands {
  HostTensor v, vf;
  SoftmaxOperands(const PsCase& cs, DType dt, Rng& rng) : v(dt, {cs.l, cs.d}, {}, cs.pad) {
    v.fill_uniform(rng, -1, 1);
    vf = to_f32(v);
  }
};

HostTensor make_scores(const PsCase& cs, int64_t m, Rng& rng) {
  HostTensor s(cs.s_dtype, {m, cs.l}, cs.colmajor ? std::vector<int>{1, 0} : std::vector<int>{}, cs.pad);
  if (cs.s_dtype == DType::i32) s.fill_int(rng, -600, 600);
  else s.fill_uniform(rng, -6, 6);
  return s;
}

// Every strategy and exp mode for each M of the case, fresh S each time, against the
// reference; with a forced kernel also bit for bit against the unpacked call (which
// then runs the same GEMM path).
void check_softmax(const PsCase& cs, DType dt, const char* impl, DType kernel_ab, Rng& rng) {
  SoftmaxOperands ops(cs, dt, rng);
  fc::SoftmaxVParams p;
  p.impl = impl;
  p.scale = cs.scale;
  const fc::PackedOperands packed = fc::pack_softmax_v(ops.v.view(), p);
  EXPECT_STREQ(packed.op(), "softmax_v");
  EXPECT_EQ(packed.dim(0), cs.l);
  EXPECT_EQ(packed.dim(1), cs.d);
  if (impl != nullptr) {
    EXPECT_STREQ(packed.kernel(), impl);
  }
  int call = 0;
  for (int64_t m : cs.ms) {
    const HostTensor s = make_scores(cs, m, rng);
    HostTensor ref(DType::f32, {m, cs.d});
    fc::reference::softmax_v(s.view(), ops.vf.view(), ref.view(), p);
    for (Strategy st : kStrategies)
      for (Exp2Mode e : kExpModes) {
        SCOPED_TRACE("M " + std::to_string(m) + ", strategy " + name(st) + ", exp " + name(e));
        p.strategy = st;
        p.exp2 = e;
        p.threads = 1 + call++ % 2;
        p.impl = impl;
        const double tol = tolerance(dt, kernel_ab, e, cs.l);
        fc::PhaseTimes times;
        const HostTensor packed_out = run_poisoned(dt, {m, cs.d}, cs.pad, ref, tol, [&](const Tensor& o) {
          fc::softmax_v(s.view(), packed, o, p, &times);
        });
        EXPECT_EQ(times.kernel, packed.kernel());
        EXPECT_EQ(times.pack, 0.0) << "the packed call packed V";
        const HostTensor unpacked_out = run_poisoned(dt, {m, cs.d}, cs.pad, ref, tol, [&](const Tensor& o) {
          fc::softmax_v(s.view(), ops.v.view(), o, p);
        });
        if (impl != nullptr) {
          EXPECT_EQ(packed_out.snapshot(), unpacked_out.snapshot()) << "packed and unpacked calls differ";
        }
      }
  }
}

TEST_P(PackedSoftmaxVTest, MatchesUnpackedAndReference) {
  Rng rng;
  FC_TRACE_SEED(rng);
  check_softmax(std::get<0>(GetParam()), std::get<1>(GetParam()), nullptr, DType::f32, rng);
}

// ---------------------------------------------------------------- every kernel
class PackedKernelTest : public KernelTest {};

TEST_P(PackedKernelTest, ForcedKernelMatchesUnpackedAndReference) {
  const fc::cpu::GemmUkernel& k = kernel();
  Rng rng;
  FC_TRACE_SEED(rng);
  for (DType dt : kStorageTypes) {
    SCOPED_TRACE("storage " + name(dt));
    check_chain({"forced", 50, 290, 41, 2, {37, 12}}, dt, k.key, k.ab, rng);
    check_softmax({"forced", 333, 72, {12, 45}, DType::f32, true, 1}, dt, k.key, k.ab, rng);
  }
}


// ---------------------------------------------------------------- ownership, edges
// Packing copies: the packed object stays valid after its sources change or go away, and
// copies of it share the one buffer.
TEST(Packed, OutlivesItsSources) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const PcCase cs{"own", 30, 200, 20, 0, {9}};
  HostTensor a(DType::f32, {9, cs.k1}), ref(DType::f32, {9, cs.n});
  a.fill_uniform(rng, -1, 1);
  fc::PackedOperands copy;
  {
    ChainOperands ops(cs, DType::f32, rng);
    fc::reference::gemm_chain(a.view(), ops.bf.view(), ops.cf.view(), ref.view());
    const fc::PackedOperands packed = fc::pack_gemm_chain(ops.b.view(), ops.c.view());
    copy = packed;
    ops.b.poison();
    ops.c.poison();
    EXPECT_EQ(copy.bytes(), packed.bytes());
  }
  run_poisoned(DType::f32, {9, cs.n}, 0, ref, tolerance(DType::f32, Exp2Mode::exact, cs.k2),
               [&](const Tensor& o) { fc::gemm_chain(a.view(), copy, o); });
  EXPECT_NE(copy.describe().find("gemm_chain f32 K1=30 K2=200 N=20 for "), std::string::npos)
      << copy.describe();
}

// K2 = 0: nothing packed, E = 0; M = 0: a no-op.
TEST(Packed, EmptyDims) {
  const Tensor b = Tensor::contiguous(nullptr, DType::f32, {4, 0});
  const Tensor c = Tensor::contiguous(nullptr, DType::f32, {0, 6});
  const fc::PackedOperands packed = fc::pack_gemm_chain(b, c);
  HostTensor a(DType::f32, {5, 4}), out(DType::f32, {5, 6});
  Rng rng;
  a.fill_uniform(rng, -1, 1);
  out.poison();
  fc::gemm_chain(a.view(), packed, out.view());
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << "element " << i;
  HostTensor a0(DType::f32, {0, 4}), out0(DType::f32, {0, 6});
  const auto before = out0.snapshot();
  fc::gemm_chain(a0.view(), packed, out0.view());
  EXPECT_EQ(out0.snapshot(), before);
}

// The portable kernels forced before packing: the packed object is for the portable
// kernel, and calls under the same setting use it.
TEST(Packed, ForceGeneric) {
  ForceGeneric generic(true);
  Rng rng;
  FC_TRACE_SEED(rng);
  const fc::cpu::CpuConfig cfg = fc::cpu::select_kernels(DType::f32, nullptr);
  check_chain({"generic", 20, 70, 33, 0, {20}}, DType::bf16, nullptr, DType::f32, rng);
  const fc::PackedOperands packed = fc::pack_softmax_v(Tensor::contiguous(nullptr, DType::f32, {0, 8}));
  EXPECT_STREQ(packed.kernel(), cfg.gemm->key);
}

INSTANTIATE_TEST_SUITE_P(Cpu, PackedGemmChainTest,
                         ::testing::Combine(::testing::ValuesIn(kChainCases), ::testing::ValuesIn(kStorageTypes)),
                         CaseDtypeName());
INSTANTIATE_TEST_SUITE_P(Cpu, PackedSoftmaxVTest,
                         ::testing::Combine(::testing::ValuesIn(kSoftmaxCases), ::testing::ValuesIn(kStorageTypes)),
                         CaseDtypeName());
INSTANTIATE_TEST_SUITE_P(Cpu, PackedKernelTest, ::testing::Range(0, fc::cpu::gemm_ukernel_count()), KernelName());

}  // namespace
}  // namespace fctest
