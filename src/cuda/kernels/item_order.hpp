// Host side of the sm90 persistent kernels' schedule: which ItemOrder (params.hpp) a launch
// takes. The CTAs walk a static list (fwd_sm90.cuh: in round r, CTA c takes item r G + c,
// or r G + G - 1 - c for odd r), so the numbering decides each CTA's share of the work.
// One head's query blocks after another (group 1) keeps the CTAs at work at one time on a
// few heads' K and V (L2), and with equal items, or with many rounds per head's blocks, it
// is balanced. Under a band mask (causal, windows) an item costs its key tiles, and where a
// head's blocks number about as many as the CTAs, the rounds line up: some CTAs take heavy
// blocks round after round (H200, f16 hd256 B2 H8 S8192 causal: 513 TFLOP/s against 631
// with every head's last block first). So the launch simulates both numberings (group 1
// and group B Hi) with each item's cost its key tiles plus one for its set-up, and keeps
// group 1 unless its slowest CTA is 3 % or more further from the mean than group B Hi's
// (docs/results/cuda-sm90-2026-11-22.md, session 25).
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

// The group for a persistent launch: rows (query rows, packed: Sq << shift) in blocks of
// block_m, keys in tiles of block_n, hbs head-batches, ctas CTAs, forced (> 0: that group,
// rounded down to a divisor of hbs). Up to 2^16 items (the simulation's bound; more make
// many rounds per head's blocks, which balance); the last answer is kept per thread.
inline int persistent_item_group(const core::BandMask& m, int sq, int sk, int shift, int block_m, int block_n,
                                 int hbs, int ctas, int forced = 0) {
  if (forced > 0) {
    int g = std::min(forced, std::max(hbs, 1));
    while (hbs % g != 0) --g;
    return g;
  }
  const int64_t rows = int64_t(sq) << shift, n_mb = (rows + block_m - 1) / block_m, items = n_mb * hbs;
  if (m.none() || hbs <= 1 || items <= ctas || items > (int64_t(1) << 16)) return 1;
  struct Key {
    int64_t left, right, offset;
    int sq, sk, shift, block_m, block_n, hbs, ctas;
    bool operator==(const Key& o) const {
      return left == o.left && right == o.right && offset == o.offset && sq == o.sq && sk == o.sk &&
             shift == o.shift && block_m == o.block_m && block_n == o.block_n && hbs == o.hbs && ctas == o.ctas;
    }
  };
  thread_local Key last{};
  thread_local int last_group = 0;
  const Key key{m.left, m.right, m.offset, sq, sk, shift, block_m, block_n, hbs, ctas};
  if (last_group > 0 && key == last) return last_group;
  std::vector<int64_t> cost(static_cast<size_t>(n_mb));
  for (int64_t blk = 0; blk < n_mb; ++blk) {
    const int64_t m0 = (n_mb - 1 - blk) * block_m, m1 = std::min(m0 + block_m, rows) - 1;
    const int64_t kb = m.key_begin(m0 >> shift, sk), ke = m.key_end(m1 >> shift, sk);
    cost[size_t(blk)] = 1 + (ke > kb ? (ke + block_n - 1) / block_n - kb / block_n : 0);
  }
  const int group = item_balance(cost, hbs, 1, ctas) >= item_balance(cost, hbs, hbs, ctas) - 0.03 ? 1 : hbs;
  last = key;
  last_group = group;
  return group;
}

}  // namespace flashcore::cuda
