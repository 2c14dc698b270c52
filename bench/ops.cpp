// CPU runs of each op: set up inputs, check once against the reference (output poisoned
// first), time the library call, then a few more calls with PhaseTimes for the breakdown.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

#include "bench.hpp"
#include "cases.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "flashcore/flashcore.hpp"
#include "peak.hpp"
#include "timing.hpp"

namespace fcbench {

using flashcore::DType;
using flashcore::PhaseTimes;

void apply_defaults(Config& c) {
  // Per-op defaults: attention a mid-size prefill; softmax-v seed 000's headline case
  // (M=12, L=32768, d=256); gemm-chain the seeds' fused double GEMM block (M=K1=N=256, K2=8192).
  // attention-backward and --pass bwd are one thing: op attention-backward, pass bwd.
  if (c.op == "attention" && c.pass == "bwd") c.op = "attention-backward";
  if (c.op == "attention-backward") c.pass = "bwd";
  if (c.op != "attention" && c.op != "attention-backward") c.pass = "fwd";
  // decode: one query per sequence against 4096 cached keys.
  const bool dec = c.op == "decode";
  const bool att = c.op == "attention" || c.op == "attention-backward" || dec;
  const bool smv = c.op == "softmax-v";
  if (c.batch < 0) c.batch = 1;
  if (c.heads < 0) c.heads = att ? 8 : 1;
  if (c.kv_heads < 0) c.kv_heads = c.heads;
  if (c.seq_q < 0) c.seq_q = dec ? 1 : att ? 1024 : smv ? 12 : 256;
  if (c.seq_k < 0) c.seq_k = dec ? 4096 : att ? c.seq_q : smv ? 32768 : 8192;
  if (c.head_dim < 0) c.head_dim = att ? 128 : 256;
}

double flop_count(const Config& c) {
  const double b = double(c.batch), h = double(c.heads), sq = double(c.seq_q),
               sk = double(c.seq_k), d = double(c.head_dim);
  if (c.op == "softmax-v") return 2.0 * b * h * sq * sk * d;  // exps not counted
  if (c.op == "gemm-ukernel") return 2.0 * sq * sk * d * double(std::max(c.threads, 1));
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
  const double passes = c.pass == "bwd" ? 2.5 : c.pass == "fwd+bwd" ? 3.5 : 1.0;
  return passes * 4.0 * b * h * pairs * d;
}

double decode_bytes(const Config& c) {
  if ((c.op != "attention" && c.op != "decode") || c.pass != "fwd" || c.seq_q > kDecodeSq) return 0;
  const double es = c.dtype == "f32" ? 4 : c.dtype == "e4m3" ? 1 : 2, kv_es = c.fp8_cache ? 1 : es;
  const double qo = 2.0 * double(c.batch * c.heads * c.seq_q * c.head_dim);
  const double kv = 2.0 * double(c.batch * c.kv_heads * c.seq_k * c.head_dim);
  return qo * es + kv * kv_es;
}

namespace {

std::string isa_of_kernel(const std::string& key) {
  for (int i = 0; i < flashcore::cpu::gemm_ukernel_count(); ++i)
    if (key == flashcore::cpu::gemm_ukernel(i).key)
      return flashcore::cpu::isa_name(flashcore::cpu::gemm_ukernel(i).isa);
  for (int i = 0; i < flashcore::cpu::rowops_count(); ++i)  // the decode / few-row path
    if (key == flashcore::cpu::rowops(i).key)
      return flashcore::cpu::isa_name(flashcore::cpu::rowops(i).isa);
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
  if (const double bytes = decode_bytes(r.cfg); bytes > 0) {
    r.gbps = bytes / (r.p50_us * 1e-6) * 1e-9;
    r.mem_gbps = mem_read_peak(r.cfg.threads)->gflops;
    r.pct_mem = 100.0 * r.gbps / r.mem_gbps;
  }
}

void set_check(Result& r, const CheckResult& cr) {
  r.rel_err = cr.rel_err;
  r.tol = tolerance(r.cfg);
  r.check_ok = !std::isnan(cr.rel_err) && cr.rel_err <= r.tol;
  r.check_subset = cr.subset;
}

// The naive baseline on the same inputs: slow (~1 GFLOP/s), so it runs on a part of the
// problem, the last rows of the first KV group's heads, sized to ~kNaiveBudgetFlops per
// call; its time is scaled by (flops of the whole problem) / (flops of the part).
struct NaivePart {
  HostArray out;
  int64_t units_run = 0, rows_run = 0;
  double scale = 1;
  std::string note;
  std::function<void()> call;
};

std::unique_ptr<NaivePart> make_naive(const Config& c, const AttentionData& d) {
  constexpr double kNaiveBudgetFlops = 2.5e8;
  if (c.op != "attention" || c.dtype != "f32" || c.backend != "cpu")
    throw flashcore::Error(flashcore::Status::unsupported, "naive baseline: cpu attention f32 only");
  if (d.h % d.hkv != 0)
    throw flashcore::Error(flashcore::Status::invalid_argument, "--kv-heads must divide --heads");
  auto np = std::make_unique<NaivePart>();
  const int64_t units = d.b * d.h;
  np->units_run = std::min(units, d.h / d.hkv);
  np->rows_run = std::clamp<int64_t>(
      int64_t(kNaiveBudgetFlops / (4.0 * double(d.sk * d.d * np->units_run))), 1, d.sq);
  double part_flops = 0;  // visible (query, key) pairs of the part, as flop_count counts them
  for (int64_t i = d.sq - np->rows_run; i < d.sq; ++i)
    part_flops += double(c.causal ? std::min<int64_t>(d.sk, std::max<int64_t>(0, i + d.sk - d.sq + 1)) : d.sk);
  part_flops *= 4.0 * double(np->units_run * d.d);
  np->scale = flop_count(c) / part_flops;
  if (np->units_run < units || np->rows_run < d.sq)
    np->note = "naive timed on " + std::to_string(np->units_run) + "/" + std::to_string(units) +
               " heads x last " + std::to_string(np->rows_run) + "/" + std::to_string(d.sq) +
               " rows, time scaled by the flop ratio x" + std::to_string(std::lround(np->scale));
  np->out = empty_array(DType::f32, d.o.n);
  NaivePart* raw = np.get();
  np->call = [raw, &d, &c] {
    naive_attention(static_cast<const float*>(d.q.data()), static_cast<const float*>(d.k.data()),
                    static_cast<const float*>(d.v.data()), static_cast<float*>(raw->out.data()),
                    d.b, d.h, d.hkv, d.sq, d.sk, d.d, raw->units_run, d.sq - raw->rows_run,
                    c.causal, c.threads);
  };
  return np;
}

// First (warm-up) call of the naive part, poisoned and checked with --check; returns its time.
double naive_first_call(Result& nr, NaivePart& np, const AttentionData& d) {
  if (nr.cfg.check) poison(np.out);
  const double t0 = now_seconds();
  np.call();
  const double first_s = now_seconds() - t0;
  if (nr.cfg.check) set_check(nr, check_attention(nr.cfg, d, np.out, np.units_run, np.rows_run));
  nr.kernel = "naive_f32_rowwise";
  nr.strategy_ran = "naive";
  nr.note = np.note;
  return first_s;
}

// A second call timed alongside the measured one, calls interleaved: the naive baseline
// (vs_naive) or the unpacked call (vs_unpacked). `first` makes its warm-up call (poisoned
// and checked with --check, filling its row's kernel) and returns its time; its row gets
// the timings, as % of the ceiling of `isa` (naive: "generic"; empty: its kernel's), its
// time multiplied by `scale`; *ratio gets the median over pairs of its time / ours.
struct Alongside {
  std::function<double()> first;
  std::function<void()> call;
  Result* row;
  std::string isa;
  double scale = 1;
  double* ratio;
};

Alongside naive_alongside(Result& ours, Result& naive_row, NaivePart& np, const AttentionData& d) {
  return {[&] { return naive_first_call(naive_row, np, d); }, np.call, &naive_row, "generic",
          np.scale, &ours.speedup_vs_naive};
}

// The measurement shared by every CPU op: `call` runs the library once (PhaseTimes
// optional), `poison_out` and `check` implement --check.
// The first call of an op into row r (poisoned and checked with --check); returns its time.
double first_call(Result& r, const std::function<void(PhaseTimes*)>& call,
                  const std::function<void()>& poison_out, const std::function<CheckResult()>& check) {
  PhaseTimes first;
  if (r.cfg.check) poison_out();
  const double t0 = now_seconds();
  call(&first);
  const double first_s = now_seconds() - t0;
  if (r.cfg.check) set_check(r, check());
  r.kernel = first.kernel;
  r.strategy_ran = first.strategy;
  return first_s;
}

void measure(Result& r, const std::function<void(PhaseTimes*)>& call,
             const std::function<void()>& poison_out, const std::function<CheckResult()>& check,
             Alongside* base = nullptr) {
  const double first_s = first_call(r, call, poison_out, check);  // also the first warm-up call

  Stats st;
  if (base != nullptr) {
    const double base_first_s = base->first();
    const PairStats ps = time_pair([&] { call(nullptr); }, first_s, base->call, base_first_s,
                                   r.cfg.iters);
    st = ps.a;
    Result& nr = *base->row;
    nr.p50_us = ps.b.p50_us;
    nr.p90_us = ps.b.p90_us;
    nr.iters = ps.b.iters;
    finish(nr, base->isa.empty() ? isa_of_kernel(nr.kernel) : base->isa, base->scale);
    *base->ratio = ps.ratio * base->scale;
  } else {
    st = time_calls([&] { call(nullptr); }, r.cfg.iters, first_s);
  }
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
  const std::string isa = isa_of_kernel(r.kernel);
  finish(r, isa);
  if (r.cfg.paired > 0)
    r.pct_peak_paired = paired_pct(isa, r.cfg.threads, flop_count(r.cfg), r.p50_us * 1e-6, [&] { call(nullptr); },
                                   r.cfg.paired);
}

const char* impl_arg(const Config& c) { return c.impl == "auto" ? nullptr : c.impl.c_str(); }

// The forward's options of a row: mask, strategy, exp mode, threads and kernel.
flashcore::AttentionParams forward_params(const Config& c) {
  flashcore::AttentionParams p;
  p.causal = c.causal;
  p.strategy = parse_strategy(c.strategy);
  p.exp2 = c.exp == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  return p;
}

void run_attention(Result& r, Rng& rng, Result* naive_row) {
  const Config& c = r.cfg;
  AttentionData d = make_attention(c, rng);
  const flashcore::Tensor q = view(d.q, {d.b, d.sq, d.h, d.d}), k = view(d.k, {d.b, d.sk, d.hkv, d.d}),
                          v = view(d.v, {d.b, d.sk, d.hkv, d.d}), o = view(d.o, {d.b, d.sq, d.h, d.d});
  flashcore::AttentionParams p = forward_params(c);
  set_variants(c, d, p);
  std::unique_ptr<NaivePart> np;
  Alongside base;
  if (naive_row != nullptr) base = naive_alongside(r, *naive_row, *(np = make_naive(c, d)), d);
  measure(r, [&](PhaseTimes* t) { flashcore::attention(q, k, v, o, p, t); },
          [&] { poison(d.o); }, [&] { return check_attention(c, d, d.o); },
          naive_row ? &base : nullptr);
}

// decode: attention_with_kvcache over a cache that holds the Sk keys of make_attention's K
// and V for every sequence (cache_seqlens = Sk, nothing appended): those tensors themselves
// (--page-size 0), or pages of page_size rows, each sequence's pages in a random order (a
// server's cache after many sequences came and went). --check: the reference on the
// contiguous keys. contig_row (vs_contiguous): the same call on the contiguous K and V,
// timed alongside, calls interleaved.
void run_decode(Result& r, Rng& rng, Result* contig_row) {
  const Config& c = r.cfg;
  AttentionData d = make_attention(c, rng);
  if (c.fp8_cache)
    for (HostArray* t : {&d.k, &d.v}) round_to_e4m3(*t);
  DecodeCache dc = make_decode_cache(d, c.page_size, c.pages_in_order, rng, c.fp8_cache);
  const int64_t page = dc.page;
  const flashcore::Tensor q = view(d.q, {d.b, d.sq, d.h, d.d}), o = view(d.o, {d.b, d.sq, d.h, d.d}),
                          kcv = page > 0 || c.fp8_cache ? view(dc.kc, {dc.pages, page > 0 ? page : d.sk, d.hkv, d.d})
                                                        : view(d.k, {d.b, d.sk, d.hkv, d.d}),
                          vcv = page > 0 || c.fp8_cache ? view(dc.vc, {dc.pages, page > 0 ? page : d.sk, d.hkv, d.d})
                                                        : view(d.v, {d.b, d.sk, d.hkv, d.d}),
                          lensv = view(dc.lens, {d.b}), tablev = view(dc.table, {d.b, dc.per_seq});
  flashcore::KvCacheOptions opt;
  if (page > 0) opt.block_table = &tablev;
  const flashcore::AttentionParams p = forward_params(c);
  const flashcore::Tensor kv = view(d.k, {d.b, d.sk, d.hkv, d.d}), vv = view(d.v, {d.b, d.sk, d.hkv, d.d});
  auto contiguous = [&](PhaseTimes* t) { flashcore::attention_with_kvcache(q, kv, vv, lensv, o, {}, p, t); };
  auto poison_out = [&] { poison(d.o); };
  auto check = [&] { return check_attention(c, d, d.o); };
  Alongside base{[&] { return first_call(*contig_row, contiguous, poison_out, check); },
                 [&] { contiguous(nullptr); }, contig_row, "", 1.0, &r.speedup_vs_contiguous};
  measure(r, [&](PhaseTimes* t) { flashcore::attention_with_kvcache(q, kcv, vcv, lensv, o, opt, p, t); }, poison_out,
          check, contig_row != nullptr ? &base : nullptr);
  r.note = dc.describe() + (c.fp8_cache ? ", e4m3" : "");
  if (contig_row != nullptr) contig_row->note = "contiguous cache, calls interleaved with the row above";
}

// attention-backward (pass bwd): the backward of one forward made before the timed calls;
// pass fwd+bwd: a forward with lse and its backward per call. --check compares the gradients
// with the fp64 backward reference (cases.cpp, check_attention_backward).
void run_attention_backward(Result& r, Rng& rng) {
  const Config& c = r.cfg;
  AttentionData d = make_attention(c, rng);
  const DType t = d.q.dtype;
  BackwardData g = make_backward(d, rng);
  const flashcore::Tensor q = view(d.q, {d.b, d.sq, d.h, d.d}), k = view(d.k, {d.b, d.sk, d.hkv, d.d}),
                          v = view(d.v, {d.b, d.sk, d.hkv, d.d}), o = view(d.o, {d.b, d.sq, d.h, d.d}),
                          lse = view(g.lse, {d.b, d.h, d.sq}), dout = view(g.dout, {d.b, d.sq, d.h, d.d}),
                          dq = view(g.dq, {d.b, d.sq, d.h, d.d}), dk = view(g.dk, {d.b, d.sk, d.hkv, d.d}),
                          dv = view(g.dv, {d.b, d.sk, d.hkv, d.d});
  flashcore::AttentionParams p;
  p.causal = c.causal;
  p.exp2 = c.exp == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  set_variants(c, d, p);
  // (with sinks the backward also gives dsinks, timed with it, not checked here)
  HostArray dsinks = empty_array(DType::f32, c.sinks ? d.h : 0);
  const flashcore::Tensor dsinks_t = view(dsinks, {d.h});
  if (c.sinks) p.dsinks = const_cast<flashcore::Tensor*>(&dsinks_t);
  flashcore::AttentionParams pf = p;  // the forward's: with lse
  pf.strategy = parse_strategy(c.strategy);
  pf.impl = nullptr;
  pf.lse = const_cast<flashcore::Tensor*>(&lse);
  const bool both = c.pass == "fwd+bwd";
  if (!both) flashcore::attention(q, k, v, o, pf);
  measure(r, [&](PhaseTimes*) {
            if (both) flashcore::attention(q, k, v, o, pf);
            flashcore::attention_backward(q, k, v, o, dout, lse, dq, dk, dv, p);
          },
          [&] { poison(g.dq); poison(g.dk); poison(g.dv); }, [&] { return check_attention_backward(c, d, g); });
  // The backward's kernel: select_kernels' choice for the storage dtype and --impl (the
  // backward takes no PhaseTimes).
  r.kernel = flashcore::cpu::select_kernels(t, p.impl).gemm->key;
  r.strategy_ran = both ? "fwd+bwd" : "bwd";
  r.phases.present = false;
  finish(r, isa_of_kernel(r.kernel));
}

// --prepacked: `packed_call` is the measured call (its operands packed by the caller, not
// timed); with --vs-unpacked `plain_call` runs alongside into `plain_row`. Otherwise the
// plain call is measured.
void measure_packable(Result& r, const std::function<void(PhaseTimes*)>& plain_call,
                      const std::function<void(PhaseTimes*)>& packed_call, Result* plain_row,
                      const std::function<void()>& poison_out, const std::function<CheckResult()>& check) {
  if (!r.cfg.prepacked) {
    measure(r, plain_call, poison_out, check);
    return;
  }
  Alongside base{[&] { return first_call(*plain_row, plain_call, poison_out, check); },
                 [&] { plain_call(nullptr); }, plain_row, "", 1.0, &r.speedup_vs_unpacked};
  measure(r, packed_call, poison_out, check, plain_row ? &base : nullptr);
}

void run_softmax_v(Result& r, Rng& rng, Result* plain_row) {
  const Config& c = r.cfg;
  SoftmaxVData d = make_softmax_v(c, rng);
  const flashcore::Tensor s = view(d.s, {d.m, d.l}), v = view(d.v, {d.l, d.d}), o = view(d.o, {d.m, d.d});
  flashcore::SoftmaxVParams p;
  p.strategy = parse_strategy(c.strategy);
  p.exp2 = c.exp == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  const flashcore::PackedOperands packed = c.prepacked ? flashcore::pack_softmax_v(v, p) : flashcore::PackedOperands();
  measure_packable(r, [&](PhaseTimes* t) { flashcore::softmax_v(s, v, o, p, t); },
                   [&](PhaseTimes* t) { flashcore::softmax_v(s, packed, o, p, t); }, plain_row,
                   [&] { poison(d.o); }, [&] { return check_softmax_v(d); });
}

void run_gemm_chain(Result& r, Rng& rng, Result* plain_row) {
  const Config& c = r.cfg;
  GemmChainData d = make_gemm_chain(c, rng);
  const flashcore::Tensor a = view(d.a, {d.m, d.k1}), b = view(d.b, {d.k1, d.k2}),
                          cc = view(d.c, {d.k2, d.n}), e = view(d.e, {d.m, d.n});
  flashcore::GemmChainParams p;
  p.threads = c.threads;
  p.impl = impl_arg(c);
  const flashcore::PackedOperands packed = c.prepacked ? flashcore::pack_gemm_chain(b, cc, p) : flashcore::PackedOperands();
  measure_packable(r, [&](PhaseTimes* t) { flashcore::gemm_chain(a, b, cc, e, p, t); },
                   [&](PhaseTimes* t) { flashcore::gemm_chain(a, packed, e, p, t); }, plain_row,
                   [&] { poison(d.e); }, [&] { return check_gemm_chain(d); });
}

// --impl naive: the baseline on its own.
void run_naive(Result& r, Rng& rng) {
  const AttentionData d = make_attention(r.cfg, rng);
  const std::unique_ptr<NaivePart> np = make_naive(r.cfg, d);
  const double first_s = naive_first_call(r, *np, d);
  const Stats st = time_calls(np->call, r.cfg.iters, first_s);
  r.p50_us = st.p50_us;
  r.p90_us = st.p90_us;
  r.iters = st.iters;
  finish(r, "generic", np->scale);
}

}  // namespace

std::vector<Result> run_config(const Config& c0, uint64_t seed) {
  Result r;
  r.cfg = c0;
  apply_defaults(r.cfg);
  r.seed = seed;
  if (r.cfg.backend == "cuda") return run_cuda(r.cfg, seed);
  if (r.cfg.threads <= 0) r.cfg.threads = online_cores();
  const bool packable = r.cfg.op == "softmax-v" || r.cfg.op == "gemm-chain";
  if (!packable) r.cfg.prepacked = r.cfg.vs_unpacked = false;
  Result naive = r;  // the baseline row of vs_naive, or the unpacked row of vs_unpacked
  const bool with_naive = r.cfg.vs_naive && r.cfg.impl != "naive";
  // vs_unpacked, vs_contiguous: the row of the other call is the same op and kernel.
  const bool with_contiguous = r.cfg.op == "decode" && r.cfg.vs_contiguous && r.cfg.page_size > 0;
  const bool with_unpacked = r.cfg.vs_unpacked || with_contiguous;
  naive.cfg.impl = with_unpacked ? r.cfg.impl : "naive";
  naive.cfg.vs_naive = naive.cfg.prepacked = naive.cfg.vs_unpacked = naive.cfg.vs_contiguous = false;
  naive.cfg.page_size = 0;
  naive.cfg.portable = false;
  naive.cfg.label = r.cfg.label.empty() ? ""
                    : r.cfg.label + (with_contiguous ? "-contiguous" : with_unpacked ? "-unpacked" : "-naive");
  Rng rng(seed);
  // Rows of the portable kernels (a suite's portable-vs-naive row) force them, whatever the CPU has.
  const bool was_generic = flashcore::force_generic();
  if (r.cfg.portable) flashcore::set_force_generic(true);
  r.cfg.portable = flashcore::force_generic();
  if (with_unpacked) {
    naive.cfg.portable = r.cfg.portable;
    naive.note = "unpacked call, interleaved with the row above";
  }
  try {
    if (r.cfg.op == "gemm-ukernel") run_gemm_ukernel(r, seed);
    else if (r.cfg.impl == "naive") run_naive(r, rng);
    else if (r.cfg.op == "attention-backward" || r.cfg.pass == "fwd+bwd") run_attention_backward(r, rng);
    else if (r.cfg.op == "attention") run_attention(r, rng, with_naive ? &naive : nullptr);
    else if (r.cfg.op == "decode") run_decode(r, rng, with_contiguous ? &naive : nullptr);
    else if (r.cfg.op == "softmax-v") run_softmax_v(r, rng, with_unpacked ? &naive : nullptr);
    else run_gemm_chain(r, rng, with_unpacked ? &naive : nullptr);
  } catch (const std::exception& e) {
    r.error = e.what();
    naive.error = e.what();
  }
  flashcore::set_force_generic(was_generic);
  if (with_naive || with_unpacked) return {r, naive};
  return {r};
}

#if !defined(FLASHCORE_BENCH_CUDA)
std::vector<Result> run_cuda(const Config& c, uint64_t seed) {
  Result r;
  r.cfg = c;
  r.seed = seed;
  r.error = "--backend cuda: this flashcore-bench was built without CUDA (FLASHCORE_WITH_CUDA off or no CUDA toolkit)";
  return {r};
}
#endif

}  // namespace fcbench
