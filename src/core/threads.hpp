// CPU thread counts. A call runs at most kThreadsPerCpu threads per CPU of the machine: far
// more only slows it down, and an OpenMP runtime that cannot create the threads it is asked
// for (address-space or process limits) ends the whole process instead of failing the call.
// An explicit request beyond the bound is refused by the argument checks; the automatic
// count (OMP_NUM_THREADS, else every core) is capped at it.
#pragma once

#include <algorithm>
#include <thread>

namespace flashcore::core {

inline constexpr int kThreadsPerCpu = 4;

inline int max_threads() {
  static const int n = kThreadsPerCpu * int(std::max(1u, std::thread::hardware_concurrency()));
  return n;
}

}  // namespace flashcore::core
