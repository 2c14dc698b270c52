// The tile algebra of the sm80 forward (mma.sync, one warp's rows): Q's and K's ldmatrix
// operands, S = Q K^T on one K stage, O += P V on one V stage. parts/operands.cuh holds what
// differs between the 16-bit types (m16n8k16) and fp32 on TF32 (m16n8k8). Shared-memory
// tiles are rows of kRowBytes with the 16-byte chunk swizzle of common/swizzle.cuh.
//
// ldmatrix lane roles (see ptx::mma_16816 / mma_1688_tf32 for the fragment layouts): warp w
// owns rows [w * 16 kMI, (w + 1) * 16 kMI) of the block, fragment mi rows +16 mi. Every
// lane's ldmatrix row is = lane (mod 8), so the swizzled chunk of logical chunk 8 b + 2 j + c
// is 8 b + ((2 j + c) ^ lane % 8): four per-lane bases per operand (j) and compile-time
// offsets for the rest (row blocks, b, the stage). K's and V's tiles may have their own row
// and 128-byte column-group strides (kKvRow, kKvBlock: a TMA-written tile keeps each column
// group as a tile of 128-byte rows, kvc_sm90.cuh); Q's are the tile's rows.
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/parts/operands.cuh"

namespace flashcore::cuda::sm80 {

template <typename T, class Tr, int kKvRow = Tr::kRowBytes, int kKvBlock = 128>
struct Mainloop {
  using Op = MmaOps<T>;
  static constexpr int kMI = Tr::kMI, kNF = Tr::kNF, kKS = Tr::kKS, kDF = Tr::kDF, kPK = Tr::kPK;
  static constexpr uint32_t kRowBytes = Tr::kRowBytes;
  static constexpr bool kQInRegs = Tr::kQInRegs;
  uint32_t q_base[4], k_base[4];
  VOperand<T, kKvRow, kKvBlock> vop;
  // Q's fragments, held for the whole key loop where they are few (kQInRegs: one 128-byte
  // row chunk, hd64 16-bit, 16-32 registers): no Q ldmatrix per tile.
  uint32_t qf[kQInRegs ? kKS : 1][kMI][4];

  __device__ __forceinline__ void init(uint32_t sQ, uint32_t sK, uint32_t sV, int warp, int lane) {
    const int r7 = lane % 8, cq = lane / 16, ck = (lane / 8) % 2;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      q_base[j] = sQ + (warp * 16 * kMI + r7 + ck * 8) * kRowBytes + (((2 * j + cq) ^ r7) * 16);
      k_base[j] = sK + (r7 + cq * 8) * kKvRow + (((2 * j + ck) ^ r7) * 16);
    }
    vop.init(sV, lane);
  }

  // Q's A fragment of k-step ks, row fragment mi, from shared memory.
  __device__ __forceinline__ void load_q(uint32_t (&a)[4], int ks, int mi) const {
    ptx::ldmatrix_x4(a, q_base[ks % 4] + mi * 16 * kRowBytes + (ks / 4) * 128);
    Op::operand(a);
  }
  // kQInRegs: every k-step's fragments into registers (Q's tile landed).
  __device__ __forceinline__ void load_q_regs() {
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) load_q(qf[ks][mi], ks, mi);
  }

  // S = Q K^T on the K stage at stage_off; each K fragment pair serves all kMI row
  // fragments of the warp.
  __device__ __forceinline__ void qk(float (&s)[kMI][kNF][4], uint32_t stage_off) const {
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
          load_q(a[mi], ks, mi);
        }
      }
#pragma unroll
      for (int nf = 0; nf < kNF; nf += 2) {
        uint32_t bk[4];
        ptx::ldmatrix_x4(bk, k_base[ks % 4] + stage_off + nf * 8 * kKvRow + (ks / 4) * kKvBlock);
        Op::operand(bk);
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          Op::mma(s[mi][nf], a[mi], bk[0], bk[1]);
          Op::mma(s[mi][nf + 1], a[mi], bk[2], bk[3]);
        }
      }
    }
  }

  // O += P V on the V stage at stage_off: the softmax output of one k-step's keys is its A
  // fragment once converted (Op::p_operand).
  __device__ __forceinline__ void pv(float (&acc)[kMI][kDF][4], const float (&s)[kMI][kNF][4], uint32_t stage_off) const {
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
};

}  // namespace flashcore::cuda::sm80
