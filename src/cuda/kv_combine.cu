// The merge of KV splits (flash-decoding; FwdParams::kv_splits): kv_splits CTAs of the
// sm90 kernel each ran an online softmax over one run of an item's key tiles and left
// their unnormalized O rows and (m_j, l_j) (log2 domain: O_j = sum 2^(s e - m_j) V over the
// run, l_j the same sum of weights) in a workspace, m_j in two parts hi + lo
// (OnlineSoftmax::finish: rows with large scores keep their max exactly, the sum of an fp32
// and its remainder). Per output row, with M = max m_j and w_j = 2^(m_j - M) (computed as
// (hi_j - M_hi) + (lo_j - M_lo), M the largest pair, hi first): O = sum w_j O_j / sum w_j
// l_j, lse = (M + log2 sum w_j l_j) ln 2. By the pairs, not by each split's lse: past
// ~2^24 an fp32 lse cannot hold log2 l beside the max, and splits whose maxima tie must be
// weighted by their sums. A row no split saw a key of (every l_j = 0) gets O = 0 and lse =
// -inf, one that saw a NaN score (some l_j NaN) NaN, as the kernels write them.
// With sinks (FwdParams::sinks) the head's sink joins the merged row once, here
// (core::join_sink; the splits' partials never hold it): a row with no key then gets O = 0
// and lse = the sink, a NaN row stays NaN.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/variants/score.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/parts/epilogue.cuh"

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
  float mh = -INFINITY, ml = 0.f, l = 0.f;  // running max (log2, two parts) and sum of the merged splits
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int j0 = 0; j0 < ns; j0 += kChunk) {
    float4 v[kChunk];  // (hi, lo, l, -)
    float4 o[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      v[i] = make_float4(-INFINITY, 0.f, 0.f, 0.f);  // absent splits weigh 0
      o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j0 + i < ns) {
        const int64_t row = int64_t(j0 + i) * rows + r;
        v[i] = p.part_ml[row];
        o[i] = *reinterpret_cast<const float4*>(p.part_o + row * p.dv + c);
      }
    }
    float ch = mh, cl = ml;  // the largest (hi, lo) so far
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const bool more = v[i].x > ch || (v[i].x == ch && v[i].y > cl);
      ch = more ? v[i].x : ch;
      cl = more ? v[i].y : cl;
    }
    // No -inf - -inf: a max of -inf (no split with a key so far) is taken as 0, and an empty
    // split's 2^-inf is 0.
    const float bh = ch == -INFINITY ? 0.f : ch, bl = ch == -INFINITY ? 0.f : cl;
    const float keep = exp2f((mh - bh) + (ml - bl));  // the merged part so far (0 before the first)
    l *= keep;
    acc = make_float4(acc.x * keep, acc.y * keep, acc.z * keep, acc.w * keep);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const float w = exp2f((v[i].x - bh) + (v[i].y - bl));
      l += v[i].z * w;
      acc.x += w * o[i].x;
      acc.y += w * o[i].y;
      acc.z += w * o[i].z;
      acc.w += w * o[i].w;
    }
    mh = ch;
    ml = cl;
  }
  const int hq = r % p.heads, q = varlen ? r / p.heads : (r / p.heads) % p.sq, b = varlen ? 0 : r / p.heads / p.sq;
  float inv = row_inv(l);  // l = 0: every O_j is 0 (the kernels zero such rows)
  float lse = row_lse(mh, ml, l);
  if (p.sinks != nullptr) {  // l NaN: NaN through the join as well
    const core::SinkJoin j = core::join_sink((mh + ml) * 0.69314718055994531f, l, p.sinks[hq]);
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
