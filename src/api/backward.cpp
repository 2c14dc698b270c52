// attention_backward: checks -> backend choice -> backend. Nothing here computes.
#include "api/checks_backward.hpp"
#include "core/errors.hpp"
#include "cpu/backward/backward.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore {

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const AttentionParams& params) {
  const core::AttentionBackwardProblem p = api::check_attention_backward(q, k, v, out, dout, lse, dq, dk, dv, params);
  if (p.fwd.device == Device::cuda) {
    // The CUDA backward plugs in here (a cuda::attention_backward(p) beside cuda::attention,
    // under FC_BUILD_CUDA), taking the same checked problem; until then CUDA tensors are
    // refused before anything runs.
    throw_error(Status::unsupported,
                "q: attention_backward on CUDA tensors is not available yet (this build has the CPU backward only)");
  }
  cpu::attention_backward(p);
}

}  // namespace flashcore
