// What the CPU pipelines share: the key tile and decode bounds, integer helpers, the
// thread count and forced-kernel tests, and the phase timer behind PhaseTimes.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/threads.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::cpu {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Key tile: 256 keys keep a Kc x NR panel of V (fp32, NR = 16..64) and the P tile in L1/L2,
// the seeds' Kc. Packed operands of at most this many bytes are built per chunk of groups.
inline constexpr int64_t kKeyTile = 256;
// Attention's decode blocks take several kv heads' query rows, up to this many rows
// (softmax_v: the row ops up to this many rows).
inline constexpr int64_t kDecodeBlockRows = 64;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
inline int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }
inline int64_t lcm(int64_t a, int64_t b) { return a / gcd(a, b) * b; }

// `impl` naming a GEMM micro-kernel keeps a call on that kernel (the GEMM path), also for
// the shapes that would otherwise take the row ops.
inline bool gemm_forced(const char* impl) {
  return impl != nullptr && impl[0] != '\0' && std::strcmp(impl, "auto") != 0;
}

// The threads of a call: the request (checked against core::max_threads by the API), or
// OMP_NUM_THREADS / every core, capped at core::max_threads.
inline int resolve_threads(int requested) {
  return requested > 0 ? requested : std::min(omp_get_max_threads(), core::max_threads());
}

inline Strategy resolve(Strategy s, int64_t sq, int64_t sk, int64_t d, DType t) {
  return s == Strategy::automatic ? choose_strategy(sq, sk, d, t) : s;
}

struct Phases {
  double pack = 0, max_find = 0, exp_pack = 0, gemm = 0, normalize = 0;
  void add(const Phases& o) {
    pack += o.pack; max_find += o.max_find; exp_pack += o.exp_pack; gemm += o.gemm;
    normalize += o.normalize;
  }
};

// Lap timer that costs nothing when the caller did not ask for phase times.
class Lap {
 public:
  explicit Lap(bool on) : on_(on) { if (on_) t_ = std::chrono::steady_clock::now(); }
  void to(double& slot) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    slot += std::chrono::duration<double>(now - t_).count();
    t_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point t_;
};

// The per-thread phase times summed into `times` (when given), with the kernel key and
// the strategy that ran.
void report(PhaseTimes* times, const std::vector<Phases>& per_thread, const char* kernel,
            Strategy s);

}  // namespace flashcore::cpu
