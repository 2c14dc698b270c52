#include "timing.hpp"

#include <sched.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

namespace fcbench {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> us, double q) {
  if (us.empty()) return NAN;
  std::sort(us.begin(), us.end());
  // nearest rank: the smallest value with at least q of the samples at or below it
  const size_t rank = size_t(std::ceil(q * double(us.size())));
  return us[std::min(us.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Stats time_calls(const std::function<void()>& call, int iters, double target_s) {
  // Warm-up: at least one call, and at least ~50 ms of calls for short ones (caches,
  // page faults of the library's scratch arenas, OpenMP thread start-up).
  constexpr double kWarmupSeconds = 0.05;
  double t0 = now_seconds();
  call();
  double one = now_seconds() - t0;
  int warm = 1;
  while (now_seconds() - t0 < kWarmupSeconds && warm < 1000) {
    const double s = now_seconds();
    call();
    one = std::min(one, now_seconds() - s);
    ++warm;
  }
  int n = iters;
  if (n <= 0) {
    const double est = std::max(one, 1e-7);
    n = int(std::clamp(std::ceil(target_s / est), double(kMinIters), 100000.0));
  }
  std::vector<double> us(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double s = now_seconds();
    call();
    us[size_t(i)] = (now_seconds() - s) * 1e6;
  }
  Stats st;
  st.iters = n;
  st.p50_us = percentile(us, 0.5);
  st.p90_us = percentile(us, 0.9);
  return st;
}

std::string ensure_pinned_threads(int argc, char** argv) {
  (void)argc;
  const char* bind = std::getenv("OMP_PROC_BIND");
  const char* places = std::getenv("OMP_PLACES");
  if (bind == nullptr && places == nullptr && std::getenv("FLASHCORE_BENCH_REEXEC") == nullptr) {
    setenv("OMP_PROC_BIND", "close", 1);
    setenv("OMP_PLACES", "cores", 1);
    setenv("FLASHCORE_BENCH_REEXEC", "1", 1);  // never loop, even if the runtime ignores them
    execv("/proc/self/exe", argv);
    // execv returned: run unpinned rather than not at all, and say so.
    return "unpinned (re-exec failed)";
  }
  std::string s = "OMP_PROC_BIND=";
  s += bind ? bind : "(unset)";
  s += " OMP_PLACES=";
  s += places ? places : "(unset)";
  return s;
}

int online_cores() {
  // Once OpenMP has pinned the initial thread, its affinity mask holds one core: count
  // the places instead (OMP_PLACES=cores gives one place per usable core).
  if (omp_get_num_places() > 0) return omp_get_num_places();
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

}  // namespace fcbench
