// CPU runs of each op: set up inputs, check once against the reference (output poisoned
// first), time the library call, then a few more calls with PhaseTimes for the breakdown.
#include <algorithm>
#include <cmath>
#include <functional>

#include "bench.hpp"
#include "cases.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "flashcore/flashcore.hpp"
#include "peak.hpp"
#include "timing.hpp"

namespace fcbench {

using flashcore::PhaseTimes;

void apply_defaults(Config& c) {
  // Per-op defaults: attention a mid-size prefill; softmax-v seed 000's headline case
  // (M=12, L=32768, d=256); gemm-chain issue 3's block (M=K1=N=256, K2=8192).
  const bool att = c.op == "attention";
  const bool smv = c.op == "softmax-v";
  if (c.batch < 0) c.batch = 1;
  if (c.heads < 0) c.heads = att ? 8 : 1;
  if (c.kv_heads < 0) c.kv_heads = c.heads;
  if (c.seq_q < 0) c.seq_q = att ? 1024 : smv ? 12 : 256;
  if (c.seq_k < 0) c.seq_k = att ? c.seq_q : smv ? 32768 : 8192;
  if (c.head_dim < 0) c.head_dim = att ? 128 : 256;
}

double flop_count(const Config& c) {
  const double b = double(c.batch), h = double(c.heads), sq = double(c.seq_q),
               sk = double(c.seq_k), d = double(c.head_dim);
  if (c.op == "softmax-v") return 2.0 * b * h * sq * sk * d;  // exps not counted
  if (c.op == "gemm-chain") return 2.0 * b * h * sq * d * sk + 2.0 * b * h * sq * sk * d;
  double pairs = sq * sk;
  if (c.causal && c.seq_q == c.seq_k) {
    pairs *= 0.5;  // BENCH.md's convention
  } else if (c.causal) {
    // Exact count of visible (query, key) pairs, bottom-right aligned: row i sees
    // min(sk, max(0, i + sk - sq + 1)) keys.
    pairs = 0;
    for (int64_t i = 0; i < c.seq_q; ++i)
      pairs += double(std::min<int64_t>(c.seq_k, std::max<int64_t>(0, i + c.seq_k - c.seq_q + 1)));
  }
  return 4.0 * b * h * pairs * d;
}

namespace {

std::string isa_of_kernel(const std::string& key) {
  for (int i = 0; i < flashcore::cpu::gemm_ukernel_count(); ++i)
    if (key == flashcore::cpu::gemm_ukernel(i).key)
      return flashcore::cpu::isa_name(flashcore::cpu::gemm_ukernel(i).isa);
  return "";
}

// Throughput and % of the ceiling of the ISA that ran; `scale` multiplies the measured
// time when only a part of the problem was timed (naive baseline).
void finish(Result& r, const std::string& isa, double time_scale = 1.0) {
  r.p50_us *= time_scale;
  r.p90_us *= time_scale;
  r.gflops = flop_count(r.cfg) / (r.p50_us * 1e-6) * 1e-9;
  if (const Peak* pk = peak_for_isa(isa, r.cfg.threads)) {
    r.peak_name = pk->name;
    r.peak_gflops = pk->gflops;
    r.pct_peak = 100.0 * r.gflops / pk->gflops;
  }
}

void set_check(Result& r, const CheckResult& cr) {
  r.rel_err = cr.rel_err;
  r.tol = tolerance(r.cfg);
  r.check_ok = !std::isnan(cr.rel_err) && cr.rel_err <= r.tol;
  r.check_subset = cr.subset;
}

// The measurement shared by every CPU op: `call` runs the library once (PhaseTimes
// optional), `poison_out` and `check` implement --check.
void measure(Result& r, const std::function<void(PhaseTimes*)>& call,
             const std::function<void()>& poison_out, const std::function<CheckResult()>& check) {
  PhaseTimes first;
  if (r.cfg.check) poison_out();
  call(&first);
  if (r.cfg.check) set_check(r, check());
  r.kernel = first.kernel;
  r.strategy_ran = first.strategy;

  const Stats st = time_calls([&] { call(nullptr); }, r.cfg.iters);
  r.p50_us = st.p50_us;
  r.p90_us = st.p90_us;
  r.iters = st.iters;

  // Breakdown: separate calls, because the lap timers cost a little; averaged over a
  // few calls, and over threads (PhaseTimes sums every thread's time).
  constexpr double kLongCallUs = 1e5;
  const int runs = st.p50_us > kLongCallUs ? 1 : 3;
  PhaseTimes sum;
  for (int i = 0; i < runs; ++i) {
    PhaseTimes t;
    call(&t);
    sum.pack += t.pack; sum.max_find += t.max_find; sum.exp_pack += t.exp_pack;
    sum.gemm += t.gemm; sum.normalize += t.normalize;
  }
  const double to_us = 1e6 / (double(runs) * double(r.cfg.threads));
  r.phases = {true, sum.pack * to_us, sum.max_find * to_us, sum.exp_pack * to_us,
              sum.gemm * to_us, sum.normalize * to_us};
  finish(r, isa_of_kernel(r.kernel));
}

const char* impl_arg(const Config& c) { return c.impl == "auto" ? nullptr : c.impl.c_str(); }

void run_attention(Result& r, Rng& rng) {
  const Config& c = r.cfg;
  AttentionData d = make_attention(c, rng);
  const flashcore::Tensor q = view(d.q, {d.b, d.sq, d.h, d.d}), k = view(d.k, {d.b, d.sk, d.hkv, d.d}),
                          v = view(d.v, {d.b, d.sk, d.hkv, d.d}), o = view(d.o, {d.b, d.sq, d.h, d.d});
  flashcore::AttentionParams p;
  p.causal = c.causal;
  p.strategy = parse_strategy(c.strategy);
  p.exp2 = c.exp == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  measure(r, [&](PhaseTimes* t) { flashcore::attention(q, k, v, o, p, t); },
          [&] { poison(d.o); }, [&] { return check_attention(c, d); });
}

void run_softmax_v(Result& r, Rng& rng) {
  const Config& c = r.cfg;
  SoftmaxVData d = make_softmax_v(c, rng);
  const flashcore::Tensor s = view(d.s, {d.m, d.l}), v = view(d.v, {d.l, d.d}), o = view(d.o, {d.m, d.d});
  flashcore::SoftmaxVParams p;
  p.strategy = parse_strategy(c.strategy);
  p.exp2 = c.exp == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  measure(r, [&](PhaseTimes* t) { flashcore::softmax_v(s, v, o, p, t); }, [&] { poison(d.o); },
          [&] { return check_softmax_v(d); });
}

void run_gemm_chain(Result& r, Rng& rng) {
  const Config& c = r.cfg;
  GemmChainData d = make_gemm_chain(c, rng);
  const flashcore::Tensor a = view(d.a, {d.m, d.k1}), b = view(d.b, {d.k1, d.k2}),
                          cc = view(d.c, {d.k2, d.n}), e = view(d.e, {d.m, d.n});
  flashcore::GemmChainParams p;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  measure(r, [&](PhaseTimes* t) { flashcore::gemm_chain(a, b, cc, e, p, t); }, [&] { poison(d.e); },
          [&] { return check_gemm_chain(d); });
}

// The naive baseline, timed on as many (batch, head) pairs as fit ~kNaiveBudgetFlops per
// call, then scaled to the whole problem (every pair costs the same).
void run_naive(Result& r, Rng& rng) {
  constexpr double kNaiveBudgetFlops = 2.5e9;
  Config& c = r.cfg;
  if (c.op != "attention" || c.dtype != "f32")
    throw flashcore::Error(flashcore::Status::unsupported, "--impl naive: attention f32 only");
  AttentionData d = make_attention(c, rng);
  const int64_t units = d.b * d.h, group = d.h / d.hkv;
  const double per_unit = flop_count(c) / double(units);
  int64_t run = std::clamp<int64_t>(int64_t(kNaiveBudgetFlops / per_unit), 1, units);
  run = std::min(units, (run + group - 1) / group * group);  // whole KV groups for the check
  auto call = [&] {
    naive_attention(static_cast<const float*>(d.q.data()), static_cast<const float*>(d.k.data()),
                    static_cast<const float*>(d.v.data()), static_cast<float*>(d.o.data()), d.b,
                    d.h, d.hkv, d.sq, d.sk, d.d, run, c.causal, c.threads);
  };
  if (c.check) {
    poison(d.o);
    call();
    set_check(r, check_attention(c, d, std::min(run, d.h)));
  }
  // The naive call is long: fewer timed calls (the adaptive rule still gives >= 5 when
  // one call takes under 60 ms).
  const Stats st = time_calls(call, c.iters > 0 ? c.iters : 0, 0.3);
  r.p50_us = st.p50_us;
  r.p90_us = st.p90_us;
  r.iters = st.iters;
  r.kernel = "naive_f32_rowwise";
  r.strategy_ran = "naive";
  if (run < units)
    r.note = "naive timed on " + std::to_string(run) + "/" + std::to_string(units) +
             " heads, time scaled x" + std::to_string(units / run);
  finish(r, "generic", double(units) / double(run));
}

}  // namespace

Result run_config(const Config& c0, uint64_t seed) {
  Result r;
  r.cfg = c0;
  apply_defaults(r.cfg);
  r.seed = seed;
  if (r.cfg.backend == "cuda") return run_cuda(r.cfg, seed);
  if (r.cfg.threads <= 0) r.cfg.threads = online_cores();
  Rng rng(seed);
  try {
    if (r.cfg.impl == "naive") run_naive(r, rng);
    else if (r.cfg.op == "attention") run_attention(r, rng);
    else if (r.cfg.op == "softmax-v") run_softmax_v(r, rng);
    else run_gemm_chain(r, rng);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

#if !defined(FLASHCORE_BENCH_CUDA)
Result run_cuda(const Config& c, uint64_t seed) {
  Result r;
  r.cfg = c;
  r.seed = seed;
  r.error = "--backend cuda: this flashcore-bench was built without CUDA (FLASHCORE_WITH_CUDA off or no CUDA toolkit)";
  return r;
}
#endif

}  // namespace fcbench
