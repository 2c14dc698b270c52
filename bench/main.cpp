// flashcore-bench: see BENCH.md for the contract and bench.hpp for the parts.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "bench.hpp"
#include "core/clones.hpp"
#include "flashcore/flashcore.hpp"
#include "peak.hpp"
#include "timing.hpp"

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// The 1-minute load average: timings on a shared machine mean little without it.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  f >> one;
  return one.empty() ? "?" : one;
}

int list_kernels() {
  const int n = flashcore::list_kernels(nullptr, 0);
  std::vector<flashcore::KernelInfo> ks(static_cast<size_t>(n));
  flashcore::list_kernels(ks.data(), n);
  for (const auto& k : ks)
    std::printf("%-32s %-12s %s\n", k.key.c_str(), k.isa.c_str(), k.available ? "available" : "not on this machine");
  return 0;
}

// Every measured ceiling at 1 thread and at N (default: every online core).
int print_peaks(int threads) {
  const int n = threads > 0 ? threads : fcbench::online_cores();
  for (const std::string& isa : fcbench::peak_isas())
    for (int t : {1, n}) {
      if (t == n && n == 1) continue;
      if (const fcbench::Peak* p = fcbench::peak_for_isa(isa, t))
        std::printf("%-28s %8.1f GFLOP/s\n", p->name.c_str(), p->gflops);
    }
  for (int t : {1, n}) {
    if (t == n && n == 1) continue;
    const fcbench::Peak* p = fcbench::mem_read_peak(t);
    std::printf("%-28s %8.1f GB/s\n", p->name.c_str(), p->gflops);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string binding = fcbench::ensure_pinned_threads(argv);

  fcbench::Options opt;
  std::string err;
  if (!fcbench::parse_args(argc, argv, opt, err)) {
    std::fprintf(stderr, "flashcore-bench: %s\n", err.c_str());
    fcbench::print_usage(argv[0]);
    return 2;
  }
  if (opt.help) { fcbench::print_usage(argv[0]); return 0; }
  if (opt.list) return list_kernels();
  if (opt.peaks) return print_peaks(opt.cfg.threads);

  std::vector<fcbench::Config> configs;
  if (!opt.suite.empty()) {
    if (!fcbench::suite_configs(opt.suite, configs, err)) {
      std::fprintf(stderr, "flashcore-bench: %s\n", err.c_str());
      return 2;
    }
  } else {
    configs.push_back(opt.cfg);
  }
  // Fresh inputs every run unless --seed reproduces one; each row gets its own seed.
  const uint64_t seed = opt.seed_given ? opt.seed : (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::time(nullptr));

  const std::string load = load_average();  // before our own runs add to it
  std::vector<fcbench::Result> rows;
  for (size_t i = 0; i < configs.size(); ++i) {
    fcbench::Config c = configs[i];
    if (!opt.suite.empty()) {  // --threads / --iters given with a suite apply to every row
      if (opt.cfg.threads > 0) c.threads = opt.cfg.threads;
      if (opt.cfg.iters > 0) c.iters = opt.cfg.iters;
    }
    fcbench::apply_defaults(c);
    const double t0 = fcbench::now_seconds();
    for (fcbench::Result& r : fcbench::run_config(c, seed + i)) rows.push_back(std::move(r));
    if (!opt.suite.empty())
      std::fprintf(stderr, "[%zu/%zu] %s: %.1f s\n", i + 1, configs.size(), c.label.c_str(),
                   fcbench::now_seconds() - t0);
  }

  bool ok = true;
  for (const auto& r : rows) ok = ok && (r.error.empty() || r.skipped) && r.check_ok;
  if (opt.json) {
    for (const auto& r : rows) fcbench::print_json(r);
  } else {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    std::printf("flashcore %s bench, %s, %s, %d online cores, load average %s at start, %s, "
                "portable kernels built as the %s clone%s\n\n",
                flashcore::version(), date, cpu_model().c_str(), fcbench::online_cores(),
                load.c_str(), binding.c_str(), flashcore::core::portable_isa_level(),
                flashcore::force_generic() ? ", portable kernels forced (FLASHCORE_FORCE_GENERIC)" : "");
    fcbench::print_table(rows, true);
  }
  for (const auto& r : rows)
    if (!r.error.empty() && !r.skipped) std::fprintf(stderr, "flashcore-bench: %s: %s\n", r.cfg.label.empty() ? r.cfg.op.c_str() : r.cfg.label.c_str(), r.error.c_str());
  return ok ? 0 : 1;
}
