// The merge of KV splits (flash-decoding; FwdParams::kv_splits): kv_splits CTAs of the
// sm90 kernel each ran an online softmax over one run of an item's key tiles and left
// their unnormalized O rows and (m, l) (log2 domain: O_j = sum 2^(s e - m_j) V over the
// run, l_j the same sum of weights) in a workspace. Per output row, with M = max m_j and
// w_j = 2^(m_j - M): O = sum w_j O_j / sum w_j l_j, lse = (M + log2 sum w_j l_j) ln 2. A
// row no split saw a key of (every l_j = 0) gets O = 0 and lse = -inf, as the kernels
// write it. With sinks (FwdParams::sinks) the head's sink joins the merged row once, here
// (core::join_sink; the splits' partials never hold it): a row with no key then gets O = 0
// and lse = the sink.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/variants/score.hpp"
#include "cuda/kernels/params.hpp"

namespace flashcore::cuda {
namespace {

__device__ __forceinline__ void put(__half* o, float x) { *o = __float2half_rn(x); }
__device__ __forceinline__ void put(__nv_bfloat16* o, float x) { *o = __float2bfloat16_rn(x); }

// One thread per 4 columns of an output row r = (b Sq + query) H + head (varlen: (row of
// the packed O) H + head; Dv is a multiple of 8), `rows` apart from one split's rows to
// the next's; varlen rows past the last sequence (cu_seqlens_q[B]) are not written. The
// splits are read kChunk at a time, every load of a chunk issued before the first use
// (predicated, unrolled: one memory latency per chunk; a loop over the splits with its
// loads in turn waited ~2.5 us for 16 splits on an H100), and merged with a running max.
constexpr int kCombineThreads = 128, kChunk = 16;
template <typename O>
__global__ void __launch_bounds__(kCombineThreads) kv_combine_kernel(const FwdParams p, int rows) {
  // Launched as a programmatic dependent of the split kernel (sm90): its blocks may start
  // while that one drains, and wait here until its writes are visible.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int quads = p.dv / 4;
  const int64_t t = int64_t(blockIdx.x) * kCombineThreads + threadIdx.x;
  const bool varlen = p.cu_q != nullptr;
  const int used = varlen ? p.cu_q[p.batch] * p.heads : rows;
  if (t >= int64_t(used) * quads) return;
  const int r = int(t / quads), c = int(t % quads) * 4, ns = p.kv_splits;
  float m = -INFINITY, l = 0.f;  // running max (log2) and sum of the merged splits
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int j0 = 0; j0 < ns; j0 += kChunk) {
    float2 v[kChunk];
    float4 o[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      v[i] = make_float2(-INFINITY, 0.f);  // absent splits weigh 0
      o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j0 + i < ns) {
        const int64_t row = int64_t(j0 + i) * rows + r;
        v[i] = p.part_ml[row];
        o[i] = *reinterpret_cast<const float4*>(p.part_o + row * p.dv + c);
      }
    }
    float mc = m;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) mc = fmaxf(mc, v[i].x);
    const float base = mc == -INFINITY ? 0.f : mc;  // no -inf - -inf; an empty split's 2^-inf is 0
    const float keep = exp2f(m - base);             // the merged part so far (0 before the first)
    l *= keep;
    acc = make_float4(acc.x * keep, acc.y * keep, acc.z * keep, acc.w * keep);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const float w = exp2f(v[i].x - base);
      l += v[i].y * w;
      acc.x += w * o[i].x;
      acc.y += w * o[i].y;
      acc.z += w * o[i].z;
      acc.w += w * o[i].w;
    }
    m = mc;
  }
  const int hq = r % p.heads, q = varlen ? r / p.heads : (r / p.heads) % p.sq, b = varlen ? 0 : r / p.heads / p.sq;
  float inv = l > 0.f ? 1.f / l : 0.f;
  float lse = l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
  if (p.sinks != nullptr) {
    const core::SinkJoin j = core::join_sink(m * 0.69314718055994531f, l, p.sinks[hq]);
    inv = j.inv;
    lse = j.lse;
  }
  O* go = static_cast<O*>(p.o) + b * p.o_sb + q * p.o_ss + hq * p.o_sh + c;
  put(go, acc.x * inv);
  put(go + 1, acc.y * inv);
  put(go + 2, acc.z * inv);
  put(go + 3, acc.w * inv);
  if (p.lse != nullptr && c == 0) p.lse[b * p.lse_sb + hq * p.lse_sh + q] = lse;
}

}  // namespace

// After the split kernel on the same stream: O (f16 or bf16, p.o with its strides) and lse.
cudaError_t kv_combine(const FwdParams& p, bool bf16, cudaStream_t stream) {
  const int rows = int(p.o_rows() * p.heads);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned((int64_t(rows) * (p.dv / 4) + kCombineThreads - 1) / kCombineThreads));
  cfg.blockDim = dim3(kCombineThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;  // programmatic dependent launch
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return bf16 ? cudaLaunchKernelEx(&cfg, kv_combine_kernel<__nv_bfloat16>, p, rows)
              : cudaLaunchKernelEx(&cfg, kv_combine_kernel<__half>, p, rows);
}

}  // namespace flashcore::cuda
