// merge_states' argument checks. Every failure names the argument before anything is read
// by a backend or written; nothing is written on failure.
#include "api/checks_serving.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "api/check_helpers.hpp"
#include "api/checks.hpp"
#include "core/errors.hpp"

namespace flashcore::api {

using namespace detail;

namespace {

bool same_view(const Tensor& a, const Tensor& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.device != b.device || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i] || a.strides[i] != b.strides[i]) return false;
  return true;
}

bool extents_meet(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const Extent ea = extent(a), eb = extent(b);
  return ea.lo < eb.hi && eb.lo < ea.hi;
}

}  // namespace

core::MergeProblem check_merge_states(const Tensor* out_parts, const Tensor* lse_parts, int64_t n,
                                      const Tensor& out, const Tensor& lse, const MergeStatesParams& params,
                                      bool pair, std::vector<core::StatePart>& parts) {
  if (n < 1) bad("n", "merge_states needs at least one part, got n = " + std::to_string(n));
  if (out_parts == nullptr) bad("out_parts", "is a null pointer");
  if (lse_parts == nullptr) bad("lse_parts", "is a null pointer");
  check_tensor(out, "out", 4, "[B, S, H, D]");
  check_tensor(lse, "lse", 3, "[B, H, S]");
  check_storage_dtype(out.dtype, "out", Device::cpu);
  if (lse.dtype != DType::f32) bad("lse", std::string("must be f32, got ") + to_string(lse.dtype));
  check_same_device(lse, "lse", out.device);
  const int64_t B = out.shape[0], S = out.shape[1], H = out.shape[2], D = out.shape[3];
  check_dim(lse, "lse", 0, "B", B, "out");
  check_dim(lse, "lse", 1, "H", H, "out");
  check_dim(lse, "lse", 2, "S", S, "out");
  auto o_name = [&](int64_t i) {
    return pair ? std::string(i == 0 ? "out_a" : "out_b") : "out_parts[" + std::to_string(i) + "]";
  };
  auto l_name = [&](int64_t i) {
    return pair ? std::string(i == 0 ? "lse_a" : "lse_b") : "lse_parts[" + std::to_string(i) + "]";
  };
  static const char* const kDims[] = {"B", "S", "H", "D"};
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& o = out_parts[i];
    const Tensor& l = lse_parts[i];
    const std::string on = o_name(i), ln = l_name(i);
    check_tensor(o, on.c_str(), 4, "[B, S, H, D]");
    check_tensor(l, ln.c_str(), 3, "[B, H, S]");
    check_same_device(o, on.c_str(), out.device);
    check_same_device(l, ln.c_str(), out.device);
    if (i == 0) check_storage_dtype(o.dtype, on.c_str(), Device::cpu);
    if (o.dtype != out_parts[0].dtype)
      bad(on.c_str(), std::string("dtype ") + to_string(o.dtype) + " differs from " + o_name(0) + "'s " +
                          to_string(out_parts[0].dtype));
    if (l.dtype != DType::f32) bad(ln.c_str(), std::string("must be f32, got ") + to_string(l.dtype));
    for (int d = 0; d < 4; ++d) check_dim(o, on.c_str(), d, kDims[d], out.shape[d], "out");
    check_dim(l, ln.c_str(), 0, "B", B, "out");
    check_dim(l, ln.c_str(), 1, "H", H, "out");
    check_dim(l, ln.c_str(), 2, "S", S, "out");
  }
  // Outputs: each may be exactly one part's view (in place) and must meet no other input.
  check_no_alias(lse, "lse", out, "out");
  check_no_self_overlap(out, "out");
  check_no_self_overlap(lse, "lse");
  for (int64_t i = 0; i < n; ++i) {
    const std::pair<const Tensor*, const Tensor*> outs[] = {{&out, &out_parts[i]}, {&lse, &lse_parts[i]}};
    for (const auto& [w, part] : outs) {
      const char* wn = w == &out ? "out" : "lse";
      const std::string pn = part == &out_parts[i] ? o_name(i) : l_name(i);
      if (!same_view(*w, *part) && extents_meet(*w, *part))
        bad(wn, "overlaps " + pn + " in memory; merging in place, it must be exactly that part's view (same memory, "
                "element type, shape and strides)");
    }
    check_no_alias(out, "out", lse_parts[i], l_name(i).c_str());
    check_no_alias(lse, "lse", out_parts[i], o_name(i).c_str());
  }
  check_threads(params.threads);
  if (out.device == Device::cuda)
    throw_error(Status::unsupported, "out: merge_states takes CPU tensors only in this build (CUDA tensors given)");

  parts.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& o = out_parts[i];
    const Tensor& l = lse_parts[i];
    parts[size_t(i)] = {{o.data, o.strides[0], o.strides[1], o.strides[2]},
                        static_cast<const float*>(l.data), l.strides[0], l.strides[1]};
  }
  core::MergeProblem pr;
  pr.part_dtype = out_parts[0].dtype;
  pr.out_dtype = out.dtype;
  pr.device = out.device;
  pr.parts = parts.data();
  pr.n = n;
  pr.o = out.data;
  pr.o_sb = out.strides[0];
  pr.o_ss = out.strides[1];
  pr.o_sh = out.strides[2];
  pr.lse = static_cast<float*>(lse.data);
  pr.lse_sb = lse.strides[0];
  pr.lse_sh = lse.strides[1];
  pr.batch = B;
  pr.s = S;
  pr.heads = H;
  pr.d = D;
  pr.threads = params.threads;
  pr.stream = params.stream;
  return pr;
}

}  // namespace flashcore::api
