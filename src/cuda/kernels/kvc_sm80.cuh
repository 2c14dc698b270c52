// kvc_sm80: attention over a KV cache (attention_with_kvcache) on mma.sync, every GPU from
// sm80. K/V rows come from a contiguous or paged cache (sm80/load.cuh: CacheKvRows), each
// sequence's length from FwdParams::seqlens_k on the device, the query heads of a KV head
// packed into one tile's rows (FwdParams::pack_shift), and KV splits for kv_combine.cu. The
// rows FC_SM80(kvc, ...) of instances.inc are launched here. The new keys are written into
// the cache before (kv_append.cu), on the same stream. Two forms, by the row's tile:
//
// - block_m >= 16 warps: the sm80 forward kernel (fwd_sm80.cuh with kCache), each warp its
//   16 or 32 rows of the tile against every key of a K/V tile.
// - block_m = 16 (fewer rows than warps x 16): the key-split form below, for decode and
//   short speculative queries, whose few packed rows would fill a few of a 64-row tile's.
//   Every warp takes all 16 rows against its own kBlockN / kWarps keys of each K/V tile
//   (the K/V tiles are loaded by the whole CTA as in the forward; over an e4m3 cache each
//   warp copies its own rows, below). The warps' online
//   softmax states are merged at the end through shared memory. The forward's 64-row tile
//   spent 4x the MMA, ldmatrix and softmax instructions on rows that hold nothing, and that
//   kernel is bound by instruction issue on decode (docs/results/cuda-kvcache-2026-11-29.md).
//
// An fp8 cache (rows whose type column is Fp8Cache<T>: e4m3 K/V under f16 / bf16 q) takes the
// key-split form at every row count, with its own key loop (sm80/keys_as_m.cuh): the keys
// as the MMA's M and the packed rows as N (8 per fragment: one fragment for up to 8 rows, the
// decode case, two for up to 16), K's fragments read straight from the cp.async ring's e4m3
// tiles and widened in registers, V's rows widened by each warp into a 16-bit tile
// (sm80/load.cuh: widen_rows, exact). Each warp copies, widens and reads only its own rows
// of every tile (its ring rows), so __syncwarp orders them and the key loop has no CTA
// barrier (the e4m3 loop is bound by instruction issue and latency, not by memory). At the
// end the warps' states take the row layout of the 16-bit loop (KeysAsM::to_rows) and the
// merge, repair and epilogue below are shared. The dequantization factors are folded in: K's
// (FwdParams::scale_log2 times k_descale on the host, times k_descale_heads[b Hkv + hk] here)
// into the scores' scale, V's (o_scale, v_descale_heads) into the output rows.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "cuda/kernels/fwd_sm80.cuh"
#include "cuda/kernels/sm80/keys_as_m.cuh"

namespace flashcore::cuda {

// The type column of an fp8 cache's kvc rows: e4m3 K/V, T (f16 / bf16) q, out and MMAs.
template <typename T>
struct Fp8Cache {};
// A kvc row's (q and MMA type, cache element type).
template <typename T>
struct KvcTypes {
  using Q = T;
  using C = T;
};
template <typename T>
struct KvcTypes<Fp8Cache<T>> {
  using Q = T;
  using C = __nv_fp8_e4m3;
};

namespace sm80 {

// One warp's view of a key-split tile (sm80::Mainloop's traits): its 16 rows against kKeys
// keys of the K/V stage.
template <typename T, int kHeadDim, int kKeys>
struct WarpSliceTraits {
  static constexpr int kMI = 1, kNF = kKeys / 8, kDF = kHeadDim / 8;
  static constexpr int kKS = kHeadDim * int(sizeof(T)) / 32;
  static constexpr int kPK = kKeys / MmaOps<T>::kPVKeys;
  static constexpr int kRowBytes = SwizzledTile<kHeadDim, T>::kRowBytes;
  static constexpr bool kQInRegs = kKS <= 4;
  static_assert(kKeys % 16 == 0, "a warp's key slice: whole 16-key blocks (ldmatrix x4 pairs, one P V k-step)");
};

}  // namespace sm80

// TC: the cache's element type (T, or __nv_fp8_e4m3: the ring holds TC tiles, widened into
// one T tile of K and one of V per key tile).
template <typename T_, typename TC_, int kHeadDim_, int kBlockN_, int kWarps_, int kStages_, int kMinBlocks>
struct KvcSplitTraits {
  using T = T_;
  using TC = TC_;
  static constexpr int kHeadDim = kHeadDim_, kBlockN = kBlockN_, kWarps = kWarps_, kStages = kStages_;
  static constexpr bool kWiden = !std::is_same_v<T, TC>;
  static constexpr int kRows = 16, kThreads = 32 * kWarps, kKeys = kBlockN / kWarps;
  using Warp = sm80::WarpSliceTraits<T, kHeadDim, kKeys>;
  static constexpr int kRowBytes = Warp::kRowBytes;
  static constexpr int kTileQ = kRows * kRowBytes, kTileKV = kBlockN * kRowBytes;
  static constexpr int kTileRing = kBlockN * SwizzledTile<kHeadDim, TC>::kRowBytes;  // a ring tile (TC)
  static constexpr int kOffK = kTileQ, kOffV = kOffK + kStages * kTileRing;
  static constexpr int kOffWide = kOffV + kStages * kTileRing;  // kWiden: the T tile of V
  static constexpr int kSmem = kOffWide + (kWiden ? kTileKV : 0);
  // The merge's shared memory (over the K/V tiles once the key loop is done): (m, l) of
  // every warp's rows, then warps 1.. kWarps-1's O rows (fp32).
  static constexpr int kMergeBytes = 2 * kWarps * kRows * 4 + (kWarps - 1) * kRows * kHeadDim * 4;
  static_assert(kMergeBytes <= kSmem - kTileQ, "the merge fits the K/V tiles");
  static_assert(!kWiden || kWarps * sm80::KeysAsM<T, kHeadDim, 2>::kScratch <= kSmem - kTileQ,
                "the e4m3 loop's to_rows scratch fits the K/V tiles");
  static_assert(kBlockN % kWarps == 0 && kStages >= 2, "tile shape");
};

// Where a key-split CTA stands: its sequence, KV head, rows and run of key tiles, and its
// shared-memory tiles (kvc_split_cta).
struct KvcCta {
  SeqInfo seq;
  int b, h, hk, m0, rows, shift, split;
  TileRange tiles;
  int key_lo;          // keys below it: before every row's window (zero rows)
  uint32_t sQ, sK, sV;  // the Q tile, the K and V stages
  int tid, warp, lane;
};

// The K/V ring over cp.async (every GPU from sm80): CacheKvRows and its page ids, rows of
// the SwizzledTile layout, keys outside [key_lo, sk) and page ids outside the cache
// zero-filled by the copies. kWarpRing (the e4m3 cache): each warp copies and reads only
// its own kKeys rows of every key tile (rows [kKeys warp, kKeys (warp + 1)) of the ring's
// stages); its rows of tile n are the cache's "tile" n kWarps + warp of kKeys keys, and
// __syncwarp orders them. Otherwise the whole CTA copies each tile and a CTA barrier orders
// it. One commit group per tile (an empty one past the run), behind Q's group.
template <class Tr, bool kWarpRing>
struct CpAsyncKvRing {
  using TC = typename Tr::TC;
  static constexpr int kHeadDim = Tr::kHeadDim, kStages = Tr::kStages, kWarps = Tr::kWarps;
  static constexpr int kRingRows = kWarpRing ? Tr::kKeys : Tr::kBlockN, kRingThreads = kWarpRing ? 32 : Tr::kThreads;
  // K's and V's tiles as Mainloop reads them: SwizzledTile rows.
  static constexpr int kKvRow = Tr::kRowBytes, kKvBlock = 128;
  sm80::CacheKvRows<TC, kRingRows> kv;
  sm80::TilePages<sm80::PagedWalk<kRingRows, kHeadDim, kRingThreads, TC>::kPasses> pages;
  uint32_t sK, sV;
  int ring_tid, warp, sk, d, dv, hi;

  struct None {};
  template <class Arg>  // (the TMA ring's argument: not used here)
  __device__ __forceinline__ CpAsyncKvRing(const FwdParams& p, const KvcCta& c, const Arg&) {
    kv = sm80::CacheKvRows<TC, kRingRows>::make(p, c.b, c.hk);
    kv.key_lo = c.key_lo;
    const uint32_t ring_w = kWarpRing ? c.warp * Tr::kKeys * SwizzledTile<kHeadDim, TC>::kRowBytes : 0;
    sK = c.sK + ring_w, sV = c.sV + ring_w;
    ring_tid = kWarpRing ? c.lane : c.tid;
    warp = c.warp, sk = c.seq.sk, d = p.d, dv = p.dv, hi = c.tiles.hi;
  }
  __device__ __forceinline__ int ring_tile(int n) const { return kWarpRing ? n * kWarps + warp : n; }
  __device__ __forceinline__ void load(int n, int stage) {
    sm80::load_kv<kRingRows, kHeadDim, kRingThreads, Tr::kTileRing, TC>(sK, sV, kv, pages, ring_tile(n), stage, sk,
                                                                       d, dv, ring_tid);
    pages = sm80::fetch_pages<kRingRows, kHeadDim, kRingThreads, TC>(kv, ring_tile(n + 1), sk, ring_tid);
  }
  // The first kStages - 1 tiles of [lo, hi).
  __device__ __forceinline__ void start(int lo) {
    pages = sm80::fetch_pages<kRingRows, kHeadDim, kRingThreads, TC>(kv, ring_tile(lo), sk, ring_tid);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (lo + s < hi) load(lo + s, s);
      ptx::cp_async_commit();
    }
  }
  // Q's group has landed (for the key loop's Q fragments).
  __device__ __forceinline__ void wait_q() { ptx::cp_async_wait<kStages - 1>(); }
  // Key tile `it` of the run has landed, this thread's copies (a barrier then orders all).
  __device__ __forceinline__ void wait(int) { ptx::cp_async_wait<kStages - 2>(); }
  // Tile nn into `stage`, whose last reader is past the barrier.
  __device__ __forceinline__ void refill(int nn, int stage) {
    if (nn < hi) load(nn, stage);
    ptx::cp_async_commit();
  }
  // After the barrier, before this warp reads its rows of tile n: nothing to do here.
  __device__ __forceinline__ void clean(int, int, int) {}
  // No copy may outlive the CTA's shared memory.
  __device__ __forceinline__ void drain() { ptx::cp_async_wait<0>(); }
};

// The merge of the warps' states of the same rows (each warp saw its own keys of every
// tile), the epilogue (the output rows, or a KV split's partial rows for kv_combine.cu) and
// the repair of the rows the key loop could not take. Over the K/V tiles' shared memory: the
// caller's barrier has freed it.
template <class Tr>
__device__ __forceinline__ void kvc_merge_store(const FwdParams& p, const KvcCta& c, unsigned char* smem,
                                                float (&acc)[1][Tr::Warp::kDF][4], const OnlineSoftmax<2>& sm,
                                                float scale_log2, float o_scale) {
  using T = typename Tr::T;
  using TC = typename Tr::TC;
  constexpr int kRows = Tr::kRows, kWarps = Tr::kWarps, kHeadDim = Tr::kHeadDim, kDF = Tr::Warp::kDF;
  const int warp = c.warp, lane = c.lane, t = lane % 4, row0 = c.m0 + lane / 4;
  // M = max m_w, O = sum 2^(m_w - M) O_w, l = sum 2^(m_w - M) l_w (a warp that saw no key of
  // a row: m_w = -inf, weight 0; NaN stays).
  float* red_m = reinterpret_cast<float*>(smem + Tr::kTileQ);
  float* red_l = red_m + kWarps * kRows;
  float* red_o = red_l + kWarps * kRows;  // warps 1..: [warp - 1][row][kHeadDim]
  if (t == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      red_m[warp * kRows + lane / 4 + 8 * half] = sm.m[half];
      red_l[warp * kRows + lane / 4 + 8 * half] = sm.l[half];
    }
  }
  __syncthreads();
  float m_all[2], l_all[2], f[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = lane / 4 + 8 * half;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w * kRows + r]);
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = red_m[w * kRows + r];
      l += mw == -INFINITY ? 0.f : red_l[w * kRows + r] * exp2f(mw - mx);
    }
    m_all[half] = mx;
    l_all[half] = l;
    f[half] = sm.m[half] == -INFINITY ? 0.f : exp2f(sm.m[half] - mx);
  }
  rescale_rows<1, kDF>(acc, f);
  if (warp > 0) {
    float* o = red_o + (warp - 1) * kRows * kHeadDim;
#pragma unroll
    for (int df = 0; df < kDF; ++df)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[(lane / 4 + 8 * (i / 2)) * kHeadDim + df * 8 + 2 * t + i % 2] = acc[0][df][i];
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    const float* o = red_o + (w - 1) * kRows * kHeadDim;
#pragma unroll
    for (int df = 0; df < kDF; ++df)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][df][i] += o[(lane / 4 + 8 * (i / 2)) * kHeadDim + df * 8 + 2 * t + i % 2];
  }
  const float mlo[2] = {0.f, 0.f};  // (the merged maxima; rows computed again below carry their own)
  const uint32_t fix = sm80::cache_fix_rows<1, kDF>(acc, l_all);
  if constexpr (Tr::kWiden) {  // V's dequantization factor
    const float f2[2] = {o_scale, o_scale};
    rescale_rows<1, kDF>(acc, f2);
  }
  const SeqInfo& seq = c.seq;
  if (p.kv_splits > 1) {  // unnormalized rows and (m, mlo, l) for kv_combine.cu
    const int64_t i0 = (int64_t(c.split) * p.o_rows() + int64_t(c.b) * p.sq) * p.heads + c.h;
    store_partial<kDF>(acc[0], m_all, mlo, l_all, p.part_o, p.part_ml, i0, p.heads, row0, seq.sq, p.dv, t, c.shift);
  } else {
    T* go = static_cast<T*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + c.h * p.o_sh;
    float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + c.h * p.lse_sh + seq.q_row0;
    store_output<T, kDF>(acc[0], m_all, mlo, l_all, go, p.o_ss, glse, row0, seq.sq, p.dv, t, c.shift, p.o_sh,
                         p.lse_sh);
  }
  // Rows the key loop could not take (sm80/cache_repair.cuh), computed again through the
  // cache's pages over this CTA's keys.
  if (__any_sync(0xffffffffu, fix != 0))
    sm80::repair_cache_rows<T, TC, 1, kDF, Tr::kBlockN>(p, seq, c.b, c.h, c.shift, c.split,
                                                         c.tiles.lo * Tr::kBlockN,
                                                         min(c.tiles.hi * Tr::kBlockN, seq.sk), row0, lane, fix,
                                                         scale_log2, o_scale);
}

// One key-split CTA (the kernels below and kvc_sm90.cuh's): Ring16 is the 16-bit cache's
// K/V ring (CpAsyncKvRing, or the TMA ring of kvc_sm90.cuh, built from `ring_arg`); the
// e4m3 cache always takes the per-warp cp.async ring.
template <class Tr, class Ring16, class RingArg>
__device__ __forceinline__ void kvc_split_cta(const FwdParams& p, unsigned char* smem, const RingArg& ring_arg) {
  using T = typename Tr::T;
  using W = typename Tr::Warp;
  constexpr int kRows = Tr::kRows, kStages = Tr::kStages, kBlockN = Tr::kBlockN;
  constexpr int kHeadDim = Tr::kHeadDim, kThreads = Tr::kThreads, kDF = W::kDF, kNF = W::kNF;

  KvcCta c;
  c.sQ = ptx::smem_addr(smem);
  c.sK = c.sQ + Tr::kOffK;  // the ring
  c.sV = c.sQ + Tr::kOffV;
  // p.kv_splits CTAs per query block (consecutive blockIdx.x); rows packed per KV head.
  c.split = int(blockIdx.x) % p.kv_splits, c.m0 = int(blockIdx.x) / p.kv_splits * kRows;
  c.shift = p.pack_shift;
  c.h = int(blockIdx.y) << c.shift, c.b = blockIdx.z;
  c.seq = cache_seq_info(p, c.b);
  c.rows = c.seq.sq << c.shift;
  if (c.m0 >= c.rows) return;
  c.hk = c.h / p.group;
  c.tid = threadIdx.x, c.warp = c.tid / 32, c.lane = c.tid % 32;
  const int warp = c.warp, lane = c.lane, t = lane % 4, m0 = c.m0, shift = c.shift;
  const SeqInfo& seq = c.seq;
  // The scores' scale and the output's factor, with an fp8 cache's per-head factors.
  float scale_log2 = p.scale_log2, o_scale = p.o_scale;
  if constexpr (Tr::kWiden) {
    const int64_t hi = int64_t(c.b) * p.kv_heads + c.hk;
    if (p.k_descale_heads != nullptr) scale_log2 *= p.k_descale_heads[hi];
    if (p.v_descale_heads != nullptr) o_scale *= p.v_descale_heads[hi];
  }
  const core::BandMask mask = band_mask(p, seq);
  c.key_lo = int(mask.key_begin(m0 >> shift, seq.sk));  // keys before the block's first row's window
  c.tiles = tile_range(mask, m0 >> shift, (min(m0 + kRows, c.rows) - 1) >> shift, seq.sk, kBlockN);
  {  // this split's run of the key tiles (near-equal runs, in order)
    const int ns = p.kv_splits, per = (c.tiles.hi - c.tiles.lo + ns - 1) / ns;
    c.tiles.lo = min(c.tiles.hi, c.tiles.lo + c.split * per);
    c.tiles.hi = min(c.tiles.hi, c.tiles.lo + per);
  }
  const TileRange tiles = c.tiles;
  const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};
  using Ring = std::conditional_t<Tr::kWiden, CpAsyncKvRing<Tr, true>, Ring16>;
  Ring ring(p, c, ring_arg);

  // Q's rows (packed: (query, head) pairs), then the first K/V tiles.
  {
    const T* gq0 = static_cast<const T*>(p.q) + seq.bb * p.q_sb + seq.q_row0 * p.q_ss + c.h * p.q_sh;
    const auto q_row = [&](int r) {
      return gq0 + ((m0 + r) >> shift) * p.q_ss + ((m0 + r) & ((1 << shift) - 1)) * p.q_sh;
    };
    load_tile_rows<kRows, kHeadDim, kThreads>(c.sQ, q_row, gq0, c.rows - m0, p.d, c.tid);
  }
  ptx::cp_async_commit();
  ring.start(tiles.lo);

  const int row0 = m0 + lane / 4;  // this lane's rows in the row layout: row0, row0 + 8
  float acc[1][kDF][4];
  OnlineSoftmax<2> sm;  // (the e4m3 loop leaves its rows' m and l here, finished)
  const float e = scale_log2 > 0.f ? scale_log2 : 1.f;
  if constexpr (Tr::kWiden) {
    // Keys as the MMA's M (sm80/keys_as_m.cuh): K's fragments straight from the e4m3 ring,
    // V widened into this warp's 16-bit rows; 8 packed rows per N fragment.
    const uint32_t sVw = c.sQ + Tr::kOffWide;  // the warps' widened V rows
    const uint32_t ring_w = warp * Tr::kKeys * SwizzledTile<kHeadDim, typename Tr::TC>::kRowBytes;
    ring.wait_q();  // the Q group (the oldest) has landed, every thread's rows
    __syncthreads();
    VOperand<T, Tr::kRowBytes> vop;
    vop.init(sVw + warp * Tr::kKeys * Tr::kRowBytes, lane);
    const auto run = [&](auto nq_c) {
      constexpr int kNQ = decltype(nq_c)::value;
      sm80::KeysAsM<T, kHeadDim, kNQ> km;
      km.init(c.sQ, lane);
      for (int n = tiles.lo; n < tiles.hi; ++n) {
        const int it = n - tiles.lo;
        ring.wait(it);
        __syncwarp();  // this warp's rows of tile n landed; its reads of tile n-1's stage done
        ring.refill(n + kStages - 1, (it + kStages - 1) % kStages);
        const uint32_t off = (it % kStages) * Tr::kTileRing + ring_w;
        sm80::widen_rows<Tr::kKeys, kHeadDim, T, typename Tr::TC>(sVw + warp * Tr::kKeys * Tr::kRowBytes, c.sV + off,
                                                                  lane);
        __syncwarp();
        float s[kNQ][4];
        km.qk(s, c.sK + off, lane);
        km.mask(s, n >= tiles.full_lo && n < tiles.full_hi, scale_log2, band, m0, n * kBlockN + warp * Tr::kKeys,
                lane, shift);
        km.softmax_pv(s, e, vop, 0);
      }
      ring.drain();
      __syncthreads();  // every warp is done with the ring: to_rows' scratch is there
      km.to_rows(acc, sm.m, sm.l,
                 reinterpret_cast<float*>(smem + Tr::kTileQ + warp * sm80::KeysAsM<T, kHeadDim, kNQ>::kScratch),
                 lane);
    };
    if (c.rows - m0 <= 8)
      run(std::integral_constant<int, 1>{});
    else
      run(std::integral_constant<int, 2>{});
  } else {
#pragma unroll
    for (int i = 0; i < kDF; ++i) acc[0][i][0] = acc[0][i][1] = acc[0][i][2] = acc[0][i][3] = 0.f;
    sm.init();
    // This warp's keys of each tile: rows [kKeys warp, kKeys (warp + 1)) of the K and V stages
    // (a multiple of 8 rows: the same chunk swizzle as the tile's first rows).
    sm80::Mainloop<T, W, Ring::kKvRow, Ring::kKvBlock> ml;
    ml.init(c.sQ, c.sK + warp * Tr::kKeys * Ring::kKvRow, c.sV + warp * Tr::kKeys * Ring::kKvRow, 0, lane);
    if constexpr (W::kQInRegs) {
      ring.wait_q();  // the Q group has landed, every thread's rows
      __syncthreads();
      ml.load_q_regs();
    }
    for (int n = tiles.lo; n < tiles.hi; ++n) {
      const int it = n - tiles.lo;
      ring.wait(it);
      __syncthreads();  // tile n visible to all; every warp is done with tile n-1's stage
      ring.refill(n + kStages - 1, (it + kStages - 1) % kStages);
      ring.clean(n, it % kStages, lane);
      const uint32_t stage_off = (it % kStages) * Tr::kTileKV;
      float s[1][kNF][4];
      ml.qk(s, stage_off);
      mask_scores<1, kNF>(s, n >= tiles.full_lo && n < tiles.full_hi, scale_log2, band, row0,
                          n * kBlockN + warp * Tr::kKeys, t, shift);
      float corr[2];
      sm.template update<1, kNF>(s, e, corr);
      rescale_rows<1, kDF>(acc, corr);
      ml.pv(acc, s, stage_off);
    }
    ring.drain();
    sm.finish();
  }
  __syncthreads();  // every warp is done with the stages (and the scratch): the merge takes them
  kvc_merge_store<Tr>(p, c, smem, acc, sm, scale_log2, o_scale);
}

template <typename T, typename TC, int kHeadDim, int kBlockN, int kWarps, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) kvc_split_sm80_kernel(const FwdParams p) {
  using Tr = KvcSplitTraits<T, TC, kHeadDim, kBlockN, kWarps, kStages, kMinBlocks>;
  extern __shared__ __align__(128) unsigned char smem[];
  kvc_split_cta<Tr, CpAsyncKvRing<Tr, false>>(p, smem, typename CpAsyncKvRing<Tr, false>::None{});
}

// Row (type column R: T, or Fp8Cache<T>) of instances.inc.
template <typename R, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks>
cudaError_t launch_kvc_sm80(const FwdParams& p, cudaStream_t stream) {
  using T = typename KvcTypes<R>::Q;
  using TC = typename KvcTypes<R>::C;
  if constexpr (kBlockM >= 16 * kWarps) {
    static_assert(std::is_same_v<T, TC>, "an fp8 cache takes the key-split form");
    return launch_fwd_sm80<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks, false, true>(p, stream);
  } else {
    static_assert(kBlockM == 16, "the key-split form: 16 rows");
    using Tr = KvcSplitTraits<T, TC, kHeadDim, kBlockN, kWarps, kStages, kMinBlocks>;
    static_assert(!Tr::kWiden || Tr::kSmem == kvc_fp8_smem(kHeadDim, kBlockM, kBlockN, kStages),
                  "the registry's size of an e4m3 cache's row (cut_tiles.hpp)");
    auto kernel = kvc_split_sm80_kernel<T, TC, kHeadDim, kBlockN, kWarps, kStages, kMinBlocks>;
    static std::atomic<uint64_t> smem_done{0};
    const cudaError_t e = opt_in_smem_once(kernel, Tr::kSmem, smem_done);
    if (e != cudaSuccess) return e;
    if (p.kv_splits < 1 || (p.kv_splits > 1 && (p.part_o == nullptr || p.part_ml == nullptr)))
      return cudaErrorInvalidValue;
    const int rows = p.sq << p.pack_shift;
    const dim3 grid(unsigned((rows + kBlockM - 1) / kBlockM * p.kv_splits), unsigned(p.heads >> p.pack_shift),
                    unsigned(p.batch));
    kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(p);
    return cudaGetLastError();
  }
}

}  // namespace flashcore::cuda
