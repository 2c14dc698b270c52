// The sm80 forward's hostile-value parts (parts/nonfinite_v.cuh, parts/exact_rows.cuh say
// why): the check after the key loop that sends a block round its keys again, cleaning
// (nonfinite_rows), the cleaning of a cut tile's V in shared memory (clean_cut_v), and the
// warp's second look at its rows once O is written (repair).
//
// The check instead of a scan of every cut tile: this kernel has no idle warps to scan V
// while the others compute; the key loop's first run is the one it was, and a block whose
// V holds no NaN / Inf pays one multiply-add per element of O and a barrier.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/exact_rows.cuh"
#include "cuda/parts/nonfinite_v.cuh"
#include "cuda/parts/score_mod.cuh"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda::sm80 {

// This lane's rows (bit r = 2 mi + half) whose sum l is not NaN (rows with l NaN are
// computed again anyway) and whose O has a non-finite element: x * 0 is NaN exactly for x
// NaN or +-Inf.
template <int kMI, int kDF>
__device__ __forceinline__ uint32_t nonfinite_lane_rows(const float (&acc)[kMI][kDF][4], const float (&l)[2 * kMI]) {
  uint32_t f = 0;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float z = 0.f;
#pragma unroll
      for (int df = 0; df < kDF; ++df) z = fmaf(acc[mi][df][2 * half + 1], 0.f, fmaf(acc[mi][df][2 * half], 0.f, z));
      if (isnan(z) && !isnan(l[2 * mi + half])) f |= 1u << (2 * mi + half);
    }
  return f;
}
template <int kMI, int kDF>
__device__ __forceinline__ bool nonfinite_rows(const float (&acc)[kMI][kDF][4], const float (&l)[2 * kMI]) {
  return nonfinite_lane_rows<kMI, kDF>(acc, l) != 0;
}

// V's tile at `tile` (a stage of the ring; rows of keys, SwizzledTile) of cut tile k
// (CutTiles' ordinal): its NaN / Inf set to 0 in place and their keys' bits or'ed into the
// record at `words` (Tr::kCutWords per tile, bit b of word w: key 32 w + b of the tile;
// ordinals past the bound share the last tile's words, all ones). Returns whether this
// thread cleaned any; the caller's barrier publishes the tile.
template <typename T, class Tr>
__device__ __forceinline__ bool clean_cut_v(uint32_t tile, uint32_t words, int k, int tid) {
  using Tile = SwizzledTile<Tr::kHeadDim, T>;
  constexpr int kChunks = Tile::kChunks, kWords = (Tr::kBlockN + 31) / 32;
  bool any = false;
#pragma unroll 1
  for (int x = tid; x < Tr::kBlockN * kChunks; x += Tr::kThreads) {
    const int r = x / kChunks;
    if (!clean_16_bytes<T>(tile + Tile::offset(r, x % kChunks))) continue;
    any = true;
    const uint32_t at = words + 4u * uint32_t((k < Tr::kMaxCut ? k : Tr::kMaxCut - 1) * kWords + r / 32);
    ptx::atom_or_shared(at, k < Tr::kMaxCut ? 1u << (r % 32) : ~0u);
  }
  return any;
}

// This lane's rows (r = 2 mi + half) whose l is NaN (bit r) or 0 (bit 16 + r).
template <int kMI>
__device__ __forceinline__ uint32_t row_flags(const float (&l)[2 * kMI]) {
  uint32_t f = 0;
#pragma unroll
  for (int r = 0; r < 2 * kMI; ++r) f |= (isnan(l[r]) ? 1u : 0u) << r | (l[r] == 0.f ? 1u : 0u) << (16 + r);
  return f;
}

// The rows of nonfinite_lane_rows as row_flags' bit r (computed again exactly: the variant
// kernels, which take no second run), the same in the four lanes of a row's quad.
template <int kMI, int kDF>
__device__ __forceinline__ uint32_t nonfinite_row_bits(const float (&acc)[kMI][kDF][4], const float (&l)[2 * kMI]) {
  uint32_t f = nonfinite_lane_rows<kMI, kDF>(acc, l);
  f |= __shfl_xor_sync(0xffffffffu, f, 1);
  f |= __shfl_xor_sync(0xffffffffu, f, 2);
  return f;
}

struct SmemWord {
  __device__ __forceinline__ uint32_t operator()(uint32_t addr) const { return ptx::lds32(addr); }
};

// After the epilogue, one row at a time (registers): this lane's rows with l NaN computed
// again exactly and written again (O, lse); where the second run cleaned (cleaned), V's
// NaN / Inf at the cleaned keys each other row sees (l > 0) added to its written O. The
// sequence (b), the KV head, the band and the block's tiles are found again here, not held
// across the key loops. kVariants (the score variants' kernel): the rows computed again take
// the transformed scores (transform_score_exact) and the sink, as the key loop does; the
// flags are those of the rows before the sink joined them.
template <typename T, class Tr, bool kVariants = false>
__device__ __forceinline__ void repair(const FwdParams& p, int b, int h, int m0, int tid, uint32_t flags,
                                       bool cleaned, uint32_t words) {
  const int warp = tid / 32, lane = tid % 32;
  constexpr int kDF = Tr::kDF, kBlockN = Tr::kBlockN;
  m0 = ptx::opaque(m0);
  h = ptx::opaque(h);
  const int hk = h / p.group;
  const SeqInfo seq = seq_info(p, ptx::opaque(b));
  const core::BandMask band = band_mask(p, seq);
  const TileRange tiles = tile_range(band, m0, min(m0 + Tr::kBlockM, seq.sq) - 1, seq.sk, kBlockN);
  const int t = lane % 4, k_lo = tiles.lo * kBlockN, k_hi = min(tiles.hi * kBlockN, seq.sk);
  const T* k0 = static_cast<const T*>(p.k) + seq.bb * p.k_sb + seq.k_row0 * p.k_ss + int64_t(hk) * p.k_sh;
  const T* v0 = static_cast<const T*>(p.v) + seq.bb * p.v_sb + seq.k_row0 * p.v_ss + int64_t(hk) * p.v_sh;
  const CutTileBits<kBlockN, Tr::kMaxCut, SmemWord> bits{words, CutTiles(tiles), kBlockN, SmemWord{}};
#pragma unroll 1
  for (int r = 0; r < 2 * Tr::kMI; ++r) {
    const int i = m0 + warp * 16 * Tr::kMI + lane / 4 + 16 * (r / 2) + 8 * (r % 2);
    const bool exact = (flags >> r) & 1u;
    if (i >= seq.sq || !(exact || (cleaned && !((flags >> (16 + r)) & 1u)))) continue;
    const int kb = max(k_lo, int(band.key_begin(i, seq.sk))), ke = min(k_hi, int(band.key_end(i, seq.sk)));
    T* orow = static_cast<T*>(p.o) + seq.bb * p.o_sb + (seq.q_row0 + i) * p.o_ss + int64_t(h) * p.o_sh;
    if (exact) {
      float o[kDF][2], m, mlo, l;
      const ExactRow<T> row{
          static_cast<const T*>(p.q) + seq.bb * p.q_sb + (seq.q_row0 + i) * p.q_ss + int64_t(h) * p.q_sh, kb, ke};
      const ExactKv<T> kv{k0, v0, p.k_ss, p.v_ss, p.d, p.dv, p.scale_log2, 1.f};
      if constexpr (kVariants) {
        const float slope2 = alibi_slope_log2(p, ptx::opaque(b), h);
        const int dist0 = i + seq.sk - seq.sq;
        recompute_row_variants<T, kDF>(o, m, mlo, l, row, kv, lane, p, slope2, dist0,
                                          p.sinks != nullptr ? p.sinks + h : nullptr);
      } else {
        recompute_row<T, kDF>(o, m, mlo, l, row, kv, lane);
      }
      store_row<T, kDF>([&](int df, int e) { return o[df][e]; }, m, mlo, l, orow,
                        p.lse != nullptr ? p.lse + seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0 + i : nullptr, p.dv,
                        t, ptx::PackAs<T>{});
      continue;
    }
    const int kb1[1] = {kb}, ke1[1] = {ke};
    add_nonfinite_v<T, 1, kDF>(v0, p.v_ss, p.dv, t, kb1, ke1, bits,
                               [&](int, int col, float x) { add_to_output<T>(orow + col, x, std::is_same_v<T, __nv_bfloat16>); });
  }
}

}  // namespace flashcore::cuda::sm80
