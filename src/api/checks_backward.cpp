// attention_backward's argument checks: the forward's (check_attention) for q, k, v, out and
// params, then dout, lse and the three gradients. Every failure names the argument before
// anything is computed; nothing is written on failure.
#include "api/checks_backward.hpp"

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "api/check_helpers.hpp"
#include "api/checks.hpp"
#include "core/errors.hpp"

namespace flashcore::api {

using namespace detail;

core::AttentionBackwardProblem check_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& dout, const Tensor& lse,
                                                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                                        const AttentionParams& params) {
  if (params.lse != nullptr)
    bad("params.lse", "must be null for attention_backward (the forward's lse is its own argument, lse)");
  core::AttentionBackwardProblem pr;
  pr.fwd = check_attention(q, k, v, out, params);
  if (q.dtype != DType::f32 && q.dtype != DType::f16 && q.dtype != DType::bf16)
    throw_error(Status::unsupported, std::string("q: attention_backward takes f32, f16 or bf16, got ") +
                                         to_string(q.dtype));
  const int64_t B = q.shape[0], Sq = q.shape[1], H = q.shape[2];
  check_tensor(dout, "dout", 4, "[B, Sq, H, Dv]");
  check_tensor(lse, "lse", 3, "[B, H, Sq]");
  check_tensor(dq, "dq", 4, "[B, Sq, H, D]");
  check_tensor(dk, "dk", 4, "[B, Sk, Hkv, D]");
  check_tensor(dv, "dv", 4, "[B, Sk, Hkv, Dv]");
  const std::pair<const Tensor*, const char*> like[] = {{&dout, "dout"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}};
  for (const auto& [t, name] : like) {
    check_same_device(*t, name, q.device);
    if (t->dtype != q.dtype)
      bad(name, std::string("dtype ") + to_string(t->dtype) + " differs from q's " + to_string(q.dtype));
  }
  check_same_device(lse, "lse", q.device);
  if (lse.dtype != DType::f32) bad("lse", std::string("must be f32 (as the forward writes it), got ") + to_string(lse.dtype));
  for (int d = 0; d < 4; ++d) {
    static const char* const kDims[4] = {"B", "Sq", "H", "Dv"};
    check_dim(dout, "dout", d, kDims[d], out.shape[d], "out");
  }
  check_dim(lse, "lse", 0, "B", B, "q");
  check_dim(lse, "lse", 1, "H", H, "q");
  check_dim(lse, "lse", 2, "Sq", Sq, "q");
  const std::pair<const Tensor*, const char*> grads[] = {{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}};
  const Tensor* const of[] = {&q, &k, &v};
  for (int g = 0; g < 3; ++g) {
    static const char* const kNames[3][4] = {
        {"B", "Sq", "H", "D"}, {"B", "Sk", "Hkv", "D"}, {"B", "Sk", "Hkv", "Dv"}};
    static const char* const kFrom[3] = {"q", "k", "v"};
    for (int d = 0; d < 4; ++d) check_dim(*grads[g].first, grads[g].second, d, kNames[g][d], of[g]->shape[d], kFrom[g]);
  }
  // Outputs: each its own elements, apart from each other and from every input.
  for (const auto& [t, name] : grads) check_no_self_overlap(*t, name);
  check_no_alias(dk, "dk", dq, "dq");
  check_no_alias(dv, "dv", dq, "dq");
  check_no_alias(dv, "dv", dk, "dk");
  const std::pair<const Tensor*, const char*> inputs[] = {{&q, "q"},     {&k, "k"},       {&v, "v"},
                                                          {&out, "out"}, {&dout, "dout"}, {&lse, "lse"}};
  const int64_t cu_bytes = pr.fwd.cu_q != nullptr ? 4 * (params.varlen_batch + 1) : 0;
  // dsinks (with sinks only): fp32 [H], an output like the gradients.
  std::vector<std::pair<const Tensor*, const char*>> outs(std::begin(grads), std::end(grads));
  if (params.dsinks != nullptr) {
    if (params.sinks == nullptr) bad("params.dsinks", "is given but params.sinks is null (no sinks, no gradient)");
    check_head_array(*params.dsinks, "params.dsinks", 1, H, false, q.device);
    check_no_self_overlap(*params.dsinks, "params.dsinks");
    for (const auto& [g, gname] : grads) check_no_alias(*params.dsinks, "params.dsinks", *g, gname);
    outs.emplace_back(params.dsinks, "params.dsinks");
    pr.dsinks = static_cast<float*>(params.dsinks->data);
  }
  for (const auto& [g, gname] : outs) {
    for (const auto& [in, iname] : inputs) check_no_alias(*g, gname, *in, iname);
    check_no_alias(*g, gname, params.cu_seqlens_q, cu_bytes, "params.cu_seqlens_q");
    check_no_alias(*g, gname, params.cu_seqlens_k, cu_bytes, "params.cu_seqlens_k");
    if (params.alibi_slopes != nullptr) check_no_alias(*g, gname, *params.alibi_slopes, "params.alibi_slopes");
    if (params.sinks != nullptr) check_no_alias(*g, gname, *params.sinks, "params.sinks");
  }

  pr.dout = {dout.data, dout.strides[0], dout.strides[1], dout.strides[2]};
  pr.dq = {dq.data, dq.strides[0], dq.strides[1], dq.strides[2]};
  pr.dk = {dk.data, dk.strides[0], dk.strides[1], dk.strides[2]};
  pr.dv = {dv.data, dv.strides[0], dv.strides[1], dv.strides[2]};
  pr.fwd.lse = static_cast<float*>(lse.data);
  pr.fwd.lse_sb = lse.strides[0];
  pr.fwd.lse_sh = lse.strides[1];
  pr.rows_q = Sq;
  pr.rows_k = k.shape[1];
  pr.deterministic = params.deterministic;
  return pr;
}

}  // namespace flashcore::api
