// The fp32 FFMA forward (fwd_sm80_f32_hd256_simt): one instance, any head dim <= 256.
#include "cuda/kernels/fwd_sm80_simt_f32.cuh"

namespace flashcore::cuda {
cudaError_t fwd_sm80_f32_hd256_simt(const FwdParams& p, cudaStream_t stream) { return launch_fwd_sm80_simt_f32(p, stream); }
}  // namespace flashcore::cuda
