// The fp32 FFMA forward (fwd_sm80_f32_hd256_simt): one instance, any head dim <= 256; calls
// with the score variants go to its variant kernel (inst_simt_f32_variants.cu).
#include "cuda/kernels/fwd_sm80_simt_f32.cuh"

namespace flashcore::cuda {
cudaError_t fwd_sm80_f32_hd256_simt_variants(const FwdParams& p, cudaStream_t stream);
cudaError_t fwd_sm80_f32_hd256_simt(const FwdParams& p, cudaStream_t stream) {
  if (p.variants) return fwd_sm80_f32_hd256_simt_variants(p, stream);
  return launch_fwd_sm80_simt_f32<false>(p, stream);
}
}  // namespace flashcore::cuda
