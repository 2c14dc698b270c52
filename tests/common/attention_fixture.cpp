// The forward attention's shared test data (attention_fixture.hpp).
#include "common/attention_fixture.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace fctest {

namespace fc = flashcore;

namespace {
std::vector<int> order_of(bool bhsd) { return bhsd ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 2, 3}; }
}  // namespace

AttnCase with_variants(AttnCase c, float softcap, int alibi, bool sinks, std::vector<int32_t> cu_q,
                       std::vector<int32_t> cu_k) {
  c.softcap = softcap;
  c.alibi = alibi;
  c.sinks = sinks;
  c.cu_q = std::move(cu_q);
  c.cu_k = std::move(cu_k);
  return c;
}

AttnFixture::AttnFixture(const AttnCase& cs, DType dt, Rng& rng, int ref_threads) : c(cs), dtype(dt) {
  q = HostTensor(dt, {c.b, c.sq, c.h, c.d}, order_of(c.bhsd), c.pad);
  k = HostTensor(dt, {c.b, c.sk, c.hkv, c.d}, order_of(c.bhsd), c.pad);
  v = HostTensor(dt, {c.b, c.sk, c.hkv, c.dv}, order_of(c.bhsd), c.pad);
  // Scores with a standard deviation of ~3 at the default scale: peaked softmax rows.
  q.fill_uniform(rng, -3, 3);
  k.fill_uniform(rng, -3, 3);
  v.fill_uniform(rng, -1, 1);
  if (c.ramp != 0.0)  // logical [B, Sk, Hkv, D] index, whatever the memory order
    for (int64_t i = 0; i < c.b * c.sk * c.hkv * c.d; ++i)
      k.set(i, k.get(i) + c.ramp * double(i / (c.hkv * c.d) % c.sk) / double(c.sk));
  const int64_t nb = c.cu_q.empty() ? c.b : int64_t(c.cu_q.size()) - 1;
  if (c.alibi != 0) {
    slopes = c.alibi == 1 ? HostTensor(DType::f32, {c.h}) : HostTensor(DType::f32, {nb, c.h});
    slopes.fill_uniform(rng, 0.0, 0.5);
  }
  if (c.sinks) {  // about the rows' own lse (scores of std ~3): sometimes ahead, sometimes not
    sinks = HostTensor(DType::f32, {c.h});
    sinks.fill_uniform(rng, -3, 8);
  }
  HostTensor qf = to_f32(q), kf = to_f32(k), vf = to_f32(v);
  ref_out = HostTensor(DType::f32, {c.b, c.sq, c.h, c.dv});
  ref_lse = HostTensor(DType::f32, {c.b, c.h, c.sq});
  fc::AttentionParams p = params();
  p.lse = ref_lse.ptr();
  p.threads = ref_threads;
  fc::reference::attention(qf.view(), kf.view(), vf.view(), ref_out.view(), p);
}

fc::AttentionParams AttnFixture::params() const {
  fc::AttentionParams p;
  p.scale = c.scale;
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  if (c.alibi != 0) p.alibi_slopes = &slopes.view();
  if (c.sinks) p.sinks = &sinks.view();
  if (!c.cu_q.empty()) {
    p.cu_seqlens_q = c.cu_q.data();
    p.cu_seqlens_k = c.cu_k.data();
    p.varlen_batch = int64_t(c.cu_q.size()) - 1;
  }
  return p;
}

void AttnFixture::check(Strategy s, Exp2Mode e, int threads, const char* impl, DType kernel_ab) {
  SCOPED_TRACE("strategy " + name(s) + ", exp " + name(e) + ", threads " + std::to_string(threads) + ", impl " +
               (impl ? impl : "auto"));
  HostTensor out(dtype, {c.b, c.sq, c.h, c.dv}, order_of(c.bhsd), c.pad);
  HostTensor lse(DType::f32, {c.b, c.h, c.sq}, {}, 1);
  fc::AttentionParams p = params();
  p.strategy = s;
  p.exp2 = e;
  p.threads = threads;
  p.impl = impl;
  p.lse = lse.ptr();
  fc::PhaseTimes times;
  fc::attention(q.view(), k.view(), v.view(), out.view(), p, &times);
  const double tol = tolerance(dtype, kernel_ab, e, c.sk);
  EXPECT_TRUE(close(out, ref_out, tol));
  EXPECT_TRUE(lse_close(lse, ref_lse, tol));
  EXPECT_TRUE(out.padding_untouched()) << "attention wrote outside the output view";
  EXPECT_TRUE(lse.padding_untouched()) << "attention wrote outside the lse view";
  if (impl != nullptr) {
    EXPECT_EQ(times.kernel, impl);
  }
  if (s != Strategy::automatic) {
    EXPECT_EQ(times.strategy, fc::to_string(s));
  }
  // Rows that see no key: O exactly 0, whatever the tolerance, and lse the sink or -inf.
  for (int64_t b = 0; b < c.b && c.cu_q.empty(); ++b)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        if (!masked(i)) continue;
        ASSERT_EQ(lse.get((b * c.h + h) * c.sq + i), c.sinks ? sinks.get(h) : -std::numeric_limits<double>::infinity())
            << "fully masked row b=" << b << " h=" << h << " i=" << i;
        for (int64_t d = 0; d < c.dv; ++d)
          ASSERT_EQ(out.get(((b * c.sq + i) * c.h + h) * c.dv + d), 0.0)
              << "fully masked row b=" << b << " h=" << h << " i=" << i;
      }
}

bool AttnFixture::masked(int64_t i) const {
  const int64_t off = c.sk - c.sq;
  const int64_t right = c.causal ? (c.window_right < 0 ? 0 : std::min<int64_t>(c.window_right, 0)) : c.window_right;
  const int64_t lo = c.window_left < 0 ? 0 : std::max<int64_t>(0, i + off - c.window_left);
  const int64_t hi = right < 0 ? c.sk : std::min(c.sk, i + off + right + 1);
  return hi <= lo;
}

}  // namespace fctest
