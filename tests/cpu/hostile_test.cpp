// Property tests over random valid attention calls with hostile values, and alias fuzzing.
//
// Calls: random layouts (BSHD / BHSD, padded rows), masks (none, causal, windows, both),
// GQA, D != Dv, varlen batches with empty sequences, every strategy, both exp2 modes,
// 1-3 threads, f32 / f16 / bf16, score variants (softcap, ALiBi slopes [H] or [B, H],
// sinks; with non-finite values also sinks of -inf, +inf, NaN and 1e30). Values: plain normals; denormals; huge powers of two
// whose fp32 scores are exact and whose scaled scores pass 2^31 (the softmax of large
// finite scores); normals with NaN / +-Inf planted in K, V and Q at random positions,
// masked or not. Each result is checked against the fp64 reference under the library's
// rules (flashcore.hpp): where the reference is finite ours is finite and close, where it
// is not ours is not either (a hidden key's NaN never reaches a row), lse NaN for a row
// that sees a NaN score, -inf only for a fully masked row; and no byte outside the output
// views changes.
//
// Alias fuzzing: every array of a call (q, k, v, out, lse, cu_seqlens) drawn from one
// shared buffer at random offsets and strides. Each call either is refused with
// invalid_argument (nothing in the buffer changed) or matches the reference computed on
// copies of its inputs; it never crashes (ASan runs this binary too).
//
// FLASHCORE_PROPERTY_CALLS=N runs N calls per test instead of the CI default.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;

int calls(int fallback) {
  const char* e = std::getenv("FLASHCORE_PROPERTY_CALLS");
  return e != nullptr && e[0] != '\0' ? std::max(1, std::atoi(e)) : fallback;
}

enum class Values { normal, denormal, huge, nonfinite };
const char* values_name(Values v) {
  switch (v) {
    case Values::normal: return "normal";
    case Values::denormal: return "denormal";
    case Values::huge: return "huge";
    case Values::nonfinite: return "nonfinite";
  }
  return "?";
}

// One random call: shapes, layout, mask, options.
struct Call {
  DType dtype = DType::f32;
  int64_t b = 1, sq = 1, sk = 1, h = 1, hkv = 1, d = 1, dv = 1;
  bool bhsd = false, varlen = false;
  std::vector<int32_t> cu_q, cu_k;
  int alibi = 0;      // slopes: 0 none, 1 [H], 2 [B, H]
  bool sinks = false;
  fc::AttentionParams p;
  std::string describe() const {
    return std::string(name(dtype)) + " B" + std::to_string(b) + " Sq" + std::to_string(sq) + " Sk" +
           std::to_string(sk) + " H" + std::to_string(h) + "/" + std::to_string(hkv) + " D" + std::to_string(d) +
           " Dv" + std::to_string(dv) + (bhsd ? " BHSD" : " BSHD") + (varlen ? " varlen" : "") +
           (p.causal ? " causal" : "") + " window(" + std::to_string(p.window_left) + "," +
           std::to_string(p.window_right) + ") " + name(p.strategy) + " " + name(p.exp2) + " threads " +
           std::to_string(p.threads) + " scale " + std::to_string(p.scale) + " softcap " +
           std::to_string(p.softcap) + " alibi " + std::to_string(alibi) + (sinks ? " sinks" : "");
  }
};

Call random_call(Rng& rng, Values values) {
  Call c;
  const DType dts[] = {DType::f32, DType::f16, DType::bf16};
  c.dtype = dts[rng.integer(0, 2)];
  const int64_t hkvs[] = {1, 1, 2, 4};
  c.hkv = hkvs[rng.integer(0, 3)];
  c.h = c.hkv * (rng.integer(0, 2) == 0 ? 1 : rng.integer(2, 8));  // GQA up to 8:1
  auto size = [&](int64_t hi) {
    const int64_t pick = rng.integer(0, 5);
    return pick == 0 ? 1 : pick == 1 ? 7 : rng.integer(1, hi);
  };
  c.sq = size(160);
  c.sk = size(400);
  c.d = rng.integer(0, 3) == 0 ? size(130) : int64_t(16) << rng.integer(0, 2);
  c.dv = rng.integer(0, 3) == 0 ? size(100) : c.d;
  c.b = rng.integer(1, 2);
  c.bhsd = rng.integer(0, 1) == 1;
  c.varlen = rng.integer(0, 3) == 0;
  if (c.varlen) {  // 1-3 sequences, empty ones too, packed along dim 1
    const int64_t n = rng.integer(1, 3);
    c.cu_q.assign(1, 0);
    c.cu_k.assign(1, 0);
    for (int64_t i = 0; i < n; ++i) {
      c.cu_q.push_back(c.cu_q.back() + int32_t(rng.integer(0, c.sq)));
      c.cu_k.push_back(c.cu_k.back() + int32_t(rng.integer(0, c.sk)));
    }
    c.b = 1;
    c.sq = std::max<int64_t>(c.cu_q.back(), 1) + rng.integer(0, 3);  // rows past the last sequence
    c.sk = std::max<int64_t>(c.cu_k.back(), 1);
    c.p.varlen_batch = n;
  }
  const int mask = int(rng.integer(0, 4));
  c.p.causal = mask == 1 || mask == 3;
  if (mask >= 2) {
    c.p.window_left = rng.integer(-1, 40);
    c.p.window_right = rng.integer(-1, 10);
  }
  c.p.strategy = kStrategies[rng.integer(0, 3)];
  c.p.exp2 = kExpModes[rng.integer(0, 1)];
  c.p.threads = int(rng.integer(1, 3));
  // Huge values: scores k * 2^28 (f16) or k * 2^80; a scale that puts the scaled max past
  // 2^31, where exp2's argument once lost the row's own maximum.
  if (values == Values::huge) c.p.scale = float(rng.uniform(8, 64));
  // Score variants, each in a third of the calls. (Not ALiBi with huge scores: its biases,
  // far below an ulp of an fp32 score of 2^80, vanish there, while the fp64 reference keeps
  // them and with them breaks the exact ties between such scores.)
  if (rng.integer(0, 2) == 0) c.p.softcap = float(rng.uniform(0.5, 50));
  if (rng.integer(0, 2) == 0 && values != Values::huge) c.alibi = int(rng.integer(1, 2));
  c.sinks = rng.integer(0, 2) == 0;
  return c;
}

// The call's slopes and sinks (random; with non-finite values the sinks include -inf, +inf,
// NaN and 1e30), pointed at by c.p.
void add_variants(Call& c, Rng& rng, Values values, HostTensor& slopes, HostTensor& sinks) {
  const int64_t nb = c.varlen ? c.p.varlen_batch : c.b;
  if (c.alibi != 0) {
    slopes = c.alibi == 1 ? HostTensor(DType::f32, {c.h}) : HostTensor(DType::f32, {nb, c.h});
    slopes.fill_uniform(rng, 0, 1);
    c.p.alibi_slopes = slopes.ptr();
  }
  if (c.sinks) {
    sinks = HostTensor(DType::f32, {c.h});
    sinks.fill_uniform(rng, -3, 3);
    const double specials[] = {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN(), 1e30};
    if (values == Values::nonfinite) sinks.set(rng.integer(0, c.h - 1), specials[rng.integer(0, 3)]);
    c.p.sinks = sinks.ptr();
  }
}

// Operands of a call with their fp32 copies (the reference's inputs).
struct Operands {
  HostTensor q, k, v, out, lse, q32, k32, v32, ref, ref_lse;
};

std::vector<int> layout(bool bhsd) { return bhsd ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{}; }

// Fills per the value distribution. Denormal: q, k subnormal (scores underflow to 0: a
// uniform softmax); V stays normal, since bf16 dot products flush subnormal operands and a
// subnormal output has too few bits for a relative tolerance. Huge: q, k entries 0 or
// +-2^e (products and their sums exact in fp32); nonfinite: normals with a few NaN / +-Inf
// in q, k and v.
void fill(HostTensor& t, Rng& rng, Values values, bool qk, DType dt) {
  const int64_t n = t.numel();
  const double big = dt == DType::f16 ? 0x1p14 : 0x1p40;
  for (int64_t i = 0; i < n; ++i) {
    double x = rng.uniform(-1, 1) + rng.uniform(-1, 1);
    if (values == Values::denormal && qk) x *= dt == DType::f16 ? 0x1p-20 : 0x1p-130;
    if (values == Values::huge && qk) {
      const int64_t r = rng.integer(0, 2);
      x = r == 0 ? 0.0 : r == 1 ? big : -big;
    }
    t.set(i, x);
  }
  if (values == Values::nonfinite) {
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity()};
    const int64_t planted = std::max<int64_t>(1, n / 200);
    for (int64_t i = 0; i < planted && n > 0; ++i) t.set(rng.integer(0, n - 1), specials[rng.integer(0, 2)]);
  }
}

void run_property(Values values, int n) {
  Rng rng;
  FC_TRACE_SEED(rng);
  for (int call = 0; call < n; ++call) {
    Call c = random_call(rng, values);
    SCOPED_TRACE("call " + std::to_string(call) + ": " + c.describe() + ", values " + values_name(values));
    const std::vector<int> ord = layout(c.bhsd);
    const int64_t pad = rng.integer(0, 3);
    Operands t{HostTensor(c.dtype, {c.b, c.sq, c.h, c.d}, ord, pad),
               HostTensor(c.dtype, {c.b, c.sk, c.hkv, c.d}, ord, pad),
               HostTensor(c.dtype, {c.b, c.sk, c.hkv, c.dv}, ord, pad),
               HostTensor(c.dtype, {c.b, c.sq, c.h, c.dv}, ord, pad),
               HostTensor(DType::f32, {c.b, c.h, c.sq}, {}, pad),
               {}, {}, {}, HostTensor(DType::f32, {c.b, c.sq, c.h, c.dv}), HostTensor(DType::f32, {c.b, c.h, c.sq})};
    fill(t.q, rng, values, true, c.dtype);
    fill(t.k, rng, values, true, c.dtype);
    fill(t.v, rng, values, false, c.dtype);
    t.q32 = to_f32(t.q);
    t.k32 = to_f32(t.k);
    t.v32 = to_f32(t.v);
    if (c.varlen) {
      c.p.cu_seqlens_q = c.cu_q.data();
      c.p.cu_seqlens_k = c.cu_k.data();
    }
    HostTensor slopes, sinks;
    add_variants(c, rng, values, slopes, sinks);
    fc::AttentionParams rp = c.p;
    rp.lse = t.ref_lse.ptr();
    fc::reference::attention(t.q32.view(), t.k32.view(), t.v32.view(), t.ref.view(), rp);
    t.out.poison();
    t.lse.poison();
    c.p.lse = t.lse.ptr();
    fc::attention(t.q.view(), t.k.view(), t.v.view(), t.out.view(), c.p);
    EXPECT_TRUE(t.out.padding_untouched()) << "out: bytes outside the view changed";
    EXPECT_TRUE(t.lse.padding_untouched()) << "lse: bytes outside the view changed";
    // Varlen rows past the last sequence are not written: compare only the others.
    if (c.varlen)
      for (int64_t s = c.cu_q.back(); s < c.sq; ++s)
        for (int64_t hh = 0; hh < c.h; ++hh) {
          for (int64_t e = 0; e < c.dv; ++e) {
            const int64_t i = (s * c.h + hh) * c.dv + e;
            EXPECT_TRUE(std::isnan(t.out.get(i))) << "varlen row " << s << " past the last sequence was written";
            t.out.set(i, 0.0);
            t.ref.set(i, 0.0);
          }
          t.lse.set(hh * c.sq + s, -std::numeric_limits<double>::infinity());
          t.ref_lse.set(hh * c.sq + s, -std::numeric_limits<double>::infinity());
        }
    // Huge scores are exact in fp32 and their softmax is (nearly) one-hot: the fp32 and
    // 16-bit tolerances hold. Fast exp2 with 16-bit P adds its error to P's rounding, and
    // with NaN-laden rows the finite outputs left to compare can be a handful that do not
    // average out (bf16, D = 1: 1.6e-2 seen): 2e-2 there.
    const bool fast16 = c.p.exp2 == fc::Exp2Mode::fast && c.dtype != DType::f32;
    const double tol = fast16 ? std::max(2e-2, tolerance(c.dtype, c.p.exp2, c.sk)) : tolerance(c.dtype, c.p.exp2, c.sk);
    EXPECT_TRUE(outputs_agree(t.out, t.ref, tol));
    EXPECT_TRUE(lse_agree(t.lse, t.ref_lse, tol));
    if (::testing::Test::HasFailure()) return;  // one described failure, not hundreds
  }
}

TEST(Hostile, NormalValues) { run_property(Values::normal, calls(60)); }
TEST(Hostile, DenormalValues) { run_property(Values::denormal, calls(30)); }
TEST(Hostile, HugeScoresGiveTheirSoftmax) { run_property(Values::huge, calls(60)); }
TEST(Hostile, NonFiniteValuesReachOnlyRowsThatSeeThem) { run_property(Values::nonfinite, calls(120)); }

// A row split over keys (one query block, two threads) whose later keys all score -inf
// (K = -inf where q > 0) and one of which holds NaN in V: that part of the row sees no
// finite score, yet the key is seen, so 0 * NaN reaches the output as in the reference
// (column 0 NaN, the others finite), whichever part holds it.
TEST(Hostile, SplitPartWithOnlyMinusInfScoresPassesSeenNaN) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t sk = 1024, d = 8;
  for (Strategy st : kStrategies) {
    SCOPED_TRACE(name(st));
    HostTensor q(DType::f32, {1, 1, 1, d}), k(DType::f32, {1, sk, 1, d}), v(DType::f32, {1, sk, 1, d});
    HostTensor out(DType::f32, {1, 1, 1, d}), ref(DType::f32, {1, 1, 1, d});
    q.fill_uniform(rng, 0.5, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    for (int64_t j = 64; j < sk; ++j) k.set(j * d, -std::numeric_limits<double>::infinity());
    v.set((sk - 5) * d, std::numeric_limits<double>::quiet_NaN());
    fc::AttentionParams p;
    p.strategy = st;
    p.threads = 2;
    fc::reference::attention(q.view(), k.view(), v.view(), ref.view(), p);
    ASSERT_TRUE(std::isnan(ref.get(0)) && std::isfinite(ref.get(1)));
    out.poison();
    fc::attention(q.view(), k.view(), v.view(), out.view(), p);
    EXPECT_TRUE(outputs_agree(out, ref, 1e-5));
  }
}

// Scaled scores within fp32's range whose max times log2(e) is not: +-2.4e38 to 3.2e38 (scale 1),
// and a huge ALiBi slope that takes every score of a row near -FLT_MAX (and some past it,
// to -inf). exp2's argument c*s - c*m must not become inf - inf: each row is the softmax of
// its scores, here one-hot on the max key (an ulp at 2^127 is 2^104). Every strategy and
// exp2 mode.
TEST(Hostile, MaxPastFloatRangeAfterLog2e) {
  Rng rng;
  FC_TRACE_SEED(rng);
  const int64_t sk = 7, dv = 3;
  for (const double sign : {1.0, -1.0})
    for (const bool alibi : {false, true})
      for (Strategy st : kStrategies)
        for (Exp2Mode mode : kExpModes) {
          SCOPED_TRACE(std::string(name(st)) + " " + name(mode) + (alibi ? " alibi" : " scores") +
                       (sign > 0 ? " +" : " -"));
          // ALiBi: 13 rows over 7 keys, row i at distance |i - 6 - j| from key j: row 0's
          // biases -slope * (6 + j) run from -2.55e38 to -inf (j >= 3), the later rows'
          // reach 0.
          const int64_t sq = alibi ? 13 : 1;
          HostTensor q(DType::f32, {1, sq, 1, 1}), k(DType::f32, {1, sk, 1, 1}), v(DType::f32, {1, sk, 1, dv});
          HostTensor out(DType::f32, {1, sq, 1, dv}), ref(DType::f32, {1, sq, 1, dv});
          HostTensor slopes(DType::f32, {1});
          v.fill_uniform(rng, -1, 1);
          fc::AttentionParams p;
          p.strategy = st;
          p.exp2 = mode;
          p.threads = 1;
          if (alibi) {
            q.fill_uniform(rng, -1, 1);
            k.fill_uniform(rng, -1, 1);
            slopes.set(0, 4.25e37);
            p.alibi_slopes = slopes.ptr();
          } else {
            q.set(0, 0x1p63);
            for (int64_t j = 0; j < sk; ++j) k.set(j, sign * std::ldexp(1.4 + 0.08 * double(j), 64));
            p.scale = 1.0f;
          }
          fc::reference::attention(q.view(), k.view(), v.view(), ref.view(), p);
          for (int64_t i = 0; i < sq * dv; ++i) ASSERT_TRUE(std::isfinite(ref.get(i)));
          out.poison();
          fc::attention(q.view(), k.view(), v.view(), out.view(), p);
          EXPECT_TRUE(outputs_agree(out, ref, 1e-5));
        }
}

// A NaN or Inf in V at a key that the causal mask (or a window) hides from some rows of
// the same block, the shape the probe first found (decode and prefill, every strategy).
TEST(Hostile, MaskedNonFiniteValuesStayHidden) {
  Rng rng;
  FC_TRACE_SEED(rng);
  struct Shape { int64_t sq, sk, d; bool causal; int64_t wl, wr; };
  const Shape shapes[] = {{512, 512, 64, true, -1, -1}, {300, 700, 40, true, -1, -1}, {4, 1000, 64, true, -1, -1},
                          {1, 1000, 128, false, 100, 0},  {257, 257, 32, false, 16, 16}, {64, 64, 16, true, 8, -1}};
  for (const Shape& s : shapes)
    for (DType dt : kStorageTypes)
      for (Strategy st : kStrategies) {
        SCOPED_TRACE(name(dt) + " Sq" + std::to_string(s.sq) + " Sk" + std::to_string(s.sk) + " " + name(st));
        HostTensor q(dt, {1, s.sq, 2, s.d}), k(dt, {1, s.sk, 1, s.d}), v(dt, {1, s.sk, 1, s.d});
        HostTensor out(dt, {1, s.sq, 2, s.d}), lse(DType::f32, {1, 2, s.sq});
        q.fill_uniform(rng, -1, 1);
        k.fill_uniform(rng, -1, 1);
        v.fill_uniform(rng, -1, 1);
        // Poison V (and K) at a few keys every row cannot see: past the diagonal of the
        // first rows, and before the window of the last.
        fc::AttentionParams p;
        p.causal = s.causal;
        p.window_left = s.wl;
        p.window_right = s.wr;
        p.strategy = st;
        p.lse = lse.ptr();
        const int64_t off = s.sk - s.sq;
        for (int64_t j : {off + s.sq / 2 + 1, off + s.sq - 1, std::max<int64_t>(0, off - 3), int64_t(0)}) {
          if (j < 0 || j >= s.sk) continue;
          for (int64_t e = 0; e < s.d; ++e) {
            v.set(j * s.d + e, (e % 3 == 0) ? std::numeric_limits<double>::quiet_NaN()
                                            : std::numeric_limits<double>::infinity());
            if (e % 5 == 0) k.set(j * s.d + e, std::numeric_limits<double>::quiet_NaN());
          }
        }
        HostTensor q32 = to_f32(q), k32 = to_f32(k), v32 = to_f32(v);
        HostTensor ref(DType::f32, {1, s.sq, 2, s.d}), ref_lse(DType::f32, {1, 2, s.sq});
        fc::AttentionParams rp = p;
        rp.lse = ref_lse.ptr();
        fc::reference::attention(q32.view(), k32.view(), v32.view(), ref.view(), rp);
        out.poison();
        fc::attention(q.view(), k.view(), v.view(), out.view(), p);
        EXPECT_TRUE(outputs_agree(out, ref, tolerance(dt, Exp2Mode::exact, s.sk)));
        EXPECT_TRUE(lse_agree(lse, ref_lse, tolerance(dt, Exp2Mode::exact, s.sk)));
        if (::testing::Test::HasFailure()) return;
      }
}

// ---------------------------------------------------------------- alias fuzzing
// A view of `shape` into the shared buffer at a random offset, with random strides:
// contiguous, transposed (BHSD), padded, or occasionally zero / too small (overlapping).
Tensor draw_view(Rng& rng, float* base, int64_t cap, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = DType::f32;
  t.rank = int(shape.size());
  std::vector<int> order(shape.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  if (t.rank == 4 && rng.integer(0, 1) == 1) std::swap(order[1], order[2]);
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    const int dim = order[size_t(i)];
    t.shape[dim] = shape[size_t(dim)];
    t.strides[dim] = stride;
    stride *= std::max<int64_t>(shape[size_t(dim)], 1);
    if (i == t.rank - 1) stride += rng.integer(0, 2);  // padded rows
  }
  if (rng.integer(0, 5) == 0) {  // a zero or too small stride: elements overlap
    const int dim = int(rng.integer(0, t.rank - 2));
    t.strides[dim] = rng.integer(0, 1) == 0 ? 0 : t.strides[dim] / 2;
  }
  int64_t span = 1;
  for (int i = 0; i < t.rank; ++i) span += (t.shape[i] - 1) * t.strides[i];
  t.data = base + rng.integer(0, std::max<int64_t>(0, cap - span));
  return t;
}

// The elements of a view copied into a contiguous f32 tensor.
HostTensor copy_of(const Tensor& t) {
  std::vector<int64_t> shape(t.shape, t.shape + t.rank);
  HostTensor c(DType::f32, shape);
  const int64_t n = c.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = i, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (r % t.shape[d]) * t.strides[d];
      r /= t.shape[d];
    }
    c.set(i, double(static_cast<const float*>(t.data)[off]));
  }
  return c;
}

TEST(Hostile, AliasedArraysAreRefusedOrCorrect) {
  Rng rng;
  FC_TRACE_SEED(rng);
  constexpr int64_t kCap = 1 << 15;  // floats
  std::vector<float> buf(kCap + 64);
  float* base = buf.data();
  int refused = 0, ran = 0;
  for (int call = 0, n = calls(300); call < n; ++call) {
    const int64_t b = rng.integer(1, 2), sq = rng.integer(1, 12), sk = rng.integer(1, 12);
    const int64_t hkv = rng.integer(1, 2), h = hkv * rng.integer(1, 2), d = rng.integer(1, 9);
    for (float& x : buf) x = float(rng.uniform(-1, 1));
    const bool varlen = rng.integer(0, 2) == 0;
    const int64_t bb = varlen ? 1 : b;
    Tensor q = draw_view(rng, base, kCap, {bb, sq, h, d}), k = draw_view(rng, base, kCap, {bb, sk, hkv, d});
    Tensor v = draw_view(rng, base, kCap, {bb, sk, hkv, d}), out = draw_view(rng, base, kCap, {bb, sq, h, d});
    Tensor lse = draw_view(rng, base, kCap, {bb, h, sq});
    fc::AttentionParams p;
    p.causal = rng.integer(0, 1) == 1;
    p.threads = int(rng.integer(1, 2));
    p.lse = rng.integer(0, 3) == 0 ? nullptr : &lse;
    int32_t* cu_q = nullptr;
    int32_t* cu_k = nullptr;
    if (varlen) {  // cu_seqlens written into the shared buffer too (int32 bits in the floats)
      int32_t* cus = reinterpret_cast<int32_t*>(base);
      cu_q = cus + rng.integer(0, kCap - 8);
      do {  // (the two arrays apart from each other: one written over the other is no valid call)
        cu_k = cus + rng.integer(0, kCap - 8);
      } while (cu_k > cu_q - 2 && cu_k < cu_q + 2);
      cu_q[0] = cu_k[0] = 0;
      cu_q[1] = int32_t(rng.integer(0, sq));
      cu_k[1] = int32_t(rng.integer(0, sk));
      p.cu_seqlens_q = cu_q;
      p.cu_seqlens_k = cu_k;
      p.varlen_batch = 1;
    }
    SCOPED_TRACE("call " + std::to_string(call) + (varlen ? " varlen" : "") + " B" + std::to_string(bb) + " Sq" +
                 std::to_string(sq) + " Sk" + std::to_string(sk) + " H" + std::to_string(h) + "/" +
                 std::to_string(hkv) + " D" + std::to_string(d));
    // The reference on copies taken now, before the call (inputs the call may not change).
    HostTensor q32 = copy_of(q), k32 = copy_of(k), v32 = copy_of(v);
    std::vector<int32_t> cq = varlen ? std::vector<int32_t>{cu_q[0], cu_q[1]} : std::vector<int32_t>{};
    std::vector<int32_t> ck = varlen ? std::vector<int32_t>{cu_k[0], cu_k[1]} : std::vector<int32_t>{};
    HostTensor ref(DType::f32, {bb, sq, h, d}), ref_lse(DType::f32, {bb, h, sq});
    fc::AttentionParams rp = p;
    rp.lse = ref_lse.ptr();
    if (varlen) {
      rp.cu_seqlens_q = cq.data();
      rp.cu_seqlens_k = ck.data();
    }
    fc::reference::attention(q32.view(), k32.view(), v32.view(), ref.view(), rp);
    const std::vector<float> before = buf;
    try {
      fc::attention(q, k, v, out, p);
    } catch (const fc::Error& e) {
      ++refused;
      EXPECT_EQ(int(e.code()), int(fc::Status::invalid_argument)) << e.what();
      EXPECT_TRUE(std::memcmp(before.data(), buf.data(), buf.size() * 4) == 0)
          << "refused (" << e.what() << ") but the buffer changed";
      continue;
    }
    ++ran;
    HostTensor got = copy_of(out);
    const int64_t rows = varlen ? cq[1] : sq;  // varlen rows past the sequence: not written
    for (int64_t bi = 0; bi < bb; ++bi)
      for (int64_t s = 0; s < rows; ++s)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t e = 0; e < d; ++e) {
            const int64_t i = ((bi * sq + s) * h + hh) * d + e;
            ASSERT_NEAR(got.get(i), ref.get(i), 1e-5 * (1 + std::abs(ref.get(i)))) << "out index " << i;
          }
    if (p.lse != nullptr) {
      HostTensor gl = copy_of(lse);
      for (int64_t bi = 0; bi < bb; ++bi)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t s = 0; s < rows; ++s) {
            const int64_t i = (bi * h + hh) * sq + s;
            const double r = ref_lse.get(i), o = gl.get(i);
            ASSERT_TRUE(std::isinf(r) ? o == r : std::abs(o - r) <= 1e-5 * (1 + std::abs(r)))
                << "lse index " << i << ": got " << o << ", want " << r;
          }
    }
  }
  // Both outcomes must occur, or the fuzzer tests only one side.
  EXPECT_GT(refused, 0);
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace fctest
