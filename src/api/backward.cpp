// attention_backward: checks -> backend choice -> backend. Nothing here computes.
#include "api/checks_backward.hpp"
#include "core/errors.hpp"
#include "cpu/backward/backward.hpp"
#include "flashcore/flashcore.hpp"
#if defined(FC_BUILD_CUDA)
#include "cuda/backend.hpp"
#endif

namespace flashcore {

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const AttentionParams& params) {
  const core::AttentionBackwardProblem p = api::check_attention_backward(q, k, v, out, dout, lse, dq, dk, dv, params);
  if (p.fwd.device == Device::cuda) {
#if defined(FC_BUILD_CUDA)
    cuda::attention_backward(p);
    return;
#else
    throw_error(Status::unsupported, "q: CUDA tensors given, but this flashcore was built without CUDA");
#endif
  }
  cpu::attention_backward(p);
}

}  // namespace flashcore
