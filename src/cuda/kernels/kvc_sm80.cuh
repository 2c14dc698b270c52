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
//   (the K/V tiles are loaded by the whole CTA as in the forward). The warps' online
//   softmax states are merged at the end through shared memory. The forward's 64-row tile
//   spent 4x the MMA, ldmatrix and softmax instructions on rows that hold nothing, and that
//   kernel is bound by instruction issue on decode (docs/results/cuda-kvcache-2026-11-29.md).
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/kernels/fwd_sm80.cuh"

namespace flashcore::cuda {

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

template <typename T, int kHeadDim, int kBlockN, int kWarps, int kStages, int kMinBlocks>
struct KvcSplitTraits {
  static constexpr int kRows = 16, kThreads = 32 * kWarps, kKeys = kBlockN / kWarps;
  using Warp = sm80::WarpSliceTraits<T, kHeadDim, kKeys>;
  static constexpr int kRowBytes = Warp::kRowBytes;
  static constexpr int kTileQ = kRows * kRowBytes, kTileKV = kBlockN * kRowBytes;
  static constexpr int kSmem = kTileQ + 2 * kStages * kTileKV;
  // The merge's shared memory (over the K/V stages once the key loop is done): (m, l) of
  // every warp's rows, then warps 1.. kWarps-1's O rows (fp32).
  static constexpr int kMergeBytes = 2 * kWarps * kRows * 4 + (kWarps - 1) * kRows * kHeadDim * 4;
  static_assert(kMergeBytes <= 2 * kStages * kTileKV, "the merge fits the K/V stages");
  static_assert(kBlockN % kWarps == 0 && kStages >= 2, "tile shape");
};

template <typename T, int kHeadDim, int kBlockN, int kWarps, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) kvc_split_sm80_kernel(const FwdParams p) {
  using Tr = KvcSplitTraits<T, kHeadDim, kBlockN, kWarps, kStages, kMinBlocks>;
  using W = typename Tr::Warp;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads, kNF = W::kNF, kDF = W::kDF;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK = sQ + Tr::kTileQ;
  const uint32_t sV = sK + kStages * Tr::kTileKV;

  // p.kv_splits CTAs per query block (consecutive blockIdx.x); rows packed per KV head.
  const int split = int(blockIdx.x) % p.kv_splits, m0 = int(blockIdx.x) / p.kv_splits * kRows;
  const int shift = p.pack_shift;
  const int h = int(blockIdx.y) << shift, b = blockIdx.z;
  const SeqInfo seq = cache_seq_info(p, b);
  const int rows = seq.sq << shift;
  if (m0 >= rows) return;
  const int hk = h / p.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, t = lane % 4;
  const core::BandMask mask = band_mask(p, seq);
  const auto kv = [&] {  // keys before the block's first row's window: zero rows (CacheKvRows::key_lo)
    auto c = sm80::CacheKvRows<T, kBlockN>::make(p, b, hk);
    c.key_lo = int(mask.key_begin(m0 >> shift, seq.sk));
    return c;
  }();
  TileRange tiles = tile_range(mask, m0 >> shift, (min(m0 + kRows, rows) - 1) >> shift, seq.sk, kBlockN);
  {  // this split's run of the key tiles (near-equal runs, in order)
    const int ns = p.kv_splits, per = (tiles.hi - tiles.lo + ns - 1) / ns;
    tiles.lo = min(tiles.hi, tiles.lo + split * per);
    tiles.hi = min(tiles.hi, tiles.lo + per);
  }
  const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};

  // Q's rows (packed: (query, head) pairs), then the first K/V tiles, one commit group each.
  {
    const T* gq0 = static_cast<const T*>(p.q) + seq.bb * p.q_sb + seq.q_row0 * p.q_ss + h * p.q_sh;
    const auto q_row = [&](int r) {
      return gq0 + ((m0 + r) >> shift) * p.q_ss + ((m0 + r) & ((1 << shift) - 1)) * p.q_sh;
    };
    load_tile_rows<kRows, kHeadDim, kThreads>(sQ, q_row, gq0, rows - m0, p.d, tid);
  }
  ptx::cp_async_commit();
  auto pages = sm80::fetch_pages<kBlockN, kHeadDim, kThreads, T>(kv, tiles.lo, seq.sk, tid);
  auto load_kv = [&](int n, int stage) {
    sm80::load_kv<kBlockN, kHeadDim, kThreads, Tr::kTileKV, T>(sK, sV, kv, pages, n, stage, seq.sk, p.d, p.dv, tid);
    pages = sm80::fetch_pages<kBlockN, kHeadDim, kThreads, T>(kv, n + 1, seq.sk, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (tiles.lo + s < tiles.hi) load_kv(tiles.lo + s, s);
    ptx::cp_async_commit();
  }

  float acc[1][kDF][4];
#pragma unroll
  for (int i = 0; i < kDF; ++i) acc[0][i][0] = acc[0][i][1] = acc[0][i][2] = acc[0][i][3] = 0.f;
  OnlineSoftmax<2> sm;
  sm.init();
  // This warp's keys of each tile: rows [kKeys warp, kKeys (warp + 1)) of the K and V stages
  // (a multiple of 8 rows: the same chunk swizzle as the tile's first rows).
  sm80::Mainloop<T, W> ml;
  ml.init(sQ, sK + warp * Tr::kKeys * Tr::kRowBytes, sV + warp * Tr::kKeys * Tr::kRowBytes, 0, lane);
  const int row0 = m0 + lane / 4;  // this lane's rows: row0, row0 + 8
  if constexpr (W::kQInRegs) {
    ptx::cp_async_wait<kStages - 1>();  // the Q group (the oldest) has landed
    __syncthreads();
    ml.load_q_regs();
  }
  const float e = p.scale_log2 > 0.f ? p.scale_log2 : 1.f;
  for (int n = tiles.lo; n < tiles.hi; ++n) {
    const int it = n - tiles.lo;
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile n visible to all; every warp is done with tile n-1's stage
    {
      const int nn = n + kStages - 1;
      if (nn < tiles.hi) load_kv(nn, (it + kStages - 1) % kStages);
      ptx::cp_async_commit();
    }
    const uint32_t stage_off = (it % kStages) * Tr::kTileKV;
    float s[1][kNF][4];
    ml.qk(s, stage_off);
    mask_scores<1, kNF>(s, n >= tiles.full_lo && n < tiles.full_hi, p.scale_log2, band, row0,
                        n * kBlockN + warp * Tr::kKeys, t, shift);
    float corr[2];
    sm.template update<1, kNF>(s, e, corr);
    rescale_rows<1, kDF>(acc, corr);
    ml.pv(acc, s, stage_off);
  }
  ptx::cp_async_wait<0>();  // no copy may outlive the CTA's shared memory
  sm.finish();
  __syncthreads();  // every warp is done with the stages: the merge takes them

  // The warps' states of the same rows merged: M = max m_w, O = sum 2^(m_w - M) O_w, l =
  // sum 2^(m_w - M) l_w (a warp that saw no key of a row: m_w = -inf, weight 0; NaN stays).
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
  if (p.kv_splits > 1) {  // unnormalized rows and (m, mlo, l) for kv_combine.cu
    const int64_t i0 = (int64_t(split) * p.o_rows() + int64_t(b) * p.sq) * p.heads + h;
    store_partial<kDF>(acc[0], m_all, mlo, l_all, p.part_o, p.part_ml, i0, p.heads, row0, seq.sq, p.dv, t, shift);
  } else {
    T* go = static_cast<T*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h * p.o_sh;
    float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0;
    store_output<T, kDF>(acc[0], m_all, mlo, l_all, go, p.o_ss, glse, row0, seq.sq, p.dv, t, shift, p.o_sh, p.lse_sh);
  }
  // Rows the key loop could not take (sm80/cache_repair.cuh), computed again through the
  // cache's pages over this CTA's keys.
  if (__any_sync(0xffffffffu, fix != 0))
    sm80::repair_cache_rows<T, 1, kDF, kBlockN>(p, seq, b, h, shift, split, tiles.lo * kBlockN,
                                                min(tiles.hi * kBlockN, seq.sk), row0, lane, fix);
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks>
cudaError_t launch_kvc_sm80(const FwdParams& p, cudaStream_t stream) {
  if constexpr (kBlockM >= 16 * kWarps) {
    return launch_fwd_sm80<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks, false, true>(p, stream);
  } else {
    static_assert(kBlockM == 16, "the key-split form: 16 rows");
    using Tr = KvcSplitTraits<T, kHeadDim, kBlockN, kWarps, kStages, kMinBlocks>;
    auto kernel = kvc_split_sm80_kernel<T, kHeadDim, kBlockN, kWarps, kStages, kMinBlocks>;
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
