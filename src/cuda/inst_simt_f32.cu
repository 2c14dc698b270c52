// The fp32 FFMA forward (fwd_simt_f32): one instance, any head dim <= 256.
#include "cuda/kernels/fwd_simt_f32.cuh"

namespace flashcore::cuda {
cudaError_t fwd_simt_f32(const FwdParams& p, cudaStream_t stream) { return launch_fwd_simt_f32(p, stream); }
}  // namespace flashcore::cuda
