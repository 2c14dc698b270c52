// The AVX512-BF16 dot-product ceiling (vdpbf16ps: per fp32 lane two bf16 products added):
// the peak of the bf16_*_avx512bf16 micro-kernels. Compiled with -mavx512bf16; called only
// after a run-time cpuid check (peak.cpp). No STL and no shared inline templates here.
#include <immintrin.h>

namespace fcbench {

double peak_loop_avx512bf16_bf16(long reps);

// 16 independent accumulators as in the fp32 loop; small products keep them bounded.
double peak_loop_avx512bf16_bf16(long reps) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(1.0f + float(i) * 1e-3f);
  volatile float va = 1e-3f, vb = 1e-4f;
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(va), _mm512_set1_ps(va));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(vb), _mm512_set1_ps(vb));
  for (long r = 0; r < reps; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  volatile float sink = lanes[0] + lanes[15];
  (void)sink;
  return 2.0 * 32.0 * kAcc * double(reps);
}

}  // namespace fcbench
