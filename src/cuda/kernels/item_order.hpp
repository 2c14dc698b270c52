// Host side of the sm90 persistent kernels' schedule: which ItemOrder (params.hpp) a launch
// takes. The CTAs walk a static list (sm90/scheduler.cuh: in round r, CTA c takes item r G + c,
// or r G + G - 1 - c for odd r), so the numbering decides each CTA's share of the work.
// One head's query blocks after another (group 1) keeps the CTAs at work at one time on a
// few heads' K and V (L2), and with equal items, or with many rounds per head's blocks, it
// is balanced. Under a band mask (causal, windows) an item costs its key tiles, and where a
// head's blocks number about as many as the CTAs, the rounds line up: some CTAs take heavy
// blocks round after round (H200, f16 hd256 B2 H8 S8192 causal: 513 TFLOP/s against 631
// with every head's last block first). So the launch simulates two numberings (group 1
// and the widest group below) with each item's cost its key tiles plus one for its set-up,
// and keeps group 1 unless its slowest CTA is 3 % or more further from the mean than the
// other's (docs/results/cuda-sm90-2026-11-22.md, 2026-11-26, d28ba79).
// The widest group is B Hi, or the largest divisor of it whose heads' K and V are read
// again soon enough to still be in L2: a group's query blocks of one level run one after
// another, so a head's next block comes `group` items later; within the same round where
// group <= CTAs, else after the group's K and V went through L2, which must hold them
// (group * K and V bytes <= L2 / 2). Without the bound (d28ba79's rule) the short
// causal rows with many heads read K and V from memory at every level (H100, f16 hd64
// B32 H32 S512 causal: 248 us against 135 with group 1; 2026-11-27, ff9fac4).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/variants/mask.hpp"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {

// Mean CTA load over the slowest CTA's (1: even) for ItemOrder(group, n_mb), item costs
// cost[blk] (blk: the block index counted from the last), hbs head-batches, ctas CTAs.
inline double item_balance(const std::vector<int64_t>& cost, int hbs, int group, int ctas) {
  const int n_mb = int(cost.size()), items = n_mb * hbs;
  const ItemOrder order(group, n_mb);
  std::vector<int64_t> load(size_t(ctas), 0);
  int64_t total = 0;
  for (int r = 0; int64_t(r) * ctas < items; ++r)
    for (int c = 0; c < ctas; ++c) {
      const int w = r * ctas + ((r & 1) ? ctas - 1 - c : c);
      if (w >= items) continue;
      int blk, hb;
      order.decode(w, n_mb, blk, hb);
      load[size_t(c)] += cost[size_t(blk)];
      total += cost[size_t(blk)];
    }
  const int64_t worst = *std::max_element(load.begin(), load.end());
  return worst > 0 ? double(total) / ctas / double(worst) : 1.0;
}

// FLASHCORE_SM90_ITEM_GROUP=<g> (tests, experiments): the group forced, rounded down to a
// divisor of the head-batches; unset or 0: the rule below.
inline int forced_item_group() {
  const char* v = std::getenv("FLASHCORE_SM90_ITEM_GROUP");
  return v != nullptr ? std::max(0, std::atoi(v)) : 0;
}

// The largest divisor of hbs that is <= limit (>= 1).
inline int divisor_at_most(int hbs, int64_t limit) {
  int g = int(std::min<int64_t>(std::max(limit, int64_t(1)), std::max(hbs, 1)));
  while (hbs % g != 0) --g;
  return g;
}

// The widest group whose K and V stay in L2 between a head's blocks (above): kv_bytes of
// K and V per head-batch, l2_bytes of L2 (0: unknown, then groups up to the CTAs only).
inline int widest_item_group(int hbs, int ctas, int64_t kv_bytes, int64_t l2_bytes) {
  const int64_t by_l2 = kv_bytes > 0 && l2_bytes > 0 ? l2_bytes / 2 / kv_bytes : 0;
  return divisor_at_most(hbs, std::max<int64_t>(ctas, by_l2));
}

// The group for a persistent launch: rows (query rows, packed: Sq << shift) in blocks of
// block_m, keys in tiles of block_n, hbs head-batches, ctas CTAs, kv_bytes and l2_bytes as
// for widest_item_group, forced (> 0: that group, rounded down to a divisor of hbs). Up to
// 2^16 items (the simulation's bound; more make many rounds per head's blocks, which
// balance); the last answer is kept per thread.
inline int persistent_item_group(const core::BandMask& m, int sq, int sk, int shift, int block_m, int block_n,
                                 int hbs, int ctas, int64_t kv_bytes, int64_t l2_bytes, int forced = 0) {
  if (forced > 0) return divisor_at_most(hbs, forced);
  const int64_t rows = int64_t(sq) << shift, n_mb = (rows + block_m - 1) / block_m, items = n_mb * hbs;
  const int wide = widest_item_group(hbs, ctas, kv_bytes, l2_bytes);
  if (m.none() || wide <= 1 || items <= ctas || items > (int64_t(1) << 16)) return 1;
  struct Key {
    int64_t left, right, offset;
    int sq, sk, shift, block_m, block_n, hbs, ctas, wide;
    bool operator==(const Key& o) const {
      return left == o.left && right == o.right && offset == o.offset && sq == o.sq && sk == o.sk &&
             shift == o.shift && block_m == o.block_m && block_n == o.block_n && hbs == o.hbs && ctas == o.ctas &&
             wide == o.wide;
    }
  };
  thread_local Key last{};
  thread_local int last_group = 0;
  const Key key{m.left, m.right, m.offset, sq, sk, shift, block_m, block_n, hbs, ctas, wide};
  if (last_group > 0 && key == last) return last_group;
  std::vector<int64_t> cost(static_cast<size_t>(n_mb));
  for (int64_t blk = 0; blk < n_mb; ++blk) {  // the kernel's key tiles of the block (sm90/scheduler.cuh: key_tiles)
    const int64_t m0 = (n_mb - 1 - blk) * block_m, m1 = std::min(m0 + block_m, rows) - 1;
    const TileRange r = tile_range(m, int(m0 >> shift), int(m1 >> shift), sk, block_n);
    cost[size_t(blk)] = 1 + (r.hi - r.lo);
  }
  const int group = item_balance(cost, hbs, 1, ctas) >= item_balance(cost, hbs, wide, ctas) - 0.03 ? 1 : wide;
  last = key;
  last_group = group;
  return group;
}

}  // namespace flashcore::cuda
