// The V^T pre-pass of the fp8 (e4m3) forward: fp8 wgmma reads its B operand K-major only,
// so V [B][Sk][Hkv][Dv] (any strides, 16-byte rows) is written to a workspace
// [B][Hkv][Dv][sk_pad] with the keys of every 32 in the order of parts/fp8.hpp
// (fp8_vt_key) and zeros for keys Sk .. sk_pad - 1. Varlen (packed V [total][Hkv][Dv]):
// one block [1][Hkv][Dv][sk_pad], sequence b from position fp8_vt_row0(cu_k[b], b), zeros up
// to the next one's start (every byte of the block is written). V's NaN are written as 0 and
// recorded (FwdParams::vt_bad; the kernels add them back to the rows that see them,
// parts/nonfinite_v.cuh). Part of every fp8
// attention call (and of its timing) but those whose kernel makes V^T itself (the
// persistent hd128 ones on fixed-length batches: kernels/sm90/vt_transpose.cuh, kVtFused; the same bytes);
// memory-bound: Sk * Dv bytes read and written per KV head.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/fp8.hpp"
#include "cuda/parts/nonfinite_v.cuh"

namespace flashcore::cuda {
namespace {

constexpr int kKeys = 32, kCols = 128, kPad = 16;  // tile: 32 keys x 128 columns of V (whole 128-byte rows)
constexpr int kSub = 8;                             // tiles per block, their loads in flight together
static_assert(kFp8VtKeyAlign % kKeys == 0 && kKeys % 32 == 0 && kKeys * kCols == 16 * 256,
              "tiles hold whole 32-key groups, one 16-byte piece per thread");

// Block (kSub key tiles, column tile) of KV head blockIdx.y, sequence blockIdx.z; 256
// threads, each loads one 16-byte piece of a V row per tile (all kSub loads issued before
// any is used, whole 128-byte rows of V: one 16-byte load per thread in flight and 64-byte
// pieces of the rows left the pass at ~46 % of the H200's DRAM bandwidth), transposes the
// tiles in shared memory (below), and stores one 16-byte piece of a V^T row per tile. Until
// 2026-11-27 (5ab2442) each thread gathered its piece with 16 byte loads from V's tile; the transpose
// by ldmatrix and byte permutes into a transposed tile made the e4m3 grid's S512 rows
// 1.03-1.04x faster (H200) and a pre-pass decode call (B32 H32/8 Sk16384 D128) 597-599 ->
// 545-553 us; storing the permuted words straight to global memory instead (16 bytes per
// row per instruction) was slower than the byte gathers. Key tiles count from the
// sequence's start; those past its stretch of the block are skipped (block-uniform).
__global__ void __launch_bounds__(256) vt_fp8_kernel(const FwdParams p, uint8_t* __restrict__ vt, int64_t sk_pad,
                                                     int col_tiles) {
  // The block's buffer: first its kSub tiles of V ([kSub][kKeys][kCols + kPad], rows
  // 144 bytes apart), then the same tiles transposed ([kSub][kCols][kKeys + kPad]).
  __shared__ __align__(16) uint8_t buf[kSub * kCols * (kKeys + kPad)];
  static_assert(kSub * kKeys * (kCols + kPad) <= sizeof(buf), "V's tiles fit the buffer");
  auto tile = reinterpret_cast<uint8_t(*)[kKeys][kCols + kPad]>(buf);
  auto tile_t = reinterpret_cast<uint8_t(*)[kCols][kKeys + kPad]>(buf);
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
  // V's NaN (e4m3's one non-finite code) are written as 0, and the keys that had one are
  // recorded (p.vt_bad, parts/nonfinite_v.cuh): one word per tile, bit r for its row r, kept
  // in bytes that neither of the buffer's layouts writes (the padding of transposed rows 768
  // and 769, past V's tiles): 48 KiB is all the static shared memory sm80 allows.
  static_assert(768 * (kKeys + kPad) >= kSub * kKeys * (kCols + kPad) && kSub <= 8, "the record's place");
  auto bad = [&](int s) { return reinterpret_cast<uint32_t*>(buf + (768 + s / 4) * (kKeys + kPad) + kKeys + 4 * (s % 4)); };
  if (threadIdx.x < kSub) *bad(threadIdx.x) = 0;
  uint32_t bad_tiles = 0;  // this thread's pieces with a NaN, bit s for tile s
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
    for (int s = 0; s < kSub; ++s) {
      const uint32_t f0 = nonfinite_bits<__nv_fp8_e4m3>(x[s].x), f1 = nonfinite_bits<__nv_fp8_e4m3>(x[s].y),
                     f2 = nonfinite_bits<__nv_fp8_e4m3>(x[s].z), f3 = nonfinite_bits<__nv_fp8_e4m3>(x[s].w);
      if ((f0 | f1 | f2 | f3) != 0) {
        x[s] = make_uint4(zero_flagged<__nv_fp8_e4m3>(x[s].x, f0), zero_flagged<__nv_fp8_e4m3>(x[s].y, f1),
                          zero_flagged<__nv_fp8_e4m3>(x[s].z, f2), zero_flagged<__nv_fp8_e4m3>(x[s].w, f3));
        bad_tiles |= 1u << s;
      }
      *reinterpret_cast<uint4*>(&tile[s][r][c]) = x[s];
    }
  }
  __syncthreads();
#pragma unroll 1
  for (; bad_tiles != 0; bad_tiles &= bad_tiles - 1)
    atomicOr(bad(__ffs(int(bad_tiles)) - 1), 1u << (threadIdx.x / 8));
  {
    // Warp w transposes columns 16 w .. 16 w + 15 of every tile (as the kernel's transposer
    // does, kernels/sm90/vt_transpose.cuh kVtIn): ldmatrix.x4.trans of the tile's 32 rows as 16-bit pairs
    // gives lane (jj, t) keys 8 m + 2t, 8 m + 2t + 1 of column pair 2 jj, 2 jj + 1 (matrix
    // m); four byte permutes make that pair's two V^T rows at k positions 4t .. 4t + 3 and
    // 16 + 4t .. (fp8_vt_words). All tiles are read before any is overwritten; lanes
    // jj >= 4 write their odd row first (ra / rb), which puts a warp's 32 stores of one word
    // in 32 distinct banks (rows 48 bytes apart).
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, jj = lane / 4, t = lane % 4;
    const int ra = 16 * warp + 2 * jj + (jj < 4 ? 0 : 1), rb = ra ^ 1;
    uint32_t v[kSub][4];
#pragma unroll
    for (int s = 0; s < kSub; ++s) ptx::ldmatrix_x4_trans(v[s], ptx::smem_addr(&tile[s][lane][16 * warp]));
    __syncthreads();
#pragma unroll
    for (int s = 0; s < kSub; ++s) {
      uint32_t w[4];
      fp8_vt_words(v[s], jj, w);
      *reinterpret_cast<uint32_t*>(&tile_t[s][ra][4 * t]) = w[0];
      *reinterpret_cast<uint32_t*>(&tile_t[s][ra][16 + 4 * t]) = w[1];
      *reinterpret_cast<uint32_t*>(&tile_t[s][rb][4 * t]) = w[2];
      *reinterpret_cast<uint32_t*>(&tile_t[s][rb][16 + 4 * t]) = w[3];
    }
  }
  __syncthreads();
  const int64_t bh = bb * p.kv_heads + hk;
  if (threadIdx.x < kSub && k0 + int(threadIdx.x) * kKeys < stretch) {  // (bad is read after the syncs above)
    const uint32_t w = *bad(threadIdx.x);
    p.fp8_bad_words(bh, col_tile)[(pos0 + k0) / kKeys + threadIdx.x] = w;
    if (w != 0) p.vt_bad[4 * bh] = p.vt_stamp;
  }
  // Row r of a V^T tile = column c0 + r of V; bytes c .. c + 15 = k positions k0 + c ..
  const int r = threadIdx.x / 2, c = (threadIdx.x % 2) * 16;  // 128 rows of 2 pieces
  const int col = c0 + r;
  if (col >= p.dv) return;
  uint8_t* dst = vt + (bh * p.dv + col) * sk_pad + pos0 + k0 + c;
#pragma unroll
  for (int s = 0; s < kSub; ++s) {
    if (k0 + s * kKeys >= stretch) break;  // stretch: a multiple of kKeys
    *reinterpret_cast<uint4*>(dst + s * kKeys) = *reinterpret_cast<const uint4*>(&tile_t[s][r][c]);
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
