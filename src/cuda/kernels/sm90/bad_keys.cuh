// Where the sm90 forward keeps the hostile-value rule "a NaN / Inf of V at a key a mask hides
// from a row never reaches that row" (parts/nonfinite_v.cuh), and the shared words it needs.
//
// 16-bit kernels: nothing on the key loop. Cut tiles go to P V as loaded, so a hidden key's
// NaN / Inf gives its rows 0 * NaN = NaN in O (P of a hidden key is exactly 0: its score is
// -inf). After the key loop each consumer tests its rows' accumulators for a non-finite
// element (Mainloop::fix_flags: per element an fma by 0, which is 0 for a finite value and
// NaN otherwise, reduced over the row's quad) and only rows that came out non-finite are
// computed again exactly over the keys they see (RowRepair, parts/exact_rows.cuh), which
// never reads a hidden key: a row that sees a NaN / Inf V (or a NaN score) is non-finite
// again there, as the reference is; a row that was hit only by hidden keys comes out finite.
// Until ec90b85 the producer's three spare warps scanned and cleaned every cut tile
// before the consumers' P V (a second barrier per cut tile, vraw), and under a causal mask
// the cut tile is each item's diagonal, last one: the scan sat on every item's critical
// path (H200, causal S = 1024: 0.89-0.95x of the kernels without the rules).
//
// fp8: the V^T makers clean what they write (the pre-pass and the fused transposer every
// tile, "_vt"'s transposer the cut tiles, while it transposes them anyway), and the item's
// rows take V's NaN back from global memory after the epilogue (RowRepair). Which items:
// BadKeys below, two slots (items alternate: the n-th item of a CTA uses slot n % 2), each a
// tag word (n + 1 while item n has cleaned keys, or the pre-pass's / fused transposer's
// stamp; zeroed at the start), 16 bytes apart. A slot is written again two items later,
// once the consumers read it: its writers run only once the producer has loaded that
// item's Q, after the consumers released the Q of the item in between, after their
// epilogue and second look. Then (every kernel) 32 bytes of the epilogue's RowRepair words
// (SmemLayout::fix_word).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda::sm90 {

template <class Tr>
struct BadKeys {
  static constexpr uint32_t kSlotBytes = 16;
  uint32_t base;  // SmemLayout::bad

  __device__ __forceinline__ uint32_t tag(int qi) const { return base + uint32_t(qi & 1) * kSlotBytes; }
  __device__ __forceinline__ void mark(int qi) const { ptx::sts32(tag(qi), uint32_t(qi) + 1); }
  // Whether item qi has cleaned keys: its tag is qi + 1 ("_vt"'s transposer, mark), or
  // (fp8 from the pre-pass's or the fused transposer's V^T: the TMA thread's copy_stamp, or
  // its write from wait_vt_head's flag) the call's stamp.
  __device__ __forceinline__ bool tagged(const FwdParams& p, int qi) const {
    const uint32_t x = ptx::lds32(tag(qi));
    return !Tr::kVtIn ? x == p.vt_stamp : x == uint32_t(qi) + 1;
  }
  // Thread 0, before the CTA's first barrier sync: the tags (fp8) and the RowRepair words.
  __device__ __forceinline__ void init() const {
    for (uint32_t a = base; a < base + uint32_t(Tr::kBadBytes); a += 4u) ptx::sts32(a, 0u);
  }
};

}  // namespace flashcore::cuda::sm90
