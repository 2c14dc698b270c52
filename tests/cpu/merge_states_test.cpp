// merge_states on the CPU: attention split at random key boundaries (empty parts included)
// and merged, n-way and pairwise in place, against the fp64 reference over all keys; hostile
// lse values (-inf parts whose O is NaN, all -inf, NaN, +inf, large and far-apart lse)
// against an fp64 model; in place equal to out of place; 1 and 2 threads bit-identical.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A view of rows [k0, k1) of a [B, Sk, Hkv, D] tensor.
Tensor key_slice(const HostTensor& t, int64_t k0, int64_t k1) {
  Tensor v = t.view();
  v.data = static_cast<char*>(v.data) + k0 * v.strides[1] * int64_t(fc::dtype_size(v.dtype));
  v.shape[1] = k1 - k0;
  return v;
}

class MergeStatesTest : public ::testing::TestWithParam<DType> {};

TEST_P(MergeStatesTest, AttentionSplitAtRandomKeys) {
  const DType dt = GetParam();
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int round = 0; round < 3; ++round) {
    const int64_t b = rng.integer(1, 2), hkv = int64_t(1) << rng.integer(0, 2), h = 4, sq = rng.integer(1, 9),
                  sk = rng.integer(1, 300), d = std::vector<int64_t>{16, 64, 80}[size_t(rng.integer(0, 2))];
    std::ostringstream shape;
    shape << "B" << b << " H" << h << "/" << hkv << " Sq" << sq << " Sk" << sk << " D" << d;
    SCOPED_TRACE(shape.str());
    HostTensor q(dt, {b, sq, h, d}), k(dt, {b, sk, hkv, d}), v(dt, {b, sk, hkv, d});
    q.fill_uniform(rng, -2, 2);
    k.fill_uniform(rng, -2, 2);
    v.fill_uniform(rng, -1, 1);
    HostTensor ref(DType::f32, {b, sq, h, d}), ref_lse(DType::f32, {b, h, sq});
    {
      HostTensor qf = to_f32(q), kf = to_f32(k), vf = to_f32(v);
      fc::AttentionParams p;
      p.lse = ref_lse.ptr();
      fc::reference::attention(qf.view(), kf.view(), vf.view(), ref.view(), p);
    }
    // n parts over [cut_i, cut_i+1): cuts may repeat (a part with no key: lse -inf).
    const int64_t n = rng.integer(2, 4);
    std::vector<int64_t> cuts{0, sk};
    for (int64_t i = 1; i < n; ++i) cuts.push_back(rng.integer(0, sk));
    std::sort(cuts.begin(), cuts.end());
    std::vector<HostTensor> outs, lses;
    std::vector<Tensor> ov, lv;
    for (int64_t i = 0; i < n; ++i) {
      outs.emplace_back(dt, std::vector<int64_t>{b, sq, h, d});
      lses.emplace_back(DType::f32, std::vector<int64_t>{b, h, sq});
    }
    for (int64_t i = 0; i < n; ++i) {
      fc::AttentionParams p;
      p.lse = lses[size_t(i)].ptr();
      p.scale = float(1.0 / std::sqrt(double(d)));
      fc::attention(q.view(), key_slice(k, cuts[size_t(i)], cuts[size_t(i) + 1]),
                    key_slice(v, cuts[size_t(i)], cuts[size_t(i) + 1]), outs[size_t(i)].view(), p);
      ov.push_back(outs[size_t(i)].view());
      lv.push_back(lses[size_t(i)].view());
    }
    const double tol = tolerance(dt, Exp2Mode::exact, sk);
    // n-way, out of place (padded, poisoned outputs).
    HostTensor out(dt, {b, sq, h, d}, {}, 3), lse(DType::f32, {b, h, sq}, {}, 1);
    out.poison();
    lse.poison();
    fc::merge_states(ov.data(), lv.data(), n, out.view(), lse.view());
    EXPECT_TRUE(close(out, ref, tol));
    EXPECT_TRUE(lse_close(lse, ref_lse, tol));
    EXPECT_TRUE(out.padding_untouched());
    EXPECT_TRUE(lse.padding_untouched());
    // Pairwise, in place into part 0, one part after another.
    fc::MergeStatesParams mp;
    mp.threads = 2;
    for (int64_t i = 1; i < n; ++i)
      fc::merge_states(ov[0], lv[0], ov[size_t(i)], lv[size_t(i)], ov[0], lv[0], mp);
    EXPECT_TRUE(close(outs[0], ref, tol));
    EXPECT_TRUE(lse_close(lses[0], ref_lse, tol));
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MergeStatesTest, ::testing::ValuesIn(kStorageTypes),
                         [](const auto& info) { return name(info.param); });

// One row's merge in fp64: weights exp(lse_s - max) over the parts with lse_s > -inf.
void model_row(const std::vector<double>& lse, const std::vector<std::vector<double>>& o, std::vector<double>& out,
               double& out_lse) {
  double mx = -kInf;
  bool nan = false;
  for (double l : lse) {
    nan |= std::isnan(l);
    mx = std::max(mx, l);
  }
  std::fill(out.begin(), out.end(), 0.0);
  if (nan) {
    std::fill(out.begin(), out.end(), std::nan(""));
    out_lse = std::nan("");
    return;
  }
  if (mx == -kInf) {
    out_lse = -kInf;
    return;
  }
  double sum = 0;
  for (size_t s = 0; s < lse.size(); ++s) {
    if (lse[s] == -kInf) continue;
    const double w = lse[s] == mx ? 1.0 : std::exp(lse[s] - mx);
    sum += w;
    for (size_t j = 0; j < out.size(); ++j) out[j] += w * o[s][j];
  }
  for (double& x : out) x /= sum;
  out_lse = mx + std::log(sum);
}

TEST(MergeStates, HostileLse) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const double nan = std::nan("");
  // Per row, the three parts' lse (row r: S index r of head 0; head 1 gets random finite).
  const std::vector<std::vector<double>> rows = {
      {-kInf, -kInf, -kInf},   // every part saw no key: O = 0, lse = -inf
      {-kInf, 1.5, -0.5},      // a -inf part (its O is NaN: not read)
      {0.25, nan, 3.0},        // NaN: a NaN row
      {2.0, kInf, -1.0},       // +inf: the +inf part's O, lse +inf
      {30000.0, 29999.0, -kInf},  // large lse: weights relative to the max
      {0.0, -200.0, -90.0},    // a weight that underflows fp32
      {1e30, 1e30, 1e30},      // equal huge lse: the mean
  };
  const int64_t n = 3, s = int64_t(rows.size()), h = 2, d = 9;
  std::vector<HostTensor> outs, lses;
  std::vector<Tensor> ov, lv;
  for (int64_t i = 0; i < n; ++i) {
    outs.emplace_back(DType::f32, std::vector<int64_t>{1, s, h, d});
    lses.emplace_back(DType::f32, std::vector<int64_t>{1, h, s});
    outs.back().fill_uniform(rng, -1, 1);
    lses.back().fill_uniform(rng, -5, 5);
  }
  for (int64_t r = 0; r < s; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const double l = rows[size_t(r)][size_t(i)];
      lses[size_t(i)].set(r, l);  // head 0
      if (l == -kInf)
        for (int64_t j = 0; j < d; ++j) outs[size_t(i)].set(r * h * d + j, nan);
    }
  for (int64_t i = 0; i < n; ++i) {
    ov.push_back(outs[size_t(i)].view());
    lv.push_back(lses[size_t(i)].view());
  }
  HostTensor out(DType::f32, {1, s, h, d}), lse(DType::f32, {1, h, s});
  out.poison();
  lse.poison();
  fc::merge_states(ov.data(), lv.data(), n, out.view(), lse.view());
  for (int64_t r = 0; r < s; ++r)
    for (int64_t hh = 0; hh < h; ++hh) {
      std::ostringstream where;
      where << "row " << r << " head " << hh;
      SCOPED_TRACE(where.str());
      std::vector<double> l(static_cast<size_t>(n)), want(static_cast<size_t>(d));
      std::vector<std::vector<double>> o(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(d)));
      for (int64_t i = 0; i < n; ++i) {
        l[size_t(i)] = lses[size_t(i)].get(hh * s + r);
        for (int64_t j = 0; j < d; ++j) o[size_t(i)][size_t(j)] = outs[size_t(i)].get((r * h + hh) * d + j);
      }
      double want_lse = 0;
      model_row(l, o, want, want_lse);
      const double got_lse = lse.get(hh * s + r);
      if (std::isnan(want_lse)) {
        EXPECT_TRUE(std::isnan(got_lse));
      } else if (std::isinf(want_lse)) {
        EXPECT_EQ(got_lse, want_lse);
      } else {
        EXPECT_NEAR(got_lse, want_lse, 1e-6 * (1 + std::abs(want_lse)));
      }
      for (int64_t j = 0; j < d; ++j) {
        const double got = out.get((r * h + hh) * d + j);
        if (std::isnan(want[size_t(j)])) EXPECT_TRUE(std::isnan(got)) << "col " << j;
        else EXPECT_NEAR(got, want[size_t(j)], 1e-6) << "col " << j;
      }
    }
}

// In place (out = a part's view, lse = its lse) gives the bits of the out-of-place merge;
// 1 and 2 threads too; bf16 parts into an f32 output.
TEST(MergeStates, InPlaceAndThreadsBitIdentical) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t n = 3, b = 2, s = 5, h = 3, d = 40;
  for (DType dt : {DType::f16, DType::bf16}) {
    std::vector<HostTensor> outs, lses;
    std::vector<Tensor> ov, lv;
    for (int64_t i = 0; i < n; ++i) {
      outs.emplace_back(dt, std::vector<int64_t>{b, s, h, d}, std::vector<int>{0, 2, 1, 3}, 2);
      lses.emplace_back(DType::f32, std::vector<int64_t>{b, h, s});
      outs.back().fill_uniform(rng, -1, 1);
      lses.back().fill_uniform(rng, -8, 8);
    }
    for (int64_t i = 0; i < n; ++i) {
      ov.push_back(outs[size_t(i)].view());
      lv.push_back(lses[size_t(i)].view());
    }
    HostTensor o1(dt, {b, s, h, d}), l1(DType::f32, {b, h, s}), o2(dt, {b, s, h, d}), l2(DType::f32, {b, h, s});
    HostTensor of(DType::f32, {b, s, h, d}), lf(DType::f32, {b, h, s});
    fc::MergeStatesParams one, two;
    one.threads = 1;
    two.threads = 2;
    fc::merge_states(ov.data(), lv.data(), n, o1.view(), l1.view(), one);
    fc::merge_states(ov.data(), lv.data(), n, o2.view(), l2.view(), two);
    fc::merge_states(ov.data(), lv.data(), n, of.view(), lf.view(), two);
    EXPECT_EQ(o1.snapshot(), o2.snapshot());
    EXPECT_EQ(l1.snapshot(), l2.snapshot());
    EXPECT_EQ(lf.snapshot(), l1.snapshot());
    EXPECT_TRUE(close(o1, of, dt == DType::bf16 ? 4e-3 : 5e-4));  // f32 out: o1 is its rounding
    fc::merge_states(ov.data(), lv.data(), n, ov[1], lv[1], two);  // in place into part 1
    for (int64_t i = 0; i < o1.numel(); ++i) ASSERT_EQ(outs[1].get(i), o1.get(i)) << "element " << i;
    for (int64_t i = 0; i < l1.numel(); ++i) ASSERT_EQ(lses[1].get(i), l1.get(i)) << "lse " << i;
  }
}

}  // namespace
}  // namespace fctest
