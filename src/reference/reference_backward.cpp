// fp64 reference of attention_backward: the exact gradients of attention at the given
// (rounded) inputs, for tests and benchmarks. O, lse and P are recomputed from q, k and v in
// double (the forward's out and lse are checked, never read), so the truth does not depend
// on how accurate the forward that produced them was. Plain loops, no blocking.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "api/checks_backward.hpp"
#include "core/backward_problem.hpp"
#include "core/dtype.hpp"
#include "core/errors.hpp"
#include "core/threads.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::reference {
namespace {

using Rows = std::vector<std::vector<double>>;

// n rows of `len` elements, row j at base + j * stride (elements of dtype t), as doubles.
Rows load_rows(const void* base, int64_t stride, int64_t n, int64_t len, DType t) {
  Rows r(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(len)));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < len; ++d) r[size_t(j)][size_t(d)] = double(core::load_as_f32(base, j * stride + d, t));
  return r;
}

void store_rows(const Rows& r, void* base, int64_t stride, DType t) {
  for (size_t j = 0; j < r.size(); ++j)
    for (size_t d = 0; d < r[j].size(); ++d) core::store_from_f32(base, int64_t(j) * stride + int64_t(d), t, float(r[j][d]));
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const AttentionParams& params) {
  const core::AttentionBackwardProblem bp = api::check_attention_backward(q, k, v, out, dout, lse, dq, dk, dv, params);
  const core::AttentionProblem& p = bp.fwd;
  if (p.device != Device::cpu)
    throw_error(Status::unsupported, "q: the reference runs on CPU tensors only");
  const int64_t nb = p.cu_q ? 1 : p.batch;
  // Rows outside every sequence (varlen) and every element when a dim is 0 stay zero.
  core::zero_grad(bp.dq, p.dtype, nb, bp.rows_q, p.heads, p.d);
  core::zero_grad(bp.dk, p.dtype, nb, bp.rows_k, p.kv_heads, p.d);
  core::zero_grad(bp.dv, p.dtype, nb, bp.rows_k, p.kv_heads, p.dv);
  if (p.heads == 0) return;
  const double scale = double(p.scale);
  const int64_t es = int64_t(dtype_size(p.dtype));
  // One (batch, KV head) per iteration: it owns its dk/dv rows and its query heads' dq
  // rows, and sums in a fixed order, so the result does not depend on the thread count
  // (params.threads, or OMP_NUM_THREADS / all cores capped as the fast paths are).
  const int threads = p.threads > 0 ? p.threads : std::min(omp_get_max_threads(), core::max_threads());
  // The sinks' gradient per (batch entry, head), summed over the batch after the loop.
  std::vector<double> dsink(static_cast<size_t>(bp.dsinks ? p.batch * p.heads : 0), 0.0);
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t hk = 0; hk < p.kv_heads; ++hk) {
      const core::Sequence seq = core::sequence(p, b);
      const int64_t q_off = seq.q_off, k_off = seq.k_off, sq = seq.sq, sk = seq.sk, bb = seq.bb;
      const core::BandMask mask = core::make_mask(p.causal, p.window_left, p.window_right, sq, sk);
      auto kv_at = [&](const void* base, int64_t sb, int64_t ss, int64_t sh) {
        return static_cast<const char*>(base) + (bb * sb + k_off * ss + hk * sh) * es;
      };
      const Rows K = load_rows(kv_at(p.k.data, p.k.sb, p.k.ss, p.k.sh), p.k.ss, sk, p.d, p.dtype);
      const Rows V = load_rows(kv_at(p.v.data, p.v.sb, p.v.ss, p.v.sh), p.v.ss, sk, p.dv, p.dtype);
      Rows dK(static_cast<size_t>(sk), std::vector<double>(static_cast<size_t>(p.d), 0.0));
      Rows dV(static_cast<size_t>(sk), std::vector<double>(static_cast<size_t>(p.dv), 0.0));
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        auto q_at = [&](const void* base, int64_t sb, int64_t ss, int64_t sh) {
          return static_cast<const char*>(base) + (bb * sb + q_off * ss + h * sh) * es;
        };
        const Rows Q = load_rows(q_at(p.q.data, p.q.sb, p.q.ss, p.q.sh), p.q.ss, sq, p.d, p.dtype);
        const Rows dO = load_rows(q_at(bp.dout.data, bp.dout.sb, bp.dout.ss, bp.dout.sh), bp.dout.ss, sq, p.dv, p.dtype);
        Rows dQ(static_cast<size_t>(sq), std::vector<double>(static_cast<size_t>(p.d), 0.0));
        std::vector<double> s(static_cast<size_t>(sk)), pr(static_cast<size_t>(sk)), o(static_cast<size_t>(p.dv)),
            dz(static_cast<size_t>(sk), 1.0);
        // Score variants: z = softcap(scale q.k) - slope * distance; dz/d(scale q.k) = 1 - tanh^2
        // with the softcap (ALiBi adds a constant); the sink joins the sum without a value.
        const double cap = double(p.softcap), slope = double(p.slope(b, h));
        const double sink = p.sinks ? double(p.sinks[h]) : -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < sq; ++i) {
          // Softmax of the visible scores (none visible: the row contributes nothing).
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < sk; ++j) {
            double z = -std::numeric_limits<double>::infinity();
            if (mask.visible(i, j)) {
              z = scale * dot(Q[size_t(i)], K[size_t(j)]);
              if (cap > 0.0) {
                const double t = std::tanh(z / cap);
                z = cap * t;
                dz[size_t(j)] = 1.0 - t * t;
              }
              z -= slope * double(std::llabs(i + sk - sq - j));
            }
            s[size_t(j)] = z;
            mx = std::max(mx, z);
          }
          if (mx == -std::numeric_limits<double>::infinity()) continue;
          mx = std::max(mx, sink);
          double sum = std::exp(sink - mx);
          for (int64_t j = 0; j < sk; ++j) sum += pr[size_t(j)] = std::exp(s[size_t(j)] - mx);
          std::fill(o.begin(), o.end(), 0.0);
          for (int64_t j = 0; j < sk; ++j) {
            pr[size_t(j)] /= sum;
            for (int64_t e = 0; e < p.dv; ++e) o[size_t(e)] += pr[size_t(j)] * V[size_t(j)][size_t(e)];
          }
          const double Di = dot(dO[size_t(i)], o);
          // d sink = -P_sink D_i (P_sink = exp(sink - lse_i), the sink's share of the row)
          if (!dsink.empty()) dsink[size_t(b * p.heads + h)] -= std::exp(sink - mx) / sum * Di;
          for (int64_t j = 0; j < sk; ++j) {
            const double pj = pr[size_t(j)];
            if (pj == 0.0) continue;
            const double ds = pj * (dot(dO[size_t(i)], V[size_t(j)]) - Di) * dz[size_t(j)];
            for (int64_t e = 0; e < p.d; ++e) {
              dQ[size_t(i)][size_t(e)] += scale * ds * K[size_t(j)][size_t(e)];
              dK[size_t(j)][size_t(e)] += scale * ds * Q[size_t(i)][size_t(e)];
            }
            for (int64_t e = 0; e < p.dv; ++e) dV[size_t(j)][size_t(e)] += pj * dO[size_t(i)][size_t(e)];
          }
        }
        store_rows(dQ, static_cast<char*>(bp.dq.data) + (bb * bp.dq.sb + q_off * bp.dq.ss + h * bp.dq.sh) * es,
                   bp.dq.ss, p.dtype);
      }
      auto grad_at = [&](const core::GradOut& g) {
        return static_cast<char*>(g.data) + (bb * g.sb + k_off * g.ss + hk * g.sh) * es;
      };
      store_rows(dK, grad_at(bp.dk), bp.dk.ss, p.dtype);
      store_rows(dV, grad_at(bp.dv), bp.dv.ss, p.dtype);
    }
  }
  for (int64_t h = 0; bp.dsinks != nullptr && h < p.heads; ++h) {
    double acc = 0;
    for (int64_t b = 0; b < p.batch; ++b) acc += dsink[size_t(b * p.heads + h)];
    bp.dsinks[h] = float(acc);
  }
}

}  // namespace flashcore::reference
