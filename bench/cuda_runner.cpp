// --backend cuda: device buffers through the CUDA runtime, timing with CUDA events (a
// CUDA graph of several calls for short shapes, where launch overhead would dominate),
// --check copies the output back and compares with the CPU reference on a subset.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"
#include "cases.hpp"
#include "timing.hpp"

namespace fcbench {
namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Owns one device allocation holding a copy of a host array.
class DeviceCopy {
 public:
  explicit DeviceCopy(const HostArray& h) : bytes_(h.nbytes()) {
    cuda_ok(cudaMalloc(&p_, std::max<size_t>(bytes_, 1)), "cudaMalloc");
    cuda_ok(cudaMemcpy(p_, h.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  ~DeviceCopy() { cudaFree(p_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// The run's stream, destroyed when the run returns (whichever way).
struct OwnedStream {
  cudaStream_t s = nullptr;
  ~OwnedStream() {
    if (s) cudaStreamDestroy(s);
  }
};

class Events {
 public:
  Events() { cuda_ok(cudaEventCreate(&a_), "cudaEventCreate"); cuda_ok(cudaEventCreate(&b_), "cudaEventCreate"); }
  ~Events() { cudaEventDestroy(a_); cudaEventDestroy(b_); }
  // Microseconds of GPU time taken by `work` on `s`.
  template <class F>
  double time_us(cudaStream_t s, F&& work) {
    cuda_ok(cudaEventRecord(a_, s), "cudaEventRecord");
    work();
    cuda_ok(cudaEventRecord(b_, s), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b_), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, a_, b_), "cudaEventElapsedTime");
    return double(ms) * 1e3;
  }

 private:
  cudaEvent_t a_{}, b_{};
};

// Shapes faster than this are timed as a CUDA graph of kGraphCalls calls.
constexpr double kGraphBelowUs = 50.0;
constexpr int kGraphCalls = 20;

// Captures kGraphCalls calls into a graph; returns nullptr (error state cleared) when
// the backend cannot be captured (e.g. it synchronizes or allocates inside a call).
cudaGraphExec_t capture(cudaStream_t s, const std::function<void()>& call) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  bool threw = false;
  try {
    for (int i = 0; i < kGraphCalls; ++i) call();
  } catch (const std::exception&) {
    threw = true;
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  cudaGraphExec_t exec = nullptr;
  if (threw || end != cudaSuccess || graph == nullptr ||
      cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    exec = nullptr;
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  return exec;
}

// Samples to take of per_sample calls of about est_us each: c.iters, or enough for
// kTargetSeconds.
int sample_count(const Config& c, double est_us, int per_sample = 1) {
  return c.iters > 0 ? c.iters
                     : int(std::clamp(std::ceil(kTargetSeconds * 1e6 / (std::max(est_us, 0.5) * per_sample)),
                                      double(kMinIters), 10000.0));
}

// A row's figures from its n samples (us): iters, p50, p90 and the GFLOP/s at p50.
void sample_figures(Result& r, const std::vector<double>& us, int n) {
  r.iters = n;
  r.p50_us = percentile(us, 0.5);
  r.p90_us = percentile(us, 0.9);
  r.gflops = flop_count(r.cfg) / (r.p50_us * 1e-6) * 1e-9;
  r.note += "; no measured GPU compute ceiling in the bench yet (pct_peak null)";
}

// Warm-up and an estimate, then c.iters (or enough for kTargetSeconds) samples of one call,
// or of one CUDA graph of kGraphCalls calls for shapes under kGraphBelowUs.
void time_samples(Result& r, cudaStream_t stream, const std::function<void()>& call) {
  Events ev;
  for (int i = 0; i < 3; ++i) call();
  const double est = ev.time_us(stream, [&] { for (int i = 0; i < 10; ++i) call(); }) / 10;
  cudaGraphExec_t graph = est < kGraphBelowUs ? capture(stream, call) : nullptr;
  const int per_sample = graph ? kGraphCalls : 1;
  const int n = sample_count(r.cfg, est, per_sample);
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    us.push_back(ev.time_us(stream, [&] {
      if (graph) cuda_ok(cudaGraphLaunch(graph, stream), "cudaGraphLaunch");
      else call();
    }) / per_sample);
  }
  if (graph) {
    cudaGraphExecDestroy(graph);
    r.note += "; CUDA graph of " + std::to_string(kGraphCalls) + " calls per sample";
  }
  sample_figures(r, us, n);
}

// vs_contiguous: the calls of two rows timed in pairs (a, then b; no CUDA graph), c.iters
// pairs or enough for kTargetSeconds: each row's figures, and *ratio the median over the
// pairs of b's time / a's.
void time_pairs(Result& a, Result& b, cudaStream_t stream, const std::function<void()>& call_a,
                const std::function<void()>& call_b, double* ratio) {
  Events ev;
  for (int i = 0; i < 3; ++i) call_a(), call_b();
  const double est = ev.time_us(stream, [&] { for (int i = 0; i < 5; ++i) call_a(), call_b(); }) / 5;
  const int n = sample_count(a.cfg, est);
  std::vector<double> ua, ub, q;
  for (int i = 0; i < n; ++i) {
    ua.push_back(ev.time_us(stream, call_a));
    ub.push_back(ev.time_us(stream, call_b));
    q.push_back(ub.back() / ua.back());
  }
  sample_figures(a, ua, n);
  sample_figures(b, ub, n);
  *ratio = percentile(q, 0.5);
}

// The device's copy bandwidth, GB/s of bytes read + written by cudaMemcpyAsync between two
// 512 MiB buffers (best of 10), measured once per process: decode rows' ceiling.
double copy_gbps(cudaStream_t s) {
  static double gbps = 0;
  if (gbps > 0) return gbps;
  constexpr size_t kBytes = size_t(512) << 20;
  void *a = nullptr, *b = nullptr;
  cuda_ok(cudaMalloc(&a, kBytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&b, kBytes), "cudaMalloc");
  Events ev;
  double best = 1e30;
  for (int i = 0; i < 10; ++i)
    best = std::min(best, ev.time_us(s, [&] { cuda_ok(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, s), "copy"); }));
  cudaFree(a);
  cudaFree(b);
  gbps = 2.0 * double(kBytes) / (best * 1e-6) * 1e-9;
  return gbps;
}

// --op attention-backward on device copies (--pass bwd: the backward of one forward made
// before the timed calls; fwd+bwd: a forward with lse and its backward per call); --check
// compares dq, dk, dv with the fp64 backward reference on a subset (cases.cpp). The
// forward's tensors and options come from run_cuda.
void run_backward(Result& r, AttentionData& d, DeviceCopy& o, const flashcore::Tensor& tq, const flashcore::Tensor& tk,
                  const flashcore::Tensor& tv, const flashcore::Tensor& to, const flashcore::AttentionParams& p,
                  cudaStream_t stream, Rng& rng) {
  using flashcore::Device;
  const Config& c = r.cfg;
  BackwardData g = make_backward(d, rng);
  DeviceCopy dout(g.dout), lse(g.lse), dq(g.dq), dk(g.dk), dv(g.dv);
  const flashcore::Tensor tdout = view(g.dout, {d.b, d.sq, d.h, d.d}, Device::cuda, dout.get()),
                          tlse = view(g.lse, {d.b, d.h, d.sq}, Device::cuda, lse.get()),
                          tdq = view(g.dq, {d.b, d.sq, d.h, d.d}, Device::cuda, dq.get()),
                          tdk = view(g.dk, {d.b, d.sk, d.hkv, d.d}, Device::cuda, dk.get()),
                          tdv = view(g.dv, {d.b, d.sk, d.hkv, d.d}, Device::cuda, dv.get());
  flashcore::AttentionParams pf = p;  // the forward's: with lse, the policy's kernel
  pf.lse = const_cast<flashcore::Tensor*>(&tlse);
  pf.impl = nullptr;
  const bool both = c.pass == "fwd+bwd";
  if (!both) flashcore::attention(tq, tk, tv, to, pf);
  auto call = [&] {
    if (both) flashcore::attention(tq, tk, tv, to, pf);
    flashcore::attention_backward(tq, tk, tv, to, tdout, tlse, tdq, tdk, tdv, p);
  };
  for (DeviceCopy* x : {&dq, &dk, &dv}) cuda_ok(cudaMemsetAsync(x->get(), 0xFF, x->bytes(), stream), "cudaMemset");
  call();
  cuda_ok(cudaStreamSynchronize(stream), "first call");
  if (c.check) {
    const std::pair<HostArray*, DeviceCopy*> back[] = {{&d.o, &o}, {&g.lse, &lse}, {&g.dq, &dq}, {&g.dk, &dk}, {&g.dv, &dv}};
    for (const auto& [h, dev] : back)
      cuda_ok(cudaMemcpy(h->data(), dev->get(), dev->bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    const CheckResult cr = check_attention_backward(c, d, g);
    r.rel_err = cr.rel_err;
    r.tol = tolerance(c);
    r.check_ok = !std::isnan(cr.rel_err) && cr.rel_err <= r.tol;
    r.check_subset = cr.subset;
  }
  r.kernel = c.impl == "auto" ? "attention_backward (CUDA, the backend's choice)" : c.impl;
  r.strategy_ran = both ? "fwd+bwd" : "bwd";
  time_samples(r, stream, call);
}

}  // namespace

std::vector<Result> run_cuda(const Config& c, uint64_t seed) {
  Result r;
  r.cfg = c;
  r.seed = seed;
  // vs_contiguous (a paged decode): the same keys in a contiguous cache, a second row.
  const bool with_contiguous = c.op == "decode" && c.vs_contiguous && c.page_size > 0;
  Result contig = r;
  contig.cfg.page_size = 0;
  contig.cfg.vs_contiguous = false;
  contig.cfg.label = c.label.empty() ? "" : c.label + "-contiguous";
  OwnedStream owned;
  try {
    int ndev = 0;
    const cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
      throw std::runtime_error(std::string("--backend cuda: no usable CUDA device (") +
                               (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
    const bool decode = c.op == "decode", backward = c.pass != "fwd";
    if (c.op != "attention" && c.op != "attention-backward" && !decode)
      throw std::runtime_error("--backend cuda: --op attention, attention-backward and decode run on the CUDA backend");
    if (c.impl == "naive") throw std::runtime_error("--impl naive is a CPU baseline");
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    r.note = prop.name;

    Rng rng(seed);
    AttentionData d = make_attention(c, rng);
    if (decode && c.fp8_cache)  // (--check's reference then sees the cache's values)
      for (HostArray* t : {&d.k, &d.v}) round_to_e4m3(*t);
    DeviceCopy q(d.q), k(d.k), v(d.v), o(d.o);
    using flashcore::Device;
    const flashcore::Tensor tq = view(d.q, {d.b, d.sq, d.h, d.d}, Device::cuda, q.get());
    const flashcore::Tensor tk = view(d.k, {d.b, d.sk, d.hkv, d.d}, Device::cuda, k.get());
    const flashcore::Tensor tv = view(d.v, {d.b, d.sk, d.hkv, d.d}, Device::cuda, v.get());
    const flashcore::Tensor to = view(d.o, {d.b, d.sq, d.h, d.d}, Device::cuda, o.get());
    cuda_ok(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaStream_t stream = owned.s;
    flashcore::AttentionParams p;
    p.causal = c.causal;
    p.strategy = parse_strategy(c.strategy);
    p.exp2 = c.exp == "fast" ? flashcore::Exp2Mode::fast : flashcore::Exp2Mode::exact;
    p.impl = c.impl == "auto" ? nullptr : c.impl.c_str();
    p.stream = stream;
    p.tile_m = c.tile_m;  // --tile: 0x0 = the backend's table
    p.tile_n = c.tile_n;
    DeviceCopy slopes(d.slopes), sinks(d.sinks);  // (--alibi, --sinks; empty otherwise)
    set_variants(c, d, p, Device::cuda, slopes.get(), sinks.get());
    if (backward) {
      run_backward(r, d, o, tq, tk, tv, to, p, stream, rng);
      return {r};
    }
    // decode: attention_with_kvcache over the cache of make_decode_cache (contiguous: d.k,
    // d.v themselves), cache_seqlens = Sk on the device.
    // An e4m3 cache (--kv-dtype e4m3): the cache's own copy, contiguous ones too.
    DecodeCache dc = decode ? make_decode_cache(d, c.page_size, c.pages_in_order, rng, c.fp8_cache) : DecodeCache{};
    DeviceCopy kc(dc.kc), vc(dc.vc), lens(dc.lens), table(dc.table);
    const bool paged = dc.page > 0, own = paged || c.fp8_cache;
    const int64_t rows = paged ? dc.page : d.sk;
    const flashcore::Tensor tkc = own ? view(dc.kc, {dc.pages, rows, d.hkv, d.d}, Device::cuda, kc.get()) : tk;
    const flashcore::Tensor tvc = own ? view(dc.vc, {dc.pages, rows, d.hkv, d.d}, Device::cuda, vc.get()) : tv;
    const flashcore::Tensor tlens = view(dc.lens, {d.b}, Device::cuda, lens.get());
    const flashcore::Tensor ttable = view(dc.table, {d.b, dc.per_seq}, Device::cuda, table.get());
    flashcore::KvCacheOptions opt;
    if (paged) opt.block_table = &ttable;
    auto run = [&](flashcore::PhaseTimes* t) {
      if (decode)
        flashcore::attention_with_kvcache(tq, tkc, tvc, tlens, to, opt, p, t);
      else
        flashcore::attention(tq, tk, tv, to, p, t);
    };
    auto call = [&] { run(nullptr); };

    // The contiguous cache's call (with_contiguous, 16-bit caches): d.k, d.v themselves.
    auto contiguous = [&](flashcore::PhaseTimes* t) { flashcore::attention_with_kvcache(tq, tk, tv, tlens, to, {}, p, t); };

    // First call: poisoned output (all-ones bytes are NaN in f32, f16 and bf16), kernel key.
    const auto first_call = [&](Result& row, const std::function<void(flashcore::PhaseTimes*)>& f) {
      flashcore::PhaseTimes first;
      cuda_ok(cudaMemsetAsync(o.get(), 0xFF, o.bytes(), stream), "cudaMemset");
      f(&first);
      cuda_ok(cudaStreamSynchronize(stream), "first call");
      row.kernel = first.kernel;
      row.strategy_ran = first.strategy.empty() ? "fused" : first.strategy;
      if (c.check) {
        cuda_ok(cudaMemcpy(d.o.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
        const CheckResult cr = check_attention(c, d, d.o);
        row.rel_err = cr.rel_err;
        // fp32 on TF32 tensor cores (the default CUDA f32 path): BENCH.md's TF32 bound.
        row.tol = c.dtype == "f32" && row.kernel.rfind("fwd_sm80_tf32_", 0) == 0 ? 2e-3 : tolerance(c);
        row.check_ok = !std::isnan(cr.rel_err) && cr.rel_err <= row.tol;
        row.check_subset = cr.subset;
      }
    };
    first_call(r, run);
    if (with_contiguous) {
      if (c.fp8_cache) throw std::runtime_error("--vs-contiguous: a 16-bit cache only on the CUDA backend");
      first_call(contig, contiguous);
      contig.note = r.note;
      time_pairs(r, contig, stream, call, [&] { contiguous(nullptr); }, &r.speedup_vs_contiguous);
      contig.note += "; contiguous cache, calls interleaved with the row above";
    } else {
      time_samples(r, stream, call);
    }
    if (const double bytes = decode_bytes(c); bytes > 0) {  // memory-bound rows: GB/s
      for (Result* row : {&r, &contig}) {
        if (row == &contig && !with_contiguous) continue;
        row->gbps = bytes / (row->p50_us * 1e-6) * 1e-9;
        row->mem_gbps = copy_gbps(stream);
        row->pct_mem = 100.0 * row->gbps / row->mem_gbps;
        row->note += "; mem = device-to-device copy (bytes read + written)";
      }
      if (decode) r.note += "; " + dc.describe() + (c.fp8_cache ? ", e4m3" : "");
    }
  } catch (const std::exception& e) {
    r.error = e.what();
    contig.error = e.what();
  }
  if (with_contiguous) return {r, contig};
  return {r};
}

}  // namespace fcbench
