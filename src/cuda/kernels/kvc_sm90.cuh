// kvc_sm90: the key-split form of kvc_sm80.cuh (16 packed rows, each of 4 warps a quarter of
// every 64-key tile, mma.sync) with its K/V tiles loaded by TMA, on compute capability 9.0
// (sm_90a), for paged 16-bit caches. The rows FC_SM90(kvc, ...) of instances.inc are
// launched here; the policy takes them on Hopper where the pages divide or are a multiple of
// the 64-key tile (pick_kvcache). A contiguous cache stays on kvc_sm80's cp.async rows: over
// it the TMA rows took 1.06-1.14x their time on an H200
// (docs/results/cuda-kvcache-tma-2026-12-02.md).
//
// Why: the cp.async copies of a paged tile spend per-thread instructions on every row's page
// lookup and address, and at the decode grids' two CTAs per SM that issue work delayed the
// loads (Nsight Compute, docs/results/cuda-kvcache-2026-12-02.md: 1.49-1.68x the contiguous
// kernel's instructions). Here warp 0's lanes issue the TMA boxes of a tile, each lane those
// of its rows of one page (one box per 128-byte column group of K and of V; box heights in
// the launcher), page ids read a tile ahead; the other warps issue nothing.
//
// TMA writes each 128-byte column group of a tile as its own [64 rows x 128 bytes] tile with
// the 128-byte swizzle (chunk c of row r at r 128 + (c ^ r % 8) 16, from a 1024-byte aligned
// base), which Mainloop reads through its K/V strides (kKvRow 128, kKvBlock 64 x 128). A
// box reads whole page rows, so rows outside [key_lo, sk) of a tile (a page's slots past the
// sequence, keys before the window) arrive as whatever the cache holds there; the warps
// zero their rows of such a tile in shared memory before reading it (NaN / Inf there would
// reach P V through 0 * NaN). Page ids outside [0, num_pages) and pages past the sequence are
// boxes out of the map's bounds: zeros.
#pragma once

#include <cuda.h>

#include <algorithm>

#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/tma_host.hpp"
#include "cuda/kernels/kvc_sm80.cuh"

namespace flashcore::cuda {

// The K/V ring over TMA (kvc_split_cta's Ring16): stage s of K at sK + s kTileKV, of V at
// sV + s kTileKV, full barrier s at bar + 8 s (one arrival: warp 0's lane 0, with the
// stage's bytes).
template <class Tr>
struct TmaKvRing {
  static constexpr int kHeadDim = Tr::kHeadDim, kStages = Tr::kStages, kBlockN = Tr::kBlockN, kKeys = Tr::kKeys;
  static constexpr int kGroups = Tr::kRowBytes / 128;  // 128-byte column groups per row: a box each
  static constexpr int kKvRow = 128, kKvBlock = kBlockN * 128;
  static_assert(Tr::kTileKV == kGroups * kKvBlock && !Tr::kWiden, "16-bit tiles of whole 128-byte groups");
  struct Maps {
    const CUtensorMap *k, *v;
    int box_rows;  // the maps' box rows: a power of two that divides kBlockN (and the page)
  };
  const CUtensorMap *mk, *mv;
  sm80::CacheKvRows<typename Tr::T, kBlockN> kv;  // the sequence's block-table row and page rule
  uint32_t sK, sV, bar;
  int box_rows, boxes;   // rows per box (Maps::box_rows), boxes per tile and column group
  int hk, sk, key_lo, hi, warp, lane, tid;
  int id;                // lanes < boxes of warp 0: the page id of their box of the next tile

  __device__ __forceinline__ TmaKvRing(const FwdParams& p, const KvcCta& c, const Maps& m)
      : mk(m.k), mv(m.v), sK(c.sK), sV(c.sV), hk(c.hk), sk(c.seq.sk), key_lo(c.key_lo), hi(c.tiles.hi),
        warp(c.warp), lane(c.lane), tid(c.tid), id(-1) {
    bar = c.sQ + Tr::kSmem;
    kv = sm80::CacheKvRows<typename Tr::T, kBlockN>::make(p, c.b, c.hk);
    box_rows = m.box_rows;
    boxes = kBlockN / box_rows;
  }
  // Lane `lane`'s page id for tile n (-1 past the sequence: an out-of-bounds box).
  __device__ __forceinline__ int fetch(int n) const {
    const int key = n * kBlockN + lane * box_rows;
    return lane < boxes && key < sk ? __ldg(kv.pages + kv.slot(key)) : -1;
  }
  // Warp 0: tile n into `stage`, then the next tile's page ids.
  __device__ __forceinline__ void load(int n, int stage) {
    const uint32_t full = bar + 8 * stage;
    if (lane == 0) ptx::mbar_arrive_expect_tx(full, 2 * Tr::kTileKV);
    __syncwarp();
    if (lane < boxes) {
      const int key = n * kBlockN + lane * box_rows;
      // (column, row in the page, KV head, page)
      const int row = key - kv.slot(key) * kv.page_size;
      const uint32_t off = stage * Tr::kTileKV + lane * box_rows * 128;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        ptx::tma_load_4d(sK + off + g * kKvBlock, mk, full, g * 64, row, hk, id);
        ptx::tma_load_4d(sV + off + g * kKvBlock, mv, full, g * 64, row, hk, id);
      }
    }
    id = fetch(n + 1);
  }
  __device__ __forceinline__ void start(int lo) {
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) ptx::mbar_init(bar + 8 * s, 1);
      ptx::mbar_init_fence();
    }
    __syncthreads();  // the barriers are initialized before anyone waits on them
    if (warp != 0) return;
    id = fetch(lo);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s)
      if (lo + s < hi) load(lo + s, s);
  }
  // Q's cp.async group has landed (this thread's rows).
  __device__ __forceinline__ void wait_q() { ptx::cp_async_wait<0>(); }
  // Tile `it` of the run has landed (its barrier's phase it / kStages); Q's rows too.
  __device__ __forceinline__ void wait(int it) {
    if (it == 0) ptx::cp_async_wait<0>();
    ptx::mbar_wait(bar + 8 * (it % kStages), (it / kStages) & 1);
  }
  __device__ __forceinline__ void refill(int nn, int stage) {
    if (warp == 0 && nn < hi) load(nn, stage);
  }
  // This warp's rows of tile n outside [key_lo, sk) zeroed in the stage's K and V tiles
  // (uniform: only a tile that reaches past the sequence or before the window), then fenced
  // against the TMA writes that will reuse the stage.
  __device__ __forceinline__ void clean(int n, int stage, int) {
    const int k0 = n * kBlockN;
    if (k0 + kBlockN <= sk && k0 >= key_lo) return;
    constexpr int kChunks = kKeys * kGroups * 8;  // this warp's rows x 16-byte chunks
    const uint4 zero = make_uint4(0, 0, 0, 0);
    static_assert(kChunks % 32 == 0, "whole passes of the warp");
#pragma unroll
    for (int j = 0; j < kChunks / 32; ++j) {
      const int i = 32 * j + lane;
      const int r = warp * kKeys + i / (kGroups * 8), g = (i / 8) % kGroups, ch = i % 8;
      const int key = k0 + r;
      if (key >= sk || key < key_lo) {
        const uint32_t off = stage * Tr::kTileKV + g * kKvBlock + r * 128 + ch * 16;
        ptx::sts128(sK + off, zero);
        ptx::sts128(sV + off, zero);
      }
    }
    ptx::fence_proxy_async();
    __syncwarp();
  }
  __device__ __forceinline__ void drain() { ptx::cp_async_wait<0>(); }
};

template <typename T, int kHeadDim, int kBlockN, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(128, kMinBlocks)
    kvc_sm90_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                    const FwdParams p, int box_rows) {
  using Tr = KvcSplitTraits<T, T, kHeadDim, kBlockN, 4, kStages, kMinBlocks>;
  extern __shared__ __align__(1024) unsigned char smem_tma[];  // (the swizzle's 1024-byte base)
  kvc_split_cta<Tr, TmaKvRing<Tr>>(p, smem_tma, typename TmaKvRing<Tr>::Maps{&tm_k, &tm_v, box_rows});
}

// Row FC_SM90(kvc, dtype, T, head dim, 16, block_n, stages, 0) of instances.inc: 4 warps,
// registers budgeted for kvc_sm80's CTAs per SM at the head dim (4 at hd64, else 3).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant>
cudaError_t launch_kvc_sm90(const FwdParams& p, cudaStream_t stream) {
  static_assert(kBlockM == 16 && kVariant == 0, "the key-split form: 16 rows");
  constexpr int kMinBlocks = kHeadDim <= 64 ? 4 : 3;
  using Tr = KvcSplitTraits<T, T, kHeadDim, kBlockN, 4, kStages, kMinBlocks>;
  constexpr int kSmem = Tr::kSmem + 8 * kStages;
  static_assert(kSmem == kvc_tma_smem(kHeadDim, kBlockM, kBlockN, kStages), "the registry's size of the row");
  static_assert(Tr::kOffK % 1024 == 0 && Tr::kTileKV % 1024 == 0, "TMA's 128-byte swizzle: 1024-byte aligned tiles");
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if (p.block_table == nullptr || p.page_size < 8 || (p.page_size % kBlockN != 0 && kBlockN % p.page_size != 0))
    return cudaErrorInvalidValue;
  if (p.kv_splits < 1 || (p.kv_splits > 1 && (p.part_o == nullptr || p.part_ml == nullptr)))
    return cudaErrorInvalidValue;
  // Box rows: the page's, up to 64 at hd64 and up to 16 at wider rows (two or more 128-byte
  // groups), the fastest of 64 / 32 / 16 / 8 on an H200 at pages 16 and 64
  // (docs/results/cuda-kvcache-tma-2026-12-02.md, "Box heights 8 and 32").
  const int box = std::min(p.page_size, kHeadDim <= 64 ? kBlockN : 16);
  // [num_pages][page_size][Hkv][D] in the caller's strides (NHD or HND alike).
  CUtensorMap tk, tv;
  cudaError_t e =
      make_tma_16bit_4d(&tk, bf16, p.k, p.d, p.page_size, p.kv_heads, p.num_pages, p.k_ss, p.k_sh, p.k_sb, box);
  if (e == cudaSuccess)
    e = make_tma_16bit_4d(&tv, bf16, p.v, p.dv, p.page_size, p.kv_heads, p.num_pages, p.v_ss, p.v_sh, p.v_sb, box);
  if (e != cudaSuccess) return e;
  auto kernel = kvc_sm90_kernel<T, kHeadDim, kBlockN, kStages, kMinBlocks>;
  static std::atomic<uint64_t> smem_done{0};
  e = opt_in_smem_once(kernel, kSmem, smem_done);
  if (e != cudaSuccess) return e;
  const int nrows = p.sq << p.pack_shift;
  const dim3 grid(unsigned((nrows + kBlockM - 1) / kBlockM * p.kv_splits), unsigned(p.heads >> p.pack_shift),
                  unsigned(p.batch));
  kernel<<<grid, Tr::kThreads, kSmem, stream>>>(tk, tv, p, box);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
