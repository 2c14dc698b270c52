// kvc_sm80: attention over a KV cache (attention_with_kvcache) on the sm80 forward kernel
// (fwd_sm80.cuh with kCache: K/V rows from a contiguous or paged cache, each sequence's
// length from FwdParams::seqlens_k on the device, the query heads of a KV head packed into
// one tile's rows (FwdParams::pack_shift), KV splits for kv_combine.cu). The rows
// FC_SM80(kvc, ...) of instances.inc are launched here; the new keys are written into the
// cache before (kv_append.cu), on the same stream.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/fwd_sm80.cuh"

namespace flashcore::cuda {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks>
cudaError_t launch_kvc_sm80(const FwdParams& p, cudaStream_t stream) {
  return launch_fwd_sm80<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMinBlocks, false, true>(p, stream);
}

}  // namespace flashcore::cuda
