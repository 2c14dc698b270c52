// Public C++ API: checks -> backend choice -> backend. Nothing here computes.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/checks.hpp"
#include "api/errors.hpp"
#include "core/env.hpp"
#include "cpu/dispatch/dispatch.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "flashcore/flashcore.hpp"
#if defined(FC_BUILD_CUDA)
#include "cuda/backend.hpp"
#endif

namespace flashcore {

Tensor Tensor::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = int(shape.size() < size_t(kMaxRank) ? shape.size() : size_t(kMaxRank));
  int i = 0;
  for (int64_t s : shape) {
    if (i >= kMaxRank) break;
    t.shape[i++] = s;
  }
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d] > 0 ? t.shape[d] : 1;
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i) n *= shape[i];
  return rank > 0 ? n : 0;
}

const char* to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
  }
  return "unknown";
}
const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::automatic: return "auto";
    case Strategy::two_pass: return "two-pass";
    case Strategy::three_pass: return "three-pass";
    case Strategy::online: return "online";
  }
  return "unknown";
}
const char* to_string(Exp2Mode m) { return m == Exp2Mode::fast ? "fast" : "exact"; }

size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::e4m3: case DType::e5m2: return 1;
  }
  return 0;
}

const char* version() { return "0.1.0"; }

namespace {
std::atomic<bool> g_force_generic{core::env_flag("FLASHCORE_FORCE_GENERIC")};
}  // namespace

void set_force_generic(bool on) { g_force_generic.store(on); }
bool force_generic() { return g_force_generic.load(); }

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
