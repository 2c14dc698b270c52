// The fp32 FFMA forward's score-variant kernel (FwdParams::variants), in a unit of its own
// so that the plain kernel's (inst_simt_f32.cu) is compiled alone.
#include "cuda/kernels/fwd_sm80_simt_f32.cuh"

namespace flashcore::cuda {
cudaError_t fwd_sm80_f32_hd256_simt_variants(const FwdParams& p, cudaStream_t stream) {
  return launch_fwd_sm80_simt_f32<true>(p, stream);
}
}  // namespace flashcore::cuda
