// kvc_sm80: attention over a KV cache (attention_with_kvcache) on the sm80 forward kernel
// (fwd_sm80.cuh with kCache: K/V rows from a contiguous or paged cache, each sequence's
// length from FwdParams::seqlens_k on the device, the query heads of a KV head packed into
// one tile's rows (FwdParams::pack_shift), KV splits for kv_combine.cu). The rows
// FC_SM80(kvc, ...) of instances.inc are launched here; the new keys are written into the
// cache before (kv_append.cu), on the same stream.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/kernels/fwd_sm80.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks>
cudaError_t launch_kvc_sm80(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdSm80Traits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks>;
  auto kernel = fwd_sm80_kernel<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks, false, true>;
  static std::atomic<uint64_t> smem_done{0};
  const cudaError_t e = opt_in_smem_once(kernel, Tr::kSmem, smem_done);
  if (e != cudaSuccess) return e;
  if (p.kv_splits < 1 || (p.kv_splits > 1 && (p.part_o == nullptr || p.part_ml == nullptr)))
    return cudaErrorInvalidValue;
  const int rows = p.sq << p.pack_shift;  // GQA packing: (query, head) rows per KV head
  const dim3 grid(unsigned((rows + kBlockM - 1) / kBlockM * p.kv_splits), unsigned(p.heads >> p.pack_shift),
                  unsigned(p.batch));
  kernel<<<grid, Tr::kThreads, Tr::kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
