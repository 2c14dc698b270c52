// Shared-memory layout of the sm90 forward kernel (FwdSm90Config's sizes), from the 1024-byte
// aligned base up: Q's tile, kStages K tiles, kStages V (fp8: V^T) tiles, fp8 "_vt"'s raw V
// ring, O's staging buffer (where it has its own), the fused V^T transposer's tiles, fp8's
// tags of items with cleaned keys (BadKeys) and the RowRepair words, then the mbarriers.
// Every tile is kColBlocks column blocks of [rows][128 bytes] in the 128-byte swizzle
// (16-byte chunk c of row r at c ^ (r % 8)): what TMA's SWIZZLE_128B writes and wgmma's SW128
// descriptors read. fp8's V^T tiles: kHeadDim rows of 64 keys per 64-byte column block, the
// 64-byte swizzle.
#pragma once

#include <cstdint>

#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/sm90/pipeline.cuh"

namespace flashcore::cuda::sm90 {

template <class Tr>
struct SmemLayout {
  static constexpr int kStages = Tr::kStages;
  uint32_t q, k, v;  // tiles: Q, K stage 0 (stage s at + s kTileKV), V (V^T) stage 0
  uint32_t raw;      // Tr::kVtIn: V's 64-key sub-tiles (kRawSlots of kRawSub bytes)
  uint32_t o;        // O's staging: its own buffer (Tr::kTileO > 0) or Q's
  uint32_t vt_tiles; // Tr::kVtFused: the transposing warps' tiles (kVtStage bytes each)
  uint32_t bad;      // BadKeys (bad_keys.cuh): fp8's two tag slots, then the RowRepair words
  uint32_t bars;     // the mbarriers (below)

  __device__ __forceinline__ explicit SmemLayout(uint32_t base) {
    q = (base + 1023u) & ~1023u;
    k = q + Tr::kTileQ;
    v = k + kStages * Tr::kTileKV;
    raw = v + kStages * Tr::kTileKV;
    const uint32_t obuf = raw + (Tr::kVtIn ? Tr::kRawBytes : 0);
    o = Tr::kTileO > 0 ? obuf : q;
    vt_tiles = obuf + Tr::kTileO;
    bad = vt_tiles + (Tr::kVtFused ? 3 * Tr::kVtStage : 0);
    bars = bad + Tr::kBadBytes;
  }

  // The mbarriers (Tr::kBarriers of 8 bytes): Q's full, K's full, V's full, K's empty, V's
  // empty, Q's empty, then (Tr::kVtIn) the raw ring's full and empty ones.
  __device__ __forceinline__ Pipeline<1> q_pipe() const { return {bars, bars + 8u * (1 + 4 * kStages)}; }
  __device__ __forceinline__ Pipeline<kStages> k_pipe() const {
    return {bars + 8u * 1, bars + 8u * (1 + 2 * kStages)};
  }
  __device__ __forceinline__ Pipeline<kStages> v_pipe() const {
    return {bars + 8u * (1 + kStages), bars + 8u * (1 + 3 * kStages)};
  }
  __device__ __forceinline__ Pipeline<Tr::kRawSlots> raw_pipe() const {
    return {bars + 8u * (2 + 4 * kStages), bars + 8u * (2 + 4 * kStages + Tr::kRawSlots)};
  }
  // Consumer warpgroup cw's word telling its warps, for items of qi's parity, that one of
  // them needs RowRepair (Epilogue::store_staged), after BadKeys' slots.
  __device__ __forceinline__ uint32_t fix_word(int cw, int qi) const {
    return bad + uint32_t(Tr::kBadBytes - 32) + 8u * uint32_t(cw) + 4u * uint32_t(qi & 1);
  }

  // One thread, then a CTA barrier: Q's full barrier takes the TMA thread's arrival, its
  // empty one every consumer warp's (persistent: the producer refills Q once they are done
  // with it); K's and V's as their pipelines say, V's full one the transposing warps' where
  // they write V^T in the kernel (Tr::kVtIn).
  __device__ __forceinline__ void init_barriers() const {
    q_pipe().init(1, 4 * Tr::kConsumers);
    k_pipe().init(1, 4 * Tr::kConsumers);  // one arrival per consumer warp
    v_pipe().init(Tr::kVtIn ? Tr::kVtWarps : 1, 4 * Tr::kConsumers);
    if constexpr (Tr::kVtIn) raw_pipe().init(1, Tr::kVtWarps);
    ptx::mbar_init_fence();
  }
};

}  // namespace flashcore::cuda::sm90
