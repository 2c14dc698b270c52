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

constexpr int kKeys = 64, kCols = 64, kPad = 16;  // tile: 64 keys x 64 columns of V
static_assert(kFp8VtKeyAlign % kKeys == 0 && kKeys % 32 == 0, "tiles hold whole 32-key groups");

// Block (key tile, column tile) of KV head blockIdx.y, sequence blockIdx.z; 256 threads,
// each loads one 16-byte piece of a V row and stores one 16-byte piece of a V^T row. Key
// tiles count from the sequence's start; those past its stretch of the block return.
__global__ void __launch_bounds__(256) vt_fp8_kernel(const FwdParams p, uint8_t* __restrict__ vt, int64_t sk_pad,
                                                     int col_tiles) {
  __shared__ __align__(16) uint8_t tile[kKeys][kCols + kPad];
  const int key_tile = blockIdx.x / col_tiles, col_tile = blockIdx.x % col_tiles;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int k0 = key_tile * kKeys, c0 = col_tile * kCols;
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
  const int r = threadIdx.x / 4, c = (threadIdx.x % 4) * 16;
  {
    const int key = k0 + r, col = c0 + c;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (key < sk && col < p.dv)
      x = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.v) + bb * p.v_sb + (k_row0 + key) * p.v_ss +
                                          hk * p.v_sh + col);
    *reinterpret_cast<uint4*>(&tile[r][c]) = x;
  }
  __syncthreads();
  // Row r of this V^T tile = column c0 + r of V; bytes c .. c + 15 = k positions k0 + c ..
  const int col = c0 + r;
  if (col >= p.dv) return;
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t x = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) x |= uint32_t(tile[fp8_vt_key(c + 4 * i + j)][r]) << (8 * j);
    w[i] = x;
  }
  const int kv_heads = p.heads / p.group;
  uint8_t* dst = vt + ((bb * kv_heads + hk) * p.dv + col) * sk_pad + pos0 + k0 + c;
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace

// vt: B * Hkv * Dv * sk_pad bytes; sk_pad a multiple of kFp8VtKeyAlign, >= Sk (varlen:
// Hkv * Dv * sk_pad, sk_pad = fp8_vt_row0(total keys, B); p.sk the longest sequence).
cudaError_t transpose_v_fp8(const FwdParams& p, void* vt, int64_t sk_pad, cudaStream_t stream) {
  const int col_tiles = (p.dv + kCols - 1) / kCols;
  // Varlen: a sequence's stretch is at most its keys + 2 blocks - 1 (fp8_vt_row0).
  const int64_t key_tiles = p.cu_k != nullptr ? (int64_t(p.sk) + 2 * kKeys - 1) / kKeys + 1 : sk_pad / kKeys;
  const dim3 grid(unsigned(key_tiles * col_tiles), unsigned(p.heads / p.group), unsigned(p.batch));
  vt_fp8_kernel<<<grid, 256, 0, stream>>>(p, static_cast<uint8_t*>(vt), sk_pad, col_tiles);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
