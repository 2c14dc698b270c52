// The storage-type-specific half of the sm80 mainloop: which mma.sync shape runs, how
// ldmatrix results become operands, how P (the softmax output, fp32 accumulators)
// becomes the A operand of P V, and how V fragments are read from shared memory.
//
//   16-bit (f16, bf16): m16n8k16. Q, K by ldmatrix; P packed to 16 bits; V by
//                       ldmatrix.trans (16 keys x 16 columns per x4).
//   fp32:               m16n8k8 .tf32 (fp32 accumulation). A 32-byte k-step of a row is 8
//                       fp32 instead of 16 halves, and the m16n8k8 tf32 A/B fragments
//                       are exactly what ldmatrix b16 returns for 8x(4 fp32) blocks, so Q
//                       and K use the same byte addresses as the 16-bit path, each
//                       register rounded to TF32. P: lane (g, t) holds keys 2t, 2t+1 of
//                       an 8-key accumulator fragment; they serve as k = t and k = t + 4
//                       (any key order works for a sum as long as V follows it), so V's
//                       B operand is rows 2t and 2t+1 of column g: two 32-bit shared loads
//                       (ldmatrix.trans would split fp32 values), conflict-free under the
//                       swizzle (see VOperand<float>).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace flashcore::cuda {

template <typename T>
struct MmaOps {
  static constexpr int kPVKeys = 16;  // keys per P V k-step
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_16816<T>(d, a, b0, b1);
  }
  // ldmatrix results as they feed the MMA.
  __device__ __forceinline__ static void operand(uint32_t (&)[4]) {}
  // A operand of P V k-step pk from the softmax output s[nf][..] of one 16-row fragment.
  template <int kNF>
  __device__ __forceinline__ static void p_operand(uint32_t (&a)[4], const float (&s)[kNF][4], int pk) {
    a[0] = ptx::pack2<T>(s[2 * pk][0], s[2 * pk][1]);
    a[1] = ptx::pack2<T>(s[2 * pk][2], s[2 * pk][3]);
    a[2] = ptx::pack2<T>(s[2 * pk + 1][0], s[2 * pk + 1][1]);
    a[3] = ptx::pack2<T>(s[2 * pk + 1][2], s[2 * pk + 1][3]);
  }
};

template <>
struct MmaOps<float> {
  static constexpr int kPVKeys = 8;
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ptx::mma_1688_tf32(d, a, b0, b1);
  }
  __device__ __forceinline__ static void operand(uint32_t (&r)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = ptx::tf32_rna(__uint_as_float(r[i]));
  }
  template <int kNF>
  __device__ __forceinline__ static void p_operand(uint32_t (&a)[4], const float (&s)[kNF][4], int pk) {
    a[0] = ptx::tf32_rna(s[pk][0]);  // (g, key 2t)     as k = t
    a[1] = ptx::tf32_rna(s[pk][2]);  // (g + 8, key 2t)
    a[2] = ptx::tf32_rna(s[pk][1]);  // (g, key 2t + 1) as k = t + 4
    a[3] = ptx::tf32_rna(s[pk][3]);
  }
};

// B operands of P V for the column fragments df, df + 1 (df even) of k-step pk:
// bv = {b0, b1} of df, then of df + 1. Per-lane base addresses are set once; the rest of
// the address (stage, pk, the 128-byte group of df) is a compile-time offset. V's rows are
// kRowBytes apart and its 128-byte column groups kBlockBytes apart: 128 where a row's groups
// are consecutive (the cp.async tiles), rows x 128 where each group is a tile of its own
// (what a TMA box of 128-byte rows writes).
template <typename T, int kRowBytes, int kBlockBytes = 128>
struct VOperand {
  uint32_t base[4];
  __device__ __forceinline__ void init(uint32_t sV, int lane) {
    // ldmatrix.trans x4: matrices (keys 0-7, cols 0-7), (keys 8-15, cols 0-7), (keys 0-7,
    // cols 8-15), (keys 8-15, cols 8-15) of the 16x16 block; lane = its row address.
    const int r7 = lane % 8, cq = lane / 16, ck = (lane / 8) % 2;
#pragma unroll
    for (int j = 0; j < 4; ++j) base[j] = sV + (r7 + ck * 8) * kRowBytes + (((2 * j + cq) ^ r7) * 16);
  }
  __device__ __forceinline__ void load(uint32_t (&bv)[4], uint32_t stage_off, int pk, int df) const {
    ptx::ldmatrix_x4_trans(bv, base[(df / 2) % 4] + stage_off + pk * 16 * kRowBytes + (df / 8) * kBlockBytes);
  }
};

template <int kRowBytes, int kBlockBytes>
struct VOperand<float, kRowBytes, kBlockBytes> {
  // base[j][e]: row 2t + e, column 8 df + g for df = j (mod 4), i.e. 4-fp32 chunk
  // 2 j + g / 4 (swizzled with the row), word g % 4. The 32 lanes of one load read rows
  // {2t + e} x chunks {2 j + g/4} ^ (2t + e): 8 distinct 16-byte bank groups, 4 words each.
  uint32_t base[4][2];
  __device__ __forceinline__ void init(uint32_t sV, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = 2 * t + e;
        base[j][e] = sV + row * kRowBytes + (((2 * j + g / 4) ^ row) * 16) + (g % 4) * 4;
      }
  }
  __device__ __forceinline__ void load(uint32_t (&bv)[4], uint32_t stage_off, int pk, int df) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = df + h;
      const uint32_t off = stage_off + pk * 8 * kRowBytes + (d / 4) * kBlockBytes;
      bv[2 * h] = ptx::tf32_rna(__uint_as_float(ptx::lds32(base[d % 4][0] + off)));
      bv[2 * h + 1] = ptx::tf32_rna(__uint_as_float(ptx::lds32(base[d % 4][1] + off)));
    }
  }
};

}  // namespace flashcore::cuda
