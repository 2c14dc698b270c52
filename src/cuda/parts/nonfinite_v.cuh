// A NaN or Inf of V at a key that a mask hides from some rows of a key tile must not reach
// those rows, but P V multiplies every key of the tile: 0 * NaN and 0 * Inf are NaN (stale
// KV-cache slots outside a sliding window, say). Only the tiles that the band or Sk cuts
// hold such keys (the others every row of the tile sees whole, and tiles hidden from every
// row are not visited), so there, and only there, V is cleaned before P V: its non-finite
// elements set to 0 (where and by whom per kernel family: kernels/fwd_sm80.cuh; fp8's V^T
// makers clean what they write; the sm90 16-bit kernels clean nothing and compute the rows
// whose O came out non-finite again instead: kernels/sm90/bad_keys.cuh), and the keys cleaned are
// recorded, one bit per key. Once the item's output is written, each row adds back the
// non-finite elements of the cleaned keys it sees (add_nonfinite_v) to its written O: P_ij
// v_jd is as non-finite as v_jd (P_ij >= 0 keeps its sign; the fp64 reference's P_ij of 0
// gives NaN where this gives +-Inf: both non-finite), and a finite O_id plus it is it, so
// the sum in O, normalized or not, is non-finite as the reference's is. Read from V in
// global memory. On ordinary inputs the cost is the scan of the cut tiles and one test per
// item; the fix-up runs where a cut tile held NaN / Inf.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {

// The top bit of each element of a 32-bit word of V's storage type that is non-finite (its
// exponent all ones; e4m3: NaN, its one non-finite code), others 0: the exponent field plus
// one carries into the top bit exactly when it is all ones, and never into the next element.
template <typename T>
__device__ __forceinline__ uint32_t nonfinite_bits(uint32_t w) {
  if constexpr (sizeof(T) == 1) return ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
  else if constexpr (sizeof(T) == 4) return ((w & 0x7F800000u) + 0x00800000u) & 0x80000000u;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return ((w & 0x7F807F80u) + 0x00800080u) & 0x80008000u;
  else return ((w & 0x7C007C00u) + 0x04000400u) & 0x80008000u;
}
// w with the elements flagged in bits (nonfinite_bits) set to 0.
template <typename T>
__device__ __forceinline__ uint32_t zero_flagged(uint32_t w, uint32_t bits) {
  constexpr int kBits = 8 * int(sizeof(T));
  constexpr uint32_t kAll = kBits == 32 ? 0xFFFFFFFFu : (1u << kBits) - 1;
  return w & ~((bits >> (kBits - 1)) * kAll);
}

// The 16 bytes at shared address a (elements of T): their NaN / Inf set to 0 in place, where
// there are any (the test first, then the rare cleaning, each word's bits found again: the
// callers' warps are short of registers). Returns whether there were.
template <typename T>
__device__ __forceinline__ bool clean_16_bytes(uint32_t a) {
  uint4 x = ptx::lds128(a);
  if ((nonfinite_bits<T>(x.x) | nonfinite_bits<T>(x.y) | nonfinite_bits<T>(x.z) | nonfinite_bits<T>(x.w)) == 0)
    return false;
  x.x = zero_flagged<T>(x.x, nonfinite_bits<T>(x.x));
  x.y = zero_flagged<T>(x.y, nonfinite_bits<T>(x.y));
  x.z = zero_flagged<T>(x.z, nonfinite_bits<T>(x.z));
  x.w = zero_flagged<T>(x.w, nonfinite_bits<T>(x.w));
  ptx::sts128(a, x);
  return true;
}

// The record of one item's cleaned keys: per cut tile (ordinal k) kWords = ceil(kBlockN /
// 32) words, bit b of word w = key kBlockN n + 32 w + b; ordinals from kMaxCut - 1 on share
// the last tile's words, which their writers set to all ones (never reached within the
// bound, and a bit only makes the fix-up look at a key). load(addr) reads a word.
template <int kBlockN, int kMaxCut, class Load>
struct CutTileBits {
  static constexpr int kWords = (kBlockN + 31) / 32;
  uint32_t words;  // the record's first word (an address for load)
  CutTiles cut;
  int bn_keys;     // kBlockN (keys per tile)
  Load load;
  // Keys j0 .. j0 + 31 (j0 a multiple of 32); 0 for keys of tiles no one cleaned.
  __device__ __forceinline__ uint32_t operator()(int j0) const {
    uint32_t w = 0;
#pragma unroll
    for (int part = 0; part < (kBlockN < 32 ? 32 / kBlockN : 1); ++part) {  // tiles of 16 keys: two per word
      const int j = j0 + part * kBlockN, n = j / kBlockN;
      const int k = n >= cut.lo && n < cut.hi ? cut.ordinal(n) : -1;
      if (k < 0) continue;
      const uint32_t x = load(words + 4u * uint32_t((k < kMaxCut ? k : kMaxCut - 1) * kWords + (j % kBlockN) / 32));
      w |= kBlockN < 32 ? (x & ((1u << kBlockN) - 1)) << (part * kBlockN) : x;
    }
    return w;
  }
};

// Every key of the cut tiles (where the cleaner recorded no keys, only that it cleaned).
template <int kBlockN>
struct CutTileKeys {
  CutTiles cut;
  __device__ __forceinline__ uint32_t operator()(int j0) const {
    uint32_t w = 0;
#pragma unroll
    for (int part = 0; part < (kBlockN < 32 ? 32 / kBlockN : 1); ++part) {  // tiles of 16 keys: two per word
      const int n = (j0 + part * kBlockN) / kBlockN;
      if (n >= cut.lo && n < cut.hi && cut.ordinal(n) >= 0) w |= kBlockN < 32 ? ((1u << kBlockN) - 1) << (part * kBlockN) : ~0u;
    }
    return w;
  }
};

// fp8's V^T made by the pre-pass or the fused transposer (FwdParams::vt_bad): the keys of head
// bh (V^T block b Hkv + KV head) whose V had a NaN, as words of 32 (positions vt0 + j of
// the block; vt0 a multiple of 64), or'ed over the 128-column tiles.
struct Fp8NanBits {
  const FwdParams* p;
  int64_t bh;
  int vt0;
  __device__ __forceinline__ uint32_t operator()(int j0) const {
    uint32_t w = 0;
    for (int ct = 0; ct < (p->dv + 127) / 128; ++ct) w |= p->fp8_bad_words(bh, ct)[(vt0 + j0) / 32];
    return w;
  }
};

// Element d of V's row (storage type T) as float.
template <typename T>
__device__ __forceinline__ float v_elem(const T* row, int d) {
  if constexpr (std::is_same_v<T, float>) return row[d];
  else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return float(row[d]);
  else return float(row[d]);
}

// For each of this lane's kRows rows r, the non-finite elements of V's rows at the keys in
// [kb[r], ke[r]) that bits (keys in words of 32, above) flags, handed to add(r, col, x)
// (the row's element x of column col = 8 df + 2 t + e: the mma accumulator layout's columns
// of lane t): v0 is V's row of key 0 of the sequence at the item's KV head, v_ss its row
// stride, dv its columns. The rows' keys in one walk, each key's row read once.
template <typename T, int kRows, int kDF, class Bits, class Add>
__device__ __forceinline__ void add_nonfinite_v(const T* v0, int64_t v_ss, int dv, int t, const int (&kb)[kRows],
                                                const int (&ke)[kRows], const Bits& bits, const Add& add) {
  int lo = kb[0], hi = ke[0];
#pragma unroll
  for (int r = 1; r < kRows; ++r) {
    lo = min(lo, kb[r]);
    hi = max(hi, ke[r]);
  }
#pragma unroll 1
  for (int j0 = lo & ~31; j0 < hi; j0 += 32) {
    uint32_t w = bits(j0);
#pragma unroll 1
    while (w != 0) {
      const int j = j0 + __ffs(int(w)) - 1;
      w &= w - 1;
      bool vis[kRows], any = false;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        vis[r] = j >= kb[r] && j < ke[r];
        any |= vis[r];
      }
      if (!any) continue;
      const T* row = v0 + j * v_ss;
#pragma unroll 1
      for (int df = 0; df < kDF; ++df) {
        const int col = df * 8 + 2 * t;
        if (col >= dv) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = v_elem(row, col + e);
          if (isfinite(x)) continue;
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            if (vis[r]) add(r, col + e, x);
        }
      }
    }
  }
}

}  // namespace flashcore::cuda
