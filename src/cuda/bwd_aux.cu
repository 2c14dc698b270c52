// The attention backward's kernels around the main one (kernels/bwd_sm80.cuh), for f16 and
// bf16 storage, memory-bound:
//   bwd_row_stats per (row, head), into the workspace (before): D = rowsum(dO * O) and
//                 lse log2 e (+inf where lse = -inf, a row that sees no key: its P is then
//                 2^-inf = 0 in the main kernel, never NaN)
//   bwd_dq_store  dQ = scale * (the sum of the dQ slices, in slice order), converted to the
//                 storage type and written to the caller's (strided) dq (after)
//   bwd_zero_tail varlen: zeros dK and dV rows past the last sequence (cu_k[batch] on the
//                 device), which no CTA of the main kernel covers (after)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/common/ptx.cuh"
#include "cuda/kernels/bwd_params.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kAuxThreads = 256;
constexpr int kMaxBlocks = 1 << 16;  // the grid-stride loops' grids: enough to fill any device

// Eight lanes per (row, head): each sums the products of 16-byte chunks c = lane8, lane8 + 8,
// ... of O and dO, then the eight reduce by shuffles; the first also converts lse. Rows are
// numbered head fastest, then row, then batch entry, so that neighbouring groups read
// neighbouring heads ([B, S, H, D]).
template <typename T>
__global__ void __launch_bounds__(kAuxThreads) bwd_row_stats(const BwdParams p) {
  const int64_t heads = p.f.heads, rows = p.rows_q, n = int64_t(p.nb) * rows * heads;
  const int lane8 = threadIdx.x % 8;
  const unsigned group_mask = 0xffu << (threadIdx.x % 32 / 8 * 8);
  // The eight lanes of a group share r, so they stay together through the loop.
  for (int64_t r = (int64_t(blockIdx.x) * kAuxThreads + threadIdx.x) / 8; r < n;
       r += int64_t(gridDim.x) * (kAuxThreads / 8)) {
    const int64_t h = r % heads, row = (r / heads) % rows, bb = r / (heads * rows);
    const T* o = static_cast<const T*>(p.f.o) + bb * p.f.o_sb + row * p.f.o_ss + h * p.f.o_sh;
    const T* d_o = static_cast<const T*>(p.dout) + bb * p.do_sb + row * p.do_ss + h * p.do_sh;
    float sum = 0.f;
    for (int c = lane8 * 8; c < p.f.dv; c += 64) {
      const uint4 x = *reinterpret_cast<const uint4*>(o + c), y = *reinterpret_cast<const uint4*>(d_o + c);
      const T* xs = reinterpret_cast<const T*>(&x);
      const T* ys = reinterpret_cast<const T*>(&y);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum = fmaf(float(xs[i]), float(ys[i]), sum);
    }
    sum += __shfl_xor_sync(group_mask, sum, 1);
    sum += __shfl_xor_sync(group_mask, sum, 2);
    sum += __shfl_xor_sync(group_mask, sum, 4);
    if (lane8 == 0) {
      const float lse = p.f.lse[bb * p.f.lse_sb + h * p.f.lse_sh + row];
      const float l2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
      p.rowstat[(bb * heads + h) * rows + row] = make_float2(l2, sum);
    }
  }
}

// One thread per 4 columns of one (row, head): the slices' fp32 sums in slice order.
template <typename T>
__global__ void __launch_bounds__(kAuxThreads) bwd_dq_store(const BwdParams p) {
  const int64_t heads = p.f.heads, rows = p.rows_q, quads = p.f.d / 4;
  const int64_t n = int64_t(p.nb) * rows * heads * quads;
  for (int64_t i = int64_t(blockIdx.x) * kAuxThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kAuxThreads) {
    const int64_t c = i % quads * 4, r = i / quads;
    const int64_t h = r % heads, row = (r / heads) % rows, bb = r / (heads * rows);
    const int64_t wrow = (bb * heads + h) * rows + row;  // the workspace row
    const int64_t panel = c / p.acc_panel, pc = c % p.acc_panel;  // the column's panel, its column there
    const float* acc = p.dq_acc + (panel * p.nb * heads * rows + wrow) * p.acc_panel +
                       (p.dq_swizzled ? ((pc / 4) ^ (wrow % 8)) * 4 : pc);
    float4 s = *reinterpret_cast<const float4*>(acc);
    for (int k = 1; k < p.splits; ++k) {
      const float4 x = *reinterpret_cast<const float4*>(acc + k * p.dq_split);
      s.x += x.x;
      s.y += x.y;
      s.z += x.z;
      s.w += x.w;
    }
    T* dst = static_cast<T*>(p.dq) + bb * p.dq_sb + row * p.dq_ss + h * p.dq_sh + c;
    ptx::store2<T>(dst, s.x * p.scale, s.y * p.scale);
    ptx::store2<T>(dst + 2, s.z * p.scale, s.w * p.scale);
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
  const int64_t threads = int64_t(p.nb) * p.rows_q * p.f.heads * 8;
  if (threads == 0) return cudaSuccess;
  bwd_row_stats<T><<<blocks_for(threads), kAuxThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t finish(const BwdParams& p, cudaStream_t stream) {
  const int64_t threads = int64_t(p.nb) * p.rows_q * p.f.heads * (p.f.d / 4);
  if (threads > 0) {
    bwd_dq_store<T><<<blocks_for(threads), kAuxThreads, 0, stream>>>(p);
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
