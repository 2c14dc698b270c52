// What the fp8 (e4m3) forward's host code, V^T pre-pass and kernel agree on.
//
// P V on fp8 wgmma (m64nNk32) takes P from registers as the A operand and V^T as a K-major
// B operand (fp8 wgmma has no transpose). A thread's k32 A fragment holds, for each of its
// rows g and g + 8, the k positions {4t .. 4t+3, 16+4t .. 16+4t+3} (t = lane % 4), while the
// fp32 S accumulator (m16n8 fragments) gives it keys {2t, 2t+1, 8+2t, 9+2t, 16+2t, 17+2t,
// 24+2t, 25+2t} of every 32. Feeding the accumulator's keys in that order as k positions
// 0..31 of the A fragment needs no data movement between lanes; P V is unchanged when V^T's
// k positions hold the keys in the same order (sum over keys in any order). So k position
// l of every 32 holds key fp8_vt_key(l): a permutation of bits 1-3 of l (l = 4t + 2h + b
// within 16 -> key 8h + 2t + b), written by the pre-pass, read as is by the kernel.
#pragma once

#include <cstdint>

namespace flashcore::cuda {

// Key stored at k position l of V^T (the permutation repeats every 32 keys).
__host__ __device__ constexpr int fp8_vt_key(int l) {
  return (l & ~15) | (((l >> 1) & 1) << 3) | (((l >> 2) & 3) << 1) | (l & 1);
}
static_assert(fp8_vt_key(2) == 8 && fp8_vt_key(4) == 2 && fp8_vt_key(19) == 25 && fp8_vt_key(20) == 18,
              "V^T key order");
// The transposers (kernels/sm90/vt_transpose.cuh, vt_fp8.cu) build V^T from ldmatrix.x4.trans
// of 32 keys: lane t's word from matrices 2h, 2h + 1 holds at byte i the key
// 8 (2h + i / 2) + 2t + i % 2, stored at k position 16 h + 4 t + i; that is this order.
constexpr bool fp8_vt_order_is_ldmatrix_order() {
  for (int l = 0; l < 32; ++l) {
    const int h = l / 16, t = l % 16 / 4, i = l % 4;
    if (fp8_vt_key(l) != 8 * (2 * h + i / 2) + 2 * t + i % 2) return false;
  }
  return true;
}
static_assert(fp8_vt_order_is_ldmatrix_order(), "the transposers' byte permutes assume fp8_vt_key's order");

#if defined(__CUDACC__)
// The transposers' byte permutes. v: ldmatrix.x4.trans of 32 keys x 16 columns read as
// 16-bit pairs (lane (jj, t) = (lane / 4, lane % 4) holds keys 8 m + 2t, 8 m + 2t + 1 of
// columns 2 jj, 2 jj + 1 in v[m]). w[0], w[1]: k positions 4t .. 4t + 3 and 16 + 4t .. of
// V^T row 2 jj + (jj >= 4); w[2], w[3]: the same of the pair's other row (lanes jj >= 4
// take their odd row first, which the callers use to spread a store phase over the banks).
__device__ __forceinline__ void fp8_vt_words(const uint32_t (&v)[4], int jj, uint32_t (&w)[4]) {
  const uint32_t sel_a = jj < 4 ? 0x6420u : 0x7531u, sel_b = sel_a ^ 0x1111u;
  w[0] = __byte_perm(v[0], v[1], sel_a);
  w[1] = __byte_perm(v[2], v[3], sel_a);
  w[2] = __byte_perm(v[0], v[1], sel_b);
  w[3] = __byte_perm(v[2], v[3], sel_b);
}
#endif

// P (in [0, 2^kFp8Slack] after the running-max subtraction: OnlineSoftmax's lazy
// rescaling lets it pass 1 by that slack) is stored as e4m3(P * 2^kFp8PLog2), the power of
// two folded into the softmax's exponent (OnlineSoftmax::update / try_update<..,
// kFp8PLog2, kFp8Slack>), so the row sums l carry it too and O / l is unscaled; lse
// subtracts it. 2^(PLog2 + Slack) must stay below e4m3's 448. The split: PLog2 keeps P down
// to 2^-(6 + PLog2) in e4m3's normal range (relative rounding step 2^-4; below it the
// subnormals' absolute step 2^-(9 + PLog2)); the slack is how far a row's max may grow
// before O is rescaled, and the speculative softmax's test (every lane's partial row sum
// of 2^PLog2 P over a tile's 48 or 32 keys <= 2^(PLog2 + Slack)) passes on typical tiles
// only with a slack well above log2 of those key counts. 2 / 6 (P >= 2^-8 normal): the
// test passes; 6 / 2 (P >= 2^-12) failed it on nearly every tile (0.75-0.92x from S2048).
constexpr int kFp8PLog2 = 2;
constexpr int kFp8Slack = 6;
static_assert(kFp8PLog2 + kFp8Slack <= 8, "2^(PLog2 + Slack) must stay below 448, e4m3's max");

// Keys per row of the V^T workspace are padded to a multiple of this (zeros past Sk).
constexpr int kFp8VtKeyAlign = 64;

// Varlen batches share one V^T block ([1][Hkv][Dv][vt_sk]): sequence b's keys start at
// position fp8_vt_row0(cu_k[b], b), its first key rounded up to a whole kFp8VtKeyAlign block
// plus one block per earlier sequence, so every sequence starts a block of its own (the key
// order above is per 32 keys from a tile's start) past the previous one's keys, with zeros
// between; vt_sk = fp8_vt_row0(total keys, B). Fixed-length batches: position 0 of the
// batch entry's own block.
__host__ __device__ constexpr long long fp8_vt_row0(long long k_row0, long long b) {
  return (k_row0 + kFp8VtKeyAlign - 1) / kFp8VtKeyAlign * kFp8VtKeyAlign + kFp8VtKeyAlign * b;
}

}  // namespace flashcore::cuda
