// Timing: steady clock, warm-up, p50/p90 over many calls; CPU thread pinning.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fcbench {

struct Stats {
  double p50_us = 0, p90_us = 0;
  int iters = 0;
};

double now_seconds();  // steady clock

// Nearest-rank percentile (q in [0, 1]) of per-call times in microseconds.
double percentile(std::vector<double> us, double q);

// Warm-up (~50 ms of calls, counting a first call the caller made and timed: first_s > 0),
// then `iters` timed calls (0 = adaptive: enough calls for ~target_s, at least kMinIters).
// Each call is timed on its own so p90 shows the spread.
constexpr int kMinIters = 5;
constexpr double kTargetSeconds = 0.3;
Stats time_calls(const std::function<void()>& call, int iters, double first_s = 0,
                 double target_s = kTargetSeconds);

// Two calls timed alternately (a, b, a, b, ...) so both see the same machine load, the
// way a side-by-side ratio should be taken on a shared machine. `ratio` is the median
// over pairs of b_i / a_i. first_*_s: the callers' warm-up calls, as in time_calls.
struct PairStats {
  Stats a, b;
  double ratio = 0;
};
PairStats time_pair(const std::function<void()>& a, double first_a_s,
                    const std::function<void()>& b, double first_b_s, int iters,
                    double target_s = kTargetSeconds);

// OpenMP reads OMP_PROC_BIND / OMP_PLACES when the runtime starts, before main. When the
// user set neither, set them (close / cores) and re-execute this program once so that
// every OpenMP thread is pinned to a core. Returns a description of the binding in force.
std::string ensure_pinned_threads(char** argv);

// Cores this process may run on (the default thread count).
int online_cores();

}  // namespace fcbench
