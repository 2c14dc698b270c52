// choose_strategy (pipelines.hpp) and the phase-time report (common.hpp).
#include "cpu/pipelines/common.hpp"

namespace flashcore::cpu {

Strategy choose_strategy(int64_t sq, int64_t sk, int64_t d, DType storage) {
  (void)sq; (void)d; (void)storage;
  // From flashcore-bench runs (docs/results/cpu-x86-2026-11-22.md, 'automatic strategy'):
  // at Sk = 4096 online and two-pass overlap within the noise of a shared host and
  // three-pass trails; online never pays for a score strip, and for short key ranges the
  // strip of two_pass fits in L2 and saves the rescales.
  return sk <= 1024 ? Strategy::two_pass : Strategy::online;
}

void report(PhaseTimes* times, const std::vector<Phases>& per_thread, const char* kernel,
            Strategy s) {
  if (times == nullptr) return;
  Phases sum;
  for (const Phases& p : per_thread) sum.add(p);
  times->pack = sum.pack;
  times->max_find = sum.max_find;
  times->exp_pack = sum.exp_pack;
  times->gemm = sum.gemm;
  times->normalize = sum.normalize;
  times->kernel = kernel;
  times->strategy = to_string(s);
}

}  // namespace flashcore::cpu
