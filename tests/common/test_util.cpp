#include "common/test_util.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/dtype.hpp"

namespace fctest {
namespace {

// FNV-1a: a stable hash of the test name (std::hash may differ between builds).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "";
  return std::string(info->test_suite_name()) + "." + info->name();
}

// Poison patterns: a quiet NaN in every float storage type; i32 gets the fp32 pattern.
void poison_element(uint8_t* p, DType t) {
  switch (t) {
    case DType::f16: { const uint16_t v = 0x7E00; std::memcpy(p, &v, 2); break; }
    case DType::bf16: { const uint16_t v = 0x7FC0; std::memcpy(p, &v, 2); break; }
    case DType::e4m3: case DType::e5m2: *p = 0x7F; break;
    default: { const uint32_t v = 0x7FC00000u; std::memcpy(p, &v, 4); break; }
  }
}

}  // namespace

uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* e = std::getenv("FLASHCORE_TEST_SEED"); e != nullptr && e[0] != '\0')
      return uint64_t(std::strtoull(e, nullptr, 10));
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  return seed;
}

Rng::Rng() : gen_(base_seed() ^ fnv1a(current_test_name())) {}

double Rng::uniform(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(gen_);
}
int64_t Rng::integer(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
}
std::string Rng::trace() const {
  std::ostringstream s;
  s << "random inputs from seed " << base_seed() << " (replay: FLASHCORE_TEST_SEED="
    << base_seed() << " --gtest_filter=" << current_test_name() << ")";
  return s.str();
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int> order, int64_t pad)
    : shape_(std::move(shape)) {
  const int rank = int(shape_.size());
  if (order.empty()) {
    order.resize(size_t(rank));
    std::iota(order.begin(), order.end(), 0);
  }
  view_.dtype = dtype;
  view_.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = order[size_t(i)];
    view_.shape[d] = shape_[size_t(d)];
    view_.strides[d] = stride;
    stride *= std::max<int64_t>(shape_[size_t(d)], 1);
    if (i == rank - 1) stride += pad;
  }
  int64_t span = 0;
  for (int d = 0; d < rank; ++d)
    if (shape_[size_t(d)] > 0) span += (shape_[size_t(d)] - 1) * view_.strides[d];
  const size_t es = flashcore::dtype_size(dtype);
  nbytes_ = size_t(span + 1) * es;
  buf_.assign(nbytes_ + 64, 0);
  base_ = buf_.data() + (64 - reinterpret_cast<uintptr_t>(buf_.data()) % 64) % 64;
  view_.data = base_;
  poison();
}

int64_t HostTensor::offset(int64_t linear) const {
  int64_t off = 0;
  for (int d = view_.rank - 1; d >= 0; --d) {
    const int64_t n = view_.shape[d];
    off += (linear % n) * view_.strides[d];
    linear /= n;
  }
  return off;
}

double HostTensor::get(int64_t linear) const {
  const int64_t off = offset(linear);
  if (dtype() == DType::i32) return double(reinterpret_cast<const int32_t*>(base_)[off]);
  return double(flashcore::core::load_as_f32(base_, off, dtype()));
}

void HostTensor::set(int64_t linear, double v) {
  const int64_t off = offset(linear);
  if (dtype() == DType::i32) {
    reinterpret_cast<int32_t*>(base_)[off] = int32_t(v);
    return;
  }
  flashcore::core::store_from_f32(base_, off, dtype(), float(v));
}

void HostTensor::fill_uniform(Rng& rng, double lo, double hi) {
  for (int64_t i = 0; i < numel(); ++i) set(i, rng.uniform(lo, hi));
}

void HostTensor::fill_int(Rng& rng, int64_t lo, int64_t hi) {
  for (int64_t i = 0; i < numel(); ++i) set(i, double(rng.integer(lo, hi)));
}

void HostTensor::poison() {
  const size_t es = flashcore::dtype_size(dtype());
  for (size_t i = 0; i + es <= nbytes_; i += es) poison_element(base_ + i, dtype());
}

bool HostTensor::padding_untouched() const {
  const size_t es = flashcore::dtype_size(dtype());
  std::vector<bool> in_view(nbytes_ / es, false);
  for (int64_t i = 0; i < numel(); ++i) in_view[size_t(offset(i))] = true;
  uint8_t pattern[8];
  poison_element(pattern, dtype());
  for (size_t e = 0; e < in_view.size(); ++e)
    if (!in_view[e] && std::memcmp(base_ + e * es, pattern, es) != 0) return false;
  return true;
}

HostTensor to_f32(const HostTensor& t) {
  HostTensor r(DType::f32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) r.set(i, t.get(i));
  return r;
}

double rel_err(const HostTensor& out, const HostTensor& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double o = out.get(i), r = ref.get(i);
    if (!std::isfinite(o)) return std::numeric_limits<double>::infinity();
    num += (o - r) * (o - r);
    den += r * r;
  }
  // Values under an fp16 output's normal range (2^-14) have fewer significant bits: the
  // norm is taken as at least that of numel such values. (gemm_chain's 1 x 1 x 1 case, a
  // product of three uniforms, is under 3e-6 about once in 4000 draws: an fp16 subnormal
  // there is off by more than 1 % and failed a local ctest run once.)
  if (out.dtype() == DType::f16) den = std::max(den, double(out.numel()) * 0x1p-28);
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

::testing::AssertionResult outputs_agree(const HostTensor& out, const HostTensor& ref, double tol) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double o = out.get(i), r = ref.get(i);
    if (std::isfinite(r) != std::isfinite(o))
      return ::testing::AssertionFailure() << "out (row-major index " << i << "): got " << o << ", want " << r;
    if (!std::isfinite(r)) continue;
    num += (o - r) * (o - r);
    den += r * r;
  }
  if (out.dtype() == DType::f16) den = std::max(den, double(out.numel()) * 0x1p-28);
  const double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (e <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rel_err over the finite outputs " << e << " > " << tol;
}

::testing::AssertionResult lse_agree(const HostTensor& lse, const HostTensor& ref, double tol) {
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double o = lse.get(i), r = ref.get(i);
    const bool ok = std::isnan(r)   ? std::isnan(o)
                    : std::isinf(r) ? o == r
                                    : std::isfinite(o) && std::abs(o - r) <= tol * (1 + std::abs(r));
    if (!ok) return ::testing::AssertionFailure() << "lse (row-major index " << i << "): got " << o << ", want " << r;
  }
  return ::testing::AssertionSuccess();
}

void expect_error(const std::function<void()>& call, flashcore::Status status, const std::string& needle,
                  std::vector<const HostTensor*> outputs) {
  std::vector<std::vector<uint8_t>> before;
  for (const HostTensor* t : outputs) before.push_back(t->snapshot());
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const flashcore::Error& e) {
    EXPECT_EQ(int(e.code()), int(status)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not contain '" << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-flashcore exception: " << e.what();
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    EXPECT_EQ(outputs[i]->snapshot(), before[i]) << "output " << i << " was written";
}

double tolerance(DType storage, Exp2Mode mode, int64_t sk) {
  if (storage == DType::f32) return mode == Exp2Mode::exact ? 1e-5 : 1e-2;
  if (storage == DType::bf16 && sk > 512) return 2e-2;  // BENCH.md: bf16 at long Sk
  return 1e-2;
}

double tolerance(DType storage, DType kernel_ab, Exp2Mode mode, int64_t sk) {
  return std::max(tolerance(storage, mode, sk), tolerance(kernel_ab, mode, sk));
}

::testing::AssertionResult close(const HostTensor& out, const HostTensor& ref, double tol) {
  if (out.shape() != ref.shape()) return ::testing::AssertionFailure() << "shape mismatch";
  const double e = rel_err(out, ref);
  if (e <= tol) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  f << "rel_err " << e << " > tolerance " << tol;
  // Name the first bad element: usually tells a wrong index from a wrong formula.
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double o = out.get(i), r = ref.get(i);
    if (!std::isfinite(o) || std::abs(o - r) > 10 * tol * (std::abs(r) + 1e-3)) {
      f << "; first bad element (row-major index " << i << "): got " << o << ", want " << r;
      break;
    }
  }
  return f;
}

::testing::AssertionResult lse_close(const HostTensor& lse, const HostTensor& ref, double tol) {
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double o = lse.get(i), r = ref.get(i);
    const bool ok = std::isinf(r) ? o == r : (std::isfinite(o) && std::abs(o - r) <= tol * (1 + std::abs(r)));
    if (!ok)
      return ::testing::AssertionFailure()
             << "lse (row-major index " << i << "): got " << o << ", want " << r;
  }
  return ::testing::AssertionSuccess();
}

std::string name(DType d) { return flashcore::to_string(d); }
std::string name(Exp2Mode m) { return flashcore::to_string(m); }
std::string name(Strategy s) {
  std::string n = flashcore::to_string(s);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

}  // namespace fctest
