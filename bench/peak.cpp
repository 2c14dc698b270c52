#include "peak.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "core/clones.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "timing.hpp"

namespace fcbench {

// The portable ceiling: multiply-adds on independent accumulators of 4-float generic
// vectors, like the generic micro-kernels' accumulators, and compiled like them
// (FC_PORTABLE_CLONES: on x86-64 the baseline clone is SSE2 mulps + addps, the x86-64-v3
// clone 4-wide FMAs), so it measures what those kernels can reach on this CPU. 12
// accumulators cover the latency; a ~ 1 and a tiny b keep the values bounded.
FC_PORTABLE_CLONES double peak_loop_generic_fp32(long reps) {
  typedef float v4f __attribute__((vector_size(16)));
  constexpr int kVecs = 12, kLanes = 4;
  v4f acc[kVecs];
  for (int v = 0; v < kVecs; ++v)
    for (int l = 0; l < kLanes; ++l) acc[v][l] = 1.0f + float(v * kLanes + l) * 1e-3f;
  volatile float va = 0.999999f, vb = 1e-7f;  // volatile: not constants the compiler can fold
  const v4f a = v4f{va, va, va, va}, b = v4f{vb, vb, vb, vb};
  for (long r = 0; r < reps; ++r) {
#pragma GCC unroll 12
    for (int v = 0; v < kVecs; ++v) acc[v] = acc[v] * a + b;
  }
  float sum = 0;
  for (const auto& x : acc)
    for (int l = 0; l < kLanes; ++l) sum += x[l];
  volatile float sink = sum;
  (void)sink;
  return 2.0 * kVecs * kLanes * double(reps);
}

namespace {

struct Probe {
  const char* isa;      // the micro-kernel ISA name (cpu::isa_name) it is the ceiling of
  const char* what;     // unit and instruction, for the peak name
  flashcore::cpu::Isa needs;
  double (*loop)(long reps);
};

// One line per ISA; later ISAs (sve) add theirs here.
const Probe kProbes[] = {
    {"generic", "fp32_muladd", flashcore::cpu::Isa::generic, peak_loop_generic_fp32},
#if defined(FCB_PEAK_AVX2)
    {"avx2", "fp32_fma", flashcore::cpu::Isa::avx2, peak_loop_avx2_fp32},
#endif
#if defined(FCB_PEAK_AVX512F)
    {"avx512f", "fp32_fma", flashcore::cpu::Isa::avx512f, peak_loop_avx512f_fp32},
#endif
#if defined(FCB_PEAK_AVX512FP16)
    {"avx512fp16", "fp16_fma", flashcore::cpu::Isa::avx512fp16, peak_loop_avx512fp16_fp16},
#endif
#if defined(FCB_PEAK_AVX512BF16)
    {"avx512bf16", "bf16_dot", flashcore::cpu::Isa::avx512bf16, peak_loop_avx512bf16_bf16},
#endif
#if defined(FCB_PEAK_AMX)
    {"amx_bf16", "tdpbf16ps", flashcore::cpu::Isa::amx_bf16, peak_loop_amx_bf16},
#endif
};

// Repetitions of p's loop that take about `seconds` on one thread.
long calibrate(const Probe& p, double seconds) {
  long reps = 100;
  for (;;) {
    const double t0 = now_seconds();
    p.loop(reps);
    const double dt = now_seconds() - t0;
    if (dt > seconds / 4 || reps > (1L << 40)) return std::max(1L, long(double(reps) * seconds / std::max(dt, 1e-9)));
    reps *= 4;
  }
}

// GFLOP/s of one run of p's loop on every thread at once (total flops / wall time).
double run_once(const Probe& p, int threads, long reps) {
  double flops = 0;
  const double t0 = now_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  flops += p.loop(reps);
  return flops / (now_seconds() - t0) * 1e-9;
}

const Probe* probe_for(const std::string& isa) {
  for (const Probe& p : kProbes)
    if (isa == p.isa && flashcore::cpu::isa_available(p.needs)) return &p;
  return nullptr;
}

double measure(const Probe& p, int threads) {
  // Calibrate reps to ~2 ms per run on one thread, then take the best of kRuns runs with
  // every thread looping at once. Best of many short runs, not a median of long ones: a
  // ceiling is what the unit can do, and on a shared machine other processes only ever
  // lower it; short runs are the likeliest to run undisturbed (a median of 20 ms runs
  // taken under load once gave kernels at 175% of "peak").
  constexpr double kRunSeconds = 0.002;
  constexpr int kRuns = 41;
  const long reps = calibrate(p, kRunSeconds);
  std::vector<double> gf;
  for (int run = 0; run < kRuns; ++run) gf.push_back(run_once(p, threads, reps));
  return percentile(gf, 1.0);
}

// Reads `n` 64-bit words and returns their sum (integer adds: the compiler vectorizes them
// without reassociating floating point; the loads, not the adds, are the bottleneck).
uint64_t read_words(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

}  // namespace

const Peak* mem_read_peak(int threads) {
  static std::mutex mu;
  static std::map<int, Peak> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(threads); it != cache.end()) return &it->second;
  // 256 MiB, touched by the threads that read it (first-touch placement).
  constexpr size_t kWords = (size_t(256) << 20) / sizeof(uint64_t);
  constexpr int kRuns = 7;
  std::vector<uint64_t> buf(kWords);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < kWords; ++i) buf[i] = i;
  std::vector<double> gbs;
  uint64_t sink = 0;
  for (int run = 0; run < kRuns; ++run) {
    const double t0 = now_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const size_t nt = size_t(omp_get_num_threads()), id = size_t(omp_get_thread_num());
      const size_t b = kWords * id / nt, e = kWords * (id + 1) / nt;
      sink += read_words(buf.data() + b, e - b);
    }
    gbs.push_back(double(kWords * sizeof(uint64_t)) / (now_seconds() - t0) * 1e-9);
  }
  volatile uint64_t keep = sink;
  (void)keep;
  Peak pk;
  pk.name = "mem_read_" + std::to_string(threads) + "t";
  pk.gflops = percentile(gbs, 1.0);
  return &cache.emplace(threads, pk).first->second;
}

std::vector<std::string> peak_isas() {
  std::vector<std::string> out;
  for (const Probe& p : kProbes)
    if (flashcore::cpu::isa_available(p.needs)) out.push_back(p.isa);
  return out;
}

const Peak* peak_for_isa(const std::string& isa, int threads) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, Peak> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(isa, threads);
  if (auto it = cache.find(key); it != cache.end()) return &it->second;
  const Probe* p = probe_for(isa);
  if (p == nullptr) return nullptr;
  Peak pk;
  pk.name = std::string(p->isa) + "_" + p->what + "_" + std::to_string(threads) + "t";
  pk.gflops = measure(*p, threads);
  return &cache.emplace(key, pk).first->second;
}

double peak_now(const std::string& isa, int threads, double seconds) {
  static std::mutex mu;
  static std::map<std::string, long> reps_per_ms;
  const Probe* p = probe_for(isa);
  if (p == nullptr) return NAN;
  long per_ms;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = reps_per_ms.find(isa);
    if (it == reps_per_ms.end()) it = reps_per_ms.emplace(isa, calibrate(*p, 0.001)).first;
    per_ms = it->second;
  }
  return run_once(*p, threads, std::max(1L, long(double(per_ms) * seconds * 1e3)));
}

double paired_pct(const std::string& isa, int threads, double flops, double call_s,
                  const std::function<void()>& call, int pairs) {
  call_s = std::max(call_s, 1e-7);
  const int calls = std::max(1, int(1e-3 / call_s));
  std::vector<double> ratio;
  for (int i = 0; i < pairs; ++i) {
    const double peak = peak_now(isa, threads, calls * call_s);
    if (!(peak > 0)) return NAN;
    const double t0 = now_seconds();
    for (int c = 0; c < calls; ++c) call();
    ratio.push_back(flops * calls / (now_seconds() - t0) * 1e-9 / peak);
  }
  return ratio.empty() ? NAN : 100.0 * percentile(ratio, 0.5);
}

}  // namespace fcbench
