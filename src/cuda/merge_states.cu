// merge_states on CUDA tensors: every output row (b, s, h) merged from its n parts by one
// warp, with the CPU's rule (merge_row in src/cpu/pipelines/strategies.hpp): weights
// exp(lse_s - max), a part at the max (+inf too) weight 1, parts with lse = -inf not read,
// every part -inf gives O = 0 and lse = -inf, a NaN lse a NaN row. A row's lse values and
// O elements are all read before its outputs are written, each O column by the lane that
// writes it, so an output that is exactly one part's view (the only overlap the API
// allows) is merged in place. The host side (checks, arguments): merge_states_host.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/merge_states.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kWarps = 4;  // rows per block

__device__ __forceinline__ float get(const float* p) { return *p; }
__device__ __forceinline__ float get(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float get(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void put(float* p, float x) { *p = x; }
__device__ __forceinline__ void put(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void put(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

template <typename I, typename O>
__global__ void __launch_bounds__(kWarps * 32) merge_states_kernel(const MergeArgs a) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= a.rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t b = r / (a.s * a.heads), i = r / a.heads % a.s, h = r % a.heads;
  float mx = -INFINITY;
  for (int s = 0; s < a.n; ++s) {
    const float m = a.parts[s].lse[b * a.parts[s].lse_sb + h * a.parts[s].lse_sh + i];
    mx = isnan(m) || isnan(mx) ? NAN : fmaxf(mx, m);
  }
  float wsum = 0.f;
  for (int s = 0; s < a.n; ++s) {
    const float m = a.parts[s].lse[b * a.parts[s].lse_sb + h * a.parts[s].lse_sh + i];
    if (mx != -INFINITY && m != -INFINITY) wsum += m == mx ? 1.f : expf(m - mx);
  }
  O* out = static_cast<O*>(a.o) + b * a.o_sb + i * a.o_ss + h * a.o_sh;
  for (int64_t j = lane; j < a.d; j += 32) {
    float acc = 0.f;
    for (int s = 0; s < a.n && mx != -INFINITY; ++s) {
      const MergePart& p = a.parts[s];
      const float m = p.lse[b * p.lse_sb + h * p.lse_sh + i];
      if (m == -INFINITY) continue;  // saw no key: not read
      const float w = m == mx ? 1.f : expf(m - mx);
      acc += w * get(static_cast<const I*>(p.o) + b * p.sb + i * p.ss + h * p.sh + j);
    }
    put(out + j, mx == -INFINITY ? 0.f : acc / wsum);
  }
  __syncwarp();  // every lane has read the lse values before lane 0 may overwrite one
  if (lane == 0) a.lse[b * a.lse_sb + h * a.lse_sh + i] = mx == -INFINITY ? -INFINITY : mx + logf(wsum);
}

template <typename I>
cudaError_t launch_out(const MergeArgs& a, DType out, cudaStream_t stream) {
  const dim3 grid(unsigned((a.rows + kWarps - 1) / kWarps)), block(kWarps * 32);
  switch (out) {
    case DType::f32: merge_states_kernel<I, float><<<grid, block, 0, stream>>>(a); break;
    case DType::f16: merge_states_kernel<I, __half><<<grid, block, 0, stream>>>(a); break;
    default: merge_states_kernel<I, __nv_bfloat16><<<grid, block, 0, stream>>>(a); break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_merge_states(const MergeArgs& a, DType part, DType out, cudaStream_t stream) {
  switch (part) {
    case DType::f32: return launch_out<float>(a, out, stream);
    case DType::f16: return launch_out<__half>(a, out, stream);
    default: return launch_out<__nv_bfloat16>(a, out, stream);
  }
}

}  // namespace flashcore::cuda
