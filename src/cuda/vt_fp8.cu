// The V^T pre-pass of the fp8 (e4m3) forward: fp8 wgmma reads its B operand K-major only,
// so V [B][Sk][Hkv][Dv] (any strides, 16-byte rows) is written to a workspace
// [B][Hkv][Dv][sk_pad] with the keys of every 32 in the order of parts/fp8.hpp
// (fp8_vt_key) and zeros for keys Sk .. sk_pad - 1. Varlen (packed V [total][Hkv][Dv]):
// one block [1][Hkv][Dv][sk_pad], sequence b from position fp8_vt_row0(cu_k[b], b), zeros up
// to the next one's start (every byte of the block is written). Part of every fp8
// attention call (and of its timing); memory-bound: Sk * Dv bytes read and written per KV
// head.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/parts/fp8.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kKeys = 32, kCols = 128, kPad = 16;  // tile: 32 keys x 128 columns of V (whole 128-byte rows)
constexpr int kSub = 8;                             // tiles per block, their loads in flight together
static_assert(kFp8VtKeyAlign % kKeys == 0 && kKeys % 32 == 0 && kKeys * kCols == 16 * 256,
              "tiles hold whole 32-key groups, one 16-byte piece per thread");

// Block (kSub key tiles, column tile) of KV head blockIdx.y, sequence blockIdx.z; 256
// threads, each loads one 16-byte piece of a V row per tile (all kSub loads issued before
// any is used, whole 128-byte rows of V: one 16-byte load per thread in flight and 64-byte
// pieces of the rows left the pass at ~46 % of the H200's DRAM bandwidth) and stores one
// 16-byte piece of a V^T row per tile. Key tiles count from the sequence's start; those
// past its stretch of the block are skipped (block-uniform).
__global__ void __launch_bounds__(256) vt_fp8_kernel(const FwdParams p, uint8_t* __restrict__ vt, int64_t sk_pad,
                                                     int col_tiles) {
  __shared__ __align__(16) uint8_t tile[kSub][kKeys][kCols + kPad];
  const int key_block = blockIdx.x / col_tiles, col_tile = blockIdx.x % col_tiles;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int k0 = key_block * kSub * kKeys, c0 = col_tile * kCols;
  // The sequence's keys (rows k_row0 .. of V's batch entry bb) and its stretch of V^T.
  int64_t bb = b, k_row0 = 0, pos0 = 0, stretch = sk_pad;
  int sk = p.sk;
  if (p.cu_k != nullptr) {
    bb = 0;
    k_row0 = p.cu_k[b];
    sk = p.cu_k[b + 1] - p.cu_k[b];
    pos0 = fp8_vt_row0(k_row0, b);
    stretch = fp8_vt_row0(p.cu_k[b + 1], b + 1) - pos0;
  }
  if (k0 >= stretch) return;  // the whole block: __syncthreads below is reached by all or none
  {
    const int r = threadIdx.x / 8, c = (threadIdx.x % 8) * 16;  // 32 rows of 8 pieces
    const int col = c0 + c;
    uint4 x[kSub];
#pragma unroll
    for (int s = 0; s < kSub; ++s) {
      const int key = k0 + s * kKeys + r;
      x[s] = make_uint4(0, 0, 0, 0);
      if (key < sk && col < p.dv)
        x[s] = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.v) + bb * p.v_sb +
                                               (k_row0 + key) * p.v_ss + hk * p.v_sh + col);
    }
#pragma unroll
    for (int s = 0; s < kSub; ++s) *reinterpret_cast<uint4*>(&tile[s][r][c]) = x[s];
  }
  __syncthreads();
  // Row r of a V^T tile = column c0 + r of V; bytes c .. c + 15 = k positions k0 + c ..
  const int r = threadIdx.x / 2, c = (threadIdx.x % 2) * 16;  // 128 rows of 2 pieces
  const int col = c0 + r;
  if (col >= p.dv) return;
  const int kv_heads = p.heads / p.group;
  uint8_t* dst = vt + ((bb * kv_heads + hk) * p.dv + col) * sk_pad + pos0 + k0 + c;
#pragma unroll
  for (int s = 0; s < kSub; ++s) {
    if (k0 + s * kKeys >= stretch) break;  // stretch: a multiple of kKeys
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t x = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) x |= uint32_t(tile[s][fp8_vt_key(c + 4 * i + j)][r]) << (8 * j);
      w[i] = x;
    }
    *reinterpret_cast<uint4*>(dst + s * kKeys) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace

// vt: B * Hkv * Dv * sk_pad bytes; sk_pad a multiple of kFp8VtKeyAlign, >= Sk (varlen:
// Hkv * Dv * sk_pad, sk_pad = fp8_vt_row0(total keys, B); p.sk the longest sequence).
cudaError_t transpose_v_fp8(const FwdParams& p, void* vt, int64_t sk_pad, cudaStream_t stream) {
  const int col_tiles = (p.dv + kCols - 1) / kCols;
  // Varlen: a sequence's stretch is at most its keys + 2 kFp8VtKeyAlign - 1 (fp8_vt_row0).
  const int64_t key_tiles = p.cu_k != nullptr ? (int64_t(p.sk) + 2 * kFp8VtKeyAlign - 1 + kKeys - 1) / kKeys
                                              : sk_pad / kKeys;
  const int64_t key_blocks = (key_tiles + kSub - 1) / kSub;
  const dim3 grid(unsigned(key_blocks * col_tiles), unsigned(p.heads / p.group), unsigned(p.batch));
  vt_fp8_kernel<<<grid, 256, 0, stream>>>(p, static_cast<uint8_t*>(vt), sk_pad, col_tiles);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
