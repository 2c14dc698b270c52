// The CUDA backend's kernel-choice policy (policy.hpp). Each threshold's measurements are in
// docs/results/cuda-policy-2026-11-29.md, under the name of its constant.
#include "cuda/policy.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

namespace flashcore::cuda {

std::string sm90_refusal(const core::AttentionProblem& p, const InstanceInfo& i, const DeviceFacts& dev) {
  if (!dev.hopper()) return "needs a compute capability 9.0 (Hopper) device";
  if (p.dtype != i.dtype) return "is not a " + std::string(to_string(p.dtype)) + " kernel";
  if (p.variants() && !i.score_mod)
    return std::string("does not take the score variants (") +
           (p.softcap > 0.0f ? "params.softcap" : p.alibi != nullptr ? "params.alibi_slopes" : "params.sinks") +
           "): the '_sv' and sm80 kernels do";
  if (i.dtype == DType::e4m3 && (p.d != i.head_dim || p.dv != i.head_dim))
    return "needs D == Dv == " + std::to_string(i.head_dim) + " (D = " + std::to_string(p.d) +
           ", Dv = " + std::to_string(p.dv) + ")";
  if (p.d > i.head_dim || p.dv > i.head_dim)
    return "needs D, Dv <= " + std::to_string(i.head_dim) + " (D = " + std::to_string(p.d) +
           ", Dv = " + std::to_string(p.dv) + ")";
  if (i.smem() > dev.smem_optin) return "needs more shared memory than this device has";
  if (i.persistent && i.items(p.sq, p.heads, p.batch) > INT32_MAX - 2 * int64_t(dev.sms))
    return "numbers its work items (query blocks x heads x batch) in 32 bits";
  return {};
}

const InstanceInfo* persistent_variant(InstanceList list, const InstanceInfo& t) {
  for (const InstanceInfo& i : list)
    if (i.arch == 90 && i.persistent && i.score_mod == t.score_mod && i.dtype == t.dtype && i.head_dim == t.head_dim &&
        i.block_m == t.block_m && i.block_n == t.block_n && i.stages == t.stages)
      return &i;
  return nullptr;
}

// The G = H / Hkv query heads of a KV head share an item's rows when the queries are few
// (below 64, a tile of one head's rows would be mostly empty, and each head would read the
// KV head's K and V again). Fixed-length batches with a TMA-mappable O store the packed
// rows by TMA, varlen batches and other outputs from registers.
int gqa_pack_shift(const core::AttentionProblem& p, int64_t sq) {
  const int64_t g = p.group();
  if (sq >= 64 || g < 2 || g > 64 || (g & (g - 1)) != 0) return 0;
  if (p.dtype == DType::f32) return 0;
  int shift = 0;
  while ((int64_t(1) << shift) < g) ++shift;
  return shift;
}

bool kv_splittable(const InstanceInfo& i) { return i.arch == 90 && !i.persistent; }

// KV splits (flash-decoding) where the items (query blocks x heads (KV heads when packed) x
// batch) leave most SMs idle: ns = min(CTAs / items, key tiles / 4, 16) CTAs share an item's
// key tiles (CTAs: the SMs, twice that for full 64-row tiles of unpacked rows, two of which
// share an SM), and kv_combine.cu merges them; taken when ns >= 4 with at least 16 key
// tiles, or ns >= 2 with at least 64 (kv_split_count in the results file).
int kv_split_count(const core::AttentionProblem& p, int64_t sq, int64_t sk, const InstanceInfo& i, int pack_shift,
                   const DeviceFacts& dev) {
  if (!kv_splittable(i)) return 1;
  const int64_t rows = sq << pack_shift;
  const int64_t items = i.items(rows, p.heads >> pack_shift, p.batch);
  const int64_t tiles = (sk + i.block_n - 1) / i.block_n;
  if (items < 1) return 1;
  const int64_t ctas = int64_t(dev.sms) * (rows >= 64 && pack_shift == 0 ? i.ctas_per_sm() : 1);
  const int64_t ns = std::min<int64_t>({ctas / items, tiles / 4, 16});
  return (ns >= 4 && tiles >= 16) || (ns >= 2 && tiles >= 64) ? int(ns) : 1;
}

// The 16-bit sm90 rule, over the score variants' rows for a call with a variant set (no GQA
// packing there: pack_shift 0) and over the plain rows otherwise:
// - a 64-row tile where each query block sees few keys (hd64: Sk < kShortSk64, twice that
//   under a band mask; hd128 and up: a local window with Sk < kShortSk), where the packed
//   rows of a head fit one tile, or where the taller tiles would leave SMs idle; with more
//   than two 64-row items per SM, the 64-row tile that runs three CTAs per SM;
// - otherwise the first row of at least 128 rows whose grid covers the SMs, skipping rows
//   taller than 128 under a band mask with Sk < kBandedTallMinSk;
// - the chosen tile's persistent variant ("_p") where there are more items than CTAs
//   resident at once and Sk is at most kPersistentMaxSk (per tile kind and mask, below).
const InstanceInfo* pick_sm90(const core::AttentionProblem& p, const DeviceFacts& dev, int pack_shift,
                              InstanceList list) {
  if (p.tile_m != 0) return nullptr;
  // The rows of the smallest head dim that covers D and Dv (TMA zero-fills the columns past
  // them; the epilogue writes Dv columns): the score variants' rows ("_sv", "_p_sv") for a
  // call with a variant, else the others; the same rule picks among either set.
  const bool sv = p.variants();
  int hd = INT_MAX;
  for (const InstanceInfo& i : list)
    if (i.arch == 90 && i.score_mod == sv && i.dtype == p.dtype && i.head_dim >= std::max(p.d, p.dv))
      hd = std::min(hd, i.head_dim);
  if (hd == INT_MAX) return nullptr;
  constexpr int64_t kShortSk = 1024, kShortSk64 = 8192, kBandedTallMinSk = 4096, kPersistentMaxSk = 16384,
                    kPersistentMaxSkBanded = 8192, kPersistentMaxSk3 = 1024, kPersistentMaxSk256 = 2048;
  const bool banded = p.banded(), windowed = p.windowed();
  // Varlen: the mean lengths (p.sq and p.sk are the packed tensors' totals there).
  const int64_t nb = p.cu_q != nullptr ? std::max<int64_t>(p.batch, 1) : 1;
  const int64_t sq = p.sq / nb << pack_shift, sk = p.sk / nb;
  const int64_t heads = p.heads >> pack_shift;
  const InstanceInfo *tall = nullptr, *rows64 = nullptr, *first_tall = nullptr;
  const int64_t items64 = (sq + 63) / 64 * heads * p.batch;
  for (const InstanceInfo& i : list)
    // Rows of other dtypes and head dims are passed over before sm90_refusal, which
    // builds its message: this runs on every call and walks the whole table.
    if (i.arch == 90 && !i.persistent && i.score_mod == sv && i.dtype == p.dtype && i.head_dim == hd &&
        sm90_refusal(p, i, dev).empty()) {
      if (i.block_m == 64) {
        if (rows64 == nullptr || (i.ctas_per_sm() > rows64->ctas_per_sm() && items64 > 2 * int64_t(dev.sms)))
          rows64 = &i;
        continue;
      }
      if (first_tall == nullptr) first_tall = &i;
      if (tall != nullptr || (i.block_m > 128 && banded && sk < kBandedTallMinSk)) continue;
      if (i.items(sq, heads, p.batch) >= dev.sms) tall = &i;
    }
  // (the rules read the kernels' head dim: a kernel's work follows it, not the real D)
  const bool few_keys = hd <= 64 ? sk < (banded ? 2 * kShortSk64 : kShortSk64) : windowed && sk < kShortSk;
  const bool few_rows = pack_shift > 0 && sq <= 64;
  const InstanceInfo* pick = rows64 != nullptr && (few_keys || few_rows || tall == nullptr) ? rows64 : tall;
  // A grid too small for the tall rows goes to the sm80 family, but not with a score variant:
  // the sm80 variant kernels are the slower ones (docs/results/cuda-variants-2026-11-29.md).
  if (pick == nullptr && sv) pick = first_tall;
  const auto resident = [&](const InstanceInfo* i) { return int64_t(dev.sms) * i->ctas_per_sm(); };
  const int64_t persistent_max_sk = pick == nullptr          ? 0
                                    : pick->ctas_per_sm() > 2 ? kPersistentMaxSk3
                                    : banded                  ? kPersistentMaxSkBanded
                                    : hd > 128                ? kPersistentMaxSk256
                                                              : kPersistentMaxSk;
  if (pick != nullptr && sk <= persistent_max_sk && pick->items(sq, heads, p.batch) > resident(pick))
    if (const InstanceInfo* v = persistent_variant(list, *pick); v != nullptr && sm90_refusal(p, *v, dev).empty())
      return v;
  return pick;
}

// The sm80 rule: the first row (table order) for the smallest covering head dim that fits
// the device, or the first fitting row with a smaller block_m when the first leaves SMs idle
// or when, at hd <= 128, a band mask meets Sk < kBandedLongSk (the work on the diagonal
// tiles makes the 64-row tiles faster there; at hd256 the 64-row tile is slower anyway).
Sm80Pick pick_sm80(const core::AttentionProblem& p, int hd, int64_t sq, int64_t sk, const DeviceFacts& dev,
                   InstanceList list) {
  const bool may_fall_back = p.dtype == DType::f32 && p.tile_m == 0;
  int best_hd = INT_MAX;
  for (const InstanceInfo& i : list)
    if (i.arch == 80 && i.dtype == p.dtype && i.head_dim >= hd && i.head_dim < best_hd) best_hd = i.head_dim;
  if (best_hd == INT_MAX) return {nullptr, may_fall_back ? Sm80Pick::Why::ok : Sm80Pick::Why::no_head_dim, hd};
  constexpr int64_t kBandedLongSk = 12288;
  const bool banded = p.banded() && best_hd <= 128;
  const InstanceInfo* first = nullptr;
  for (const InstanceInfo& i : list) {
    if (i.arch != 80 || i.dtype != p.dtype || i.head_dim != best_hd) continue;
    if (p.tile_m != 0 && (i.block_m != p.tile_m || i.block_n != p.tile_n)) continue;
    if (i.smem() > dev.smem_optin) continue;
    if (first == nullptr) {
      first = &i;
      const bool few_ctas = i.items(sq, p.heads, p.batch) < dev.sms;
      if (p.tile_m != 0 || (!few_ctas && !(banded && sk < kBandedLongSk))) return {first, Sm80Pick::Why::ok, best_hd};
    } else if (i.block_m < first->block_m) {
      return {&i, Sm80Pick::Why::ok, best_hd};  // smaller query blocks: more SMs at work, less diagonal waste
    }
  }
  if (first != nullptr || may_fall_back) return {first, Sm80Pick::Why::ok, best_hd};
  return {nullptr, p.tile_m != 0 ? Sm80Pick::Why::no_tile : Sm80Pick::Why::no_fit, best_hd};
}

// The e4m3 rule, with lo = kFp8Lo and hi = kFp8Hi keys (doubled under a band mask):
// - the 64x128 tile (two CTAs per SM) where a head's (GQA-packed) rows fit one 64-row tile
//   (its "_vt" row where there is one: V^T made in the kernel, no pre-pass reading and
//   writing V once more), or where Sk < hi and the 128-row items leave SMs idle;
// - else the 128-row tile: the first (hd128: 192 keys) from hi / 4 keys on (banded: hi / 2),
//   else the first with 128 keys; its persistent variant ("_p") where Sk <= lo and its items
//   outnumber the SMs. The 64x192 row is taken by forced keys only.
const InstanceInfo* pick_fp8(const core::AttentionProblem& p, int64_t sq, int64_t sk_mean, int pack_shift,
                             const DeviceFacts& dev, InstanceList list) {
  constexpr int64_t kFp8Lo = 4096, kFp8Hi = 8192;
  const bool banded = p.banded();
  const int64_t lo = banded ? 2 * kFp8Lo : kFp8Lo, hi = banded ? 2 * kFp8Hi : kFp8Hi;
  const int64_t wide = banded ? hi / 2 : hi / 4;  // keys from which the 192-key tile (hd128) is taken
  auto takes = [&](const InstanceInfo& i) {
    return i.arch == 90 && i.dtype == DType::e4m3 && p.d == i.head_dim && p.dv == i.head_dim &&
           i.smem() <= dev.smem_optin;
  };
  const bool one_tile = sq << pack_shift <= 64;
  const int64_t rows = sq << pack_shift, item_heads = p.heads >> pack_shift;
  const InstanceInfo *tile64 = nullptr, *tile64_vt = nullptr, *tall = nullptr, *fallback = nullptr;
  for (const InstanceInfo& i : list) {
    if (!takes(i) || i.persistent) continue;  // persistent rows: below, as the taller row's variant
    if (i.block_m == 64) {
      const InstanceInfo*& slot = i.vt_in ? tile64_vt : tile64;
      if (slot == nullptr && i.block_n == 128) slot = &i;
      continue;
    }
    fallback = &i;
    if (tall == nullptr && (sk_mean >= wide || i.block_n == 128)) tall = &i;
  }
  const InstanceInfo* inst = nullptr;
  const bool idle = tall == nullptr || tall->items(rows, item_heads, p.batch) <= dev.sms;
  if (tile64 != nullptr && (one_tile || (sk_mean < hi && idle))) inst = one_tile && tile64_vt != nullptr ? tile64_vt : tile64;
  if (inst == nullptr && !one_tile && !idle && sk_mean <= lo)
    if (const InstanceInfo* v = persistent_variant(list, *tall); v != nullptr && takes(*v)) inst = v;
  if (inst == nullptr) inst = tall != nullptr ? tall : fallback != nullptr ? fallback : tile64;
  return inst;
}

VtPath vt_path(const InstanceInfo& inst, bool varlen, bool force_prepass) {
  if (inst.dtype != DType::e4m3) return VtPath::none;
  if (inst.vt_in) return VtPath::in_kernel;
  return inst.vt_fused && !varlen && !force_prepass ? VtPath::fused : VtPath::prepass;
}

KernelChoice complete_choice(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                             const InstanceInfo* inst, int kv_splits) {
  KernelChoice c;
  c.inst = inst;
  // (no packing for the score variants or on their "_sv" rows: slopes and sinks are per query head)
  c.pack_shift = inst != nullptr && inst->arch == 90 && !inst->score_mod && !p.variants() ? gqa_pack_shift(p, sq) : 0;
  if (inst != nullptr && kv_splits == 0) kv_splits = kv_split_count(p, sq, sk, *inst, c.pack_shift, dev);
  c.kv_splits = std::max(kv_splits, 1);
  return c;
}

Choice16 choose_kernel(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                       InstanceList list) {
  Choice16 c;
  const int pack_shift = p.variants() ? 0 : gqa_pack_shift(p, sq);
  const InstanceInfo* inst = p.dtype == DType::f32 ? nullptr : pick_sm90(p, dev, pack_shift, list);
  if (inst == nullptr) {
    const int64_t nb = std::max<int64_t>(p.batch, 1);  // varlen: mean lengths
    const bool varlen = p.cu_q != nullptr;
    c.sm80 = pick_sm80(p, int(std::max(p.d, p.dv)), varlen ? p.sq / nb : p.sq, varlen ? p.sk / nb : p.sk, dev, list);
    inst = c.sm80.inst;
  }
  c.kernel = complete_choice(p, sq, sk, dev, inst, 0);
  return c;
}

KernelChoice choose_kernel_fp8(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                               InstanceList list) {
  // The tile choice reads the mean key length (varlen: p.sk is the packed total).
  const int64_t sk_mean = p.cu_q != nullptr ? p.sk / std::max<int64_t>(p.batch, 1) : p.sk;
  const InstanceInfo* inst = pick_fp8(p, sq, sk_mean, gqa_pack_shift(p, sq), dev, list);
  return complete_choice(p, sq, sk, dev, inst, 0);
}

std::pair<int64_t, int64_t> padded_head_dims(const core::AttentionProblem& p) {
  return {(p.d + 7) / 8 * 8, (p.dv + 7) / 8 * 8};
}

int64_t copy_width(const InstanceInfo& i, int64_t padded) {
  return i.arch == 90 && i.head_dim % 64 == 0 && i.head_dim >= padded ? i.head_dim : padded;
}

KernelChoice choose_in_place(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                             InstanceList list) {
  const KernelChoice c = choose_kernel(p, sq, sk, dev, list).kernel;
  if (c.inst != nullptr && c.inst->arch == 90) return c;
  core::AttentionProblem w = p;
  for (int64_t hd = std::max(p.d, p.dv);;) {
    int64_t next = INT64_MAX;  // the next wider sm90 head dim of the list
    for (const InstanceInfo& i : list)
      if (i.arch == 90 && i.dtype == p.dtype && i.head_dim > hd) next = std::min<int64_t>(next, i.head_dim);
    if (next == INT64_MAX) return {};
    w.d = w.dv = hd = next;
    const KernelChoice k = choose_kernel(w, sq, sk, dev, list).kernel;
    if (k.inst != nullptr && k.inst->arch == 90) return k;
  }
}

bool heads_in_place(const KernelChoice& in_place, const KernelChoice& padded, int64_t sk, bool banded) {
  if (in_place.inst == nullptr || in_place.inst->arch != 90) return false;
  if (padded.inst == nullptr) return true;
  if (padded.kv_splits > 1) return false;
  return sk <= (in_place.inst->head_dim > padded.inst->head_dim ? 1024 : banded ? 8192 : 4096);
}

const InstanceInfo* pick_kvcache(DType dtype, int64_t hd, int64_t rows, const DeviceFacts& dev, InstanceList list,
                                 bool kv_fp8, int64_t page_size) {
  const auto fits = [&](const InstanceInfo& i) { return i.dtype == dtype && i.kv_fp8 == kv_fp8 && i.runs_on(dev); };
  int best_hd = INT_MAX;
  for (const InstanceInfo& i : list)
    if (fits(i) && !i.kv_tma && i.head_dim >= hd) best_hd = std::min(best_hd, i.head_dim);
  const auto boxes_read = [&](const InstanceInfo& i) {
    return page_size > 0 && (page_size % i.block_n == 0 || i.block_n % page_size == 0);
  };
  for (const InstanceInfo& i : list)
    if (fits(i) && i.kv_tma && i.head_dim == best_hd && rows <= i.block_m && boxes_read(i)) return &i;
  const InstanceInfo* other = nullptr;
  for (const InstanceInfo& i : list)
    if (fits(i) && !i.kv_tma && i.head_dim == best_hd) {
      const bool split = i.block_m < 16 * i.warps;
      if (split && (kv_fp8 || rows <= i.block_m)) return &i;
      if (!split && other == nullptr) other = &i;
    }
  return other;
}

int kvcache_split_count(int64_t sq, int64_t heads, int64_t batch, int64_t cache_rows, const InstanceInfo& i,
                        const DeviceFacts& dev) {
  const int64_t items = i.items(sq, heads, batch);
  if (items < 1) return 1;
  const int64_t tiles = (cache_rows + i.block_n - 1) / i.block_n;
  const int64_t ns = std::min<int64_t>({2 * int64_t(dev.sms) / items, tiles / 2, 32});
  return ns >= 2 ? int(ns) : 1;
}

BwdPick pick_bwd(const core::AttentionProblem& p, int64_t sk, bool deterministic, const DeviceFacts& dev,
                 BwdInstanceList list) {
  const int64_t hd = std::max(p.d, p.dv);
  if (p.impl != nullptr && p.impl[0] != '\0') {
    for (const BwdInstanceInfo& i : list)
      if (std::strcmp(i.key, p.impl) == 0) {
        if (i.dtype != p.dtype || i.head_dim < hd)
          return {nullptr, std::string("params.impl: '") + p.impl + "' is not a CUDA backward kernel for " +
                               to_string(p.dtype) + " head dim " + std::to_string(hd)};
        if (!i.runs_on(dev))
          return {nullptr, std::string("params.impl: '") + p.impl +
                               (i.arch == 90 && !dev.hopper() ? "' runs on compute capability 9.0 devices only"
                                                              : "' needs more shared memory than this device has")};
        return {&i, {}};
      }
    return {nullptr, std::string("params.impl: '") + p.impl +
                         "' is not a CUDA backward kernel of this build (bwd_sm80_* / bwd_sm90_* keys: list_kernels)"};
  }
  int best_hd = INT_MAX;
  for (const BwdInstanceInfo& i : list)
    if (i.dtype == p.dtype && i.head_dim >= hd) best_hd = std::min(best_hd, i.head_dim);
  if (best_hd == INT_MAX)
    return {nullptr, "q: head dim " + std::to_string(hd) + " (" + to_string(p.dtype) +
                         ") has no CUDA backward instance in this build (FLASHCORE_CUDA_HDIMS/DTYPES)"};
  // On Hopper the smallest covering wgmma row comes first, even at a larger head dim than an
  // sm80 row's: bwd_sm90 hd128 at D 96 took 0.73-0.78x the time of bwd_sm80 hd96 on an H200
  // (docs/results/cuda-backward-sm90-2026-11-29.md).
  // Of its rows, the first in table order, except that a causal problem of at most 1024 keys
  // takes a 64-key row where there is one: at hd64 on an H200 the 64-key CTAs took 0.92-0.97x
  // the time of the 128-key ones there (more CTAs to spread the diagonal), 0.88-0.96x the
  // other way round beyond it (docs/results/cuda-backward-hd64-2026-11-30.md). Not in
  // deterministic mode, where the 128-key row has a dQ warpgroup and the 64-key row none: there
  // the 64-key row took 1.03-1.13x the time.
  const bool short_causal = p.causal && sk <= 1024 && !deterministic;
  const BwdInstanceInfo* hopper = nullptr;
  for (const BwdInstanceInfo& i : list)
    if (i.arch == 90 && i.dtype == p.dtype && i.head_dim >= hd && i.runs_on(dev) &&
        (hopper == nullptr || i.head_dim < hopper->head_dim ||
         (i.head_dim == hopper->head_dim && short_causal && i.block_n == 64 && hopper->block_n != 64)))
      hopper = &i;
  if (hopper != nullptr) return {hopper, {}};
  for (const BwdInstanceInfo& i : list)
    if (i.arch == 80 && i.dtype == p.dtype && i.head_dim == best_hd && i.runs_on(dev)) return {&i, {}};
  return {nullptr, "q: no CUDA backward instance for head dim " + std::to_string(best_hd) +
                       " fits this device's shared memory (" + std::to_string(dev.smem_optin) + " bytes)"};
}

int deterministic_order(const BwdInstanceInfo& i, int64_t window_left, int64_t window_right, int64_t key_blocks,
                        int slots) {
  if (i.arch != 90) return 0;
  return window_left < 0 && window_right < 0 && key_blocks <= slots ? 1 : 2;
}

int deterministic_splits(int64_t items, int64_t key_blocks, int64_t most, int slots) {
  items = std::max<int64_t>(items, 1);
  const int64_t sm = std::max(slots, 1), top = std::max<int64_t>(std::min(key_blocks, most), 1);
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= top; ++s) {
    const int64_t cost = (items * s + sm - 1) / sm * ((key_blocks + s - 1) / s);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return int(best);
}

}  // namespace flashcore::cuda
