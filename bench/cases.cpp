#include "cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "core/dtype.hpp"

namespace fcbench {

using flashcore::DType;
using flashcore::Tensor;

namespace {

// The fp64 reference is a plain loop (~1 GFLOP/s here): checks cover at most this many
// reference flops, taking whole rows of the output (a subset of batches, heads, rows).
constexpr double kRefBudgetFlops = 3e8;

double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = double(got[i]) - double(ref[i]);
    num += diff * diff;  // NaN in `got` makes the result NaN: it never passes
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The reference's score variants for the first hs heads: slopes and sinks copied into the
// given vectors, viewed by the given tensors, set in p.
void variant_subset(const Config& c, const AttentionData& d, int64_t hs, flashcore::AttentionParams& p,
                    std::vector<float>& slopes, std::vector<float>& sinks, Tensor& slopes_t, Tensor& sinks_t) {
  p.softcap = c.softcap;
  for (int64_t h = 0; h < hs; ++h) {
    if (c.alibi) slopes.push_back(d.slopes.at(h));
    if (c.sinks) sinks.push_back(d.sinks.at(h));
  }
  if (c.alibi) p.alibi_slopes = &(slopes_t = Tensor::contiguous(slopes.data(), DType::f32, {hs}));
  if (c.sinks) p.sinks = &(sinks_t = Tensor::contiguous(sinks.data(), DType::f32, {hs}));
}

// Rows of the output the reference can afford: cost_per_row flops each, at least one.
int64_t affordable_rows(double cost_per_row, int64_t rows) {
  const double r = std::floor(kRefBudgetFlops / std::max(cost_per_row, 1.0));
  return std::clamp<int64_t>(int64_t(r), 1, rows);
}

}  // namespace

DType parse_dtype(const std::string& s) {
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  if (s == "e4m3") return DType::e4m3;
  return DType::f32;
}

flashcore::Strategy parse_strategy(const std::string& s) {
  if (s == "two-pass") return flashcore::Strategy::two_pass;
  if (s == "three-pass") return flashcore::Strategy::three_pass;
  if (s == "online") return flashcore::Strategy::online;
  return flashcore::Strategy::automatic;
}

float HostArray::at(int64_t i) const {
  return flashcore::core::load_as_f32(bytes.data(), i, dtype);  // e4m3 decoded exactly
}

HostArray empty_array(DType t, int64_t n) {
  HostArray a;
  a.dtype = t;
  a.n = n;
  a.bytes.assign(size_t(n) * flashcore::dtype_size(t), 0);
  return a;
}

HostArray random_array(DType t, int64_t n, float lo, float hi, Rng& rng) {
  HostArray a = empty_array(t, n);
  if (t == DType::e4m3) {
    std::uniform_int_distribution<int> exp(4, 9), man(0, 7), sign(0, 1);
    for (int64_t i = 0; i < n; ++i)
      a.bytes[size_t(i)] = uint8_t(sign(rng) << 7 | exp(rng) << 3 | man(rng));
    return a;
  }
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) flashcore::core::store_from_f32(a.data(), i, t, u(rng));
  return a;
}

void poison(HostArray& a) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (a.dtype == DType::e4m3) {
    std::fill(a.bytes.begin(), a.bytes.end(), uint8_t(0x7F));
    return;
  }
  for (int64_t i = 0; i < a.n; ++i) flashcore::core::store_from_f32(a.data(), i, a.dtype, nan);
}

Tensor view(HostArray& a, std::initializer_list<int64_t> shape, flashcore::Device dev, void* data) {
  return Tensor::contiguous(data ? data : a.data(), a.dtype, shape, dev);
}

AttentionData make_attention(const Config& c, Rng& rng) {
  AttentionData d;
  d.b = c.batch; d.h = c.heads; d.hkv = c.kv_heads; d.sq = c.seq_q; d.sk = c.seq_k; d.d = c.head_dim;
  const DType t = parse_dtype(c.dtype);
  // fp8 attention writes bf16 (the storage dtypes do not include an fp8 output).
  const DType out_t = t == DType::e4m3 ? DType::bf16 : t;
  d.q = random_array(t, d.b * d.sq * d.h * d.d, -1.0f, 1.0f, rng);
  d.k = random_array(t, d.b * d.sk * d.hkv * d.d, -1.0f, 1.0f, rng);
  d.v = random_array(t, d.b * d.sk * d.hkv * d.d, -1.0f, 1.0f, rng);
  d.o = empty_array(out_t, d.b * d.sq * d.h * d.d);
  if (c.alibi) {  // the ALiBi paper's geometric slopes
    d.slopes = empty_array(DType::f32, d.h);
    for (int64_t h = 0; h < d.h; ++h)
      flashcore::core::store_from_f32(d.slopes.data(), h, DType::f32, std::exp2(-8.0f * float(h + 1) / float(d.h)));
  }
  if (c.sinks) d.sinks = random_array(DType::f32, d.h, -1.0f, 1.0f, rng);
  return d;
}

void set_variants(const Config& c, AttentionData& d, flashcore::AttentionParams& p, flashcore::Device dev,
                  void* slopes_dev, void* sinks_dev) {
  p.softcap = c.softcap;
  if (c.alibi) {
    d.slopes_t = view(d.slopes, {d.h}, dev, slopes_dev);
    p.alibi_slopes = &d.slopes_t;
  }
  if (c.sinks) {
    d.sinks_t = view(d.sinks, {d.h}, dev, sinks_dev);
    p.sinks = &d.sinks_t;
  }
}

std::string DecodeCache::describe() const {
  if (page == 0) return "contiguous cache";
  return "paged cache, page " + std::to_string(page) + (in_order ? ", pages in table order" : ", pages in a random order");
}

void round_to_e4m3(HostArray& a) {
  for (int64_t i = 0; i < a.n; ++i)
    flashcore::core::store_from_f32(a.data(), i, a.dtype, flashcore::core::e4m3_to_f32(flashcore::core::f32_to_e4m3(a.at(i))));
}

DecodeCache make_decode_cache(const AttentionData& d, int64_t page, bool in_order, Rng& rng, bool fp8) {
  DecodeCache dc;
  dc.page = page;
  dc.in_order = in_order;
  dc.per_seq = page > 0 ? (d.sk + page - 1) / page : 0;
  dc.pages = page > 0 ? d.b * dc.per_seq : d.b;
  dc.lens = empty_array(DType::i32, d.b);
  dc.table = empty_array(DType::i32, std::max<int64_t>(page > 0 ? dc.pages : 1, 1));
  for (int64_t b = 0; b < d.b; ++b) static_cast<int32_t*>(dc.lens.data())[b] = int32_t(d.sk);
  if (page == 0 && !fp8) return dc;
  const int64_t row = d.hkv * d.d, rows = page > 0 ? page : d.sk;  // a page's (or a sequence's) rows
  const DType kt = fp8 ? DType::e4m3 : d.k.dtype;
  const int64_t es = int64_t(flashcore::dtype_size(kt)), src_es = int64_t(flashcore::dtype_size(d.k.dtype));
  int32_t* ids = static_cast<int32_t*>(dc.table.data());
  if (page > 0) {
    std::iota(ids, ids + dc.pages, 0);
    if (!in_order) std::shuffle(ids, ids + dc.pages, rng);
  }
  dc.kc = empty_array(kt, dc.pages * rows * row);
  dc.vc = empty_array(kt, dc.pages * rows * row);
  for (int64_t b = 0; b < d.b; ++b)
    for (int64_t s = 0; s < d.sk; ++s) {
      const int64_t slot = page > 0 ? int64_t(ids[b * dc.per_seq + s / page]) * page + s % page : b * d.sk + s;
      const int64_t src = (b * d.sk + s) * row;
      if (!fp8) {
        std::memcpy(dc.kc.bytes.data() + slot * row * es, d.k.bytes.data() + src * src_es, size_t(row * es));
        std::memcpy(dc.vc.bytes.data() + slot * row * es, d.v.bytes.data() + src * src_es, size_t(row * es));
        continue;
      }
      for (int64_t e = 0; e < row; ++e) {
        dc.kc.bytes[size_t(slot * row + e)] = flashcore::core::f32_to_e4m3(d.k.at(src + e));
        dc.vc.bytes[size_t(slot * row + e)] = flashcore::core::f32_to_e4m3(d.v.at(src + e));
      }
    }
  return dc;
}

SoftmaxVData make_softmax_v(const Config& c, Rng& rng) {
  SoftmaxVData d;
  d.m = c.batch * c.heads * c.seq_q; d.l = c.seq_k; d.d = c.head_dim;
  const DType t = parse_dtype(c.dtype);
  // Scores spread over a few units so the softmax is far from uniform (and max-find matters).
  d.s = random_array(DType::f32, d.m * d.l, -8.0f, 8.0f, rng);
  d.v = random_array(t, d.l * d.d, -1.0f, 1.0f, rng);
  d.o = empty_array(t, d.m * d.d);
  return d;
}

GemmChainData make_gemm_chain(const Config& c, Rng& rng) {
  GemmChainData d;
  d.m = c.batch * c.heads * c.seq_q; d.k1 = c.head_dim; d.k2 = c.seq_k; d.n = c.head_dim;
  const DType t = parse_dtype(c.dtype);
  d.a = random_array(t, d.m * d.k1, -1.0f, 1.0f, rng);
  d.b = random_array(t, d.k1 * d.k2, -1.0f, 1.0f, rng);
  d.c = random_array(t, d.k2 * d.n, -1.0f, 1.0f, rng);
  d.e = empty_array(t, d.m * d.n);
  return d;
}

CheckResult check_attention(const Config& c, const AttentionData& d, const HostArray& out,
                            int64_t max_heads, int64_t max_rows) {
  // Subset: first batch, the query heads of the first few KV heads, the *last* rows (with
  // bottom-right causal alignment the last r rows of Sq see exactly the keys they see as
  // rows of the full problem).
  const int64_t group = d.h / d.hkv;
  const int64_t hkv_max = max_heads > 0 ? std::max<int64_t>(1, max_heads / group) : d.hkv;
  int64_t hk = hkv_max;
  auto row_cost = [&](int64_t kvh) { return 4.0 * double(kvh * group * d.sk * d.d); };
  int64_t rows = affordable_rows(row_cost(hk), d.sq);
  if (rows < std::min<int64_t>(d.sq, 64) && hk > 1) {
    hk = std::max<int64_t>(1, int64_t(kRefBudgetFlops / (row_cost(1) * double(std::min<int64_t>(d.sq, 64)))));
    hk = std::min(hk, hkv_max);
    rows = affordable_rows(row_cost(hk), d.sq);
  }
  if (max_rows > 0) rows = std::min(rows, max_rows);
  const int64_t hs = hk * group, r0 = d.sq - rows;
  std::vector<float> q(size_t(rows * hs * d.d)), k(size_t(d.sk * hk * d.d)), v(k.size()),
      got(q.size()), ref(q.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = 0; h < hs; ++h)
      for (int64_t x = 0; x < d.d; ++x) {
        const int64_t src = ((r0 + i) * d.h + h) * d.d + x;  // batch 0
        const size_t dst = size_t((i * hs + h) * d.d + x);
        q[dst] = d.q.at(src);
        got[dst] = out.at(src);
      }
  for (int64_t j = 0; j < d.sk; ++j)
    for (int64_t h = 0; h < hk; ++h)
      for (int64_t x = 0; x < d.d; ++x) {
        const int64_t src = (j * d.hkv + h) * d.d + x;
        k[size_t((j * hk + h) * d.d + x)] = d.k.at(src);
        v[size_t((j * hk + h) * d.d + x)] = d.v.at(src);
      }
  flashcore::AttentionParams p;
  p.causal = c.causal;
  auto t = [](std::vector<float>& buf, std::initializer_list<int64_t> shape) {
    return Tensor::contiguous(buf.data(), DType::f32, shape);
  };
  // The variants of the checked heads (the first hs): the rows keep their positions, since
  // the last rows of Sq see the same keys at the same distances as in the whole problem.
  std::vector<float> slopes, sinks;
  Tensor slopes_t, sinks_t;
  variant_subset(c, d, hs, p, slopes, sinks, slopes_t, sinks_t);
  flashcore::reference::attention(t(q, {1, rows, hs, d.d}), t(k, {1, d.sk, hk, d.d}),
                                  t(v, {1, d.sk, hk, d.d}), t(ref, {1, rows, hs, d.d}), p);
  CheckResult res;
  res.rel_err = rel_error(got, ref);
  if (d.b > 1 || hs < d.h || rows < d.sq)
    res.subset = "ref on b 1/" + std::to_string(d.b) + ", heads " + std::to_string(hs) + "/" +
                 std::to_string(d.h) + ", last rows " + std::to_string(rows) + "/" + std::to_string(d.sq);
  return res;
}

BackwardData make_backward(const AttentionData& d, Rng& rng) {
  BackwardData g;
  const DType t = d.q.dtype;
  g.dout = random_array(t, d.o.n, -1.0f, 1.0f, rng);
  g.lse = empty_array(DType::f32, d.b * d.h * d.sq);
  g.dq = empty_array(t, d.q.n);
  g.dk = empty_array(t, d.k.n);
  g.dv = empty_array(t, d.v.n);
  return g;
}

CheckResult check_attention_backward(const Config& c, const AttentionData& d, const BackwardData& g) {
  // The reference spends ~12 D flops per visible (query, key) pair and head.
  const int64_t group = d.h / d.hkv;
  const bool whole = 12.0 * double(d.b * d.h * d.sq * d.sk * d.d) <= kRefBudgetFlops;
  const int64_t nb = whole ? d.b : 1, hk = whole ? d.hkv : 1, hs = hk * group;
  const int64_t rows = whole ? d.sq : affordable_rows(12.0 * double(hs * d.sk * d.d), d.sq), r0 = d.sq - rows;
  // Batch-major copies of [nb, rows (from r0) or sk, heads, d] as f32.
  auto take = [&](const HostArray& a, int64_t s_all, int64_t s0, int64_t n_s, int64_t h_all, int64_t n_h) {
    std::vector<float> out(size_t(nb * n_s * n_h * d.d));
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t s = 0; s < n_s; ++s)
        for (int64_t h = 0; h < n_h; ++h)
          for (int64_t x = 0; x < d.d; ++x)
            out[size_t(((b * n_s + s) * n_h + h) * d.d + x)] = a.at(((b * s_all + s0 + s) * h_all + h) * d.d + x);
    return out;
  };
  std::vector<float> q = take(d.q, d.sq, r0, rows, d.h, hs), dout = take(g.dout, d.sq, r0, rows, d.h, hs),
                     out = take(d.o, d.sq, r0, rows, d.h, hs), k = take(d.k, d.sk, 0, d.sk, d.hkv, hk),
                     v = take(d.v, d.sk, 0, d.sk, d.hkv, hk), lse(size_t(nb * hs * rows), 0.0f);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  auto t4 = [&](std::vector<float>& buf, int64_t s, int64_t h) {
    return Tensor::contiguous(buf.data(), DType::f32, {nb, s, h, d.d});
  };
  flashcore::AttentionParams p;
  p.causal = c.causal;
  std::vector<float> slopes, sinks;
  Tensor slopes_t, sinks_t;
  variant_subset(c, d, hs, p, slopes, sinks, slopes_t, sinks_t);
  flashcore::reference::attention_backward(t4(q, rows, hs), t4(k, d.sk, hk), t4(v, d.sk, hk), t4(out, rows, hs),
                                           t4(dout, rows, hs), Tensor::contiguous(lse.data(), DType::f32, {nb, hs, rows}),
                                           t4(dq, rows, hs), t4(dk, d.sk, hk), t4(dv, d.sk, hk), p);
  CheckResult res;
  res.rel_err = rel_error(take(g.dq, d.sq, r0, rows, d.h, hs), dq);
  if (whole) {
    res.rel_err = std::max({res.rel_err, rel_error(take(g.dk, d.sk, 0, d.sk, d.hkv, hk), dk),
                            rel_error(take(g.dv, d.sk, 0, d.sk, d.hkv, hk), dv)});
  } else {
    res.subset = "ref on dq only, b 1/" + std::to_string(d.b) + ", heads " + std::to_string(hs) + "/" +
                 std::to_string(d.h) + ", last rows " + std::to_string(rows) + "/" + std::to_string(d.sq);
  }
  return res;
}

CheckResult check_softmax_v(const SoftmaxVData& d) {
  const int64_t rows = affordable_rows(2.0 * double(d.l * d.d) + 3.0 * double(d.l), d.m);
  std::vector<float> s(size_t(rows * d.l)), v(size_t(d.l * d.d)), got(size_t(rows * d.d)),
      ref(got.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = d.s.at(int64_t(i));
  for (size_t i = 0; i < v.size(); ++i) v[i] = d.v.at(int64_t(i));
  for (size_t i = 0; i < got.size(); ++i) got[i] = d.o.at(int64_t(i));
  auto t = [](std::vector<float>& buf, int64_t r, int64_t c) {
    return Tensor::contiguous(buf.data(), DType::f32, {r, c});
  };
  flashcore::reference::softmax_v(t(s, rows, d.l), t(v, d.l, d.d), t(ref, rows, d.d));
  CheckResult res;
  res.rel_err = rel_error(got, ref);
  if (rows < d.m) res.subset = "ref on rows " + std::to_string(rows) + "/" + std::to_string(d.m);
  return res;
}

CheckResult check_gemm_chain(const GemmChainData& d) {
  const int64_t rows = affordable_rows(2.0 * double(d.k1 * d.k2 + d.k2 * d.n), d.m);
  std::vector<float> a(size_t(rows * d.k1)), b(size_t(d.k1 * d.k2)), c(size_t(d.k2 * d.n)),
      got(size_t(rows * d.n)), ref(got.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = d.a.at(int64_t(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = d.b.at(int64_t(i));
  for (size_t i = 0; i < c.size(); ++i) c[i] = d.c.at(int64_t(i));
  for (size_t i = 0; i < got.size(); ++i) got[i] = d.e.at(int64_t(i));
  auto t = [](std::vector<float>& buf, int64_t r, int64_t cols) {
    return Tensor::contiguous(buf.data(), DType::f32, {r, cols});
  };
  flashcore::reference::gemm_chain(t(a, rows, d.k1), t(b, d.k1, d.k2), t(c, d.k2, d.n),
                                   t(ref, rows, d.n));
  CheckResult res;
  res.rel_err = rel_error(got, ref);
  if (rows < d.m) res.subset = "ref on rows " + std::to_string(rows) + "/" + std::to_string(d.m);
  return res;
}

}  // namespace fcbench
