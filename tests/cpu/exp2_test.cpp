// The exp2 policies of src/core/exp2.hpp against std::exp2 in double: exact within
// 2 ulp (subnormal results included), fast within its stated 1.8e-3 relative error,
// and both giving exactly 0 for masked scores (-inf) and far-negative inputs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/test_util.hpp"
#include "core/exp2.hpp"

namespace fctest {
namespace {

using flashcore::core::exp2_exact;
using flashcore::core::exp2_fast;

// Distance in units in the last place between two finite non-negative floats.
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t(ia) - int64_t(ib));
}

// Sweep [lo, hi) in `steps` evenly spaced points plus a random offset per point.
template <class F>
void sweep(double lo, double hi, int steps, Rng& rng, F&& f) {
  const double h = (hi - lo) / steps;
  for (int i = 0; i < steps; ++i) f(float(lo + h * (i + rng.uniform(0, 1))));
}

TEST(Exp2, ExactWithinTwoUlp) {
  Rng rng;
  FC_TRACE_SEED(rng);
  int64_t worst = 0;
  float worst_x = 0;
  // Normal results, the subnormal range (-149 <= x < -126) and overflow to inf.
  sweep(-151.0, 128.5, 400000, rng, [&](float x) {
    const float want = float(std::exp2(double(x)));
    const float got = exp2_exact(x);
    const int64_t d = ulp_distance(got, want);
    if (d > worst) { worst = d; worst_x = x; }
  });
  // Dense around 0 (the polynomial's range) and the integer boundaries.
  sweep(-1.0, 1.0, 200000, rng, [&](float x) {
    const int64_t d = ulp_distance(exp2_exact(x), float(std::exp2(double(x))));
    if (d > worst) { worst = d; worst_x = x; }
  });
  EXPECT_LE(worst, 2) << "worst at x = " << worst_x << ": got " << exp2_exact(worst_x)
                      << ", want " << std::exp2(double(worst_x));
  EXPECT_EQ(exp2_exact(0.0f), 1.0f);
  EXPECT_EQ(exp2_exact(10.0f), 1024.0f);
}

TEST(Exp2, FastWithinStatedError) {
  Rng rng;
  FC_TRACE_SEED(rng);
  double worst = 0;
  float worst_x = 0;
  // Results in the normal range; below 2^-126 the fast policy flushes to zero.
  sweep(-126.0, 127.0, 400000, rng, [&](float x) {
    const double want = std::exp2(double(x));
    const double err = std::abs(double(exp2_fast(x)) - want) / want;
    if (err > worst) { worst = err; worst_x = x; }
  });
  EXPECT_LE(worst, 1.8e-3) << "worst at x = " << worst_x;
}

TEST(Exp2, MaskedInputsGiveZero) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (float x : {ninf, -1e30f, -1000.0f, -152.0f}) {
    EXPECT_EQ(exp2_exact(x), 0.0f) << x;
    EXPECT_EQ(exp2_fast(x), 0.0f) << x;
  }
  EXPECT_EQ(exp2_fast(-130.0f), 0.0f);  // flushed, as documented
  // NaN (e.g. inf - inf from an overflowing scale) propagates, without undefined
  // behaviour in the float -> int step (UBSan checks that in the asan build).
  EXPECT_TRUE(std::isnan(exp2_exact(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp2_fast(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp2_exact(129.0f), std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace fctest
