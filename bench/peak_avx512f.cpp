// The AVX-512 fp32 FMA ceiling. Compiled with -mavx512f; called only after a run-time
// cpuid check (peak.cpp). No STL and no shared inline templates here, so no AVX-512
// copy of a common function can leak to other TUs through the linker.
#include <immintrin.h>

namespace fcbench {

double peak_loop_avx512f_fp32(long reps);  // declared here: peak.hpp pulls in <string>

// 16 independent zmm accumulators: 2 FMA ports x 4-cycle latency needs >= 8 in flight;
// 16 leaves margin and matches the register budget of a 14x2 / 6x4-vector kernel.
double peak_loop_avx512f_fp32(long reps) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(1.0f + float(i) * 1e-3f);
  volatile float va = 0.999999f, vb = 1e-7f;
  const __m512 a = _mm512_set1_ps(va), b = _mm512_set1_ps(vb);
  for (long r = 0; r < reps; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  volatile float sink = lanes[0] + lanes[15];
  (void)sink;
  return 2.0 * 16.0 * kAcc * double(reps);
}

}  // namespace fcbench
