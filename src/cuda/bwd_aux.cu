// The attention backward's kernels around the main one (kernels/bwd_sm80.cuh, bwd_sm90.cuh),
// for f16 and bf16 storage, memory-bound:
//   bwd_row_stats per (row, head), into the workspace (before): D = rowsum(dO * O) and
//                 lse log2 e (+inf where lse = -inf, a row that sees no key: its P is then
//                 2^-inf = 0 in the main kernel, never NaN); the fp32 dQ accumulators of
//                 every slice zeroed (in the same launch, instead of a memset before it)
//   bwd_dq_store  dQ = scale * (the sum of the dQ slices, in slice order), converted to the
//                 storage type and written to the caller's (strided) dq (after)
//   bwd_zero_tail varlen: zeros dK and dV rows past the last sequence (cu_k[batch] on the
//                 device), which no CTA of the main kernel covers (after)
// The row kernels give each row a group of `lanes` threads (a power of two up to 32, one
// 8-element chunk of the row per lane), so that their index arithmetic is one 32-bit
// division chain per row (the rows of all heads: below 2^31, bwd_backend.cpp), not 64-bit
// divisions per 16 bytes, which bounded them: 2x cuDNN's dQ conversion time, 2026-12-02.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/common/launch.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels/bwd_params.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kAuxThreads = 256;
constexpr int kMaxBlocks = 1 << 16;  // the grid-stride loops' grids: enough to fill any device

// A thread group of `lanes` per query row, in the workspace's row order ((bb H + h) rows_q +
// row), so that the lse reads and the row stats' stores are contiguous (each row of O and dO
// is read whole either way; on an H200 this order took 0.99-1.01x the time of the
// head-fastest one, 2026-12-02). Lane j sums the products of the 8-element chunks j, j +
// lanes, ... of O and dO; the group reduces by shuffles (the loop's trip count is uniform per
// block, so every lane of a warp takes them); lane 0 converts lse. Before that, the grid
// zeroes the dQ accumulators of every slice.
template <typename T>
__global__ void __launch_bounds__(kAuxThreads) bwd_row_stats(const BwdParams p, const int lanes) {
  const uint32_t heads = p.f.heads, rows = p.rows_q, n = uint32_t(p.nb) * rows * heads;
  // The slices are one block of floats (dq_split: one slice's): zeroed in address order, as
  // a memset would (in the rows' order, heads apart, the stores ran at half its rate).
  const int64_t zchunks = int64_t(p.splits) * n * p.acc_ld / 4;
  for (int64_t z = int64_t(blockIdx.x) * kAuxThreads + threadIdx.x; z < zchunks; z += int64_t(gridDim.x) * kAuxThreads)
    reinterpret_cast<float4*>(p.dq_acc)[z] = make_float4(0.f, 0.f, 0.f, 0.f);
  const int lane = int(threadIdx.x) % lanes;
  const uint32_t per_block = kAuxThreads / lanes;
  for (uint32_t r0 = blockIdx.x * per_block; r0 < n; r0 += gridDim.x * per_block) {
    const uint32_t r = r0 + threadIdx.x / lanes;
    const bool ok = r < n;
    float sum = 0.f;
    uint32_t h = 0, row = 0, bb = 0;
    if (ok) {
      const uint32_t bh = r / rows;
      row = r - bh * rows, bb = bh / heads, h = bh - bb * heads;
      const T* o = static_cast<const T*>(p.f.o) + bb * p.f.o_sb + row * p.f.o_ss + h * p.f.o_sh;
      const T* d_o = static_cast<const T*>(p.dout) + bb * p.do_sb + row * p.do_ss + h * p.do_sh;
      for (int c = lane * 8; c < p.f.dv; c += lanes * 8) {
        const uint4 x = *reinterpret_cast<const uint4*>(o + c), y = *reinterpret_cast<const uint4*>(d_o + c);
        const T* xs = reinterpret_cast<const T*>(&x);
        const T* ys = reinterpret_cast<const T*>(&y);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = fmaf(float(xs[i]), float(ys[i]), sum);
      }
    }
    for (int o = lanes / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (ok && lane == 0) {
      const float lse = p.f.lse[bb * p.f.lse_sb + h * p.f.lse_sh + row];
      const float l2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
      p.rowstat[r] = make_float2(l2, sum);
    }
  }
}

// A thread group of `lanes` per workspace row ((bb H + h) rows_q + row, in that order: the
// reads are contiguous), lane j converts columns [8 j, 8 j + 8): the slices' fp32 sums in
// slice order, one 16-byte store where dq's row allows it, else four 4-byte ones.
template <typename T>
__global__ void __launch_bounds__(kAuxThreads) bwd_dq_store(const BwdParams p, const int lanes) {
  const uint32_t heads = p.f.heads, rows = p.rows_q, n = uint32_t(p.nb) * heads * rows;
  const int c = int(threadIdx.x) % lanes * 8;
  if (c >= p.f.d) return;
  const int panel = c / p.acc_panel, pc = c - panel * p.acc_panel;  // the columns' panel, their first there
  const uint32_t per_block = kAuxThreads / lanes;
  const float* const acc0 = p.dq_acc + int64_t(panel) * n * p.acc_panel;
  for (uint32_t w = blockIdx.x * per_block + threadIdx.x / lanes; w < n; w += gridDim.x * per_block) {
    const uint32_t bh = w / rows, row = w - bh * rows, bb = bh / heads, h = bh - bb * heads;
    const int sw = p.dq_swizzled ? int(w % 8) : 0;
    const float* acc = acc0 + int64_t(w) * p.acc_panel;
    const float* a0 = acc + ((pc / 4) ^ sw) * 4;
    const float* a1 = acc + ((pc / 4 + 1) ^ sw) * 4;
    float4 s0 = *reinterpret_cast<const float4*>(a0), s1 = *reinterpret_cast<const float4*>(a1);
    for (int k = 1; k < p.splits; ++k) {
      const float4 x0 = *reinterpret_cast<const float4*>(a0 + k * p.dq_split);
      const float4 x1 = *reinterpret_cast<const float4*>(a1 + k * p.dq_split);
      s0.x += x0.x, s0.y += x0.y, s0.z += x0.z, s0.w += x0.w;
      s1.x += x1.x, s1.y += x1.y, s1.z += x1.z, s1.w += x1.w;
    }
    const float sc = p.scale;
    const uint4 v = make_uint4(ptx::pack2<T>(s0.x * sc, s0.y * sc), ptx::pack2<T>(s0.z * sc, s0.w * sc),
                               ptx::pack2<T>(s1.x * sc, s1.y * sc), ptx::pack2<T>(s1.z * sc, s1.w * sc));
    T* dst = static_cast<T*>(p.dq) + bb * p.dq_sb + row * p.dq_ss + h * p.dq_sh + c;
    if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      uint32_t* d32 = reinterpret_cast<uint32_t*>(dst);
      d32[0] = v.x, d32[1] = v.y, d32[2] = v.z, d32[3] = v.w;
    }
  }
}

// Pairs of columns of the dK / dV rows [cu_k[batch], rows_k) of every KV head set to 0.
template <typename T>
__global__ void __launch_bounds__(kAuxThreads) bwd_zero_tail(const BwdParams p) {
  const int64_t first = p.f.cu_k[p.f.batch], pairs = max(p.f.d, p.f.dv) / 2;
  const int64_t n = (p.rows_k - first) * p.kv_heads * pairs;
  for (int64_t i = int64_t(blockIdx.x) * kAuxThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kAuxThreads) {
    const int64_t c = i % pairs * 2, r = i / pairs;
    const int64_t hk = r % p.kv_heads, row = first + r / p.kv_heads;
    if (c < p.f.d) ptx::store2<T>(static_cast<T*>(p.dk) + row * p.dk_ss + hk * p.dk_sh + c, 0.f, 0.f);
    if (c < p.f.dv) ptx::store2<T>(static_cast<T*>(p.dv) + row * p.dv_ss + hk * p.dv_sh + c, 0.f, 0.f);
  }
}

// Blocks of a grid-stride loop over `threads` work items.
int blocks_for(int64_t threads) {
  return int(std::max<int64_t>(1, std::min<int64_t>((threads + kAuxThreads - 1) / kAuxThreads, kMaxBlocks)));
}

template <typename T>
cudaError_t prepare(const BwdParams& p, cudaStream_t stream) {
  const int lanes = row_lanes(p.f.dv / 8);
  const int64_t threads = int64_t(p.nb) * p.rows_q * p.f.heads * lanes;
  if (threads == 0) return cudaSuccess;
  bwd_row_stats<T><<<blocks_for(threads), kAuxThreads, 0, stream>>>(p, lanes);
  return cudaGetLastError();
}

template <typename T>
cudaError_t finish(const BwdParams& p, cudaStream_t stream) {
  const int lanes = row_lanes(p.f.d / 8);
  const int64_t threads = p.f.d > 0 ? int64_t(p.nb) * p.rows_q * p.f.heads * lanes : 0;
  if (threads > 0) {
    bwd_dq_store<T><<<blocks_for(threads), kAuxThreads, 0, stream>>>(p, lanes);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (p.f.cu_k == nullptr || p.rows_k == 0 || p.kv_heads == 0) return cudaSuccess;
  const int64_t pairs = int64_t(p.rows_k) * p.kv_heads * (std::max(p.f.d, p.f.dv) / 2);
  bwd_zero_tail<T><<<blocks_for(pairs), kAuxThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t bwd_prepare(const BwdParams& p, bool bf16, cudaStream_t stream) {
  return bf16 ? prepare<__nv_bfloat16>(p, stream) : prepare<__half>(p, stream);
}

cudaError_t bwd_finish(const BwdParams& p, bool bf16, cudaStream_t stream) {
  return bf16 ? finish<__nv_bfloat16>(p, stream) : finish<__half>(p, stream);
}

}  // namespace flashcore::cuda
