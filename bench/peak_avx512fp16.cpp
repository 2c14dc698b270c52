// The AVX512-FP16 FMA ceiling (vfmadd231ph, 32 fp16 lanes per zmm): the peak of the
// f16_*_avx512fp16 micro-kernels. Compiled with -mavx512fp16; called only after a
// run-time cpuid check (peak.cpp). No STL and no shared inline templates here.
#include <immintrin.h>

namespace fcbench {

double peak_loop_avx512fp16_fp16(long reps);

// 16 independent accumulators as in the fp32 loop; a ~ 1 and a tiny b keep the fp16
// values bounded (1 + 1e-3*i stays exactly representable enough not to overflow).
double peak_loop_avx512fp16_fp16(long reps) {
  constexpr int kAcc = 16;
  __m512h acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ph(_Float16(1.0f + float(i) * 1e-3f));
  volatile float va = 0.999f, vb = 1e-4f;
  const __m512h a = _mm512_set1_ph(_Float16(va)), b = _mm512_set1_ph(_Float16(vb));
  for (long r = 0; r < reps; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ph(acc[i], a, b);
  }
  __m512h sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ph(sum, acc[i]);
  _Float16 lanes[32];
  _mm512_storeu_ph(lanes, sum);
  volatile float sink = float(lanes[0]) + float(lanes[31]);
  (void)sink;
  return 2.0 * 32.0 * kAcc * double(reps);
}

}  // namespace fcbench
