// fp64 reference: the truth every kernel is tested and benchmarked against. Plain loops,
// natural exp in double, the same argument checks and conventions as the fast paths.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "api/checks.hpp"
#include "core/errors.hpp"
#include "core/dtype.hpp"
#include "core/threads.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::reference {
namespace {

double load(const void* base, int64_t idx, DType t) { return double(core::load_as_f32(base, idx, t)); }

void require_cpu(Device d, const char* name) {
  if (d != Device::cpu) throw_error(Status::unsupported, std::string(name) + ": the reference runs on CPU tensors only");
}

// O[i] = sum_j softmax_j(scale * s_j) v_j for one row whose scores are given; returns
// lse (natural log). A row with no visible key (or only -inf scores) gets O = 0 and lse =
// `sink` (-inf: none). A NaN among the visible scores makes the row's max, and so O and lse,
// NaN (std::max would skip it). The sink (attention sinks) joins the softmax's sum without
// a value.
double softmax_row(const std::vector<double>& s, const std::vector<bool>& visible, double scale,
                   const std::vector<std::vector<double>>& vrows, std::vector<double>& o,
                   double sink = -std::numeric_limits<double>::infinity()) {
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < s.size(); ++j)
    if (visible[j]) mx = std::isnan(scale * s[j]) ? scale * s[j] : std::max(mx, scale * s[j]);
  std::fill(o.begin(), o.end(), 0.0);
  if (mx == -std::numeric_limits<double>::infinity()) return sink;
  mx = std::isnan(sink) ? sink : std::max(mx, sink);  // (a NaN in mx stays: std::max(NaN, x) is NaN)
  double sum = std::exp(sink - mx);
  for (size_t j = 0; j < s.size(); ++j) {
    if (!visible[j]) continue;
    const double p = std::exp(scale * s[j] - mx);
    sum += p;
    for (size_t d = 0; d < o.size(); ++d) o[d] += p * vrows[j][d];
  }
  for (double& x : o) x /= sum;
  return mx + std::log(sum);
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const AttentionParams& params) {
  const core::AttentionProblem p = api::check_attention(q, k, v, out, params, /*reference=*/true);
  require_cpu(p.device, "q");
  // fp8 inputs are decoded exactly and dequantized here (the descales are 1 otherwise):
  // the scores get q_descale * k_descale, V rows v_descale, each times its per-head factor
  // (entry b * Hkv + KV head) where one is given.
  auto head_factor = [&](const float* f, int64_t b, int64_t hk) {
    return f == nullptr ? 1.0 : double(f[b * p.kv_heads + hk]);
  };
  // One (batch, head) per iteration, spread over OpenMP threads: each writes only its own
  // rows of O and lse, and the sums run in the same order whatever the thread count. The
  // count: params.threads, or OMP_NUM_THREADS / all cores capped as the fast paths are.
  const int threads = p.threads > 0 ? p.threads : std::min(omp_get_max_threads(), core::max_threads());
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t q_off = p.cu_q ? p.cu_q[b] : 0, k_off = p.cu_k ? p.cu_k[b] : 0;
      const int64_t sq = p.cu_q ? p.cu_q[b + 1] - p.cu_q[b] : p.sq;
      const int64_t sk = p.cu_k ? p.cu_k[b + 1] - p.cu_k[b] : p.sk;
      const int64_t bb = p.cu_q ? 0 : b;
      const core::BandMask mask = core::make_mask(p.causal, p.window_left, p.window_right, sq, sk);
      const int64_t hk = h / p.group();
      const double qk_descale = double(p.q_descale) * head_factor(p.q_descale_heads, b, hk) * double(p.k_descale) *
                                head_factor(p.k_descale_heads, b, hk);
      const double v_descale = double(p.v_descale) * head_factor(p.v_descale_heads, b, hk);
      // K and V rows of this head decoded once (V dequantized by its descale).
      std::vector<std::vector<double>> krows(static_cast<size_t>(sk), std::vector<double>(static_cast<size_t>(p.d)));
      std::vector<std::vector<double>> vrows(static_cast<size_t>(sk), std::vector<double>(static_cast<size_t>(p.dv)));
      for (int64_t j = 0; j < sk; ++j) {
        for (int64_t d = 0; d < p.d; ++d)
          krows[size_t(j)][size_t(d)] = load(p.k.data, bb * p.k.sb + (k_off + j) * p.k.ss + hk * p.k.sh + d, p.dtype);
        for (int64_t d = 0; d < p.dv; ++d)
          vrows[size_t(j)][size_t(d)] =
              v_descale * load(p.v.data, bb * p.v.sb + (k_off + j) * p.v.ss + hk * p.v.sh + d, p.dtype);
      }
      std::vector<double> s(static_cast<size_t>(sk)), o(static_cast<size_t>(p.dv)), qrow(static_cast<size_t>(p.d));
      std::vector<bool> vis(static_cast<size_t>(sk));
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t d = 0; d < p.d; ++d)
          qrow[size_t(d)] = load(p.q.data, bb * p.q.sb + (q_off + i) * p.q.ss + h * p.q.sh + d, p.dtype);
        for (int64_t j = 0; j < sk; ++j) {
          vis[size_t(j)] = mask.visible(i, j);
          double acc = 0;
          if (vis[size_t(j)])
            for (int64_t d = 0; d < p.d; ++d) acc += qrow[size_t(d)] * krows[size_t(j)][size_t(d)];
          s[size_t(j)] = acc * qk_descale;
        }
        // Score variants: softcap then ALiBi on the scaled scores (the softmax's scale is 1 then).
        double scale = double(p.scale);
        if (p.softcap > 0.0f || p.alibi != nullptr) {
          const double cap = double(p.softcap), slope = double(p.slope(b, h));
          for (int64_t j = 0; j < sk; ++j) {
            double z = scale * s[size_t(j)];
            if (cap > 0.0) z = cap * std::tanh(z / cap);
            s[size_t(j)] = z - slope * double(std::llabs(i + sk - sq - j));
          }
          scale = 1.0;
        }
        const double sink = p.sinks ? double(p.sinks[h]) : -std::numeric_limits<double>::infinity();
        const double lse = softmax_row(s, vis, scale, vrows, o, sink);
        for (int64_t d = 0; d < p.dv; ++d)
          core::store_from_f32(p.o, bb * p.o_sb + (q_off + i) * p.o_ss + h * p.o_sh + d, p.out_dtype,
                               float(o[size_t(d)]));
        if (p.lse) p.lse[bb * p.lse_sb + h * p.lse_sh + q_off + i] = float(lse);
      }
    }
  }
}

void softmax_v(const Tensor& s, const Tensor& v, const Tensor& out, const SoftmaxVParams& params) {
  const core::SoftmaxVProblem p = api::check_softmax_v(s, v, out, params);
  std::vector<std::vector<double>> vrows(static_cast<size_t>(p.l), std::vector<double>(static_cast<size_t>(p.d)));
  for (int64_t j = 0; j < p.l; ++j)
    for (int64_t d = 0; d < p.d; ++d) vrows[size_t(j)][size_t(d)] = load(p.v, j * p.v_sl + d, p.dtype);
  std::vector<double> row(static_cast<size_t>(p.l)), o(static_cast<size_t>(p.d));
  const std::vector<bool> vis(static_cast<size_t>(p.l), true);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.l; ++j) row[size_t(j)] = load(p.s, i * p.s_sm + j * p.s_sl, p.s_dtype);
    softmax_row(row, vis, double(p.scale), vrows, o);
    for (int64_t d = 0; d < p.d; ++d) core::store_from_f32(p.o, i * p.o_sm + d, p.dtype, float(o[size_t(d)]));
  }
}

void gemm_chain(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out) {
  const core::GemmChainProblem p = api::check_gemm_chain(a, b, c, out, {});
  std::vector<double> t(static_cast<size_t>(p.k2)), e(static_cast<size_t>(p.n));
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.k2; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < p.k1; ++k) acc += load(p.a, i * p.a_sm + k, p.dtype) * load(p.b, k * p.b_sk + j, p.dtype);
      t[size_t(j)] = acc;
    }
    for (int64_t n = 0; n < p.n; ++n) {
      double acc = 0;
      for (int64_t j = 0; j < p.k2; ++j) acc += t[size_t(j)] * load(p.c, j * p.c_sk + n, p.dtype);
      e[size_t(n)] = acc;
    }
    for (int64_t n = 0; n < p.n; ++n) core::store_from_f32(p.e, i * p.e_sm + n, p.dtype, float(e[size_t(n)]));
  }
}

}  // namespace flashcore::reference
