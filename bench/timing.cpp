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

Stats time_calls(const std::function<void()>& call, int iters, double first_s, double target_s) {
  // Warm-up for ~50 ms in all (caches, page faults of the library's scratch arenas, OpenMP
  // thread start-up); the fastest warm-up call estimates the count of timed calls.
  constexpr double kWarmupSeconds = 0.05;
  double one = first_s, spent = first_s;
  if (first_s <= 0) {
    const double s = now_seconds();
    call();
    one = spent = now_seconds() - s;
  }
  for (int warm = 1; spent < kWarmupSeconds && warm < 1000; ++warm) {
    const double s = now_seconds();
    call();
    const double dt = now_seconds() - s;
    one = std::min(one, dt);
    spent += dt;
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

PairStats time_pair(const std::function<void()>& a, double first_a_s,
                    const std::function<void()>& b, double first_b_s, int iters, double target_s) {
  int n = iters;
  if (n <= 0) {
    const double slower = std::max({first_a_s, first_b_s, 1e-7});
    n = int(std::clamp(std::ceil(target_s / slower), double(kMinIters), 100000.0));
  }
  std::vector<double> ua, ub, ratio;
  for (int i = 0; i < n; ++i) {
    double s = now_seconds();
    a();
    ua.push_back((now_seconds() - s) * 1e6);
    s = now_seconds();
    b();
    ub.push_back((now_seconds() - s) * 1e6);
    ratio.push_back(ub.back() / ua.back());
  }
  PairStats ps;
  ps.a = {percentile(ua, 0.5), percentile(ua, 0.9), n};
  ps.b = {percentile(ub, 0.5), percentile(ub, 0.9), n};
  ps.ratio = percentile(ratio, 0.5);
  return ps;
}

std::string ensure_pinned_threads(char** argv) {
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
