// One test per GEMM micro-kernel, generated from the kernel list itself: gemm.inc is
// expanded here as it is in the dispatch table, so a kernel added to the list is tested
// with no edit to this file. Each runs against a double-precision reference for several
// kc, in init and accumulate form, with a_stride > MR (a_stride > kc for row-major A) and
// ldc > NR, in the operand layouts the kernel's entry names (k-major, k pairs, rows);
// kernels whose ISA this CPU lacks are skipped with a message naming the ISA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "core/dtype.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
namespace cpu = flashcore::cpu;

struct GemmEntry {
  const char* key;
  cpu::Isa isa;
  DType ab, acc;
  int mr, nr, k_align;
  cpu::GemmFn fn;
  cpu::Layout a_layout, b_layout;
};

#define FC_GEMM_UKERNEL(key_, isa_, ab_, acc_, mr_, nr_, ka_, al_, bl_)                          \
  GemmEntry{#key_, cpu::Isa::isa_, DType::ab_, DType::acc_, mr_, nr_, ka_, &cpu::ukernels::key_, \
            cpu::Layout::al_, cpu::Layout::bl_},
const GemmEntry kGemmKernels[] = {
#include "cpu/ukernels/gemm.inc"
};
#undef FC_GEMM_UKERNEL

// 64-byte aligned scratch of `n` elements of `t`, every element set to NaN bits.
class Buf {
 public:
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(DType t, int64_t n) : t_(t), bytes_(size_t(n) * fc::dtype_size(t)) {
    raw_.resize(bytes_ + 64);
    p_ = raw_.data() + (64 - reinterpret_cast<uintptr_t>(raw_.data()) % 64) % 64;
    for (int64_t i = 0; i < n; ++i) set_bits_nan(i);
  }
  void* data() { return p_; }
  double get(int64_t i) const { return fc::core::load_as_f32(p_, i, t_); }
  void set(int64_t i, double v) { fc::core::store_from_f32(p_, i, t_, float(v)); }
  std::vector<uint8_t> bytes() const { return {p_, p_ + bytes_}; }
  size_t esize() const { return fc::dtype_size(t_); }

 private:
  void set_bits_nan(int64_t i) {
    if (fc::dtype_size(t_) == 2) { const uint16_t v = 0x7E00; std::memcpy(p_ + i * 2, &v, 2); }
    else { const uint32_t v = 0x7FC00000u; std::memcpy(p_ + i * 4, &v, 4); }
  }
  DType t_;
  size_t bytes_;
  std::vector<uint8_t> raw_;
  uint8_t* p_ = nullptr;
};

double unit_roundoff(DType acc) { return acc == DType::f16 ? 0x1p-11 : 0x1p-24; }

struct Layout { int64_t a_extra, ldc_extra; };

void run_kernel(const GemmEntry& k, int64_t kc, bool accumulate, Layout lay, Rng& rng) {
  SCOPED_TRACE("kc " + std::to_string(kc) + (accumulate ? ", accumulate" : ", init") +
               ", a_stride MR+" + std::to_string(lay.a_extra) + ", ldc NR+" +
               std::to_string(lay.ldc_extra));
  const int64_t mr = k.mr, nr = k.nr, ldc = nr + lay.ldc_extra;
  const bool a_rows = k.a_layout == cpu::Layout::rows;
  const int64_t a_stride = (a_rows ? kc : mr) + lay.a_extra;
  const int64_t kc2 = (kc + 1) / 2 * 2;  // whole k pairs
  Buf a(k.ab, a_rows ? mr * a_stride : kc2 * a_stride), b(k.ab, kc2 * nr), c(k.acc, mr * ldc);
  auto ai = [&](int64_t kk, int64_t i) { return cpu::pack_index(k.a_layout, kk, i, a_stride); };
  auto bi = [&](int64_t kk, int64_t j) { return cpu::pack_index(k.b_layout, kk, j, nr); };
  // A's elements beyond MR (or kc) in its stride stay NaN: a kernel that reads them fails.
  for (int64_t kk = 0; kk < kc; ++kk) {
    for (int64_t i = 0; i < mr; ++i) a.set(ai(kk, i), rng.uniform(-1, 1));
    for (int64_t j = 0; j < nr; ++j) b.set(bi(kk, j), rng.uniform(-1, 1));
  }
  // Init form: C starts as NaN and must be overwritten; accumulate form: random C.
  if (accumulate)
    for (int64_t i = 0; i < mr; ++i)
      for (int64_t j = 0; j < nr; ++j) c.set(i * ldc + j, rng.uniform(-1, 1));
  std::vector<double> c0(size_t(mr * nr));
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) c0[size_t(i * nr + j)] = c.get(i * ldc + j);
  const std::vector<uint8_t> before = c.bytes();
  cpu::prepare_gemm(k.isa);
  k.fn(kc, a.data(), a_stride, b.data(), c.data(), ldc, accumulate ? 1 : 0);

  const double u = unit_roundoff(k.acc);
  const std::vector<uint8_t> after = c.bytes();
  const size_t es = c.esize();
  for (int64_t i = 0; i < mr; ++i) {
    for (int64_t j = 0; j < nr; ++j) {
      double want = accumulate ? c0[size_t(i * nr + j)] : 0.0, mag = std::abs(want);
      for (int64_t kk = 0; kk < kc; ++kk) {
        const double prod = a.get(ai(kk, i)) * b.get(bi(kk, j));
        want += prod;
        mag += std::abs(prod);
      }
      // Standard bound for a length-(kc+1) sum in the accumulator's precision.
      const double bound = double(kc + 2) * u * mag + 1e-30;
      const double got = c.get(i * ldc + j);
      ASSERT_TRUE(std::abs(got - want) <= bound)
          << "C(" << i << ", " << j << "): got " << got << ", want " << want << " (bound " << bound << ")";
    }
    for (int64_t j = nr; j < ldc; ++j)
      ASSERT_EQ(0, std::memcmp(&before[size_t(i * ldc + j) * es], &after[size_t(i * ldc + j) * es], es))
          << "wrote C(" << i << ", " << j << ") beyond NR";
  }
}

class GemmUkernelTest : public ::testing::TestWithParam<GemmEntry> {
 protected:
  void SetUp() override {
    const GemmEntry& k = GetParam();
    if (!cpu::isa_available(k.isa))
      GTEST_SKIP() << k.key << " needs ISA " << cpu::isa_name(k.isa) << ", which this CPU lacks";
  }
  // kc = 1, 2, odd, 256, each rounded up to the kernel's k_align.
  std::vector<int64_t> kcs() const {
    std::vector<int64_t> r;
    for (int64_t kc : {1, 2, 7, 37, 256}) {
      const int64_t a = GetParam().k_align;
      const int64_t v = (kc + a - 1) / a * a;
      if (std::find(r.begin(), r.end(), v) == r.end()) r.push_back(v);
    }
    return r;
  }
};

TEST_P(GemmUkernelTest, Init) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t kc : kcs()) run_kernel(GetParam(), kc, false, {0, 0}, rng);
}

TEST_P(GemmUkernelTest, Accumulate) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t kc : kcs()) run_kernel(GetParam(), kc, true, {0, 0}, rng);
}

TEST_P(GemmUkernelTest, StridedOperands) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int64_t kc : kcs())
    for (bool acc : {false, true}) {
      run_kernel(GetParam(), kc, acc, {3, 5}, rng);
      run_kernel(GetParam(), kc, acc, {GetParam().mr, 16}, rng);
    }
}

INSTANTIATE_TEST_SUITE_P(Gemm, GemmUkernelTest, ::testing::ValuesIn(kGemmKernels),
                         [](const auto& info) { return std::string(info.param.key); });

// AMX kernels keep no tile state of their own: after other code released the tiles
// (TILERELEASE, which makes tile instructions fault until the next LDTILECFG) or loaded a
// palette of its own, prepare_gemm (run_kernel calls it before each call, as the
// pipelines do once per stage) must make the next call right. (The assembler knows the AMX
// mnemonics without -mamx-tile; they run only where dispatch found AMX.)
TEST(GemmUkernelAmx, TileStateOfOtherCode) {
  if (!cpu::isa_available(cpu::Isa::amx_bf16))
    GTEST_SKIP() << "needs ISA amx_bf16, which this CPU lacks";
#if defined(__x86_64__)
  Rng rng;
  FC_TRACE_SEED(rng);
  struct alignas(64) Config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } other{};
  other.palette = 1;
  for (int t = 0; t < 8; ++t) {
    other.colsb[t] = 32;
    other.rows[t] = 8;
  }
  for (const GemmEntry& k : kGemmKernels) {
    if (k.isa != cpu::Isa::amx_bf16) continue;
    SCOPED_TRACE(k.key);
    run_kernel(k, 64, false, {0, 0}, rng);
    __asm__ volatile("tilerelease" ::: "memory");
    run_kernel(k, 64, true, {0, 0}, rng);
    __asm__ volatile("ldtilecfg %0" ::"m"(other) : "memory");
    run_kernel(k, 96, false, {3, 5}, rng);
  }
#endif
}

// Panel forms (gemm_panels.inc): every row range against one B panel, as stage 1 calls
// them, for each k within the panel's max_k, against a double reference; C beyond NR in
// its stride untouched; the column max folded into mx (or mx null).
struct PanelEntry {
  const char* kernel;
  const char* key;
  cpu::GemmPanelFn fn;
  int max_k;
};
#define FC_GEMM_PANEL(kernel_, key_, max_k_) PanelEntry{#kernel_, #key_, &cpu::ukernels::key_, max_k_},
const PanelEntry kPanels[] = {
#include "cpu/ukernels/gemm_panels.inc"
};
#undef FC_GEMM_PANEL

class GemmPanelTest : public ::testing::TestWithParam<PanelEntry> {};

TEST_P(GemmPanelTest, RowsAgainstOnePanel) {
  const PanelEntry& p = GetParam();
  const GemmEntry* k = nullptr;
  for (const GemmEntry& e : kGemmKernels)
    if (std::strcmp(e.key, p.kernel) == 0) k = &e;
  ASSERT_NE(k, nullptr) << p.key << ": no kernel " << p.kernel;
  ASSERT_EQ(k->a_layout, cpu::Layout::rows) << p.key;
  // The dispatch table finds the same panel for the kernel.
  for (int i = 0; i < cpu::gemm_ukernel_count(); ++i)
    if (cpu::gemm_ukernel(i).fn == k->fn) {
      ASSERT_NE(cpu::gemm_panel(cpu::gemm_ukernel(i)), nullptr);
      EXPECT_EQ(cpu::gemm_panel(cpu::gemm_ukernel(i))->fn, p.fn);
    }
  if (!cpu::isa_available(k->isa))
    GTEST_SKIP() << p.key << " needs ISA " << cpu::isa_name(k->isa) << ", which this CPU lacks";
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t nr = k->nr;
  for (int64_t kc = k->k_align; kc <= p.max_k; kc += k->k_align)
    for (int64_t rows : {16, 48, 256})
      for (bool with_max : {true, false}) {
        SCOPED_TRACE("kc " + std::to_string(kc) + ", rows " + std::to_string(rows) + (with_max ? ", mx" : ""));
        const int64_t as = kc + 5, ldc = nr + 7, kc2 = (kc + 1) / 2 * 2;
        Buf a(k->ab, rows * as), b(k->ab, kc2 * nr), c(DType::f32, rows * ldc);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t kk = 0; kk < kc; ++kk) a.set(i * as + kk, rng.uniform(-2, 2));
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int64_t j = 0; j < nr; ++j) b.set(cpu::pack_index(k->b_layout, kk, j, nr), rng.uniform(-2, 2));
        std::vector<float> mx(static_cast<size_t>(nr)), mx0(static_cast<size_t>(nr));
        for (int64_t j = 0; j < nr; ++j)
          mx0[size_t(j)] = j % 5 == 0 ? -std::numeric_limits<float>::infinity() : float(rng.uniform(-4, 4));
        mx = mx0;
        const std::vector<uint8_t> before = c.bytes();
        cpu::prepare_gemm(k->isa);
        p.fn(kc, a.data(), as, rows, b.data(), static_cast<float*>(c.data()), ldc, with_max ? mx.data() : nullptr);
        const std::vector<uint8_t> after = c.bytes();
        std::vector<float> colmax = mx0;
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < nr; ++j) {
            double want = 0.0, mag = 0.0;
            for (int64_t kk = 0; kk < kc; ++kk) {
              const double prod = a.get(i * as + kk) * b.get(cpu::pack_index(k->b_layout, kk, j, nr));
              want += prod;
              mag += std::abs(prod);
            }
            const double got = c.get(i * ldc + j);
            ASSERT_TRUE(std::abs(got - want) <= double(kc + 2) * 0x1p-24 * mag + 1e-30)
                << "C(" << i << ", " << j << "): got " << got << ", want " << want;
            colmax[size_t(j)] = std::max(colmax[size_t(j)], float(got));
          }
          ASSERT_EQ(0, std::memcmp(&before[size_t(i * ldc + nr) * 4], &after[size_t(i * ldc + nr) * 4],
                                   size_t(ldc - nr) * 4))
              << "wrote row " << i << " beyond NR";
        }
        for (int64_t j = 0; j < nr; ++j)
          ASSERT_EQ(mx[size_t(j)], with_max ? colmax[size_t(j)] : mx0[size_t(j)]) << "column max " << j;
      }
}

INSTANTIATE_TEST_SUITE_P(Gemm, GemmPanelTest, ::testing::ValuesIn(kPanels),
                         [](const auto& info) { return std::string(info.param.key); });

// Tail kernels (gemm_tails.inc) and stream forms (gemm_streams.inc): each a listed kernel
// with its main kernel's NR, ISA, dtypes, layouts and k_align, found by the dispatch table
// (a tail with fewer rows, a stream form with the same); kernels not listed there have
// none. (Each one's product is checked as a kernel of the list above; the pipelines' use
// of tails by tests/cpu's forced-kernel gemm_chain cases, of stream forms by its
// pre-packed few-row softmax_v cases.)
struct PairEntry {
  const char* kernel;
  const char* other;
};
#define FC_GEMM_TAIL(kernel_, tail_) PairEntry{#kernel_, #tail_},
const PairEntry kTails[] = {
    PairEntry{nullptr, nullptr},
#include "cpu/ukernels/gemm_tails.inc"
};
#undef FC_GEMM_TAIL
#define FC_GEMM_STREAM(kernel_, form_) PairEntry{#kernel_, #form_},
const PairEntry kStreams[] = {
    PairEntry{nullptr, nullptr},
#include "cpu/ukernels/gemm_streams.inc"
};
#undef FC_GEMM_STREAM

template <size_t N>
void check_pairs(const PairEntry (&table)[N], const cpu::GemmUkernel* (*lookup)(const cpu::GemmUkernel&),
                 bool fewer_rows) {
  auto find = [](const char* key) -> const cpu::GemmUkernel* {
    for (int i = 0; i < cpu::gemm_ukernel_count(); ++i)
      if (std::strcmp(cpu::gemm_ukernel(i).key, key) == 0) return &cpu::gemm_ukernel(i);
    return nullptr;
  };
  int listed = 0;
  for (const PairEntry& t : table) {
    if (t.kernel == nullptr) continue;
    SCOPED_TRACE(std::string(t.kernel) + " -> " + t.other);
    const cpu::GemmUkernel* k = find(t.kernel);
    const cpu::GemmUkernel* tk = find(t.other);
    ASSERT_NE(k, nullptr);
    ASSERT_NE(tk, nullptr);
    EXPECT_EQ(lookup(*k), tk);
    EXPECT_EQ(tk->nr, k->nr);
    EXPECT_EQ(tk->isa, k->isa);
    EXPECT_EQ(tk->ab, k->ab);
    EXPECT_EQ(tk->acc, k->acc);
    EXPECT_EQ(tk->k_align, k->k_align);
    EXPECT_EQ(tk->a_layout, k->a_layout);
    EXPECT_EQ(tk->b_layout, k->b_layout);
    if (fewer_rows)
      EXPECT_LT(tk->mr, k->mr);
    else
      EXPECT_EQ(tk->mr, k->mr);
    ++listed;
  }
  int with = 0;
  for (int i = 0; i < cpu::gemm_ukernel_count(); ++i) with += lookup(cpu::gemm_ukernel(i)) != nullptr;
  EXPECT_EQ(with, listed);
}

TEST(GemmTail, SameTileShapeFewerRows) { check_pairs(kTails, cpu::gemm_tail, true); }

TEST(GemmStream, SameTileShape) {
  check_pairs(kStreams, cpu::gemm_stream, false);
  // A stream form knows itself as one; its chunk is whole k steps with an A strip of at
  // most 32 KiB (at least one k step).
  for (int i = 0; i < cpu::gemm_ukernel_count(); ++i) {
    const cpu::GemmUkernel& k = cpu::gemm_ukernel(i);
    const cpu::GemmUkernel* f = cpu::gemm_stream(k);
    EXPECT_FALSE(cpu::is_gemm_stream_form(k) && f != nullptr) << k.key;
    if (f == nullptr) continue;
    EXPECT_TRUE(cpu::is_gemm_stream_form(*f)) << f->key;
    const int64_t kc = cpu::gemm_stream_chunk(*f);
    EXPECT_EQ(kc % f->k_align, 0) << f->key;
    EXPECT_LE(kc * f->mr * int64_t(flashcore::dtype_size(f->ab)), 32768) << f->key;
    EXPECT_GT(2 * kc * f->mr * int64_t(flashcore::dtype_size(f->ab)), 32768) << f->key;
  }
}

// fp32-C forms (gemm_c32.inc): bit for bit the kernel's fp16 tile widened and stored or
// added into an fp32 C (as add_f16_tile does), for k from one pair to the fp16 chunk
// (256), padded A and C strides; C beyond NR untouched; found by the dispatch table.
struct C32Entry {
  const char* kernel;
  const char* key;
  cpu::GemmFn fn;
};
#define FC_GEMM_C32(kernel_, key_) C32Entry{#kernel_, #key_, &cpu::ukernels::key_},
const C32Entry kC32[] = {
    C32Entry{nullptr, nullptr, nullptr},
#include "cpu/ukernels/gemm_c32.inc"
};
#undef FC_GEMM_C32

TEST(GemmC32, MatchesTileAddedInFp32) {
  int listed = 0;
  for (const C32Entry& e : kC32) {
    if (e.kernel == nullptr) continue;
    ++listed;
    SCOPED_TRACE(e.key);
    const GemmEntry* k = nullptr;
    for (const GemmEntry& g : kGemmKernels)
      if (std::strcmp(g.key, e.kernel) == 0) k = &g;
    ASSERT_NE(k, nullptr) << "no kernel " << e.kernel;
    ASSERT_EQ(k->acc, DType::f16);
    for (int i = 0; i < cpu::gemm_ukernel_count(); ++i) {
      if (cpu::gemm_ukernel(i).fn == k->fn) {
        EXPECT_EQ(cpu::gemm_c32(cpu::gemm_ukernel(i)), e.fn);
      }
    }
    if (!cpu::isa_available(k->isa)) continue;
    Rng rng;
    FC_TRACE_SEED(rng);
    const int64_t mr = k->mr, nr = k->nr, as = mr + 3, ldc = nr + 5;
    for (int64_t kc : {int64_t(k->k_align), int64_t(2 * k->k_align + 6), int64_t(120), int64_t(256)})
      for (int accumulate : {0, 1}) {
        SCOPED_TRACE("kc " + std::to_string(kc) + (accumulate ? ", accumulate" : ", init"));
        Buf a(k->ab, kc * as), b(k->ab, kc * nr), tile(DType::f16, mr * nr);
        for (int64_t kk = 0; kk < kc; ++kk) {
          for (int64_t i = 0; i < mr; ++i) a.set(cpu::pack_index(k->a_layout, kk, i, as), rng.uniform(-1, 1));
          for (int64_t j = 0; j < nr; ++j) b.set(cpu::pack_index(k->b_layout, kk, j, nr), rng.uniform(-1, 1));
        }
        std::vector<float> c(static_cast<size_t>(mr * ldc));
        for (float& x : c) x = float(rng.uniform(-4, 4));
        std::vector<float> want = c;
        k->fn(kc, a.data(), as, b.data(), tile.data(), nr, 0);
        const uint16_t* t = static_cast<const uint16_t*>(tile.data());
        for (int64_t i = 0; i < mr; ++i)
          for (int64_t j = 0; j < nr; ++j) {
            const float v = fc::core::f16_to_f32(t[i * nr + j]);
            float& w = want[size_t(i * ldc + j)];
            w = accumulate ? w + v : v;
          }
        e.fn(kc, a.data(), as, b.data(), c.data(), ldc, accumulate);
        ASSERT_EQ(0, std::memcmp(c.data(), want.data(), c.size() * sizeof(float)));
      }
  }
  int with_form = 0;
  for (int i = 0; i < cpu::gemm_ukernel_count(); ++i) with_form += cpu::gemm_c32(cpu::gemm_ukernel(i)) != nullptr;
  EXPECT_EQ(with_form, listed);
}

// The list expanded here and the dispatch table are the same list.
TEST(GemmUkernelList, MatchesDispatchTable) {
  ASSERT_EQ(cpu::gemm_ukernel_count(), int(std::size(kGemmKernels)));
  for (int i = 0; i < cpu::gemm_ukernel_count(); ++i) {
    const cpu::GemmUkernel& g = cpu::gemm_ukernel(i);
    EXPECT_STREQ(g.key, kGemmKernels[i].key);
    EXPECT_EQ(g.fn, kGemmKernels[i].fn);
    // The name grammar: {ab}_{MR}x{NR}..._{isa}
    const std::string key = g.key;
    EXPECT_EQ(key.rfind(fc::to_string(g.ab), 0), 0u) << key << " should start with its operand dtype";
    EXPECT_NE(key.find(std::string("_") + std::to_string(g.mr) + "x"), std::string::npos) << key;
    EXPECT_GE(g.k_align, 1) << key;
    EXPECT_EQ(g.a_layout, kGemmKernels[i].a_layout) << key;
    EXPECT_EQ(g.b_layout, kGemmKernels[i].b_layout) << key;
    // Pair layouts need whole pairs; row-major A is for A only.
    if (g.a_layout == cpu::Layout::kpairs || g.b_layout == cpu::Layout::kpairs) {
      EXPECT_EQ(g.k_align % 2, 0) << key;
    }
    EXPECT_NE(g.b_layout, cpu::Layout::rows) << key;
  }
  // list_kernels reports every one of them.
  std::vector<fc::KernelInfo> all(size_t(fc::list_kernels(nullptr, 0)));
  fc::list_kernels(all.data(), int(all.size()));
  for (const GemmEntry& k : kGemmKernels)
    EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](const fc::KernelInfo& i) { return i.key == k.key; }))
        << k.key << " missing from list_kernels";
}

}  // namespace
}  // namespace fctest
