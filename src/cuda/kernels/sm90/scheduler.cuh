// Tile schedulers of the sm90 kernels: which work items a CTA takes, in which order, and
// which of an item's key tiles it visits. A work item is kBlockM (packed) query rows of one
// (sequence, item head); with GQA packing (p.pack_shift = log2 G > 0) the rows are packed
// (query, head) pairs of the G query heads of one KV head, and the item head is the KV head.
// Varlen batches: an item's sequence geometry comes from the prefix sums (seq_info), and a
// query block past its sequence's end is skipped by every role alike (past_end).
//
// SingleItemScheduler: one CTA per item (grid: query blocks x KV splits, item heads, batch),
// heavy (late, causal) query blocks launched first; with KV splits (p.kv_splits > 1) CTA x
// takes split x % ns of query block x / ns, that split's run of the item's key tiles.
// PersistentScheduler: as many CTAs as fit on the SMs at once, each walking a static list of
// work items: in round r, CTA c takes item w = r G + c for even r and r G + G - 1 - c for odd
// r (G = gridDim.x; a snake order), until w >= items. Item w is (query block, head, batch) as
// p.order numbers them (params.hpp ItemOrder; the launcher's choice, item_order.hpp): one
// head's query blocks after another, the heaviest (latest, causal) first, so the CTAs at work
// at one time share a few heads' K and V in L2 and the snake pairs a CTA's heavy item of one
// round with a light one in the next; or, under a band mask where that order would load some
// CTAs with heavy items round after round, every head's last block first, then every head's
// next one. Producer and consumers compute the same list, so nothing is handed over between
// them. (A dynamic scheduler with an atomic counter, whose item handoff through shared memory
// racecheck could not follow, was measured and not kept: docs/results/cuda-sm90-2026-11-22.md.)
// The launcher keeps items + G below 2^31.
//
// Both: the roles walk rounds r = 0, 1, .. while round_item(p, r, item) is true, as a plain loop
// in the kernel (with the item loop in a lambda, ptxas built the wgmma descriptors per thread
// in the main loop: +11 % instructions, 3-4 % slower).
#pragma once

#include "cuda/kernels/params.hpp"
#include "cuda/parts/seq_mask.cuh"

namespace flashcore::cuda::sm90 {

struct WorkItem {
  int m0;  // first (packed) query row of the block
  int h;   // item head: the query head, or (packed) the KV head
  int b;   // sequence (batch entry)
};

// What both schedulers share: the packing, and an item's key tiles.
template <int kBlockM, int kBlockN>
struct ItemGeometry {
  int shift;  // GQA packing: log2 G, or 0
  __device__ __forceinline__ explicit ItemGeometry(const FwdParams& p) : shift(p.pack_shift) {}
  // Varlen: a query block past its sequence's end (packed rows: Sq G per sequence).
  __device__ __forceinline__ bool past_end(const WorkItem& w, const SeqInfo& seq) const {
    return w.m0 >= seq.sq << shift;
  }
  // The item's KV head.
  __device__ __forceinline__ int kv_head(const FwdParams& p, const WorkItem& w) const {
    return shift > 0 ? w.h : w.h / p.group;
  }
  // The key tiles an item's rows see: its band of the sequence's keys.
  __device__ __forceinline__ TileRange key_tiles(const FwdParams& p, const WorkItem& w, const SeqInfo& seq) const {
    return tile_range(band_mask(p, seq), w.m0 >> shift, (min(w.m0 + kBlockM, seq.sq << shift) - 1) >> shift, seq.sk,
                      kBlockN);
  }
};

// The order in which an item's key tiles are visited, shared by the producer's loads and the
// consumers' steps: the loops run k over [lo, hi) and visit tile(k), which is k itself (the
// plain kernels' loops are the key-order loops they were), except with ALiBi in the variants' kernels
// (Tr::kScoreMod, p.alibi set): from `first`, the tile of the block's first diagonal key
// (clamped to [lo, hi)), up to hi - 1, then down from first - 1 to lo. ALiBi lowers each score
// by its key's distance from the row's diagonal, so in this order a row's max comes with the
// first tile or the next and seldom moves past the softmax's slack after; in key order it
// moved on most tiles before the diagonal (a rescale of O and the speculative step lost each
// time; docs/results/cuda-variants-2026-12-01.md).
template <class Tr>
struct KeyWalk {
  int lo, hi, first;
  __device__ __forceinline__ KeyWalk(const FwdParams& p, const TileRange& r, int m0, const SeqInfo& seq)
      : lo(r.lo), hi(r.hi), first(r.lo) {
    if constexpr (Tr::kScoreMod) {
      const int d = m0 + seq.sk - seq.sq;  // the block's first row's diagonal key
      if (p.alibi != nullptr && d > 0 && r.hi > r.lo) first = max(r.lo, min(r.hi - 1, d / Tr::kBlockN));
    }
  }
  // The tile of visit k - lo, k in [lo, hi).
  __device__ __forceinline__ int tile(int k) const {
    if constexpr (Tr::kScoreMod) {
      const int j = k - lo;
      return j < hi - first ? first + j : hi - 1 - j;
    } else {
      return k;
    }
  }
};

template <int kBlockM, int kBlockN>
struct SingleItemScheduler : ItemGeometry<kBlockM, kBlockN> {
  static constexpr bool kSplits = true;
  int ns, split_j;  // KV splits per item, this CTA's split
  WorkItem own;     // the CTA's one item
  __device__ __forceinline__ explicit SingleItemScheduler(const FwdParams& p)
      : ItemGeometry<kBlockM, kBlockN>(p), ns(p.kv_splits), split_j(int(blockIdx.x) % p.kv_splits) {
    own = WorkItem{(int(gridDim.x) / ns - 1 - int(blockIdx.x) / ns) * kBlockM, int(blockIdx.y), int(blockIdx.z)};
  }
  // With splits, kv_combine.cu's launch (a programmatic dependent) may begin at once: it
  // waits for this grid's completion and memory (griddepcontrol.wait) before it reads.
  __device__ __forceinline__ void allow_dependents() const {
    if (ns > 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  __device__ __forceinline__ bool round_item(const FwdParams&, int r, WorkItem& w) const {
    w = own;
    return r == 0;
  }
  // The split's run of an item's key tiles.
  __device__ __forceinline__ TileRange kv_run(TileRange r) const {
    if (ns > 1) {
      const int per = (r.hi - r.lo + ns - 1) / ns, lo = min(r.hi, r.lo + split_j * per);
      r.hi = min(r.hi, lo + per);
      r.lo = lo;
    }
    return r;
  }
  __device__ __forceinline__ TileRange item_tiles(const FwdParams& p, const WorkItem& w, const SeqInfo& seq) const {
    return kv_run(this->key_tiles(p, w, seq));
  }
};

template <int kBlockM, int kBlockN>
struct PersistentScheduler : ItemGeometry<kBlockM, kBlockN> {
  static constexpr bool kSplits = false;
  static constexpr int ns = 1, split_j = 0;
  int n_mb, item_heads, items;  // query blocks per head, item heads, items
  __device__ __forceinline__ explicit PersistentScheduler(const FwdParams& p) : ItemGeometry<kBlockM, kBlockN>(p) {
    item_heads = p.heads >> this->shift;
    n_mb = ((p.sq << this->shift) + kBlockM - 1) / kBlockM;
    items = n_mb * item_heads * p.batch;
  }
  __device__ __forceinline__ void allow_dependents() const {}
  __device__ __forceinline__ WorkItem item(const FwdParams& p, int w) const {
    int blk, hb;
    p.order.decode(w, n_mb, blk, hb);
    const int b = p.div_heads(hb);
    return WorkItem{(n_mb - 1 - blk) * kBlockM, hb - b * item_heads, b};
  }
  __device__ __forceinline__ bool round_item(const FwdParams& p, int r, WorkItem& wi) const {
    const int g = int(gridDim.x), c = int(blockIdx.x), w = r * g + ((r & 1) ? g - 1 - c : c);
    if (w >= items) return false;
    wi = item(p, w);
    return true;
  }
  __device__ __forceinline__ TileRange item_tiles(const FwdParams& p, const WorkItem& w, const SeqInfo& seq) const {
    return this->key_tiles(p, w, seq);
  }
};

}  // namespace flashcore::cuda::sm90
