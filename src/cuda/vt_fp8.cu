// The V^T pre-pass of the fp8 (e4m3) forward: fp8 wgmma reads its B operand K-major only,
// so V [B][Sk][Hkv][Dv] (any strides, 16-byte rows) is written to a workspace
// [B][Hkv][Dv][sk_pad] with the keys of every 32 in the order of parts/fp8.hpp
// (fp8_vt_key) and zeros for keys Sk .. sk_pad - 1. Part of every fp8 attention call (and
// of its timing); memory-bound: Sk * Dv bytes read and written per KV head.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/params.hpp"
#include "cuda/parts/fp8.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kKeys = 64, kCols = 64, kPad = 16;  // tile: 64 keys x 64 columns of V
static_assert(kFp8VtKeyAlign % kKeys == 0 && kKeys % 32 == 0, "tiles hold whole 32-key groups");

// Block (key tile, column tile) of KV head blockIdx.y, batch blockIdx.z; 256 threads, each
// loads one 16-byte piece of a V row and stores one 16-byte piece of a V^T row.
__global__ void __launch_bounds__(256) vt_fp8_kernel(const FwdParams p, uint8_t* __restrict__ vt, int64_t sk_pad,
                                                     int col_tiles) {
  __shared__ __align__(16) uint8_t tile[kKeys][kCols + kPad];
  const int key_tile = blockIdx.x / col_tiles, col_tile = blockIdx.x % col_tiles;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int k0 = key_tile * kKeys, c0 = col_tile * kCols;
  const int r = threadIdx.x / 4, c = (threadIdx.x % 4) * 16;
  {
    const int key = k0 + r, col = c0 + c;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (key < p.sk && col < p.dv)
      x = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.v) + b * p.v_sb + key * p.v_ss +
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
  uint8_t* dst = vt + ((int64_t(b) * kv_heads + hk) * p.dv + col) * sk_pad + k0 + c;
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace

// vt: B * Hkv * Dv * sk_pad bytes; sk_pad a multiple of kFp8VtKeyAlign, >= Sk.
cudaError_t transpose_v_fp8(const FwdParams& p, void* vt, int64_t sk_pad, cudaStream_t stream) {
  const int col_tiles = (p.dv + kCols - 1) / kCols;
  const dim3 grid(unsigned(sk_pad / kKeys * col_tiles), unsigned(p.heads / p.group), unsigned(p.batch));
  vt_fp8_kernel<<<grid, 256, 0, stream>>>(p, static_cast<uint8_t*>(vt), sk_pad, col_tiles);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
