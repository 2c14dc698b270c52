// Mask variant shared by the CPU pipelines, the reference and the CUDA kernels.
//
// Every mask flashcore offers is a band of visible keys per query row, aligned to the
// bottom-right corner when Sq != Sk (FlashAttention >= 2.1): with off = Sk - Sq,
// query i sees keys j with  i + off - left <= j <= i + off + right.  left/right < 0
// mean unbounded; causal is right = 0. A band is all a mask needs to skip whole tiles:
// key_begin/key_end give the visible range of a block of queries.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define FC_HD __host__ __device__ __forceinline__
#else
#define FC_HD inline
#endif

namespace flashcore::core {

// I: the index type, int64_t (BandMask) or, in the CUDA kernels' loops, int (their limits
// keep sequences below 2^30 and windows below 2^29, so every sum here fits).
template <class I>
struct BasicBandMask {
  I left = -1;   // < 0: unbounded
  I right = -1;  // < 0: unbounded
  I offset = 0;  // Sk - Sq

  FC_HD bool none() const { return left < 0 && right < 0; }
  // First visible key of query i (may be < 0 = none cut), clamped to [0, sk].
  FC_HD I key_begin(I i, I sk) const {
    if (left < 0) return 0;
    const I b = i + offset - left;
    return b < 0 ? 0 : (b > sk ? sk : b);
  }
  // One past the last visible key of query i, clamped to [0, sk].
  FC_HD I key_end(I i, I sk) const {
    if (right < 0) return sk;
    const I e = i + offset + right + 1;
    return e < 0 ? 0 : (e > sk ? sk : e);
  }
  FC_HD bool visible(I i, I j) const {
    return (left < 0 || j >= i + offset - left) && (right < 0 || j <= i + offset + right);
  }
};
using BandMask = BasicBandMask<int64_t>;

inline BandMask make_mask(bool causal, int64_t window_left, int64_t window_right, int64_t sq,
                          int64_t sk) {
  BandMask m;
  m.left = window_left < 0 ? -1 : window_left;
  m.right = causal ? (window_right < 0 ? 0 : std::min<int64_t>(window_right, 0))
                   : (window_right < 0 ? -1 : window_right);
  m.offset = sk - sq;
  return m;
}

}  // namespace flashcore::core
