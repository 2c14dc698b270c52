// Measured compute ceilings: a short FMA loop per ISA, run once per (ISA, threads) in
// the process and cached. % of peak in every row is against the ceiling of the ISA of
// the kernel that ran, at the thread count that ran.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fcbench {

struct Peak {
  std::string name;   // e.g. "avx512f_fp32_fma_2t"
  double gflops = 0;  // median of a few runs
};

// nullptr when no probe exists for that ISA (or the CPU lacks it): the row then shows
// no % of peak rather than a % of the wrong ceiling.
const Peak* peak_for_isa(const std::string& isa, int threads);
std::vector<std::string> peak_isas();  // ISAs with a probe this CPU can run

// One run of the ISA's peak loop on `threads` threads, about `seconds` long: GFLOP/s now,
// for rows timed in pairs with it (NAN when no probe exists or the CPU lacks the ISA).
double peak_now(const std::string& isa, int threads, double seconds);

// The "paired" % of peak of a row: `pairs` times, the ISA's peak loop for ~max(call_s,
// 1 ms), then as many calls of `call` (each `flops`, ~call_s long) for about as long; the
// median over pairs of the calls' rate over the loop's. This host's speed moves by up to
// 2x within minutes, while the start-up ceiling is the best of its runs. NAN without a
// probe for the ISA.
double paired_pct(const std::string& isa, int threads, double flops, double call_s,
                  const std::function<void()>& call, int pairs);

// Memory read bandwidth with `threads` threads (GB/s): the ceiling of decode rows, which
// read K and V once. Best of a few passes over a buffer much larger than the caches.
const Peak* mem_read_peak(int threads);

// ISA peak loops, one per TU compiled with that ISA's flags. Each runs `reps` rounds of
// its loop on the calling thread and returns the floating-point operations it did.
double peak_loop_generic_fp32(long reps);
#if defined(FCB_PEAK_AVX2)
double peak_loop_avx2_fp32(long reps);        // 8-wide FMA, 12 ymm accumulators
#endif
#if defined(FCB_PEAK_AVX512F)
double peak_loop_avx512f_fp32(long reps);
#endif
#if defined(FCB_PEAK_AVX512FP16)
double peak_loop_avx512fp16_fp16(long reps);
#endif
#if defined(FCB_PEAK_AVX512BF16)
double peak_loop_avx512bf16_bf16(long reps);  // vdpbf16ps, 16 zmm accumulators
#endif
#if defined(FCB_PEAK_AMX)
double peak_loop_amx_bf16(long reps);         // tdpbf16ps, 4 accumulator tiles
#endif

}  // namespace fcbench
