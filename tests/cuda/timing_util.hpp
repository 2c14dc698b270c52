// Helpers of the CUDA timing drivers (flashcore_cuda_timing, flashcore_cuda_bwd_timing):
// CUDA errors end the program, integer lists from the command line, medians.
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

}  // namespace fctiming
