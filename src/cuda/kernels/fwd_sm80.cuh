// fwd_sm80: fused attention forward on mma.sync tensor cores (sm80, sm86, sm89, and sm90
// as a fallback), for f16/bf16 storage (m16n8k16) and fp32 storage on TF32 (m16n8k8):
// parts/operands.cuh holds what differs between them. One CTA computes kBlockM query
// rows of one (sequence, head); each of its kWarps warps owns kBlockM / kWarps of them
// (16 or 32: with 32, every K and V fragment read from shared memory feeds two MMAs).
// Per key tile of kBlockN keys:
//
//   S  = Q K^T                  ldmatrix Q, K from swizzled smem, 32 bytes of the head
//                               dim per k-step; fp32 accumulators
//   S' = S * scale * log2 e     band mask -> -inf, only on tiles the band cuts
//   P  = 2^(S' - m), O *= corr  OnlineSoftmax (registers; P never leaves them)
//   O += P V                    P converted to the A operand; V from shared memory
//
// K/V tiles stream through a kStages-deep cp.async ring (one __syncthreads per tile;
// kernels/sm80/load.cuh, by key block); the tile algebra is kernels/sm80/mainloop.cuh; the
// epilogue divides by the row sums and writes O (and lse) straight from registers
// (parts/epilogue.cuh). Hostile values (kernels/sm80/repair.cuh): a block whose O came out
// non-finite in a row with a finite sum runs its keys a second time, cleaning V in the
// tiles the band or Sk cuts; rows with large scores or a NaN are computed again after the
// epilogue, and cleaned NaN / Inf added back to the rows that see them.
//
// The score variants (softcap, ALiBi, sinks) run in a second kernel of each instance,
// fwd_sm80_kernel<..., true> (the same code, the hostile-value steps included but the second
// run: rows whose O came out non-finite are computed again exactly instead): S' is then the
// transformed score times log2 e (parts/score_mod.cuh) before the mask, and the sink joins
// each row before the epilogue; rows computed again take the variants too.
// attention_with_kvcache runs fwd_sm80_kernel<..., false, true> (kernels/kvc_sm80.cuh): K/V
// rows from a contiguous or paged cache (sm80/load.cuh: CacheKvRows), each sequence's
// length read on the device, and KV splits whose partial rows kv_combine.cu merges. It has
// no hostile-value steps yet: the second key run and the rows computed again read K/V as
// contiguous rows.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/kernels/cut_tiles.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm80/cache_repair.cuh"
#include "cuda/kernels/sm80/load.cuh"
#include "cuda/kernels/sm80/mainloop.cuh"
#include "cuda/kernels/sm80/repair.cuh"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/score_mod.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/softmax.cuh"
#include "cuda/parts/tile_load.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps, int kStages, int kMinBlocksPerSM>
struct FwdSm80Traits {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMI = kBlockM / (16 * kWarps);  // 16-row fragments per warp
  static constexpr int kRowBytes = SwizzledTile<kHeadDim, T>::kRowBytes;
  static constexpr int kNF = kBlockN / 8;    // 8-key fragments of S
  static constexpr int kKS = kHeadDim * int(sizeof(T)) / 32;  // 32-byte k-steps of Q K^T
  static constexpr int kDF = kHeadDim / 8;   // 8-column fragments of O
  static constexpr int kPK = kBlockN / MmaOps<T>::kPVKeys;  // k-steps of P V
  static constexpr int kTileQ = kBlockM * kRowBytes;  // bytes
  static constexpr int kTileKV = kBlockN * kRowBytes;
  // Then the record of V's cleaned keys (sm80/repair.cuh: clean_cut_v), kCutWords per cut
  // tile, at most kMaxCut of them (cut_tiles.hpp; the policy reads the size from there too).
  static constexpr int kMaxCut = max_cut_tiles(kBlockM, kBlockN), kCutWords = sm80_cut_words(kBlockM, kBlockN);
  static constexpr int kSmem = kTileQ + 2 * kStages * kTileKV + sm80_extra_smem(kBlockM, kBlockN);
  // CTAs per SM the register budget is fitted to (__launch_bounds__): more warps to
  // hide the ldmatrix/MMA/MUFU latencies vs more registers per thread (spills).
  static constexpr int kMinBlocks = kMinBlocksPerSM;
  // Q fragments held in registers for the whole key loop: measured on an H200
  // (docs/results/cuda-sm80-2026-11-22-tf32.md) 1-3% faster at hd64 16-bit; at hd128
  // mixed with 16-row warps (32 registers), 10-39% slower with 32-row warps (spills).
  static constexpr bool kQInRegs = kKS <= 4;
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockN % 16 == 0 && kStages >= 2, "tile shape");
  static_assert((kThreads & (kThreads - 1)) == 0, "threads: a power of two");
};

// kVariants: the score variants' kernel (FwdParams::variants; softcap and ALiBi on each
// tile's scores before the mask, the sink joined before the epilogue; parts/score_mod.cuh).
// The plain kernel (false) has none of its steps: its PTX is the same as before they were
// written (one kernel template: a body function inlined into two kernels numbered the PTX
// registers otherwise, and ptxas then named registers differently).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks,
          bool kVariants = false, bool kCache = false>
__global__ void __launch_bounds__(FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>::kThreads,
                                  FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>::kMinBlocks)
    fwd_sm80_kernel(const FwdParams p) {
  using Tr = FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>;
  constexpr int kMI = Tr::kMI, kNF = Tr::kNF, kDF = Tr::kDF;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK = sQ + Tr::kTileQ;
  const uint32_t sV = sK + kStages * Tr::kTileKV;
  const uint32_t bad_words = sV + kStages * Tr::kTileKV;  // the cleaned keys' record (Tr::kSmem)

  // Where the block's work is: its head, sequence and first row (heavy, late causal query
  // blocks first: they are launched in reverse order), the sequence's K/V rows, its key
  // tiles, the band, this thread and its rows row0 + 16 mi + {0, 8}. Found from the thread's
  // and block's indices read again (ptx::tid_x, ctaid) by each key loop run and the
  // epilogue: held over the first run, it made ptxas spill there when the second was added.
  // kCache: p.kv_splits CTAs per query block (consecutive blockIdx.x, `split` this one's run
  // of the key tiles), and the query heads of a KV head packed into the rows (GQA, shift =
  // log2 G > 0, as the sm90 kernels): row r is query r >> shift of head h + (r & (G - 1)).
  using Kv = std::conditional_t<kCache, sm80::CacheKvRows<T, kBlockN>, sm80::ContiguousKvRows<T, kBlockN>>;
  struct Where {
    SeqInfo seq;
    Kv kv;
    TileRange tiles;
    Band32 band;
    int h, b, m0, tid, row0, split, shift, rows;
  };
  auto where = [&p]() {
    // Two-warp tiles: tid masked to its range (which threadIdx.x would have told; kThreads is
    // a power of two), as ptxas then kept the tf32 hd256 32x16 tile's key loop free of spills;
    // other tiles (tf32 hd64 128x64, 16-bit hd256 64x32) spilled with the mask, not without.
    // kCache: threadIdx.x, which ptxas may read again where it would otherwise hold what it
    // derives from it (the opaque read left the hd256 key loop two registers short).
    const int tid = kCache              ? int(threadIdx.x)
                    : Tr::kThreads == 64 ? ptx::tid_x() & (Tr::kThreads - 1)
                                         : ptx::tid_x();
    const int3 block = ptx::ctaid();
    const int split = kCache ? block.x % p.kv_splits : 0;
    const int m_block = kCache ? int(gridDim.x) / p.kv_splits - 1 - block.x / p.kv_splits : int(gridDim.x) - 1 - block.x;
    const int shift = kCache ? p.pack_shift : 0;
    const int h = block.y << shift, b = block.z;
    const int m0 = m_block * kBlockM;
    const SeqInfo seq = kCache ? cache_seq_info(p, b) : seq_info(p, b);
    const int rows = seq.sq << shift;
    const int hk = h / p.group;
    const core::BandMask mask = band_mask(p, seq);
    TileRange tiles = tile_range(mask, m0 >> shift, (min(m0 + kBlockM, rows) - 1) >> shift, seq.sk, kBlockN);
    if constexpr (kCache) {  // this split's run of the key tiles (near-equal runs, in order)
      const int ns = p.kv_splits, per = (tiles.hi - tiles.lo + ns - 1) / ns;
      tiles.lo = min(tiles.hi, tiles.lo + split * per);
      tiles.hi = min(tiles.hi, tiles.lo + per);
    }
    const Kv kv = [&] {
      if constexpr (kCache)
        return sm80::CacheKvRows<T, kBlockN>::make(p, b, hk);
      else
        return sm80::ContiguousKvRows<T, kBlockN>{
            static_cast<const T*>(p.k) + seq.bb * p.k_sb + seq.k_row0 * p.k_ss + hk * p.k_sh,
            static_cast<const T*>(p.v) + seq.bb * p.v_sb + seq.k_row0 * p.v_ss + hk * p.v_sh, p.k_ss, p.v_ss};
    }();
    return Where{seq,   kv, tiles, Band32{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk},
                 h,     b,  m0,    tid,
                 m0 + tid / 32 * 16 * kMI + tid % 32 / 4,
                 split, shift, rows};
  };
  {
    const Where w = where();
    if (w.m0 >= w.rows) return;
    // Prologue: Q, one commit group (each key loop run loads its first K/V tiles).
    if (w.shift > 0) {  // packed rows: (query, head) pairs
      const T* gq0 = static_cast<const T*>(p.q) + w.seq.bb * p.q_sb + w.seq.q_row0 * p.q_ss + w.h * p.q_sh;
      const int shift = w.shift, m0 = w.m0;
      const auto q_row = [&](int r) {
        return gq0 + ((m0 + r) >> shift) * p.q_ss + ((m0 + r) & ((1 << shift) - 1)) * p.q_sh;
      };
      load_tile_rows<kBlockM, kHeadDim, Tr::kThreads>(sQ, q_row, gq0, w.rows - w.m0, p.d, w.tid);
    } else {
      const T* gq = static_cast<const T*>(p.q) + w.seq.bb * p.q_sb + (w.seq.q_row0 + w.m0) * p.q_ss + w.h * p.q_sh;
      load_tile<kBlockM, kHeadDim, Tr::kThreads>(sQ, gq, p.q_ss, w.seq.sq - w.m0, p.d, w.tid);
    }
    ptx::cp_async_commit();
  }

  float acc[kMI][kDF][4];
  OnlineSoftmax<2 * kMI> sm;
  // The key loop, O and the softmax state from scratch. kClean (the second run, below): V's
  // NaN / Inf in the tiles the band or Sk cuts set to 0 and recorded before P V
  // (clean_cut_v); returns whether any was.
  auto key_loop = [&](auto clean) {
    constexpr bool kClean = decltype(clean)::value;
    const Where w = where();
    const TileRange& tiles = w.tiles;
    const int tid = w.tid, t = tid % 4;
    // K/V tiles are loaded in order, each with the page ids fetched when the last one was
    // (the KV cache's paged rows; nothing for the other policies).
    const auto fetch_pages = [&](int n) {
      if constexpr (kCache)
        return sm80::fetch_pages<kBlockN, kHeadDim, Tr::kThreads, T>(w.kv, n, w.seq.sk, tid);
      else
        return sm80::NoPages{};
    };
    auto pages = fetch_pages(tiles.lo);
    auto load_kv = [&](const Kv& kv, int n, int stage) {
      sm80::load_kv<kBlockN, kHeadDim, Tr::kThreads, Tr::kTileKV, T>(sK, sV, kv, pages, n, stage, w.seq.sk, p.d, p.dv,
                                                                     tid);
      pages = fetch_pages(n + 1);
    };
    sm80::Mainloop<T, Tr> ml;
    ml.init(sQ, sK, sV, tid / 32, tid % 32);
    [[maybe_unused]] float slope2 = 0.f;  // variants: the ALiBi slope times log2 e
    if constexpr (kVariants) slope2 = alibi_slope_log2(p, w.b, w.h);
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int i = 0; i < kDF; ++i) acc[mi][i][0] = acc[mi][i][1] = acc[mi][i][2] = acc[mi][i][3] = 0.f;
    sm.init();
    {
      // kCache: keys before the block's first row's window load as zero rows
      // (CacheKvRows::key_lo). They lie in the first tile (tiles.lo's, where that row's keys
      // begin), which this prologue loads, so the key loop's loads leave key_lo at 0 and
      // hold no register for it.
      Kv kv = w.kv;
      if constexpr (kCache) kv.key_lo = int(band_mask(p, w.seq).key_begin(w.m0 >> w.shift, w.seq.sk));
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (tiles.lo + s < tiles.hi) load_kv(kv, tiles.lo + s, s);
        ptx::cp_async_commit();
      }
    }
    if constexpr (Tr::kQInRegs) {
      ptx::cp_async_wait<kStages - 1>();  // the Q group (the oldest) has landed
      __syncthreads();
      ml.load_q_regs();
    }
    bool cleaned = false;
    int cut_k = 0;  // kClean: the cut tiles so far (CutTiles' ordinal of the next)
    if constexpr (kClean) {  // the record zeroed (the loop's first barrier orders it before its use)
      for (int i = tid; i < Tr::kCutWords; i += Tr::kThreads) ptx::sts32(bad_words + 4u * i, 0u);
    }
    for (int n = tiles.lo; n < tiles.hi; ++n) {
      const int it = n - tiles.lo;
      ptx::cp_async_wait<kStages - 2>();
      __syncthreads();  // tile n visible to all; every warp is done with tile n-1's stage
      {
        const int nn = n + kStages - 1;
        if (nn < tiles.hi) load_kv(w.kv, nn, (it + kStages - 1) % kStages);
        ptx::cp_async_commit();
      }
      const uint32_t stage_off = (it % kStages) * Tr::kTileKV;
      const bool full = n >= tiles.full_lo && n < tiles.full_hi;
      if constexpr (kClean) {
        if (!full) {
          cleaned |= sm80::clean_cut_v<T, Tr>(sV + stage_off, bad_words, cut_k++, tid);
          __syncthreads();  // the cleaned tile, for every warp
        }
      }
      float s[kMI][kNF][4];
      ml.qk(s, stage_off);
      // variants: the scores go to the log2 domain here, and the mask and softmax take factor 1
      if constexpr (kVariants) {
        float ro[2 * kMI];  // (side 0: none)
        transform_scores<kMI, kNF>(s, p, ScoreFold(p, slope2, false), 0, w.band.offset, w.row0, n * kBlockN, t, ro);
      }
      mask_scores<kMI, kNF>(s, full, kVariants ? 1.f : p.scale_log2, w.band, w.row0, n * kBlockN, t, w.shift);
      float corr[2 * kMI];
      sm.template update<kMI, kNF>(s, kVariants ? 1.f : p.scale_log2 > 0.f ? p.scale_log2 : 1.f, corr);
      rescale_rows<kMI, kDF>(acc, corr);
      ml.pv(acc, s, stage_off);
    }
    ptx::cp_async_wait<0>();  // no copy may outlive the CTA's shared memory
    sm.finish();
    return kClean && __syncthreads_or(cleaned);
  };
  key_loop(std::false_type{});
  // O non-finite in a row whose sum is not (V's NaN / Inf, at a key the row may not see: P V
  // multiplies every key of a tile, 0 * NaN is NaN): the block runs its keys again, cleaning
  // (rare; the barrier also frees the stages for the second run).
  // The variant kernels take no second run (its registers made ptxas spill there): their
  // rows with O non-finite are computed again exactly instead (flags below), over the keys
  // each row sees.
  bool cleaned = false;
  if constexpr (!kCache && !kVariants) {
    if (__syncthreads_or(sm80::nonfinite_rows<kMI, kDF>(acc, sm.l))) cleaned = key_loop(std::true_type{});
  }

  zero_empty_rows<kMI, kDF>(acc, sm.l);
  // The rows repair() takes (l NaN: computed again; l = 0: no finite score): the variant
  // kernel reads them here, before a sink sets l = 1; the plain one after the epilogue.
  uint32_t flags = 0;
  if constexpr (kVariants) flags = sm80::row_flags<kMI>(sm.l) | sm80::nonfinite_row_bits<kMI, kDF>(acc, sm.l);
  if constexpr (kCache) flags = sm80::cache_fix_rows<kMI, kDF>(acc, sm.l);  // (sm80/cache_repair.cuh)
  const Where w = where();
  if constexpr (kVariants) {
    if (p.sinks != nullptr) {  // the sink joins each row: O's rows scaled here, l = 1, m = lse log2 e
      const float sink = p.sinks[w.h];
      float f[2 * kMI];
#pragma unroll
      for (int r = 0; r < 2 * kMI; ++r) {  // l = 0: f = 0, lse = the sink; l NaN: NaN (computed again)
        float lse;
        f[r] = join_sink_log2(sm.m[r] + sm.mlo[r], sm.l[r], sink, lse);
        sm.m[r] = lse * kLog2eF;
        sm.mlo[r] = 0.f;
        sm.l[r] = 1.f;
      }
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int df = 0; df < kDF; ++df) {
          acc[mi][df][0] *= f[2 * mi];
          acc[mi][df][1] *= f[2 * mi];
          acc[mi][df][2] *= f[2 * mi + 1];
          acc[mi][df][3] *= f[2 * mi + 1];
        }
    }
  }
  if (kCache && p.kv_splits > 1) {  // unnormalized rows and (m, mlo, l) for kv_combine.cu
    const int64_t i0 = (int64_t(w.split) * p.o_rows() + int64_t(w.b) * p.sq) * p.heads + w.h;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
      store_partial<kDF>(acc[mi], sm.m + 2 * mi, sm.mlo + 2 * mi, sm.l + 2 * mi, p.part_o, p.part_ml, i0, p.heads,
                         w.row0 + 16 * mi, w.seq.sq, p.dv, w.tid % 4, w.shift);
  } else {
    T* go = static_cast<T*>(p.o) + w.seq.bb * p.o_sb + w.seq.q_row0 * p.o_ss + w.h * p.o_sh;
    float* glse = p.lse == nullptr ? nullptr : p.lse + w.seq.bb * p.lse_sb + w.h * p.lse_sh + w.seq.q_row0;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)  // (packed rows: the KV cache's kernel)
      store_output<T, kDF>(acc[mi], sm.m + 2 * mi, sm.mlo + 2 * mi, sm.l + 2 * mi, go, p.o_ss, glse,
                           w.row0 + 16 * mi, w.seq.sq, p.dv, w.tid % 4, w.shift, p.o_sh, p.lse_sh);
  }
  if constexpr (kCache) {  // rows the key loop could not take, computed again through the cache's pages
    if (__any_sync(0xffffffffu, flags != 0))
      sm80::repair_cache_rows<T, T, kMI, kDF, kBlockN>(p, w.seq, w.b, w.h, w.shift, w.split, w.tiles.lo * kBlockN,
                                                         min(w.tiles.hi * kBlockN, w.seq.sk), w.row0, w.tid % 32,
                                                         flags, p.scale_log2, 1.f);
    return;
  }
  // Rows the softmax could not take (l NaN) computed again, and V's cleaned NaN / Inf added
  // back to the rows that see them (sm80/repair.cuh).
  if constexpr (!kVariants) flags = sm80::row_flags<kMI>(sm.l);
  if (__any_sync(0xffffffffu, (flags & 0xFFFFu) != 0) || cleaned)
    sm80::repair<T, Tr, kVariants>(p, w.b, w.h, w.m0, ptx::tid_x(), flags, cleaned, bad_words);
}

// The launcher of one instance: the plain kernel, or with kVariants the variant kernel
// (the build compiles each in a translation unit of its own, src/cuda/sources.cmake: the
// plain one's code does not depend on the other's presence, and the instance's plain
// launcher hands calls with FwdParams::variants to the variant one).
// kCache: the KV cache's kernel (kernels/kvc_sm80.cuh), p.kv_splits CTAs per query block of
// (query, head) rows packed per KV head (p.pack_shift).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks,
          bool kVariants = false, bool kCache = false>
cudaError_t launch_fwd_sm80(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>;
  auto kernel = fwd_sm80_kernel<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks, kVariants, kCache>;
  static std::atomic<uint64_t> smem_done{0};
  const cudaError_t e = opt_in_smem_once(kernel, Tr::kSmem, smem_done);
  if (e != cudaSuccess) return e;
  dim3 grid((p.sq + kBlockM - 1) / kBlockM, p.heads, p.batch);
  if constexpr (kCache) {
    if (p.kv_splits < 1 || (p.kv_splits > 1 && (p.part_o == nullptr || p.part_ml == nullptr)))
      return cudaErrorInvalidValue;
    const int rows = p.sq << p.pack_shift;
    grid = dim3(unsigned((rows + kBlockM - 1) / kBlockM * p.kv_splits), unsigned(p.heads >> p.pack_shift),
                unsigned(p.batch));
  }
  kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
