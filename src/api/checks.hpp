#pragma once

#include "core/problem.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore::api {

// What attention's checks call k and v: their names in messages, and whether they are a
// paged cache's pages (dim 0 is then the page, not the batch).
struct KvNames {
  const char* k = "k";
  const char* v = "v";
  bool paged = false;
  // attention_with_kvcache: k and v may be an fp8 (e4m3) cache under f32 / f16 / bf16 q, with
  // the k and v descales (and their per-head arrays) dequantizing it
  bool fp8_cache_ok = false;
};

// reference: the fp64 reference's checks, which also take e4m3/e5m2 CPU tensors (decoded
// exactly) and an f32 output for them.
core::AttentionProblem check_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const AttentionParams& p, bool reference = false,
                                       const KvNames& kv = {});
core::SoftmaxVProblem check_softmax_v(const Tensor& s, const Tensor& v, const Tensor& out,
                                      const SoftmaxVParams& p);
core::GemmChainProblem check_gemm_chain(const Tensor& a, const Tensor& b, const Tensor& c,
                                        const Tensor& out, const GemmChainParams& p);
// The pre-packed calls: the packed object against the other arguments and params.impl.
core::SoftmaxVProblem check_softmax_v(const Tensor& s, const PackedOperands& v, const Tensor& out,
                                      const SoftmaxVParams& p);
core::GemmChainProblem check_gemm_chain(const Tensor& a, const PackedOperands& bc, const Tensor& out,
                                        const GemmChainParams& p);
// pack_*: the operands to pack alone (the problem's other fields stay empty).
core::SoftmaxVProblem check_pack_softmax_v(const Tensor& v, const SoftmaxVParams& p);
core::GemmChainProblem check_pack_gemm_chain(const Tensor& b, const Tensor& c,
                                             const GemmChainParams& p);

}  // namespace flashcore::api
