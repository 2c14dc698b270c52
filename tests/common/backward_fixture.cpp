// The attention backward's shared test data (backward_fixture.hpp).
#include "common/backward_fixture.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace fctest {

namespace fc = flashcore;

std::vector<int> bwd_order(bool bhsd) { return bhsd ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 2, 3}; }

fc::AttentionParams bwd_params(const BwdCase& c, const int32_t* cu_q, const int32_t* cu_k) {
  fc::AttentionParams p;
  p.scale = c.scale;
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  if (!c.cu_q.empty()) {
    p.cu_seqlens_q = cu_q != nullptr ? cu_q : c.cu_q.data();
    p.cu_seqlens_k = cu_k != nullptr ? cu_k : c.cu_k.data();
    p.varlen_batch = int64_t(c.cu_q.size()) - 1;
    if (c.max_seqlen)
      for (size_t i = 1; i < c.cu_q.size(); ++i) {
        p.max_seqlen_q = std::max<int64_t>(p.max_seqlen_q, c.cu_q[i] - c.cu_q[i - 1]);
        p.max_seqlen_k = std::max<int64_t>(p.max_seqlen_k, c.cu_k[i] - c.cu_k[i - 1]);
      }
  }
  return p;
}

fc::AttentionParams BwdData::params() const {
  fc::AttentionParams p = bwd_params(c);
  p.softcap = c.softcap;
  if (c.alibi != 0) p.alibi_slopes = &slopes.view();
  if (c.sinks) p.sinks = &sinks.view();
  return p;
}

BwdData::BwdData(const BwdCase& cs, DType dt, Rng& rng) : c(cs), dtype(dt) {
  const int64_t nb = c.cu_q.empty() ? c.b : int64_t(c.cu_q.size()) - 1;  // batch entries or sequences
  if (c.alibi != 0) {
    slopes = c.alibi == 1 ? HostTensor(DType::f32, {c.h}) : HostTensor(DType::f32, {nb, c.h});
    slopes.fill_uniform(rng, 0.0, 0.3);
  }
  if (c.sinks) {
    sinks = HostTensor(DType::f32, {c.h});
    sinks.fill_uniform(rng, -2.0, 3.0);
    ref_dsinks = HostTensor(DType::f32, {c.h});
  }
  const auto ord = bwd_order(c.bhsd);
  q = HostTensor(dt, {c.b, c.sq, c.h, c.d}, ord, c.pad);
  k = HostTensor(dt, {c.b, c.sk, c.hkv, c.d}, ord, c.pad);
  v = HostTensor(dt, {c.b, c.sk, c.hkv, c.dv}, ord, c.pad);
  dout = HostTensor(dt, {c.b, c.sq, c.h, c.dv}, ord, c.pad);
  out = HostTensor(dt, {c.b, c.sq, c.h, c.dv}, ord, c.pad);
  lse = HostTensor(DType::f32, {c.b, c.h, c.sq}, {}, 1);
  q.fill_uniform(rng, -2, 2);
  k.fill_uniform(rng, -2, 2);
  v.fill_uniform(rng, -1, 1);
  dout.fill_uniform(rng, -1, 1);
  fc::AttentionParams p = params();
  p.lse = c.dv > 0 ? lse.ptr() : nullptr;  // (Dv = 0: the forward computes no lse; any lse will do)
  fc::attention(q.view(), k.view(), v.view(), out.view(), p);
  // varlen rows past the last sequence: the forward leaves them; give them values
  for (int64_t i = 0; i < out.numel(); ++i)
    if (std::isnan(out.get(i))) out.set(i, 0.0);
  for (int64_t i = 0; i < lse.numel(); ++i)
    if (std::isnan(lse.get(i))) lse.set(i, 0.0);
  HostTensor qf = to_f32(q), kf = to_f32(k), vf = to_f32(v), df = to_f32(dout), of = to_f32(out);
  ref_dq = HostTensor(DType::f32, {c.b, c.sq, c.h, c.d});
  ref_dk = HostTensor(DType::f32, {c.b, c.sk, c.hkv, c.d});
  ref_dv = HostTensor(DType::f32, {c.b, c.sk, c.hkv, c.dv});
  fc::AttentionParams rp = params();
  if (c.sinks) rp.dsinks = ref_dsinks.ptr();
  fc::reference::attention_backward(qf.view(), kf.view(), vf.view(), of.view(), df.view(), lse.view(), ref_dq.view(),
                                    ref_dk.view(), ref_dv.view(), rp);
}

BwdData::Grads BwdData::grads(int64_t pad) const {
  const auto ord = bwd_order(c.bhsd);
  const int64_t gp = pad >= 0 ? pad : c.pad;
  Grads g{HostTensor(dtype, {c.b, c.sq, c.h, c.d}, ord, gp), HostTensor(dtype, {c.b, c.sk, c.hkv, c.d}, ord, gp),
          HostTensor(dtype, {c.b, c.sk, c.hkv, c.dv}, ord, gp)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  if (c.sinks) g.dsinks = HostTensor(DType::f32, {c.h});
  return g;
}

void BwdData::check(const Grads& g, double tol) const {
  EXPECT_TRUE(close(g.dq, ref_dq, tol)) << "dq";
  EXPECT_TRUE(close(g.dk, ref_dk, tol)) << "dk";
  EXPECT_TRUE(close(g.dv, ref_dv, tol)) << "dv";
  // dsinks_h = -sum_i exp(sink_h - lse_i) D_i, D_i = dout_i . out_i with either sign, taken from
  // the stored out (rounded to 16 bits there; the reference recomputes out in fp64): its error
  // scales with the sum of the terms' magnitudes, not with the sum, which may cancel to ~0.
  for (int64_t h = 0; h < c.h && c.sinks; ++h) {
    double mag = 0;
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t i = 0; i < c.sq; ++i) {
        const double l = lse.get((b * c.h + h) * c.sq + i);
        if (std::isinf(l)) continue;
        for (int64_t e = 0; e < c.dv; ++e) {
          const int64_t at = ((b * c.sq + i) * c.h + h) * c.dv + e;
          mag += std::exp(sinks.get(h) - l) * std::abs(dout.get(at) * out.get(at));
        }
      }
    EXPECT_LE(std::abs(g.dsinks.get(h) - ref_dsinks.get(h)), tol * mag)
        << "dsinks[" << h << "] = " << g.dsinks.get(h) << ", reference " << ref_dsinks.get(h);
  }
  EXPECT_TRUE(g.dq.padding_untouched() && g.dk.padding_untouched() && g.dv.padding_untouched())
      << "attention_backward wrote outside a gradient view";
  // Fully masked rows (lse = -inf, or the sink's value with sinks): dq exactly 0.
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        const double masked = c.sinks ? sinks.get(h) : -std::numeric_limits<double>::infinity();
        if (lse.get((b * c.h + h) * c.sq + i) != masked) continue;
        for (int64_t e = 0; e < c.d; ++e)
          ASSERT_EQ(g.dq.get(((b * c.sq + i) * c.h + h) * c.d + e), 0.0) << "masked row b=" << b << " h=" << h << " i=" << i;
      }
}

std::vector<uint8_t> bytes_of(const BwdData::Grads& g) {
  std::vector<uint8_t> all = g.dq.snapshot();
  for (const HostTensor* t : {&g.dk, &g.dv}) {
    const std::vector<uint8_t> s = t->snapshot();
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

void expect_refused(const std::vector<fc::Tensor>& t, const fc::AttentionParams& p, const char* arg, fc::Status code) {
  try {
    fc::attention_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], p);
    ADD_FAILURE() << "accepted";
  } catch (const fc::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(arg, 0), 0u) << e.what();
  }
}

}  // namespace fctest
