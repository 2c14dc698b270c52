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
// (parts/epilogue.cuh).
//
// The score variants (softcap, ALiBi, sinks) run in a second kernel of each instance,
// fwd_sm80_kernel<..., true> (the same code): S' is then the transformed score times log2 e
// (parts/score_mod.cuh) before the mask, and the sink joins each row before the epilogue.
// attention_with_kvcache runs fwd_sm80_kernel<..., false, true> (kernels/kvc_sm80.cuh): K/V
// rows from a contiguous or paged cache (sm80/load.cuh: CacheKvRows), each sequence's
// length read on the device, and KV splits whose partial rows kv_combine.cu merges.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm80/load.cuh"
#include "cuda/kernels/sm80/mainloop.cuh"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/operands.cuh"
#include "cuda/parts/score_mod.cuh"
#include "cuda/parts/seq_mask.cuh"
#include "cuda/parts/softmax.cuh"
#include "cuda/parts/tile_load.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocksPerSM>
struct FwdSm80Traits {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMI = kBlockM / (16 * kWarps);  // 16-row fragments per warp
  static constexpr int kRowBytes = SwizzledTile<kHeadDim, T>::kRowBytes;
  static constexpr int kNF = kBlockN / 8;    // 8-key fragments of S
  static constexpr int kKS = kHeadDim * int(sizeof(T)) / 32;  // 32-byte k-steps of Q K^T
  static constexpr int kDF = kHeadDim / 8;   // 8-column fragments of O
  static constexpr int kPK = kBlockN / MmaOps<T>::kPVKeys;  // k-steps of P V
  static constexpr int kTileQ = kBlockM * kRowBytes;  // bytes
  static constexpr int kTileKV = kBlockN * kRowBytes;
  static constexpr int kSmem = kTileQ + 2 * kStages * kTileKV;
  // CTAs per SM the register budget is fitted to (__launch_bounds__): more warps to
  // hide the ldmatrix/MMA/MUFU latencies vs more registers per thread (spills).
  static constexpr int kMinBlocks = kMinBlocksPerSM;
  // Q fragments held in registers for the whole key loop: measured on an H200
  // (docs/results/cuda-sm80-2026-11-22-tf32.md) 1-3% faster at hd64 16-bit; at hd128
  // mixed with 16-row warps (32 registers), 10-39% slower with 32-row warps (spills).
  static constexpr bool kQInRegs = kKS <= 4;
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockN % 16 == 0 && kStages >= 2, "tile shape");
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

  // Heavy (late, causal) query blocks first: they are launched in reverse order. A KV
  // cache's kernel runs p.kv_splits CTAs per query block (consecutive blockIdx.x).
  [[maybe_unused]] const int split = kCache ? int(blockIdx.x) % p.kv_splits : 0;
  const int m_block = kCache ? int(gridDim.x) / p.kv_splits - 1 - int(blockIdx.x) / p.kv_splits
                             : int(gridDim.x - 1 - blockIdx.x);
  // A KV cache's kernel packs the query heads of a KV head into the rows (GQA, shift =
  // log2 G > 0, as the sm90 kernels): row r is query r >> shift of head h + (r & (G - 1)).
  const int shift = kCache ? p.pack_shift : 0;
  const int h = int(blockIdx.y) << shift, b = blockIdx.z;
  const SeqInfo seq = kCache ? cache_seq_info(p, b) : seq_info(p, b);
  const int m0 = m_block * kBlockM, rows = seq.sq << shift;
  if (m0 >= rows) return;
  const int hk = h / p.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const T* gq = static_cast<const T*>(p.q) + seq.bb * p.q_sb + (seq.q_row0 + m0) * p.q_ss + h * p.q_sh;
  const auto kv = [&] {
    if constexpr (kCache) {  // keys before the block's first row's window: zero rows (CacheKvRows::key_lo)
      auto c = sm80::CacheKvRows<T, kBlockN>::make(p, b, hk);
      c.key_lo = int(band_mask(p, seq).key_begin(m0 >> shift, seq.sk));
      return c;
    } else {
      return sm80::ContiguousKvRows<T, kBlockN>{
          static_cast<const T*>(p.k) + seq.bb * p.k_sb + seq.k_row0 * p.k_ss + hk * p.k_sh,
          static_cast<const T*>(p.v) + seq.bb * p.v_sb + seq.k_row0 * p.v_ss + hk * p.v_sh, p.k_ss, p.v_ss};
    }
  }();

  const core::BandMask mask = band_mask(p, seq);
  const int m_last = min(m0 + kBlockM, rows) - 1;
  TileRange tiles = tile_range(mask, m0 >> shift, m_last >> shift, seq.sk, kBlockN);
  if constexpr (kCache) {  // this split's run of the key tiles (near-equal runs, in order)
    const int ns = p.kv_splits, per = (tiles.hi - tiles.lo + ns - 1) / ns;
    tiles.lo = min(tiles.hi, tiles.lo + split * per);
    tiles.hi = min(tiles.hi, tiles.lo + per);
  }
  const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};

  // Prologue: Q, then the first kStages-1 K/V tiles, one commit group each.
  if (shift > 0) {  // packed rows: (query, head) pairs
    const T* gq0 = static_cast<const T*>(p.q) + seq.bb * p.q_sb + seq.q_row0 * p.q_ss + h * p.q_sh;
    const auto q_row = [&](int r) { return gq0 + ((m0 + r) >> shift) * p.q_ss + ((m0 + r) & ((1 << shift) - 1)) * p.q_sh; };
    load_tile_rows<kBlockM, kHeadDim, Tr::kThreads>(sQ, q_row, gq0, rows - m0, p.d, tid);
  } else {
    load_tile<kBlockM, kHeadDim, Tr::kThreads>(sQ, gq, p.q_ss, seq.sq - m0, p.d, tid);
  }
  ptx::cp_async_commit();
  // K/V tiles are loaded in order, each with the page ids fetched when the last one was
  // (the KV cache's paged rows; nothing for the other policies).
  const auto fetch_pages = [&](int n) {
    if constexpr (kCache)
      return sm80::fetch_pages<kBlockN, kHeadDim, Tr::kThreads, T>(kv, n, seq.sk, tid);
    else
      return sm80::NoPages{};
  };
  auto pages = fetch_pages(tiles.lo);
  auto load_kv = [&](int n, int stage) {
    sm80::load_kv<kBlockN, kHeadDim, Tr::kThreads, Tr::kTileKV, T>(sK, sV, kv, pages, n, stage, seq.sk, p.d, p.dv,
                                                                   tid);
    pages = fetch_pages(n + 1);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (tiles.lo + s < tiles.hi) load_kv(tiles.lo + s, s);
    ptx::cp_async_commit();
  }

  float acc[kMI][kDF][4];
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int i = 0; i < kDF; ++i) acc[mi][i][0] = acc[mi][i][1] = acc[mi][i][2] = acc[mi][i][3] = 0.f;
  OnlineSoftmax<2 * kMI> sm;
  sm.init();

  sm80::Mainloop<T, Tr> ml;
  ml.init(sQ, sK, sV, warp, lane);
  const int g = lane / 4, t = lane % 4;
  const int row0 = m0 + warp * 16 * kMI + g;  // this lane's rows: row0 + 16 mi + {0, 8}
  [[maybe_unused]] float slope2 = 0.f;  // variants: the ALiBi slope times log2 e
  if constexpr (kVariants) slope2 = alibi_slope_log2(p, b, h);
  if constexpr (Tr::kQInRegs) {
    ptx::cp_async_wait<kStages - 1>();  // the Q group (the oldest) has landed
    __syncthreads();
    ml.load_q_regs();
  }

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
    float s[kMI][kNF][4];
    ml.qk(s, stage_off);
    // variants: the scores go to the log2 domain here, and the mask and softmax take factor 1
    if constexpr (kVariants) transform_scores<kMI, kNF>(s, p, slope2, band.offset, row0, n * kBlockN, t);
    mask_scores<kMI, kNF>(s, n >= tiles.full_lo && n < tiles.full_hi, kVariants ? 1.f : p.scale_log2, band, row0,
                          n * kBlockN, t, shift);
    float corr[2 * kMI];
    sm.template update<kMI, kNF>(s, kVariants ? 1.f : p.scale_log2 > 0.f ? p.scale_log2 : 1.f, corr);
    rescale_rows<kMI, kDF>(acc, corr);
    ml.pv(acc, s, stage_off);
  }
  ptx::cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  sm.finish();
  if constexpr (kVariants) {
    if (p.sinks != nullptr) {  // the sink joins each row: O's rows scaled here, l = 1, m = lse log2 e
      const float sink = p.sinks[h];
      float f[2 * kMI];
#pragma unroll
      for (int r = 0; r < 2 * kMI; ++r) {
        float lse;
        f[r] = join_sink_log2(sm.m[r], sm.l[r], sink, lse);
        sm.m[r] = lse * kLog2eF;
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
  if constexpr (kCache) {
    if (p.kv_splits > 1) {  // unnormalized rows and (m, l) for kv_combine.cu
      const int64_t i0 = (int64_t(split) * p.o_rows() + int64_t(b) * p.sq) * p.heads + h;
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
        store_partial<kDF>(acc[mi], sm.m + 2 * mi, sm.l + 2 * mi, p.part_o, p.part_ml, i0, p.heads, row0 + 16 * mi,
                           seq.sq, p.dv, t, shift);
      return;
    }
  }
  T* go = static_cast<T*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h * p.o_sh;
  float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
    store_output<T, kDF>(acc[mi], sm.m + 2 * mi, sm.l + 2 * mi, go, p.o_ss, glse, row0 + 16 * mi, seq.sq, p.dv, t,
                         shift, p.o_sh, p.lse_sh);  // (packed rows: the KV cache's kernel)
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
