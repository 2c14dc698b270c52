// The loads of the sm80 forward: global -> shared tiles by cp.async (parts/tile_load.cuh:
// 16 bytes per copy, rows past the sequence and columns past the head dim zero-filled), K
// and V by key block. Where a key block lives is the KV indexing policy's answer
// (ContiguousKvRows: a sequence's keys are consecutive rows; CacheKvRows: a KV cache's,
// contiguous or paged, whose rows are looked up in the block table), so the load step takes
// "which key block" only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/params.hpp"
#include "cuda/parts/tile_load.cuh"

namespace flashcore::cuda::sm80 {

// K and V rows of a (sequence, KV head) from its first key on, in the caller's strides.
template <typename T, int kBlockN>
struct ContiguousKvRows {
  const T *k, *v;
  int64_t k_ss, v_ss;
  __device__ __forceinline__ const T* k_block(int n) const { return k + n * kBlockN * k_ss; }
  __device__ __forceinline__ const T* v_block(int n) const { return v + n * kBlockN * v_ss; }
};

// K and V of key block n (of a sequence of sk keys) into the ring's stage at sK + stage
// tile bytes, sV + the same; d, dv: the columns that hold data.
template <int kBlockN, int kHeadDim, int kThreads, int kTileKV, typename T, class Kv>
__device__ __forceinline__ void load_kv(uint32_t sK, uint32_t sV, const Kv& kv, int n, int stage, int sk, int d, int dv,
                                        int tid) {
  const int rows = sk - n * kBlockN;
  load_tile<kBlockN, kHeadDim, kThreads>(sK + stage * kTileKV, kv.k_block(n), kv.k_ss, rows, d, tid);
  load_tile<kBlockN, kHeadDim, kThreads>(sV + stage * kTileKV, kv.v_block(n), kv.v_ss, rows, dv, tid);
}

// K and V of a (sequence, KV head) in a KV cache (attention_with_kvcache): contiguous rows
// from the sequence's first key (pages null: as ContiguousKvRows), or paged: key s at row
// s % page_size of page pages[s / page_size], page ids outside [0, num_pages) read as zeros.
template <typename T, int kBlockN>
struct CacheKvRows {
  const T *k, *v;          // contiguous: the sequence's key 0; paged: page 0 (head offset included)
  int64_t k_ss, v_ss;      // row strides (within a page when paged)
  int64_t k_ps, v_ps;      // page strides
  const int32_t* pages;    // the sequence's block-table row, or null
  int page_size, num_pages;
  int page_shift;          // log2(page_size) for a power of two (a shift, not a division), else -1
  // Keys below key_lo load as zero rows: no row of the block sees them (before every row's
  // window), and a cache's stale slots there may hold NaN / Inf, which P V's 0 * NaN would
  // spread to the rows of the tile that holds them. Set by the kernel (0: none).
  int key_lo = 0;

  __device__ __forceinline__ static CacheKvRows make(const FwdParams& p, int b, int hk) {
    const bool paged = p.block_table != nullptr;
    const int64_t kb = paged ? 0 : b * p.k_sb, vb = paged ? 0 : b * p.v_sb;
    return {static_cast<const T*>(p.k) + kb + hk * p.k_sh,
            static_cast<const T*>(p.v) + vb + hk * p.v_sh,
            p.k_ss,
            p.v_ss,
            p.k_sb,
            p.v_sb,
            paged ? p.block_table + b * p.bt_sb : nullptr,
            p.page_size,
            p.num_pages,
            __popc(p.page_size) == 1 ? __ffs(p.page_size) - 1 : -1,
            0};
  }
  __device__ __forceinline__ int slot(int key) const { return page_shift >= 0 ? key >> page_shift : key / page_size; }
};

// The walk of a paged tile copy: thread tid copies 16-byte column chunk tid % kLanes of the
// tile rows tid / kLanes + i kStep, i < kPasses. kLanes is the row's chunk count rounded up
// to a power of two (lanes past the row's chunks copy nothing), so every thread has the same
// rows in every tile and can look their pages up a tile ahead.
template <int kRows, int kHeadDim, int kThreads, typename T>
struct PagedWalk {
  using Tile = SwizzledTile<kHeadDim, T>;
  static constexpr int kLanes = Tile::kChunks <= 8 ? 8 : Tile::kChunks <= 16 ? 16 : 32;
  static_assert(Tile::kChunks <= 32 && kThreads % kLanes == 0, "a paged walk needs whole rows per pass");
  static constexpr int kStep = kThreads / kLanes, kPasses = (kRows + kStep - 1) / kStep;
};

// Whether a copy of kThreads threads takes a tile that lies in one page (page_size a multiple
// of the tile's rows) as one page id and a constant-stride copy. Built for one warp's copies
// (the e4m3 cache's per-warp ring of 16 rows); in the CTA-wide copies of 64-row tiles the
// extra path made the 16-bit decode kernels ~1000 instructions longer and measured slower,
// contiguous caches included (docs/results/cuda-kvcache-2026-12-01.md).
template <int kThreads>
inline constexpr bool kTileInPage = kThreads == 32;

// The page ids of the rows a thread copies of one key tile (PagedWalk's rows; -1 past the
// sequence), read from the block table one tile before its copies are issued: a page id is
// a global load the copies' addresses depend on, and issued with them it would add a whole
// load latency to every tile of the two-stage ring. Empty for the other KV policies.
template <int kPasses>
struct TilePages {
  int id[kPasses];
};
struct NoPages {};

template <int kBlockN, int kHeadDim, int kThreads, typename T>
__device__ __forceinline__ TilePages<PagedWalk<kBlockN, kHeadDim, kThreads, T>::kPasses> fetch_pages(
    const CacheKvRows<T, kBlockN>& kv, int n, int sk, int tid) {
  using W = PagedWalk<kBlockN, kHeadDim, kThreads, T>;
  TilePages<W::kPasses> pg;
  const int key0 = n * kBlockN + tid / W::kLanes;
  if (kv.pages == nullptr) {  // a contiguous cache: no ids (load_kv does not read them), no per-row tests
#pragma unroll
    for (int i = 0; i < W::kPasses; ++i) pg.id[i] = -1;
    return pg;
  }
  if constexpr (kTileInPage<kThreads>) {
    if (kv.page_size % kBlockN == 0) {  // (uniform) the tile lies in one page: its id alone, in id[0]
      const int first = n * kBlockN;
      pg.id[0] = first < sk ? __ldg(kv.pages + kv.slot(first)) : -1;
      return pg;
    }
  }
#pragma unroll
  for (int i = 0; i < W::kPasses; ++i) {
    const int key = key0 + i * W::kStep;
    // no wait here: the ids are first used by the next tile's copies
    pg.id[i] = key < sk ? __ldg(kv.pages + kv.slot(key)) : -1;
  }
  return pg;
}

template <int kBlockN, int kHeadDim, int kThreads, int kTileKV, typename T, class Kv>
__device__ __forceinline__ void load_kv(uint32_t sK, uint32_t sV, const Kv& kv, NoPages, int n, int stage, int sk,
                                        int d, int dv, int tid) {
  load_kv<kBlockN, kHeadDim, kThreads, kTileKV, T>(sK, sV, kv, n, stage, sk, d, dv, tid);
}

// Paged or contiguous cache rows; pg: fetch_pages of tile n.
template <int kBlockN, int kHeadDim, int kThreads, int kTileKV, typename T, int kPasses>
__device__ __forceinline__ void load_kv(uint32_t sK, uint32_t sV, const CacheKvRows<T, kBlockN>& kv,
                                        const TilePages<kPasses>& pg, int n, int stage, int sk, int d, int dv,
                                        int tid) {
  const int key0 = n * kBlockN;
  if (kv.pages == nullptr) {
    load_tile<kBlockN, kHeadDim, kThreads, true>(sK + stage * kTileKV, kv.k + key0 * kv.k_ss, kv.k_ss, sk - key0, d,
                                                 tid, kv.key_lo - key0);
    load_tile<kBlockN, kHeadDim, kThreads, true>(sV + stage * kTileKV, kv.v + key0 * kv.v_ss, kv.v_ss, sk - key0, dv,
                                                 tid, kv.key_lo - key0);
    return;
  }
  if constexpr (kTileInPage<kThreads>) {
    if (kv.page_size % kBlockN == 0) {
      // The tile lies in one page (fetch_pages: its id in id[0]): its rows are a constant
      // stride apart, copied as a contiguous cache's from the tile's first row (an id outside
      // the pages: every row zero-filled).
      const int id = pg.id[0];
      const bool ok = id >= 0 && id < kv.num_pages;
      const int64_t first = key0 - kv.slot(key0) * kv.page_size;  // (the tile's first row in its page)
      const T* k0 = ok ? kv.k + id * kv.k_ps + first * kv.k_ss : kv.k;
      const T* v0 = ok ? kv.v + id * kv.v_ps + first * kv.v_ss : kv.v;
      const int rows = ok ? sk - key0 : 0;
      load_tile<kBlockN, kHeadDim, kThreads, true>(sK + stage * kTileKV, k0, kv.k_ss, rows, d, tid, kv.key_lo - key0);
      load_tile<kBlockN, kHeadDim, kThreads, true>(sV + stage * kTileKV, v0, kv.v_ss, rows, dv, tid, kv.key_lo - key0);
      return;
    }
  }
  using W = PagedWalk<kBlockN, kHeadDim, kThreads, T>;
  using Tile = typename W::Tile;
  const int lane = tid % W::kLanes, r0 = tid / W::kLanes, c = lane * Tile::kElemsPerChunk;
  if (lane >= Tile::kChunks) return;
  // A thread's rows of one page are kStep rows apart: the row addresses are worked out where
  // a pass enters a new page (warp-uniform: a warp's rows of a pass lie in one 8-row group,
  // and pages hold whole 8-row groups) and advance by a constant stride otherwise. At hd256
  // every row's address is worked out: the 64-row kernel there holds 255 registers, and the
  // run's state made ptxas spill in its key loop.
  constexpr bool kRuns = kHeadDim <= 128;
  const T *krow = kv.k, *vrow = kv.v;
  bool page_ok = false;
  int last_slot = -1;
#pragma unroll
  for (int i = 0; i < W::kPasses; ++i) {
    const int r = r0 + i * W::kStep, key = key0 + r;
    if (kBlockN % W::kStep == 0 || r < kBlockN) {
      const int slot = kv.slot(key);
      if (!kRuns || slot != last_slot) {
        last_slot = slot;
        const int id = pg.id[i];
        page_ok = id >= 0 && id < kv.num_pages;
        const int64_t in_page = key - slot * kv.page_size;
        krow = kv.k + id * kv.k_ps + in_page * kv.k_ss;
        vrow = kv.v + id * kv.v_ps + in_page * kv.v_ss;
      } else {
        krow += W::kStep * kv.k_ss;
        vrow += W::kStep * kv.v_ss;
      }
      const bool ok = page_ok && key < sk && key >= kv.key_lo;
      const uint32_t off = stage * kTileKV + Tile::offset(r, lane);
      ptx::cp_async_16(sK + off, ok && c < d ? krow + c : kv.k, ok && c < d);
      ptx::cp_async_16(sV + off, ok && c < dv ? vrow + c : kv.v, ok && c < dv);
    }
  }
}

// Two e4m3 values (the low byte first) as a T (f16 / bf16) pair, low half first; exact (every
// e4m3 value is a T value), NaN stays NaN. sm89 and later convert in one instruction
// (cvt.rn.f16x2.e4m3x2); before that: the e4m3 bits shifted into f16's places (sign to bit 15,
// exponent and mantissa to bits 7..13) are the value times 2^-8 as an f16, normal or
// subnormal alike, so one f16 multiply by 2^8 is exact; 0x7f / 0xff (e4m3's NaN) set apart.
template <typename T>
__device__ __forceinline__ uint32_t widen_e4m3x2(uint32_t two) {
  uint32_t h2;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  h2 = uint32_t(r.x) | (uint32_t(r.y) << 16);
#else
  const uint32_t x = (two & 0xffu) | ((two & 0xff00u) << 8);  // the two bytes at bits 0 and 16
  const uint32_t bits = ((x & 0x00800080u) << 8) | ((x & 0x007f007fu) << 7);
  __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&bits), __half2half2(__ushort_as_half(0x5c00)));  // 2^8
  h2 = *reinterpret_cast<const uint32_t*>(&v);
  if ((x & 0x7fu) == 0x7fu) h2 |= 0x7fffu;
  if ((x & 0x7f0000u) == 0x7f0000u) h2 |= 0x7fff0000u;
#endif
  if constexpr (std::is_same_v<T, __half>) {
    return h2;
  } else {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    return *reinterpret_cast<const uint32_t*>(&b);
  }
}

// One 16-byte chunk of e4m3 (at shared address src) widened into two 16-byte T chunks.
template <typename T>
__device__ __forceinline__ void widen_chunk(uint32_t dst0, uint32_t dst1, uint32_t src) {
  const uint4 v = ptx::lds128(src);
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    o[2 * j] = widen_e4m3x2<T>(w[j] & 0xffffu);
    o[2 * j + 1] = widen_e4m3x2<T>(w[j] >> 16);
  }
  ptx::sts128(dst0, make_uint4(o[0], o[1], o[2], o[3]));
  ptx::sts128(dst1, make_uint4(o[4], o[5], o[6], o[7]));
}

// One warp's kRows key rows (from a multiple of 8) of a key tile's e4m3 rows (the ring's
// SwizzledTile<kHeadDim, TC> rows, as load_kv wrote them) widened into the same rows of a T
// tile (SwizzledTile<kHeadDim, T>, what ldmatrix reads): chunk c of a row becomes T chunks
// 2c and 2c + 1; zero-filled rows stay zero. Lane l takes row l % kRows and every
// (32 / kRows)-th chunk from l / kRows, so each 8 lanes of an access take 8 rows of one
// chunk column (distinct 16-byte bank groups under the swizzle). A warp that reads only its
// own rows (the key-split form) then needs __syncwarp, not a CTA barrier.
template <int kRows, int kHeadDim, typename T, typename TC>
__device__ __forceinline__ void widen_rows(uint32_t dst, uint32_t src, int lane) {
  using S = SwizzledTile<kHeadDim, TC>;
  using D = SwizzledTile<kHeadDim, T>;
  static_assert(sizeof(TC) == 1 && sizeof(T) == 2, "e4m3 to a 16-bit type");
  constexpr int kGroups = 32 / kRows;  // lanes per row
  static_assert(32 % kRows == 0 && kRows % 8 == 0 && S::kChunks % kGroups == 0, "whole chunks per lane");
  const int r = lane % kRows, r7 = r & 7, g = lane / kRows;
  const uint32_t srow = r * S::kRowBytes, drow = r * D::kRowBytes;
#pragma unroll
  for (int c = g; c < S::kChunks; c += kGroups)
    widen_chunk<T>(dst + drow + (((2 * c) ^ r7) << 4), dst + drow + (((2 * c + 1) ^ r7) << 4), src + srow + ((c ^ r7) << 4));
}

}  // namespace flashcore::cuda::sm80
