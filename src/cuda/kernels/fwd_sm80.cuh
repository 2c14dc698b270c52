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
// K/V tiles stream through a kStages-deep cp.async ring (one __syncthreads per tile);
// the epilogue divides by the row sums and writes O (and lse) straight from registers.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/epilogue.cuh"
#include "cuda/parts/operands.cuh"
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

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>::kThreads,
                                  FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>::kMinBlocks)
    fwd_sm80_kernel(const FwdParams p) {
  using Tr = FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>;
  using Op = MmaOps<T>;
  constexpr int kMI = Tr::kMI, kNF = Tr::kNF, kKS = Tr::kKS, kDF = Tr::kDF, kPK = Tr::kPK;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK = sQ + Tr::kTileQ;
  const uint32_t sV = sK + kStages * Tr::kTileKV;

  // Heavy (late, causal) query blocks first: they are launched in reverse order.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqInfo seq = seq_info(p, b);
  const int m0 = m_block * kBlockM;
  if (m0 >= seq.sq) return;
  const int hk = h / p.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const T* gq = static_cast<const T*>(p.q) + seq.bb * p.q_sb + (seq.q_row0 + m0) * p.q_ss + h * p.q_sh;
  const T* gk = static_cast<const T*>(p.k) + seq.bb * p.k_sb + seq.k_row0 * p.k_ss + hk * p.k_sh;
  const T* gv = static_cast<const T*>(p.v) + seq.bb * p.v_sb + seq.k_row0 * p.v_ss + hk * p.v_sh;

  const core::BandMask mask = band_mask(p, seq);
  const int m_last = min(m0 + kBlockM, seq.sq) - 1;
  const TileRange tiles = tile_range(mask, m0, m_last, seq.sk, kBlockN);
  const Band32 band{p.window_left, p.window_right, seq.sk - seq.sq, seq.sk};

  // Prologue: Q, then the first kStages-1 K/V tiles, one commit group each.
  load_tile<kBlockM, kHeadDim, Tr::kThreads>(sQ, gq, p.q_ss, seq.sq - m0, p.d, tid);
  ptx::cp_async_commit();
  auto load_kv = [&](int n, int stage) {
    const int rows = seq.sk - n * kBlockN;
    load_tile<kBlockN, kHeadDim, Tr::kThreads>(sK + stage * Tr::kTileKV, gk + n * kBlockN * p.k_ss,
                                               p.k_ss, rows, p.d, tid);
    load_tile<kBlockN, kHeadDim, Tr::kThreads>(sV + stage * Tr::kTileKV, gv + n * kBlockN * p.v_ss,
                                               p.v_ss, rows, p.dv, tid);
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

  // ldmatrix lane roles (see ptx::mma_16816 / mma_1688_tf32 for the fragment layouts).
  // Warp w owns rows [w * 16 kMI, (w + 1) * 16 kMI) of the block, fragment mi rows
  // +16 mi. Every lane's ldmatrix row is = lane (mod 8), so the swizzled chunk of logical
  // chunk 8 b + 2 j + c is 8 b + ((2 j + c) ^ lane % 8): four per-lane bases per operand
  // (j) and compile-time offsets for the rest (row blocks, b, the stage).
  constexpr uint32_t kRowBytes = Tr::kRowBytes;
  const int r7 = lane % 8, cq = lane / 16, ck = (lane / 8) % 2;
  uint32_t q_base[4], k_base[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q_base[j] = sQ + (warp * 16 * kMI + r7 + ck * 8) * kRowBytes + (((2 * j + cq) ^ r7) * 16);
    k_base[j] = sK + (r7 + cq * 8) * kRowBytes + (((2 * j + ck) ^ r7) * 16);
  }
  VOperand<T, kRowBytes> vop;
  vop.init(sV, lane);
  const int g = lane / 4, t = lane % 4;
  const int row0 = m0 + warp * 16 * kMI + g;  // this lane's rows: row0 + 16 mi + {0, 8}

  // Q's fragments stay in registers for the whole key loop where they are few (one
  // 128-byte row chunk: hd64 16-bit, 16-32 registers): no Q ldmatrix per tile.
  constexpr bool kQInRegs = Tr::kQInRegs;
  uint32_t qf[kQInRegs ? kKS : 1][kMI][4];
  if constexpr (kQInRegs) {
    ptx::cp_async_wait<kStages - 1>();  // the Q group (the oldest) has landed
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        ptx::ldmatrix_x4(qf[ks][mi], q_base[ks % 4] + mi * 16 * kRowBytes + (ks / 4) * 128);
        Op::operand(qf[ks][mi]);
      }
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

    // S = Q K^T; each K fragment pair serves all kMI row fragments of the warp.
    float s[kMI][kNF][4];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int i = 0; i < kNF; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      uint32_t a[kMI][4];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mi][r] = qf[kQInRegs ? ks : 0][mi][r];
        } else {
          ptx::ldmatrix_x4(a[mi], q_base[ks % 4] + mi * 16 * kRowBytes + (ks / 4) * 128);
          Op::operand(a[mi]);
        }
      }
#pragma unroll
      for (int nf = 0; nf < kNF; nf += 2) {
        uint32_t bk[4];
        ptx::ldmatrix_x4(bk, k_base[ks % 4] + stage_off + nf * 8 * kRowBytes + (ks / 4) * 128);
        Op::operand(bk);
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          Op::mma(s[mi][nf], a[mi], bk[0], bk[1]);
          Op::mma(s[mi][nf + 1], a[mi], bk[2], bk[3]);
        }
      }
    }

    mask_scores<kMI, kNF>(s, n >= tiles.full_lo && n < tiles.full_hi, p.scale_log2, band, row0, n * kBlockN, t);

    float corr[2 * kMI];
    sm.template update<kMI, kNF>(s, p.scale_log2 > 0.f ? p.scale_log2 : 1.f, corr);
    rescale_rows<kMI, kDF>(acc, corr);

    // O += P V: the S accumulators of one k-step's keys are its A fragment once
    // converted (Op::p_operand).
#pragma unroll
    for (int pk = 0; pk < kPK; ++pk) {
      uint32_t a[kMI][4];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) Op::p_operand(a[mi], s[mi], pk);
#pragma unroll
      for (int df = 0; df < kDF; df += 2) {
        uint32_t bv[4];
        vop.load(bv, stage_off, pk, df);
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          Op::mma(acc[mi][df], a[mi], bv[0], bv[1]);
          Op::mma(acc[mi][df + 1], a[mi], bv[2], bv[3]);
        }
      }
    }
  }
  ptx::cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  sm.finish();
  T* go = static_cast<T*>(p.o) + seq.bb * p.o_sb + seq.q_row0 * p.o_ss + h * p.o_sh;
  float* glse = p.lse == nullptr ? nullptr : p.lse + seq.bb * p.lse_sb + h * p.lse_sh + seq.q_row0;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
    store_output<T, kDF>(acc[mi], sm.m + 2 * mi, sm.l + 2 * mi, go, p.o_ss, glse, row0 + 16 * mi, seq.sq, p.dv, t);
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks>
cudaError_t launch_fwd_sm80(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>;
  auto kernel = fwd_sm80_kernel<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>;
  static std::atomic<uint64_t> smem_done{0};
  const cudaError_t e = opt_in_smem_once(kernel, Tr::kSmem, smem_done);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.sq + kBlockM - 1) / kBlockM, p.heads, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
