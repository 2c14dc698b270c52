// The CUDA backend's kernel-choice policy: which instance runs a problem (sm90 or sm80
// family, tile, persistent or not), GQA packing and the KV split count. Pure functions of
// the problem, a few device facts and the instances on offer: no CUDA runtime calls and no
// CUDA headers, so tests/cuda/policy_test.cpp checks the choices in every configuration
// (CPU-only CI too). The registry (registry.cpp) lists this build's instances; the backend
// (backend.cpp) validates the problem, asks here, and launches (launch.cpp).
// The measurements behind the thresholds: docs/results/cuda-policy-2026-11-29.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "core/problem.hpp"
#include "cuda/kernels/bwd_sizes.hpp"
#include "cuda/kernels/cut_tiles.hpp"
#include "cuda/kernels/sm90/traits.hpp"

namespace flashcore::cuda {

// What the policy needs to know of the device.
struct DeviceFacts {
  int major = 0, minor = 0;  // compute capability
  int smem_optin = 0;        // dynamic shared memory a block may opt in to, bytes
  int sms = 0;               // multiprocessors
  bool hopper() const { return major == 9 && minor == 0; }  // the sm_90a kernels run here only
};

// One row of the instance table (src/cuda/instances.inc), as the registry and the policy
// see it: its key and the facts that decide whether and when it is taken.
struct InstanceInfo {
  const char* key;
  int arch;  // 80: fwd_sm80 (sm80+), 90: fwd_sm90 (sm_90a: compute capability 9.0 only)
  DType dtype;
  int head_dim, block_m, block_n, warps, stages;
  bool persistent = false;     // sm90 "_p" rows: persistent CTAs (a static list of items each)
  bool vt_in = false;          // sm90 e4m3 "_vt" rows: V^T made in the kernel (no pre-pass)
  int smem90 = 0, ctas90 = 1;  // sm90 rows: FwdSm90Config::kSmem, kCtasPerSm
  bool chord = false;          // sm90 rows with FwdSm90Config::kChordForm (FwdParams::exp_chord)
  bool vt_fused = false;       // sm90 e4m3 rows with FwdSm90Config::kVtFused (FwdParams::vt_sync)
  bool score_mod = false;      // sm90 "_sv" rows: the score variants' kernel (FwdSm90Config::kScoreMod)
  bool kv_fp8 = false;         // kvc rows over an e4m3 cache (dtype: q's), dtype keys f16e4m3 / bf16e4m3
  bool kv_tma = false;         // kvc sm90 rows: K/V tiles by TMA boxes (a cache they can read, pick_kvcache)
  // Dynamic shared memory: sm80, the Q tile + kStages K and V tiles, rows padded to a
  // multiple of 128 bytes (common/swizzle.cuh), and sm80_extra_smem; sm90, the instance's
  // FwdSm90Config::kSmem.
  int smem() const {
    const int row_bytes = (head_dim * int(dtype_size(dtype)) + 127) / 128 * 128;
    if (arch == 90) return smem90;
    if (kv_fp8) return kvc_fp8_smem(head_dim, block_m, block_n, stages);
    return (block_m + 2 * stages * block_n) * row_bytes + sm80_extra_smem(block_m, block_n);
  }
  // CTAs per SM: sm90, FwdSm90Config::kCtasPerSm (64-row tiles two or three, taller ones
  // one); the sm80 rows (occupancy: their key) one.
  int ctas_per_sm() const { return arch == 90 ? ctas90 : 1; }
  // Work items (one CTA each, or a persistent CTA's turn): query blocks of `rows` rows
  // (packed rows under GQA packing) times `heads` (item heads) times `batch`.
  int64_t items(int64_t rows, int64_t heads, int64_t batch) const { return (rows + block_m - 1) / block_m * heads * batch; }
  bool runs_on(const DeviceFacts& d) const { return smem() <= d.smem_optin && (arch != 90 || d.hopper()); }
};

// A row's InstanceInfo from its instances.inc fields (kDType: the dtype key's storage type;
// tf32 rows store f32). sm90: the FwdSm90Config of the row gives shared memory, CTAs per SM,
// the chord form and the fused V^T.
constexpr InstanceInfo sm80_instance(const char* key, DType dt, int hd, int bm, int bn, int warps, int stages,
                                     bool kv_fp8 = false) {
  InstanceInfo i{key, 80, dt, hd, bm, bn, warps, stages};
  i.kv_fp8 = kv_fp8;
  return i;
}
template <DType kDType, int kHeadDim, int kBlockM, int kBlockN, int kStages, int kVariant>
constexpr InstanceInfo sm90_instance(const char* key) {
  using C = FwdSm90Config<kDType == DType::e4m3 ? 1 : 2, kDType == DType::e4m3, kHeadDim, kBlockM, kBlockN, kStages,
                          kVariant>;
  return {key,           90,           kDType,       kHeadDim,     kBlockM,      kBlockN,
          4 * C::kConsumers + 4,       kStages,      C::kPersistent, C::kVtIn,   C::kSmem,
          C::kCtasPerSm, C::kChordForm, C::kVtFused, C::kScoreMod};
}

// The dtype keys of the table's rows -> storage dtype (tf32: fp32 storage on TF32 tensor
// cores; f16e4m3 / bf16e4m3, the kvc rows over an e4m3 cache: q's) and whether the KV cache
// is e4m3, and a row of an expanded table (instances_<dir>.inc lines) as its InstanceInfo:
//   #define FC_SM80_INST FC_SM80_INSTANCE_INFO / #define FC_SM90_INST FC_SM90_INSTANCE_INFO
namespace instance_dtype {
constexpr DType f16 = DType::f16, bf16 = DType::bf16, tf32 = DType::f32, e4m3 = DType::e4m3;
constexpr DType f16e4m3 = DType::f16, bf16e4m3 = DType::bf16;
}  // namespace instance_dtype
namespace instance_cache_fp8 {
constexpr bool f16 = false, bf16 = false, tf32 = false, e4m3 = false, f16e4m3 = true, bf16e4m3 = true;
}  // namespace instance_cache_fp8
#define FC_SM80_INSTANCE_INFO(key, dt, hd, bm, bn, wp, st, oc)                                                \
  ::flashcore::cuda::sm80_instance(#key, ::flashcore::cuda::instance_dtype::dt, hd, bm, bn, wp, st, \
                                   ::flashcore::cuda::instance_cache_fp8::dt),
// The kvc rows of the sm90 family (kernels/kvc_sm90.cuh): the key-split form, 4 warps, its
// K/V tiles by TMA (kv_tma); shared memory cut_tiles.hpp's kvc_tma_smem.
constexpr InstanceInfo kvc_sm90_instance(const char* key, DType dt, int hd, int bm, int bn, int stages) {
  InstanceInfo i{key, 90, dt, hd, bm, bn, 4, stages};
  i.smem90 = kvc_tma_smem(hd, bm, bn, stages);
  i.kv_tma = true;
  return i;
}
#define FC_SM90_KVC_INSTANCE_INFO(key, dt, hd, bm, bn, st, ps) \
  ::flashcore::cuda::kvc_sm90_instance(#key, ::flashcore::cuda::instance_dtype::dt, hd, bm, bn, st),
#define FC_SM90_INSTANCE_INFO(key, dt, hd, bm, bn, st, ps) \
  ::flashcore::cuda::sm90_instance<::flashcore::cuda::instance_dtype::dt, hd, bm, bn, st, ps>(#key),

// The instances on offer, in table order (= preference within a dtype and head dim).
using InstanceList = std::span<const InstanceInfo>;

// A kernel choice: the instance (null: see the caller), its GQA packing (FwdParams::
// pack_shift: log2 of the query heads of one KV head packed into an item's rows; sm90 rows
// only) and its KV split count (FwdParams::kv_splits, >= 1).
struct KernelChoice {
  const InstanceInfo* inst = nullptr;
  int pack_shift = 0;
  int kv_splits = 1;
};

// Why the sm90 kernel `i` cannot take this problem ("" when it can): it needs a 9.0
// device, the problem's dtype, no score variant (softcap, ALiBi, sinks: named) unless it is
// an "_sv" row, D and Dv at most its head dim (e4m3: D == Dv == its head dim), its shared
// memory, and (persistent) 32-bit item numbers.
std::string sm90_refusal(const core::AttentionProblem& p, const InstanceInfo& i, const DeviceFacts& dev);

// The persistent ("_p") row of sm90 tile t (same dtype, head dim, tile and stages), or null.
const InstanceInfo* persistent_variant(InstanceList list, const InstanceInfo& t);

// GQA packing for the longest query sequence sq: log2 G for G = H / Hkv query heads per KV
// head (a power of two up to 64, 16-bit or e4m3) when sq < 64, else 0.
int gqa_pack_shift(const core::AttentionProblem& p, int64_t sq);

// Whether `i` takes KV splits (the sm90 rows without "_p"), and how many for a problem with
// the longest sequences sq, sk and packing pack_shift (1: none).
bool kv_splittable(const InstanceInfo& i);
int kv_split_count(const core::AttentionProblem& p, int64_t sq, int64_t sk, const InstanceInfo& i, int pack_shift,
                   const DeviceFacts& dev);

// The Hopper kernel for a 16-bit problem (no forced tile, no score variant; table order =
// preference), or null (not a 9.0 device, no qualifying row): the sm80 family runs it.
const InstanceInfo* pick_sm90(const core::AttentionProblem& p, const DeviceFacts& dev, int pack_shift,
                              InstanceList list);

// The sm80 family's row for head dim hd (the smallest covering one) and the mean sequence
// lengths sq, sk, matching a forced tile (p.tile_m, p.tile_n). f32 without a forced tile:
// null when no row fits (the caller runs the exact FFMA kernel); otherwise `why` says.
struct Sm80Pick {
  enum class Why { ok, no_head_dim, no_tile, no_fit };
  const InstanceInfo* inst = nullptr;
  Why why = Why::ok;
  int head_dim = 0;  // the head dim looked at (no_tile, no_fit)
};
Sm80Pick pick_sm80(const core::AttentionProblem& p, int hd, int64_t sq, int64_t sk, const DeviceFacts& dev,
                   InstanceList list);

// The e4m3 rule's row (no forced key) for the longest queries sq and the mean key length
// sk_mean, with packing pack_shift, or null when no e4m3 row takes D, Dv on this device.
const InstanceInfo* pick_fp8(const core::AttentionProblem& p, int64_t sq, int64_t sk_mean, int pack_shift,
                             const DeviceFacts& dev, InstanceList list);

// The whole choice for problems that passed the backend's checks and leave the choice to
// the policy (no forced key): 16-bit problems (an sm90 row, else the sm80 family's; `why`
// set when there is none) and f32 ones allowed on TF32 tensor cores (inst null: the exact
// FFMA kernel). sq, sk: the longest sequences.
struct Choice16 {
  KernelChoice kernel;
  Sm80Pick sm80;  // the sm80 family's pick where it was asked (its why when inst is null)
};
Choice16 choose_kernel(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                       InstanceList list);

// The head dims (D, Dv) that a 16-bit problem whose D or Dv is not a multiple of 8 is copied
// into (backend.cpp: attention_head_padded; zero columns): each the next multiple of 8, the
// smallest rows that 16-byte loads and TMA take; the padded problem then runs on the
// kernels of the smallest head dim that covers both (both families zero-fill up to their
// instance's head dim).
std::pair<int64_t, int64_t> padded_head_dims(const core::AttentionProblem& p);
// The row for a 16-bit problem read in place (backend.cpp: attention_head_columns; p's D and
// Dv the widths the kernel must hold): the choice for p where that is an sm90 row, else the
// choice at the next wider head dim of `list` whose choice is one (null when none is): in
// place runs on sm90 rows only, and at a few items the choice for hd96 is the sm80 hd96 row
// (the sm90 hd96 row has only a 128-row tile), which sent D 59 and D 81 at B2 H8 S300 to the
// copies in builds with hd96. Packing and splits are the choice's (in place takes neither).
KernelChoice choose_in_place(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                             InstanceList list);
// Whether a 16-bit problem with a head dim off the multiples of 8, whose tensors the sm90
// kernels can read in place (backend.cpp: attention_head_columns), runs in place on the
// choice `in_place` (a row whose head dim holds D and Dv from their offsets in a 16-byte
// chunk) rather than through padded copies on `padded` (the choice for padded_head_dims),
// for keys of length sk (the longest), under a band mask (causal or a window) or not. In
// place saves the copies, which cost as much as a short sequence's attention, but its TMA
// boxes start off 128-byte lines (0.80-0.86x of the next dim's time at any length, against
// 0.88-0.95x for the copies' kernel at 16384 keys) and it takes no KV splits. Measured on an
// H200, same call (docs/results/cuda-head-dims-2026-12-01.md): on the same head dim in place
// is 1.2-1.6x faster at S 1024-2048, even at 4096, even (band) or 0.95x (none) at 8192, and
// 0.88-0.93x at 16384; on a wider head dim (D 59: hd128 for hd64) 1.0-1.25x at S 1024 and
// 0.72-0.93x past it. So: the copies where the padded call splits its keys; else in place up
// to 4096 keys (8192 under a band mask) on the same head dim, 1024 on a wider one.
bool heads_in_place(const KernelChoice& in_place, const KernelChoice& padded, int64_t sk, bool banded);
// The head dim that padded copies widen D or Dv (padded_head_dims) to for the row `i` that
// runs them: an sm90 row's own head dim where that is a whole number of 128-byte lines (64,
// 128, 192, 256 columns), so that every row of a TMA box starts a line; else `padded`. The
// boxes of rows that start off a line made the hd128 kernel 13-19 % slower on D 111 at
// S 8192 and 16384 (H200, docs/results/cuda-head-dims-2026-12-01.md).
int64_t copy_width(const InstanceInfo& i, int64_t padded);
// e4m3 problems: inst null when no row takes them.
KernelChoice choose_kernel_fp8(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                               InstanceList list);
// How an e4m3 instance gets V^T: its own warps (kVtFused rows on fixed-length batches,
// unless force_prepass: FLASHCORE_SM90_VT_PREPASS=1 for measurements and tests), inside its
// producer ("_vt" rows), or the pre-pass (vt_fp8.cu) into a workspace. none: not e4m3.
enum class VtPath { none, prepass, fused, in_kernel };

// attention_with_kvcache's kernel among the kvc rows (`list`), for `rows` packed rows per
// sequence and item head (Sq G under GQA packing): of the dtype and the smallest head dim >=
// hd that runs on the device, the first key-split row (block_m below 16 per warp,
// kvc_sm80.cuh) where the rows fit its tile, else the first other row; null if none.
// kv_fp8 (an e4m3 cache): among the rows over an e4m3 cache, which are all key-split rows,
// the first at every row count. page_size: the paged cache's (0: contiguous); a key-split
// row with TMA loads (kv_tma, Hopper) comes first where its boxes can read the pages: they
// divide or are a multiple of its key tile (a contiguous cache: the cp.async rows, faster
// there on an H200, docs/results/cuda-kvcache-tma-2026-12-02.md).
const InstanceInfo* pick_kvcache(DType dtype, int64_t hd, int64_t rows, const DeviceFacts& dev, InstanceList list,
                                 bool kv_fp8 = false, int64_t page_size = 0);
// Its KV splits (flash-decoding) for batch sequences of sq rows and heads item heads (with GQA
// packing: Sq G rows and H / G heads) over at most cache_rows keys each: ns = min(2 SMs / CTAs, key tiles / 2, 32) where that is >= 2
// (kv_combine.cu merges them), else 1. cache_rows bounds the lengths (they stay on the
// device): each CTA splits its own sequence's tiles, so an over-count only adds empty runs.
int kvcache_split_count(int64_t sq, int64_t heads, int64_t batch, int64_t cache_rows, const InstanceInfo& i,
                        const DeviceFacts& dev);
VtPath vt_path(const InstanceInfo& inst, bool varlen, bool force_prepass);

// Packing and splits for a given instance (a forced key's; kv_splits 0: the rule's count).
KernelChoice complete_choice(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceFacts& dev,
                             const InstanceInfo* inst, int kv_splits);

// One backward row of the instance table (instances.inc's bwd rows): the fields that decide
// whether and when it is taken.
struct BwdInstanceInfo {
  const char* key;
  int arch;  // 80: bwd_sm80 (sm80+), 90: bwd_sm90 (sm_90a: compute capability 9.0 only)
  DType dtype;
  int head_dim, block_m, block_n, stages, dsplit;
  int smem() const {
    const int es = int(dtype_size(dtype));
    return arch == 90 ? bwd_sm90_smem(head_dim, block_m, block_n, stages, es)
                      : bwd_sm80_smem(head_dim, block_m, block_n, stages, es);
  }
  // CTAs per SM its registers are budgeted for (the sm80 rows: one, their last common column)
  int ctas_per_sm() const { return arch == 90 ? bwd_sm90_ctas_per_sm(head_dim, block_n) : 1; }
  bool runs_on(const DeviceFacts& d) const { return smem() <= d.smem_optin && (arch == 80 || d.hopper()); }
};
#define FC_SM80_BWD_INSTANCE_INFO(key, dt, hd, bm, bn, wp, st, oc, dqm, ds, qs) \
  {#key, 80, ::flashcore::cuda::instance_dtype::dt, hd, bm, bn, st, ds},
#define FC_SM90_BWD_INSTANCE_INFO(key, dt, hd, bm, bn, st, ps) \
  {#key, 90, ::flashcore::cuda::instance_dtype::dt, hd, bm, bn, st, 1},
using BwdInstanceList = std::span<const BwdInstanceInfo>;

// The backward's row for a problem whose longest sequence has sk keys: the forced key
// (p.impl), else the sm90 row of the smallest head dim that covers D and Dv where the device
// runs one (the first in table order; a 64-key row for causal problems of at most 1024 keys
// unless deterministic), else, of the smallest covering head dim, the first sm80 row that
// fits its shared memory (table order = preference). inst null: `why` is the error
// (Status::unsupported), naming the argument.
struct BwdPick {
  const BwdInstanceInfo* inst = nullptr;
  std::string why;
};
BwdPick pick_bwd(const core::AttentionProblem& p, int64_t sk, bool deterministic, const DeviceFacts& dev,
                 BwdInstanceList list);

// Deterministic mode's CTAs along the keys (each with a dQ slice of its own), for `items`
// CTAs per key-block position (B Hkv, times the column splits) and `key_blocks` blocks: the
// count s <= min(key_blocks, most) with the fewest block-times, ceil(items s / slots) waves of
// ceil(key_blocks / s) blocks each (slots: SMs times the instance's CTAs per SM), the
// smallest such s (the least workspace). E.g. 132 SMs, 16 KV heads, 128 key blocks: 8 (one
// wave of 128 CTAs, 16 blocks each, as long as the 16 waves of the default mode); 9 would
// start a second wave.
int deterministic_splits(int64_t items, int64_t key_blocks, int64_t most, int slots);

// Deterministic mode in one dQ slice, added in a fixed order (kernels/bwd_params.hpp:
// dq_order), on bwd_sm90 rows: 1 (the cyclic walk) where no band limits a query's keys and
// the key blocks of one (sequence, KV head) fit the device's CTA slots at once (slots: SMs
// times the row's CTAs per SM; a CTA may wait on one launched after it), else 2 (the in-order
// walk, launched last key block first: a CTA waits only on CTAs launched before it). 0 (the
// slices of deterministic_splits): the sm80 family.
int deterministic_order(const BwdInstanceInfo& i, int64_t window_left, int64_t window_right, int64_t key_blocks,
                        int slots);

}  // namespace flashcore::cuda
