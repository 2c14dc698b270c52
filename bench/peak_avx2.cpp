// The AVX2 + FMA fp32 ceiling (ymm). Compiled with -mavx2 -mfma; called only after a
// run-time cpuid check (peak.cpp). No STL here (see peak_avx512f.cpp).
#include <immintrin.h>

namespace fcbench {

double peak_loop_avx2_fp32(long reps);  // declared here: peak.hpp pulls in <string>

// 12 independent ymm accumulators: two FMA pipes of 4-5 cycles latency need >= 10 in
// flight, and 12 is what f32_6x2_avx2 keeps.
double peak_loop_avx2_fp32(long reps) {
  constexpr int kAcc = 12;
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(1.0f + float(i) * 1e-3f);
  volatile float va = 0.999999f, vb = 1e-7f;
  const __m256 a = _mm256_set1_ps(va), b = _mm256_set1_ps(vb);
  for (long r = 0; r < reps; ++r) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  volatile float sink = lanes[0] + lanes[7];
  (void)sink;
  return 2.0 * 8.0 * kAcc * double(reps);
}

}  // namespace fcbench
