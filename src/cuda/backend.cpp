// CUDA backend: validates what only the device can tell (pointer kinds, alignment,
// arch, shared memory, device-resident cu_seqlens), picks a kernel from the instance
// table and launches it on the caller's stream. Every CUDA error becomes a
// flashcore::Error; nothing is launched until every check has passed.
#include "cuda/backend.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/cu_seqlens.hpp"
#include "core/env.hpp"
#include "core/errors.hpp"
#include "cuda/kernels/fwd_sm90_traits.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/fp8.hpp"

namespace flashcore::cuda {

using LaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

// Kernel entry points, one per instance TU (names = keys).
cudaError_t fwd_sm80_f32_hd256_simt(const FwdParams&, cudaStream_t);
cudaError_t transpose_v_fp8(const FwdParams&, void* vt, int64_t sk_pad, cudaStream_t);  // vt_fp8.cu
cudaError_t kv_combine(const FwdParams&, bool bf16, cudaStream_t);                       // kv_combine.cu
#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) cudaError_t key(const FwdParams&, cudaStream_t);
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) cudaError_t key(const FwdParams&, cudaStream_t);
#include "instances_enabled.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST

namespace {

struct DeviceInfo {
  int id = -1, major = 0, minor = 0, smem_optin = 0, sms = 0, l2_bytes = 0;
};

struct Instance {
  const char* key;
  int arch;  // 80: fwd_sm80 (sm80+), 90: fwd_sm90 (sm_90a: compute capability 9.0 only)
  DType dtype;
  int head_dim, block_m, block_n, warps, stages;
  LaunchFn fn;
  bool persistent = false;  // sm90 "_p" rows: persistent CTAs (a static list of items each)
  bool vt_in = false;       // sm90 e4m3 "_vt" rows: V^T made in the kernel (no pre-pass)
  int smem90 = 0, ctas90 = 1;  // sm90 rows: FwdSm90Traits::kSmem, kCtasPerSm
  bool chord = false;          // sm90 rows with FwdSm90Traits::kChordForm (FwdParams::exp_chord)
  bool vt_fused = false;       // sm90 e4m3 rows with FwdSm90Traits::kVtFused (FwdParams::vt_sync)
  // Dynamic shared memory: sm80, the Q tile + kStages K and V tiles, rows padded to a
  // multiple of 128 bytes (common/swizzle.cuh); sm90, the instance's FwdSm90Traits::kSmem.
  int smem() const {
    const int row_bytes = (head_dim * int(dtype_size(dtype)) + 127) / 128 * 128;
    return arch == 90 ? smem90 : (block_m + 2 * stages * block_n) * row_bytes;
  }
  // CTAs per SM: sm90, FwdSm90Traits::kCtasPerSm (64-row tiles two or three, taller ones
  // one); the sm80 rows (occupancy: their key) one.
  int ctas_per_sm() const { return arch == 90 ? ctas90 : 1; }
  // Work items (one CTA each, or a persistent CTA's turn): query blocks of `rows` rows
  // (packed rows under GQA packing) times `heads` (item heads) times `batch`.
  int64_t items(int64_t rows, int64_t heads, int64_t batch) const { return (rows + block_m - 1) / block_m * heads * batch; }
  bool runs_on(const DeviceInfo& d) const {
    return smem() <= d.smem_optin && (arch != 90 || (d.major == 9 && d.minor == 0));
  }
};

// Instance dtype keys -> storage dtype (tf32: fp32 storage on TF32 tensor cores).
constexpr DType dtype_f16 = DType::f16, dtype_bf16 = DType::bf16, dtype_tf32 = DType::f32, dtype_e4m3 = DType::e4m3;
// sm90 dtype keys -> the kernels' storage types (FwdSm90Traits).
using type_f16 = __half;
using type_bf16 = __nv_bfloat16;
using type_e4m3 = __nv_fp8_e4m3;
const Instance kInstances[] = {
#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) {#key, 80, dtype_##dt, hd, bm, bn, wp, st, key},
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps)                                          \
  {#key, 90, dtype_##dt, hd, bm, bn, 4 * (bm / 64 + 1), st, key, ps == 1, ps == 2,        \
   FwdSm90Traits<type_##dt, hd, bm, bn, st, ps>::kSmem, FwdSm90Traits<type_##dt, hd, bm, bn, st, ps>::kCtasPerSm, \
   FwdSm90Traits<type_##dt, hd, bm, bn, st, ps>::kChordForm, FwdSm90Traits<type_##dt, hd, bm, bn, st, ps>::kVtFused},
#include "instances_enabled.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
constexpr const char* kSimtKey = "fwd_sm80_f32_hd256_simt";
constexpr int kMaxHeadDim = 256;

[[noreturn]] void cuda_fail(Status code, const std::string& what, cudaError_t e) {
  throw_error(code, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Current device; throws `unsupported` when there is none or it predates sm80. The
// attributes are cached per thread for the last device seen (short shapes would pay
// microseconds per call for the queries).
DeviceInfo device_info(bool require_sm80) {
  thread_local DeviceInfo cached;
  DeviceInfo d;
  cudaError_t e = cudaGetDevice(&d.id);
  if (e == cudaSuccess && cached.id == d.id) {
    d = cached;
  } else {
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, d.id);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, d.id);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.id);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, d.id);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.l2_bytes, cudaDevAttrL2CacheSize, d.id);
    if (e == cudaSuccess) cached = d;
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    cuda_fail(Status::unsupported, "q: CUDA tensors given, but no usable CUDA device", e);
  }
  if (require_sm80 && d.major < 8)
    throw_error(Status::unsupported, "q: the CUDA kernels need compute capability >= 8.0 (Ampere); device " +
                                         std::to_string(d.id) + " is sm" + std::to_string(d.major) +
                                         std::to_string(d.minor));
  return d;
}

// A pointer given as a Device::cuda tensor must be device (or managed) memory of the
// current device: a host pointer would fault inside the kernel instead of failing here.
void check_device_pointer(const void* ptr, const char* name, int device) {
  if (ptr == nullptr) return;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear: this call's failure is not sticky
    cuda_fail(Status::invalid_argument, std::string(name) + ": cannot query the pointer", e);
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw_error(Status::invalid_argument,
                std::string(name) + ": is not device memory (a host pointer was given for a Device::cuda tensor)");
  if (a.device != device)
    throw_error(Status::invalid_argument, std::string(name) + ": lives on device " + std::to_string(a.device) +
                                              " but the current device is " + std::to_string(device));
}

void check_pointers(const core::AttentionProblem& p, const DeviceInfo& dev) {
  const char* names[] = {"q", "k", "v", "out"};
  const void* ptrs[] = {p.q.data, p.k.data, p.v.data, p.o};
  for (int i = 0; i < 4; ++i) check_device_pointer(ptrs[i], names[i], dev.id);
  check_device_pointer(p.lse, "params.lse", dev.id);
  check_device_pointer(p.cu_q, "params.cu_seqlens_q", dev.id);
  check_device_pointer(p.cu_k, "params.cu_seqlens_k", dev.id);
}

// The kernels' index limits: B and H are grid dimensions (<= 65535), row arithmetic is
// 32-bit (the tensors' rows <= 2^30; varlen's longest sequence is at most its total).
void check_kernel_limits(const core::AttentionProblem& p) {
  if (p.heads > 65535 || p.batch > 65535)
    throw_error(Status::unsupported, "q: B = " + std::to_string(p.batch) + ", H = " + std::to_string(p.heads) +
                                         ": the CUDA kernels take at most 65535 of each");
  if (p.sq > INT_MAX / 2 || p.sk > INT_MAX / 2)
    throw_error(Status::unsupported, "q: sequence lengths above 2^30 are not supported by the CUDA kernels");
}

// 16-byte cp.async loads need 16-byte aligned rows: the base and every stride that
// is used (its dim > 1) a multiple of `bytes` / (element size) elements. Returns why not
// ("" when aligned).
using Strides = std::initializer_list<std::pair<int64_t, int64_t>>;
std::string misalignment(const void* ptr, int64_t bytes, int64_t elem_size, Strides strides) {
  const int64_t elems = std::max<int64_t>(bytes / elem_size, 1);
  if (reinterpret_cast<uintptr_t>(ptr) % uintptr_t(bytes) != 0)
    return "data pointer must be " + std::to_string(bytes) + "-byte aligned for the CUDA kernels";
  for (const auto& [stride, extent] : strides)
    if (extent > 1 && stride % elems != 0)
      return "stride " + std::to_string(stride) + " is not a multiple of " + std::to_string(elems) +
             " elements (rows must be " + std::to_string(bytes) + "-byte aligned for the CUDA kernels)";
  return {};
}

// The q/k/v (16 bytes) and out (4 bytes) alignment the tensor-core kernels need; the
// first violation, or "" when none.
std::string tensor_core_misalignment(const core::AttentionProblem& p, std::string* which) {
  const int64_t es = int64_t(dtype_size(p.dtype)), nb = p.cu_q != nullptr ? 1 : p.batch;
  const std::pair<const char*, std::string> checks[] = {
      {"q", misalignment(p.q.data, 16, es, {{p.q.sb, nb}, {p.q.ss, p.sq}, {p.q.sh, p.heads}})},
      {"k", misalignment(p.k.data, 16, es, {{p.k.sb, nb}, {p.k.ss, p.sk}, {p.k.sh, p.kv_heads}})},
      {"v", misalignment(p.v.data, 16, es, {{p.v.sb, nb}, {p.v.ss, p.sk}, {p.v.sh, p.kv_heads}})},
      {"out", misalignment(p.o, 4, int64_t(dtype_size(p.out_dtype)), {{p.o_sb, nb}, {p.o_ss, p.sq}, {p.o_sh, p.heads}})},
  };
  for (const auto& [name, why] : checks)
    if (!why.empty()) {
      *which = name;
      return why;
    }
  return {};
}

// Why the sm90 kernels cannot take this problem ("" when they can): they need a 9.0
// device, 16-bit storage, D == Dv == the instance's head dim (no padding). Windows,
// causal, GQA, lse, varlen and any strides the 16-bit path accepts are fine.
std::string sm90_refusal(const core::AttentionProblem& p, const Instance& i, const DeviceInfo& dev) {
  if (!(dev.major == 9 && dev.minor == 0)) return "needs a compute capability 9.0 (Hopper) device";
  if (p.dtype != i.dtype) return "is not a " + std::string(to_string(p.dtype)) + " kernel";
  if (p.d != i.head_dim || p.dv != i.head_dim)
    return "needs D == Dv == " + std::to_string(i.head_dim) + " (D = " + std::to_string(p.d) +
           ", Dv = " + std::to_string(p.dv) + ")";
  if (i.smem() > dev.smem_optin) return "needs more shared memory than this device has";
  if (i.persistent && i.items(p.sq, p.heads, p.batch) > INT32_MAX - 2 * int64_t(dev.sms))
    return "numbers its work items (query blocks x heads x batch) in 32 bits";
  return {};
}

// The persistent ("_p") row of sm90 tile t: same dtype, head dim, tile and stages; or null.
const Instance* persistent_variant(const Instance& t) {
  for (const Instance& i : kInstances)
    if (i.arch == 90 && i.persistent && i.dtype == t.dtype && i.head_dim == t.head_dim && i.block_m == t.block_m &&
        i.block_n == t.block_n && i.stages == t.stages)
      return &i;
  return nullptr;
}

// The Hopper kernel for this problem when the device is 9.0 and it qualifies (table
// order = preference), else nullptr: the sm80 family runs it. A forced tile stays with
// the sm80 family. Measured on an H200 (docs/results/cuda-sm90-2026-11-22.md, session 4):
// - 64-row tiles (two CTAs per SM) where each query block sees few keys: at hd64 Sk <
//   8192, with a band mask or not (session 16, H200, same-process rounds against the
//   192-row tile, B 16384/S H32: S1024 395 vs 338 TFLOP/s, S2048 450 vs 416, S4096 483
//   vs 458, causal S4096 419 vs 375; from S8192 the 192-row tile is as fast or faster, 509
//   vs 494; session 4 had set Sk < 1024, < 4096 banded; session 17's 128x128_s2_p, same
//   method, f16: S2048 408 vs 437 for 64x128_s2_p, causal 335 vs 345, S4096 409 vs 465);
//   at hd128 under a local window with Sk < 1024 (causal S512, session 17, same method:
//   128x128_s2_p 251.9 against 64x64_s2_p 249.6 TFLOP/s; flashcore_cuda_timing 291 vs
//   282, causal S1024 406 vs 368; session 4 had taken 64 rows for any band mask); and
//   wherever the taller tiles would leave SMs idle (B1 H8 S512 hd64: 6.7 vs 9.0 us for the
//   sm80 family). hd64 with more than two 64-row items per SM takes the 64x64 tile that
//   runs three CTAs per SM (session 18, H200, same-process rounds, f16, B 16384/S H32,
//   against 64x128 (two per SM) or its persistent variant: S512 347 vs 329 TFLOP/s, causal
//   204 vs 193; S1024 415 vs 399, causal 308 vs 281; S4096 491 vs 468, causal 436 vs 420;
//   causal S8192 474 vs 456 for the 192-row tile, so hd64 takes 64-row tiles up to Sk <
//   16384 under a band mask; bf16 alike). With few items (B1 H8 S512) the 64x128 tile's
//   shorter key loop stays.
// - Otherwise the first row of at least 128 rows whose grid covers the SMs, skipping rows
//   taller than 128 under a band mask with Sk < 4096 (causal S2048: 421 vs 406 us for 64
//   rows; from S8192 they are the fastest).
// - The chosen tile's persistent variant ("_p") where Sk <= 8192 under a band mask, else
//   Sk <= 16384 (hd256: 2048), since session 25 (the items' order chosen per launch,
//   kernels/item_order.hpp; H200, flashcore_cuda_timing --all-tiles, 3 rounds, f16 TFLOP/s
//   against the tile without: hd128 S8192 680 vs 651, causal 616 vs 607, S16384 686 vs 668,
//   causal 635 vs 646; hd256 causal S8192 618 vs 607, S16384 668 vs 693, S4096 without a
//   mask 662 vs 669). Before: Sk <= 4096 (the
//   three-per-SM hd64 tile: Sk <= 1024; session 18: S1024 415 vs 402 TFLOP/s for the tile
//   without, S2048 448 vs 456, S4096 438 vs 491) and there are more items than resident CTAs (session 5, same call vs session 4's kernels: S512
//   B32 hd64 1.15-1.18x, hd128 1.21-1.23x; --all-tiles, f16, vs the same tile without:
//   S512 1.07-1.13x, S2048 hd64 causal 1.03x, hd128 1.02x and causal 1.06x; session 17,
//   flashcore_cuda_timing only: hd128 S4096 647 vs 627 TFLOP/s, causal 560 vs 536, once
//   the ping-pong turns ran on across items; from S8192 it lost in session 5:
//   causal S16384 0.67x, the static order gives some CTAs the heaviest blocks).
//   hd256's (session 18; its O goes out in two halves through a buffer of half O's size
//   since session 23, FwdSm90Traits::kOPasses, where it was staged in Q's buffer before):
//   up to Sk 4096 under a band mask, 2048 without (H200, session 23, flashcore_cuda_timing
//   --all-tiles, 3 rounds, B 16384/S H8, against the kernel without, f16 / bf16 TFLOP/s:
//   S1024 579 vs 565 / 604 vs 585, S2048 643 vs 635 / 669 vs 657; session 18, O in Q's
//   buffer, causal S512 256 vs 249 / 262 vs 257, S1024 385 vs 370 / 388 vs 379, S2048
//   511 vs 490 / 524 vs 502, S4096 614 vs 591 / 627 vs 606).
// - With GQA packing (gqa_pack_shift) the rows are Sq G per KV head; a 64-row tile where
//   they fit in one.
const Instance* pick_sm90(const core::AttentionProblem& p, const DeviceInfo& dev, int pack_shift) {
  if (p.tile_m != 0) return nullptr;
  constexpr int64_t kShortSk = 1024, kShortSk64 = 8192, kBandedTallMinSk = 4096, kPersistentMaxSk = 16384,
                    kPersistentMaxSkBanded = 8192, kPersistentMaxSk3 = 1024, kPersistentMaxSk256 = 2048;
  const bool banded = p.banded(), windowed = p.windowed();
  // Varlen: the mean lengths (p.sq and p.sk are the packed tensors' totals there).
  const int64_t nb = p.cu_q != nullptr ? std::max<int64_t>(p.batch, 1) : 1;
  const int64_t sq = p.sq / nb << pack_shift, sk = p.sk / nb;
  const int64_t heads = p.heads >> pack_shift;
  const Instance *tall = nullptr, *rows64 = nullptr;
  // 64-row items; more than two per SM: a 64-row tile that runs three CTAs per SM (hd64
  // 64x64) rather than the first 64-row row (two per SM, longer key tiles).
  const int64_t items64 = (sq + 63) / 64 * heads * p.batch;
  for (const Instance& i : kInstances)
    // Rows of other dtypes and head dims are passed over before sm90_refusal, which
    // builds its message: this runs on every call and walks the whole table.
    if (i.arch == 90 && !i.persistent && i.dtype == p.dtype && i.head_dim == p.d && sm90_refusal(p, i, dev).empty()) {
      if (i.block_m == 64) {
        if (rows64 == nullptr || (i.ctas_per_sm() > rows64->ctas_per_sm() && items64 > 2 * int64_t(dev.sms)))
          rows64 = &i;
        continue;
      }
      if (tall != nullptr || (i.block_m > 128 && banded && sk < kBandedTallMinSk)) continue;
      if (i.items(sq, heads, p.batch) >= dev.sms) tall = &i;
    }
  const bool few_keys = p.d <= 64 ? sk < (banded ? 2 * kShortSk64 : kShortSk64) : windowed && sk < kShortSk;
  const bool few_rows = pack_shift > 0 && sq <= 64;
  const Instance* pick = rows64 != nullptr && (few_keys || few_rows || tall == nullptr) ? rows64 : tall;
  // Persistent CTAs only help where there are more items than CTAs resident at once.
  const auto resident = [&](const Instance* i) { return int64_t(dev.sms) * i->ctas_per_sm(); };
  const int64_t persistent_max_sk = pick == nullptr          ? 0
                                    : pick->ctas_per_sm() > 2 ? kPersistentMaxSk3
                                    : banded                  ? kPersistentMaxSkBanded
                                    : p.d > 128               ? kPersistentMaxSk256
                                                              : kPersistentMaxSk;
  if (pick != nullptr && sk <= persistent_max_sk && pick->items(sq, heads, p.batch) > resident(pick))
    if (const Instance* v = persistent_variant(*pick); v != nullptr && sm90_refusal(p, *v, dev).empty()) return v;
  return pick;
}

// Whether the sm90 kernels may write O with TMA stores: fixed-length batches and 16-byte
// aligned base and strides (checked here, so that no tensor-map encode fails on the way).
bool o_tma_mappable(const core::AttentionProblem& p) {
  return p.cu_q == nullptr &&
         misalignment(p.o, 16, int64_t(dtype_size(p.out_dtype)),
                      {{p.o_sb, p.batch}, {p.o_ss, p.sq}, {p.o_sh, p.heads}}).empty();
}

// GQA packing on the sm90 kernels (FwdParams::pack_shift): the G = H / Hkv query heads
// of a KV head share the tiles when the queries are few (sq: the longest sequence, below
// 64: a tile of one head's rows is then mostly empty, and each head would read the KV
// head's K and V again): G a power of two up to 64, 16-bit or e4m3. Fixed-length batches with a
// TMA-mappable O store the packed rows by TMA, varlen batches and other outputs from
// registers. log2 G, or 0.
int gqa_pack_shift(const core::AttentionProblem& p, int64_t sq) {
  const int64_t g = p.group();
  if (sq >= 64 || g < 2 || g > 64 || (g & (g - 1)) != 0) return 0;
  if (p.dtype == DType::f32) return 0;
  int shift = 0;
  while ((int64_t(1) << shift) < g) ++shift;
  return shift;
}

// KV splits (flash-decoding) on the sm90 kernels that are not persistent (16-bit and e4m3), where
// the items (query blocks x heads (KV heads when packed) x batch; varlen: of the longest
// sequences, sq and sk) leave most SMs idle: ns = min(CTAs / items, key tiles / 4, 16) CTAs share an
// item's key tiles (CTAs: the SMs, twice that for full 64-row tiles of unpacked rows,
// two of which share an SM), and kv_combine.cu merges them; taken when ns >= 4 with at
// least 16 key tiles, or ns >= 2 with at least 64. Measured on an H100 (f16, CUDA graphs,
// docs/results/cuda-sm90-2026-11-22.md, session 14, call 14): decode B1 H32/8 hd128 Sk2048
// 22.4 -> 8.9 us (8 splits), Sk4096 40.6 -> 11.1 (8 or 16), Sk8192 80.4 -> 13.4 (16;
// 32 slower), Sk16384 163 -> 29.9 (16), B4 Sk8192 87.3 -> 49.0 (4), B8 Sk16384 203 -> 175
// (2), B1 H8 Sq512 Sk16384 hd64 96.3 -> 38.2 (4); call 16: B8 decode Sk4096 54.2 -> 49.1
// (2 splits of 64 tiles), B8 H32/8 Sq16 Sk4096 (packed rows fill the 64-row tile) 2
// splits 53.3, 4 splits 57.6, unsplit ~56.9.
bool kv_splittable(const Instance& i) { return i.arch == 90 && !i.persistent; }

// A forced key's "+kv<N>" (kv_splits > 1) on a kernel that takes no splits.
void check_forced_splits(const char* impl, int kv_splits, const Instance& i) {
  if (kv_splits > 1 && !kv_splittable(i))
    throw_error(Status::unsupported,
                std::string("params.impl: '") + impl + "': KV splits run on the sm90 kernels without '_p'");
}
int kv_split_count(const core::AttentionProblem& p, int64_t sq, int64_t sk, const Instance& i, int pack_shift,
                   const DeviceInfo& dev) {
  if (!kv_splittable(i)) return 1;
  const int64_t rows = sq << pack_shift;
  const int64_t items = i.items(rows, p.heads >> pack_shift, p.batch);
  const int64_t tiles = (sk + i.block_n - 1) / i.block_n;
  if (items < 1) return 1;
  const int64_t ctas = int64_t(dev.sms) * (rows >= 64 && pack_shift == 0 ? i.ctas_per_sm() : 1);
  const int64_t ns = std::min<int64_t>({ctas / items, tiles / 4, 16});
  return (ns >= 4 && tiles >= 16) || (ns >= 2 && tiles >= 64) ? int(ns) : 1;
}

const Instance* find_key(const char* key) {
  for (const Instance& i : kInstances)
    if (std::strcmp(i.key, key) == 0) return &i;
  return nullptr;
}

// First instance (table order = preference) for this dtype that covers the head dim,
// fits the device's shared memory and matches a forced tile. f32 without a forced tile:
// nullptr when none does (the caller runs the FFMA kernel); otherwise that throws.
const Instance* pick(const core::AttentionProblem& p, int hd, int64_t sq, int64_t sk, const DeviceInfo& dev) {
  const bool may_fall_back = p.dtype == DType::f32 && p.tile_m == 0;
  int best_hd = INT_MAX;
  for (const Instance& i : kInstances)
    if (i.arch == 80 && i.dtype == p.dtype && i.head_dim >= hd && i.head_dim < best_hd) best_hd = i.head_dim;
  if (best_hd == INT_MAX && may_fall_back) return nullptr;
  if (best_hd == INT_MAX)
    throw_error(Status::unsupported, "q: head dim " + std::to_string(hd) + " (" + to_string(p.dtype) +
                                         ") has no CUDA instance in this build (FLASHCORE_CUDA_HDIMS/DTYPES)");
  // Measured on an H200 (instances.inc): at hd <= 128, with a band mask and Sk below
  // this, the work on the diagonal tiles makes the 64-row tiles faster than the 128-row
  // ones (at hd256 the 64-row tile is slower anyway).
  constexpr int64_t kBandedLongSk = 12288;
  const bool banded = p.banded() && best_hd <= 128;
  const Instance* first = nullptr;
  for (const Instance& i : kInstances) {
    if (i.arch != 80 || i.dtype != p.dtype || i.head_dim != best_hd) continue;
    if (p.tile_m != 0 && (i.block_m != p.tile_m || i.block_n != p.tile_n)) continue;
    if (i.smem() > dev.smem_optin) continue;
    if (first == nullptr) {
      first = &i;
      const bool few_ctas = i.items(sq, p.heads, p.batch) < dev.sms;
      if (p.tile_m != 0 || (!few_ctas && !(banded && sk < kBandedLongSk))) return first;
    } else if (i.block_m < first->block_m) {
      return &i;  // smaller query blocks: more SMs at work, less diagonal waste
    }
  }
  if (first != nullptr || may_fall_back) return first;
  if (p.tile_m != 0)
    throw_error(Status::unsupported, "params.tile_m: no CUDA instance with tile " + std::to_string(p.tile_m) + "x" +
                                         std::to_string(p.tile_n) + " for " + to_string(p.dtype) + " head dim " +
                                         std::to_string(best_hd) + " that fits this device");
  throw_error(Status::unsupported, "q: no CUDA instance for head dim " + std::to_string(best_hd) +
                                       " fits this device's shared memory (" + std::to_string(dev.smem_optin) + " bytes)");
}

// The kernels' parameters for a checked problem (sq, sk: the longest sequences).
FwdParams fwd_params(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceInfo& dev) {
  const core::BandMask band = core::make_mask(p.causal, p.window_left, p.window_right, sq, sk);
  FwdParams f;
  f.q = p.q.data; f.k = p.k.data; f.v = p.v.data; f.o = p.o; f.lse = p.lse;
  f.q_sb = p.q.sb; f.q_ss = p.q.ss; f.q_sh = p.q.sh;
  f.k_sb = p.k.sb; f.k_ss = p.k.ss; f.k_sh = p.k.sh;
  f.v_sb = p.v.sb; f.v_ss = p.v.ss; f.v_sh = p.v.sh;
  f.o_sb = p.o_sb; f.o_ss = p.o_ss; f.o_sh = p.o_sh;
  f.lse_sb = p.lse_sb; f.lse_sh = p.lse_sh;
  f.batch = int(p.batch); f.sq = int(sq); f.sk = int(sk);
  f.heads = int(p.heads); f.group = int(p.group());
  f.d = int(p.d); f.dv = int(p.dv);
  f.cu_q = p.cu_q; f.cu_k = p.cu_k;
  f.total_q = int(p.sq); f.total_k = int(p.sk);  // varlen: the packed tensors' rows
  f.sms = dev.sms;
  f.l2_bytes = dev.l2_bytes;
  f.window_left = band.left < 0 ? -1 : int(std::min<int64_t>(band.left, INT_MAX / 4));
  f.window_right = band.right < 0 ? -1 : int(std::min<int64_t>(band.right, INT_MAX / 4));
  f.scale_log2 = p.scale * 1.4426950408889634f;
  return f;
}

// Device-resident cu_seqlens: copy to the host (on the caller's stream) and check.
int64_t varlen_max(const int32_t* cu, int64_t batch, int64_t total, const char* name, cudaStream_t stream) {
  std::vector<int32_t> host(size_t(batch) + 1);
  cudaError_t e = cudaMemcpyAsync(host.data(), cu, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string(name) + ": copying to the host failed", e);
  int64_t max_len = 0;
  core::check_cu_seqlens(host.data(), batch, total, name, &max_len);
  return max_len;
}

// The longest sequences: Sq and Sk, or for varlen batches the caller's bounds or the
// longest in cu_seqlens copied to the host and checked (the copy synchronizes the stream).
void longest_sequences(const core::AttentionProblem& p, int64_t* sq, int64_t* sk) {
  *sq = p.sq;
  *sk = p.sk;
  if (p.cu_q != nullptr && p.max_sq > 0) {
    *sq = p.max_sq;
    *sk = p.max_sk;
  } else if (p.cu_q != nullptr) {
    cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
    *sq = varlen_max(p.cu_q, p.batch, p.sq, "params.cu_seqlens_q", stream);
    *sk = varlen_max(p.cu_k, p.batch, p.sk, "params.cu_seqlens_k", stream);
  }
}

// Stream-ordered workspace memory from a pool of the library's own per device that keeps
// what it has allocated (release threshold: unlimited), so calls after the first neither
// cudaMalloc nor synchronize, and a buffer is reused only in stream order.
cudaMemPool_t workspace_pool(int device) {
  static std::mutex mu;
  static std::vector<cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mu);
  if (int(pools.size()) <= device) pools.resize(size_t(device) + 1, nullptr);
  if (pools[size_t(device)] == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    // The first call may come while the caller's stream is being captured into a CUDA graph,
    // where creating a pool is refused unless this thread's capture mode is relaxed.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMemPoolCreate(&pool, &props);
    uint64_t keep = UINT64_MAX;
    if (e == cudaSuccess) e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) cuda_fail(Status::device_error, "q: creating the CUDA workspace pool failed", e);
    pools[size_t(device)] = pool;
  }
  return pools[size_t(device)];
}

// The launches of one call on the caller's stream: the fp8 V^T pre-pass (e4m3; or, for
// the kernels that make V^T themselves, a memset of their counters), the kernel, and
// kv_combine after KV splits (f.kv_splits > 1); the first two and the split partials share
// one workspace from the pool ([V^T][V^T counters][splits' fp32 O rows][their (m, l)]),
// which goes back to the pool in stream order whatever launched. Each launch stops the
// chain at its error, named.
void launch(const core::AttentionProblem& p, const DeviceInfo& dev, const Instance& inst, FwdParams& f,
            cudaStream_t stream) {
  const bool fp8 = p.dtype == DType::e4m3, split = f.kv_splits > 1;
  const int64_t vt_blocks = p.cu_q != nullptr ? 1 : p.batch;  // varlen: one [Hkv][Dv][vt_sk] block
  // V^T: made by the kernel's own warps where it can (kVtFused, fixed-length batches; its
  // counters zeroed here), else by the pre-pass. FLASHCORE_SM90_VT_PREPASS=1 (measurements,
  // tests) keeps the pre-pass. On an H200 (session 37, one process, same kernel either way,
  // outputs equal bit for bit): 1.05-1.11x at S512, 1.0-1.07x at S1024-2048, 1.00-1.02x at
  // S4096; on an H100 1.10-1.14x, 1.04-1.11x, 1.02-1.04x
  // (docs/results/cuda-sm90-fp8-cudnn-method-2026-11-27.md).
  const bool fused = fp8 && inst.vt_fused && p.cu_q == nullptr && !core::env_flag("FLASHCORE_SM90_VT_PREPASS");
  const bool prepass = fp8 && !inst.vt_in && !fused;
  const size_t vt_bytes = prepass || fused ? size_t(vt_blocks * p.kv_heads * p.dv * f.vt_sk + 15) / 16 * 16 : 0;
  const size_t sync_bytes = fused ? size_t(1 + p.batch * p.kv_heads + 3) / 4 * 16 : 0;
  const size_t rows = split ? size_t(f.o_rows() * p.heads) : 0;
  const size_t o_bytes = size_t(f.kv_splits) * rows * size_t(p.dv) * 4, ml_bytes = split ? size_t(f.kv_splits) * rows * 8 : 0;
  char* ws = nullptr;
  const char* ws_name = prepass || fused ? "e4m3 V^T" : "KV-split";
  if (vt_bytes + sync_bytes + o_bytes + ml_bytes > 0) {
    const cudaError_t ea = cudaMallocFromPoolAsync(reinterpret_cast<void**>(&ws), vt_bytes + sync_bytes + o_bytes + ml_bytes,
                                                   workspace_pool(dev.id), stream);
    if (ea != cudaSuccess) cuda_fail(Status::device_error, std::string("q: allocating the ") + ws_name + " workspace failed", ea);
  }
  cudaError_t e = cudaSuccess;
  const char* what = inst.key;
  if (prepass) {
    f.vt = ws;
    e = transpose_v_fp8(f, ws, f.vt_sk, stream);
    what = "the e4m3 V^T pre-pass";
  } else if (fused) {  // no splits on these (persistent) kernels: sync_bytes is the workspace's tail
    f.vt = ws;
    f.vt_sync = reinterpret_cast<unsigned*>(ws + vt_bytes);
    f.vt_kv_heads = int(p.kv_heads);
    f.vt_head_units = int(f.vt_sk / 32) * int(p.dv / 128);
    e = cudaMemsetAsync(f.vt_sync, 0, sync_bytes, stream);
    what = "the e4m3 V^T counters' memset";
  }
  if (e == cudaSuccess) {
    if (split) {
      f.part_o = reinterpret_cast<float*>(ws + vt_bytes + sync_bytes);  // both multiples of 16
      f.part_ml = reinterpret_cast<float2*>(ws + vt_bytes + sync_bytes + o_bytes);  // o_bytes: a multiple of 8
    }
    e = inst.fn(f, stream);
    what = inst.key;
  }
  if (e == cudaSuccess && split) {
    e = kv_combine(f, p.out_dtype == DType::bf16, stream);
    what = "kv_combine";
  }
  const cudaError_t ef = ws != nullptr ? cudaFreeAsync(ws, stream) : cudaSuccess;
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string("CUDA kernel ") + what + " failed to launch", e);
  if (ef != cudaSuccess) cuda_fail(Status::device_error, std::string("q: freeing the ") + ws_name + " workspace failed", ef);
}

// A forced key, "<key>" or "<key>+kv<N>": the key into *key, N (1 .. 64) returned, 1 without.
int forced_key(const char* impl, std::string* key) {
  *key = impl;
  const size_t kv = key->rfind("+kv");
  if (kv == std::string::npos || kv == 0) return 1;
  char* end = nullptr;
  const long n = std::strtol(key->c_str() + kv + 3, &end, 10);
  if (*end != '\0' || n < 1 || n > 64)
    throw_error(Status::unsupported, std::string("params.impl: '") + impl + "': the KV split count must be 1 .. 64");
  key->resize(kv);
  return int(n);
}

// Names the kernel that runs in times: its key, "+gqa<G>" for packed query heads, "+kv<N>"
// for KV splits, "+chord" for an fp8 kernel's chord form (Exp2Mode::fast without lse).
void name_kernel(PhaseTimes* times, const char* key, const FwdParams& f) {
  if (times == nullptr) return;
  times->kernel = key;
  if (f.pack_shift > 0) times->kernel += "+gqa" + std::to_string(1 << f.pack_shift);
  if (f.kv_splits > 1) times->kernel += "+kv" + std::to_string(f.kv_splits);
  if (f.exp_chord) times->kernel += "+chord";
  times->strategy = to_string(Strategy::online);
}

// fp8 (e4m3) q/k/v: the Hopper kernel only (FC_SM90_FWD e4m3 rows), D == Dv == the row's
// head dim, f16/bf16 output. V is transposed into a workspace by a pre-pass on the
// caller's stream (vt_fp8.cu), then the kernel runs (launch). GQA packing, KV splits and
// varlen batches as for the 16-bit kernels (gqa_pack_shift, kv_split_count).
void attention_fp8(const core::AttentionProblem& p, const DeviceInfo& dev, PhaseTimes* times) {
  if (!(dev.major == 9 && dev.minor == 0))
    throw_error(Status::unsupported, "q: dtype e4m3 runs on the Hopper kernels only (compute capability 9.0); device " +
                                         std::to_string(dev.id) + " is sm" + std::to_string(dev.major) +
                                         std::to_string(dev.minor));
  check_pointers(p, dev);
  check_device_pointer(p.q_descale_heads, "params.q_descale_heads", dev.id);
  check_device_pointer(p.k_descale_heads, "params.k_descale_heads", dev.id);
  check_device_pointer(p.v_descale_heads, "params.v_descale_heads", dev.id);
  if (p.tile_m != 0)
    throw_error(Status::unsupported, "params.tile_m: the e4m3 kernels have no tile choice (leave tile_m/tile_n 0)");
  int64_t sq = p.sq, sk = p.sk;  // the longest sequences
  longest_sequences(p, &sq, &sk);
  const int pack_shift = gqa_pack_shift(p, sq);
  // The tile choice reads the mean key length (varlen: p.sk is the packed total).
  const int64_t sk_mean = p.cu_q != nullptr ? p.sk / std::max<int64_t>(p.batch, 1) : p.sk;
  // The e4m3 row for the head dim (table order = preference), or the forced key. With
  // lo = 4096 and hi = 8192 keys (a band mask, causal or windows: 8192 and 16384):
  // - the 64x128 tile (two CTAs per SM) where a head's (GQA-packed) rows fit one 64-row
  //   tile (its "_vt" row, V^T made in the kernel: no pre-pass reading and writing V once
  //   more; H200, B32 H32/8 Sq1 D128, Sk4096 163 -> 80 us, Sk16384 593 -> 295; session
  //   21), or where Sk < hi and the 128-row items leave SMs idle;
  // - else the 128-row tile: the first (hd128: 192 keys) from hi / 4 keys on (banded:
  //   hi / 2), else the first with 128 keys; its persistent variant ("_p") where Sk <= lo
  //   and its items outnumber the SMs. (Causal S4096 took the 192-key tile until session
  //   34: H200, randn, 128x128_s2_p 748 TFLOP/s, 753 with Q in registers, against
  //   128x192_s3_p's 685; at causal S8192 the 192-key one stays ahead, 860 against 846.)
  // Measured on an H200, our kernels and cuDNN's fp8 SDPA interleaved in one process
  // (bench/peers/sdpa_interleaved.py --dtype e4m3 --all-kernels, 3 rounds; randn inputs and
  // flashcore_cuda_timing's wider codes), hd128 TFLOP/s per call, randn / codes, against the
  // previous rule's choice (192 keys from Sk = 768, persistent to 8192 either way):
  // S1024 128x128_s2_p 594 / 498 vs 128x192_s3_p 569 / 488; S8192 128x192_s3 902 / 836
  // vs "_p" 896 / 821; causal S1024, S2048 128x128_s2_p 398 / 323 and 565 / 520 vs 367 /
  // 297 and 545 / 519; the rows between take 128x192_s3_p, which speculates since session
  // 30 (fwd_sm90_traits.hpp: kSpeculate; docs/results/cuda-sm90-fp8-2026-11-22.md, session
  // 30). hd256 (no 64-row tile, one 128-row tile) keeps the persistent bounds of session 25.
  constexpr int64_t kFp8Lo = 4096, kFp8Hi = 8192;
  const bool banded = p.banded();
  const int64_t lo = banded ? 2 * kFp8Lo : kFp8Lo, hi = banded ? 2 * kFp8Hi : kFp8Hi;
  const int64_t wide = banded ? hi / 2 : hi / 4;  // keys from which the 192-key tile (hd128) is taken
  auto takes = [&](const Instance& i) {
    return i.arch == 90 && i.dtype == DType::e4m3 && p.d == i.head_dim && p.dv == i.head_dim &&
           i.smem() <= dev.smem_optin;
  };
  const bool one_tile = sq << pack_shift <= 64;
  const int64_t rows = sq << pack_shift, item_heads = p.heads >> pack_shift;
  const Instance *tile64 = nullptr, *tile64_vt = nullptr, *tall = nullptr, *fallback = nullptr;
  bool any = false;
  for (const Instance& i : kInstances)
    if (i.arch == 90 && i.dtype == DType::e4m3) {
      any = true;
      if (!takes(i) || i.persistent) continue;  // persistent rows: below, as the taller row's variant
      if (i.block_m == 64) {  // the 64x192 row: forced keys only
        const Instance*& slot = i.vt_in ? tile64_vt : tile64;
        if (slot == nullptr && i.block_n == 128) slot = &i;
        continue;
      }
      fallback = &i;
      if (tall == nullptr && (sk_mean >= wide || i.block_n == 128)) tall = &i;
    }
  const Instance* inst = nullptr;
  const bool idle = tall == nullptr || tall->items(rows, item_heads, p.batch) <= dev.sms;
  if (tile64 != nullptr && (one_tile || (sk_mean < hi && idle))) inst = one_tile && tile64_vt != nullptr ? tile64_vt : tile64;
  if (inst == nullptr && !one_tile && !idle && sk_mean <= lo)
    if (const Instance* v = persistent_variant(*tall); v != nullptr && takes(*v)) inst = v;
  if (inst == nullptr) inst = tall != nullptr ? tall : fallback != nullptr ? fallback : tile64;
  int kv_splits = 0;  // 0: the rule (kv_split_count); a forced key runs unsplit or names a count
  if (p.impl != nullptr && p.impl[0] != '\0') {
    std::string key;
    kv_splits = forced_key(p.impl, &key);
    inst = find_key(key.c_str());
    if (inst == nullptr || !takes(*inst))
      throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' is not an e4m3 kernel of this build for D = " +
                                           std::to_string(p.d) + ", Dv = " + std::to_string(p.dv));
    check_forced_splits(p.impl, kv_splits, *inst);
  }
  if (!any)
    throw_error(Status::unsupported, "q: dtype e4m3 has no CUDA kernel in this build (FLASHCORE_CUDA_DTYPES, "
                                     "FLASHCORE_CUDA_ARCHS with 90)");
  if (inst == nullptr) {
    // The head dims on offer, for the message only (string work kept off the calls that run).
    std::string dims;
    for (const Instance& i : kInstances)
      if (i.arch == 90 && i.dtype == DType::e4m3) {
        const std::string hd = std::to_string(i.head_dim);
        if ((", " + dims + ", ").find(", " + hd + ", ") == std::string::npos) dims += (dims.empty() ? "" : ", ") + hd;
      }
    throw_error(Status::unsupported, "q: head dims D = " + std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) +
                                         ": the e4m3 kernels of this build take D == Dv in {" + dims + "}");
  }
  std::string bad_tensor;
  const std::string bad_align = tensor_core_misalignment(p, &bad_tensor);
  if (!bad_align.empty()) throw_error(Status::invalid_argument, bad_tensor + ": " + bad_align);
  check_kernel_limits(p);

  FwdParams f = fwd_params(p, sq, sk, dev);
  f.scale_log2 *= p.q_descale * p.k_descale;
  f.o_scale = p.v_descale;
  f.out_bf16 = p.out_dtype == DType::bf16;
  f.exp_chord = p.exp2 == Exp2Mode::fast && p.lse == nullptr && inst->chord;
  f.o_tma = o_tma_mappable(p);
  f.q_descale_heads = p.q_descale_heads;
  f.k_descale_heads = p.k_descale_heads;
  f.v_descale_heads = p.v_descale_heads;
  f.vt_sk = p.cu_q != nullptr ? int64_t(fp8_vt_row0(p.sk, p.batch))
                               : std::max<int64_t>((p.sk + kFp8VtKeyAlign - 1) / kFp8VtKeyAlign * kFp8VtKeyAlign, kFp8VtKeyAlign);
  f.pack_shift = pack_shift;
  if (kv_splits == 0) kv_splits = kv_split_count(p, sq, sk, *inst, f.pack_shift, dev);
  f.kv_splits = kv_splits;
  name_kernel(times, inst->key, f);
  if (p.batch == 0 || p.heads == 0 || sq == 0) return;
  launch(p, dev, *inst, f, static_cast<cudaStream_t>(p.stream));
}

}  // namespace

void attention(const core::AttentionProblem& p, PhaseTimes* times) {
  const DeviceInfo dev = device_info(true);
  if (p.dtype == DType::e4m3) return attention_fp8(p, dev, times);
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw_error(Status::unsupported, std::string("q: dtype ") + to_string(p.dtype) +
                                         " is not supported by the CUDA kernels (f32, f16, bf16; e4m3 on Hopper)");
  check_pointers(p, dev);

  const int64_t hd = std::max(p.d, p.dv);
  if (hd > kMaxHeadDim)
    throw_error(Status::unsupported, "q: head dim " + std::to_string(hd) + " > " + std::to_string(kMaxHeadDim) +
                                         " is not supported by the CUDA kernels");
  check_kernel_limits(p);

  // Kernel choice. 16-bit: a tensor-core instance (by key, by tile, or the table), else
  // an error. fp32: the exact FFMA kernel when asked for (exact_fp32 or its key), else
  // a TF32 instance when the head dims and strides allow (multiples of 4 elements,
  // 16-byte rows) and one fits, else the FFMA kernel (exact; never a wrong answer).
  const Instance* inst = nullptr;
  const bool f32 = p.dtype == DType::f32;
  const bool forced = p.impl != nullptr && p.impl[0] != '\0';
  const bool simt_forced = f32 && forced && std::strcmp(p.impl, kSimtKey) == 0;
  const int64_t chunk = 16 / int64_t(dtype_size(p.dtype));  // elements per 16-byte copy
  const bool dims_ok = p.d % chunk == 0 && p.dv % chunk == 0;
  std::string bad_tensor;
  const std::string bad_align = tensor_core_misalignment(p, &bad_tensor);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  int64_t sq = p.sq, sk = p.sk;
  longest_sequences(p, &sq, &sk);
  // The sm90 kernels' output path and GQA packing (used when an sm90 kernel runs).
  const bool o_tma = o_tma_mappable(p);
  const int pack_shift = gqa_pack_shift(p, sq);
  if (!f32) {
    if (!dims_ok)
      throw_error(Status::unsupported, "q: head dims D = " + std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) +
                                           " must be multiples of 8 for the 16-bit CUDA kernels");
    if (!bad_align.empty()) throw_error(Status::invalid_argument, bad_tensor + ": " + bad_align);
  }
  int kv_splits = 0;  // 0: the rule (kv_split_count); a forced key runs unsplit or names a count ("+kv<N>")
  if (forced && !simt_forced) {
    std::string key;
    kv_splits = forced_key(p.impl, &key);
    inst = find_key(key.c_str());
    if (inst != nullptr) check_forced_splits(p.impl, kv_splits, *inst);
    if (inst != nullptr && inst->arch == 90) {
      const std::string why = sm90_refusal(p, *inst, dev);
      if (!why.empty())
        throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' " + why);
    }
    if (inst == nullptr || inst->dtype != p.dtype || inst->head_dim < hd)
      throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' is not a CUDA kernel of this build for " +
                                           to_string(p.dtype) + " head dim " + std::to_string(hd) +
                                           (f32 ? std::string(" (or ") + kSimtKey + ")" : std::string()));
    if (inst->smem() > dev.smem_optin)
      throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' needs more shared memory than this device has");
    if (f32 && p.exact_fp32)
      throw_error(Status::invalid_argument, std::string("params.impl: '") + p.impl +
                                                "' runs on TF32 tensor cores, but params.exact_fp32 asks for exact fp32");
    if (f32 && !dims_ok)
      throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' needs head dims that are multiples of 4 (D = " +
                                           std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) + ")");
    if (f32 && !bad_align.empty()) throw_error(Status::invalid_argument, bad_tensor + ": " + bad_align);
  } else if (!simt_forced && !(f32 && (p.exact_fp32 || !dims_ok || !bad_align.empty()))) {
    const int64_t nb = std::max<int64_t>(p.batch, 1);  // varlen: mean lengths
    inst = f32 ? nullptr : pick_sm90(p, dev, pack_shift);
    if (inst == nullptr)
      inst = pick(p, int(hd), p.cu_q != nullptr ? p.sq / nb : p.sq, p.cu_q != nullptr ? p.sk / nb : p.sk, dev);
  }
  const bool simt = inst == nullptr;  // f32 only: pick throws for 16-bit

  FwdParams f = fwd_params(p, sq, sk, dev);
  f.pack_shift = inst != nullptr && inst->arch == 90 ? pack_shift : 0;
  f.o_tma = o_tma;
  if (inst != nullptr && kv_splits == 0) kv_splits = kv_split_count(p, sq, sk, *inst, f.pack_shift, dev);
  f.kv_splits = std::max(kv_splits, 1);

  name_kernel(times, simt ? kSimtKey : inst->key, f);
  if (p.batch == 0 || p.heads == 0 || sq == 0) return;
  if (!simt) return launch(p, dev, *inst, f, stream);
  const cudaError_t e = fwd_sm80_f32_hd256_simt(f, stream);
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string("CUDA kernel ") + kSimtKey + " failed to launch", e);
}

std::vector<KernelInfo> kernels() {
  DeviceInfo dev;
  bool have = true;
  try {
    dev = device_info(true);
  } catch (const Error&) {
    have = false;
  }
  std::vector<KernelInfo> out;
  for (const Instance& i : kInstances)
    out.push_back({i.key, i.arch == 90 ? "sm90" : "sm80", have && i.runs_on(dev)});
  out.push_back({kSimtKey, "sm80", have});
  return out;
}

}  // namespace flashcore::cuda
