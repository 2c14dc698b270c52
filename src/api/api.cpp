// Public C++ API: checks -> backend choice -> backend. Nothing here computes.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/checks.hpp"
#include "core/errors.hpp"
#include "core/force_generic.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "flashcore/flashcore.hpp"
#if defined(FC_BUILD_CUDA)
#include "cuda/backend.hpp"
#endif

namespace flashcore {

const char* version() { return "0.1.0"; }

void set_force_generic(bool on) { core::set_force_generic(on); }
bool force_generic() { return core::force_generic(); }

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const AttentionParams& params, PhaseTimes* times) {
  const core::AttentionProblem p = api::check_attention(q, k, v, out, params);
  if (p.device == Device::cuda) {
#if defined(FC_BUILD_CUDA)
    cuda::attention(p, times);
    return;
#else
    throw_error(Status::unsupported, "q: CUDA tensors given, but this flashcore was built without CUDA");
#endif
  }
  if (p.batch == 0 || p.sq == 0 || p.heads == 0 || p.dv == 0) return;  // nothing to compute
  cpu::attention(p, times);
}

void softmax_v(const Tensor& s, const Tensor& v, const Tensor& out, const SoftmaxVParams& params,
               PhaseTimes* times) {
  const core::SoftmaxVProblem p = api::check_softmax_v(s, v, out, params);
  if (p.m == 0 || p.d == 0) return;
  cpu::softmax_v(p, nullptr, times);
}

PackedOperands pack_softmax_v(const Tensor& v, const SoftmaxVParams& params) {
  return PackedOperands(cpu::pack_softmax_v(api::check_pack_softmax_v(v, params)));
}

void softmax_v(const Tensor& s, const PackedOperands& packed, const Tensor& out,
               const SoftmaxVParams& params, PhaseTimes* times) {
  const core::SoftmaxVProblem p = api::check_softmax_v(s, packed, out, params);
  if (p.m == 0 || p.d == 0) return;
  cpu::softmax_v(p, packed.state(), times);
}

void gemm_chain(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out,
                const GemmChainParams& params, PhaseTimes* times) {
  const core::GemmChainProblem p = api::check_gemm_chain(a, b, c, out, params);
  if (p.m == 0 || p.n == 0) return;
  cpu::gemm_chain(p, nullptr, times);
}

PackedOperands pack_gemm_chain(const Tensor& b, const Tensor& c, const GemmChainParams& params) {
  return PackedOperands(cpu::pack_gemm_chain(api::check_pack_gemm_chain(b, c, params)));
}

void gemm_chain(const Tensor& a, const PackedOperands& packed, const Tensor& out,
                const GemmChainParams& params, PhaseTimes* times) {
  const core::GemmChainProblem p = api::check_gemm_chain(a, packed, out, params);
  if (p.m == 0 || p.n == 0) return;
  cpu::gemm_chain(p, packed.state(), times);
}

const char* PackedOperands::op() const {
  if (state_ == nullptr) return "";
  return state_->op == State::Op::gemm_chain ? "gemm_chain" : "softmax_v";
}
DType PackedOperands::dtype() const { return state_ ? state_->dtype : DType::f32; }
const char* PackedOperands::kernel() const { return state_ ? state_->kernel->key : ""; }
int64_t PackedOperands::dim(int i) const { return state_ && i >= 0 && i < 3 ? state_->dims[i] : 0; }
size_t PackedOperands::bytes() const { return state_ ? state_->bytes : 0; }

std::string PackedOperands::describe() const {
  if (state_ == nullptr) return "empty";
  const int64_t* d = state_->dims;
  const std::string shape = state_->op == State::Op::gemm_chain
                                ? "K1=" + std::to_string(d[0]) + " K2=" + std::to_string(d[1]) +
                                      " N=" + std::to_string(d[2])
                                : "L=" + std::to_string(d[0]) + " d=" + std::to_string(d[1]);
  return std::string(op()) + " " + to_string(dtype()) + " " + shape + " for " + kernel();
}

int list_kernels(KernelInfo* out, int capacity) {
  std::vector<KernelInfo> all;
  for (int i = 0; i < cpu::gemm_ukernel_count(); ++i) {
    const cpu::GemmUkernel& g = cpu::gemm_ukernel(i);
    all.push_back({g.key, cpu::isa_name(g.isa), cpu::isa_available(g.isa)});
  }
#if defined(FC_BUILD_CUDA)
  for (const KernelInfo& k : cuda::kernels()) all.push_back(k);
#endif
  if (out != nullptr)
    for (int i = 0; i < capacity && i < int(all.size()); ++i) out[i] = all[size_t(i)];
  return int(all.size());
}

}  // namespace flashcore
