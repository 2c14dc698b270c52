// The naive baseline: a straightforward fp32 attention, one query row at a
// time (scores, softmax, P V), no blocking, no packing, no SIMD beyond what the compiler
// finds in these loops. The only concurrency is a plain parallel loop over rows, so it
// runs at the same thread count as the row it is compared with, and it is compiled for the
// same ISA level as the portable kernels (on x86-64: baseline SSE2 or x86-64-v3 clones).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bench.hpp"
#include "core/clones.hpp"

namespace fcbench {

namespace {

// One query row: scores, softmax, P V. Compiled for the same ISA level as the portable
// kernels it is compared with (FC_PORTABLE_CLONES, core/clones.hpp).
FC_PORTABLE_CLONES void naive_row(const float* qi, const float* k, const float* v, float* oi,
                                  float* s, int64_t kv_stride, int64_t last, int64_t d,
                                  float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < last; ++j) {
    const float* kj = k + j * kv_stride;
    float dot = 0;
    for (int64_t x = 0; x < d; ++x) dot += qi[x] * kj[x];
    s[j] = dot * scale;
    mx = std::max(mx, s[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < last; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  for (int64_t x = 0; x < d; ++x) oi[x] = 0;
  for (int64_t j = 0; j < last; ++j) {
    const float* vj = v + j * kv_stride;
    const float p = s[j] / sum;
    for (int64_t x = 0; x < d; ++x) oi[x] += p * vj[x];
  }
}

}  // namespace

void naive_attention(const float* q, const float* k, const float* v, float* o, int64_t batch,
                     int64_t heads, int64_t kv_heads, int64_t sq, int64_t sk, int64_t d,
                     int64_t units_run, int64_t row0, bool causal, int threads) {
  const float scale = 1.0f / std::sqrt(float(d));
  const int64_t group = heads / kv_heads;
  const int64_t units = std::min(units_run, batch * heads);  // (batch, head) pairs, b-major
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> s(static_cast<size_t>(std::max<int64_t>(sk, 1)));
#pragma omp for collapse(2) schedule(static)
    for (int64_t u = 0; u < units; ++u) {
      for (int64_t i = row0; i < sq; ++i) {
        const int64_t b = u / heads, h = u % heads, hk = h / group;
        // Causal, bottom-right aligned: query i sees keys j <= i + sk - sq.
        const int64_t last = causal ? std::min(sk, i + sk - sq + 1) : sk;
        naive_row(q + ((b * sq + i) * heads + h) * d, k + (b * sk * kv_heads + hk) * d,
                  v + (b * sk * kv_heads + hk) * d, o + ((b * sq + i) * heads + h) * d, s.data(),
                  kv_heads * d, last, d, scale);
      }
    }
  }
}

}  // namespace fcbench
