// Helpers of the CUDA timing drivers (flashcore_cuda_timing, flashcore_cuda_bwd_timing):
// CUDA errors end the program, integer lists from the command line, medians (of event times).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

namespace fctiming {

// Reads comma-separated integers at c up to a ';' (passed) or the end: false where a field
// is not a number. --hdims / --seqs take one such list, --shapes one per shape.
inline bool read_ints(const char*& c, std::vector<long long>& out) {
  for (char* end = nullptr;; c = end + 1) {
    out.push_back(std::strtoll(c, &end, 10));
    if (end == c) return false;
    if (*end != ',') {
      c = *end == ';' ? end + 1 : end;
      return true;
    }
  }
}

inline double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median over `iters` calls of call() on stream st, each between two events a and b, in
// microseconds.
template <class Call>
double median_event_us(cudaStream_t st, cudaEvent_t a, cudaEvent_t b, int iters, Call&& call) {
  std::vector<float> ts;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, st));
    call();
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  return median(ts) * 1e3;
}

}  // namespace fctiming
