// attention_with_kvcache's and merge_states' argument checks. Every failure names the
// argument before anything is read by a backend or written; nothing is written on failure.
#include "api/checks_serving.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "api/check_helpers.hpp"
#include "api/checks.hpp"
#include "core/errors.hpp"
#if defined(FC_BUILD_CUDA)
#include "cuda/backend.hpp"
#endif

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

// A cache tensor in the order the pipelines read, [.., rows, Hkv, D]: HND swaps dims 1, 2.
Tensor nhd_view(const Tensor& t, KvLayout layout) {
  Tensor r = t;
  if (layout == KvLayout::hnd) {
    std::swap(r.shape[1], r.shape[2]);
    std::swap(r.strides[1], r.strides[2]);
  }
  return r;
}

// k_cache and v_cache, both written (an append): their extents may meet only where they are
// views of one tensor, the same shape and strides a whole number of elements apart, whose
// offset as one more dim of size 2 keeps every element its own address (FlashInfer's
// [pages, 2, page_size, Hkv, D] and vLLM's [2, pages, ...] caches).
void check_caches_disjoint(const Tensor& k, const char* kn, const Tensor& v, const char* vn) {
  if (!extents_meet(k, v)) return;
  const int64_t es = int64_t(dtype_size(k.dtype));
  const int64_t bytes = int64_t(reinterpret_cast<intptr_t>(v.data) - reinterpret_cast<intptr_t>(k.data));
  bool apart = k.dtype == v.dtype && k.rank == v.rank && bytes != 0 && bytes % es == 0;
  for (int i = 0; apart && i < k.rank; ++i) apart = k.shape[i] == v.shape[i] && k.strides[i] == v.strides[i];
  if (apart) {
    std::vector<std::pair<int64_t, int64_t>> dims{{bytes < 0 ? -bytes / es : bytes / es, 2}};
    for (int i = 0; i < k.rank; ++i) dims.emplace_back(k.strides[i], k.shape[i]);
    if (distinct_elements(std::move(dims))) return;
  }
  bad(vn, std::string("overlaps ") + kn + " in memory (both caches are written when k_new / v_new are given)");
}

// The CPU arrays' contents: lengths >= 0 that fit the cache with the new keys, the page
// ids a sequence uses within the cache, and no cache slot written twice. Returns the
// longest length (before the append).
int64_t check_cache_contents(const Tensor& seqlens, const Tensor* table, const Tensor& kc, const char* kname,
                             int64_t batch, int64_t s_new) {
  const int32_t* lens = static_cast<const int32_t*>(seqlens.data);
  const bool paged = table != nullptr;
  const int64_t page = kc.shape[1], num_pages = kc.shape[0];
  const int64_t max_pages = paged ? table->shape[1] : 0, tsb = paged ? table->strides[0] : 0;
  const int32_t* ids = paged ? static_cast<const int32_t*>(table->data) : nullptr;
  int64_t longest = 0;
  std::vector<std::pair<int64_t, int64_t>> slots;  // paged appends: (page * page_size + row, sequence)
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[b], total = len + s_new;
    const std::string seq = "sequence " + std::to_string(b) + " (cache_seqlens[" + std::to_string(b) + "] = " +
                            std::to_string(len) + (s_new > 0 ? " + S_new = " + std::to_string(s_new) : "") + ")";
    if (len < 0) bad("cache_seqlens", "entry " + std::to_string(b) + " is " + std::to_string(len) + " (lengths are >= 0)");
    if (!paged && total > kc.shape[1])
      bad(s_new > 0 ? "k_new" : "cache_seqlens",
          seq + " passes the cache's S_max = " + std::to_string(kc.shape[1]) + " rows of " + kname);
    if (total > std::numeric_limits<int32_t>::max())
      bad(s_new > 0 ? "k_new" : "cache_seqlens", seq + " has more than 2^31 - 1 keys");
    longest = std::max(longest, len);
    if (!paged) continue;
    const int64_t need = (total + page - 1) / page;
    if (need > max_pages)
      bad("block_table", seq + " needs " + std::to_string(need) + " pages of " + std::to_string(page) +
                             " rows, but the table has max_pages = " + std::to_string(max_pages));
    for (int64_t i = 0; i < need; ++i) {
      const int64_t id = ids[b * tsb + i];
      if (id < 0 || id >= num_pages)
        bad("block_table", "entry [" + std::to_string(b) + ", " + std::to_string(i) + "] = " + std::to_string(id) +
                               " is not a page of " + kname + " (0 .. " + std::to_string(num_pages - 1) + "), used by " +
                               seq);
    }
    for (int64_t s = len; s < total; ++s) slots.emplace_back(ids[b * tsb + s / page] * page + s % page, b);
  }
  std::sort(slots.begin(), slots.end());
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i].first != slots[i - 1].first) continue;
    const int64_t b0 = slots[i - 1].second, b1 = slots[i].second;
    const std::string where = "page " + std::to_string(slots[i].first / page) + " row " + std::to_string(slots[i].first % page);
    bad("block_table", b0 == b1 ? "sequence " + std::to_string(b0) + " appends twice to " + where +
                                      " (its row lists that page twice)"
                                : "sequences " + std::to_string(b0) + " and " + std::to_string(b1) +
                                      " both append to " + where + " (a page that receives new keys cannot be shared)");
  }
  return longest;
}

// check_cache_contents on device arrays: cache_seqlens and the block table copied to the
// host first (KvCacheOptions::check_contents).
void check_device_contents(const Tensor& seqlens, const Tensor* table, const Tensor& kc, const char* kname,
                           int64_t batch, int64_t s_new, void* stream) {
#if defined(FC_BUILD_CUDA)
  std::vector<int32_t> lens(static_cast<size_t>(batch)), ids;
  cuda::copy_rows_to_host(lens.data(), seqlens.data, batch, 4, seqlens.strides[0] * 4, stream, "cache_seqlens");
  Tensor hl = Tensor::contiguous(lens.data(), DType::i32, {batch});
  Tensor ht;
  if (table != nullptr) {
    const int64_t max_pages = table->shape[1];
    ids.resize(size_t(batch * max_pages));
    cuda::copy_rows_to_host(ids.data(), table->data, batch, max_pages * 4, table->strides[0] * 4, stream, "block_table");
    ht = Tensor::contiguous(ids.data(), DType::i32, {batch, max_pages});
  }
  check_cache_contents(hl, table != nullptr ? &ht : nullptr, kc, kname, batch, s_new);
#else
  (void)seqlens, (void)table, (void)kc, (void)kname, (void)batch, (void)s_new, (void)stream;
#endif
}

}  // namespace

core::KvCacheProblem check_attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                                  const Tensor& cache_seqlens, const Tensor& out,
                                                  const KvCacheOptions& cache, const AttentionParams& params) {
  if (int(cache.layout) != int(KvLayout::nhd) && int(cache.layout) != int(KvLayout::hnd))
    bad("layout", "unknown KV layout code " + std::to_string(int(cache.layout)) + " (0 = NHD, 1 = HND)");
  const bool hnd = cache.layout == KvLayout::hnd, paged = cache.block_table != nullptr;
  const char* rows = paged ? (hnd ? "[pages, Hkv, page_size, D]" : "[pages, page_size, Hkv, D]")
                           : (hnd ? "[B, Hkv, S_max, D]" : "[B, S_max, Hkv, D]");
  check_tensor(k_cache, "k_cache", 4, rows);
  check_tensor(v_cache, "v_cache", 4, rows);
  if (params.cu_seqlens_q != nullptr || params.cu_seqlens_k != nullptr || params.varlen_batch != 0 ||
      params.max_seqlen_q != 0 || params.max_seqlen_k != 0)
    bad(params.cu_seqlens_q != nullptr ? "params.cu_seqlens_q" : "params.cu_seqlens_k",
        "attention_with_kvcache takes each sequence's length in cache_seqlens; varlen arrays are refused");
  // Messages about the caches speak of the NHD order the checks see.
  const KvNames names{hnd ? "k_cache (HND, as NHD)" : "k_cache", hnd ? "v_cache (HND, as NHD)" : "v_cache", paged,
                      /*fp8_cache_ok=*/true};
  const Tensor kc = nhd_view(k_cache, cache.layout), vc = nhd_view(v_cache, cache.layout);
  core::KvCacheProblem pr;
  pr.attn = check_attention(q, kc, vc, out, params, false, names);
  core::AttentionProblem& a = pr.attn;
  const int64_t B = q.shape[0];

  check_tensor(cache_seqlens, "cache_seqlens", 1, "[B]");
  check_same_device(cache_seqlens, "cache_seqlens", q.device);
  if (cache_seqlens.dtype != DType::i32)
    bad("cache_seqlens", std::string("must be int32, got ") + to_string(cache_seqlens.dtype));
  check_dim(cache_seqlens, "cache_seqlens", 0, "B", B, "q");
  if (paged) {
    const Tensor& bt = *cache.block_table;
    check_tensor(bt, "block_table", 2, "[B, max_pages]");
    check_same_device(bt, "block_table", q.device);
    if (bt.dtype != DType::i32) bad("block_table", std::string("must be int32, got ") + to_string(bt.dtype));
    check_dim(bt, "block_table", 0, "B", B, "q");
    if (kc.shape[1] % 8 != 0 || kc.shape[1] < 8 || kc.shape[1] > std::numeric_limits<int32_t>::max())
      bad(names.k, "page_size (dim 1) must be a positive multiple of 8, got " + std::to_string(kc.shape[1]));
  }
  if ((cache.k_new == nullptr) != (cache.v_new == nullptr))
    bad(cache.k_new == nullptr ? "k_new" : "v_new", "is null but the other is given: give k_new and v_new together");
  if (cache.k_new != nullptr) {
    const Tensor& kn = *cache.k_new;
    const Tensor& vn = *cache.v_new;
    check_tensor(kn, "k_new", 4, "[B, S_new, Hkv, D]");
    check_tensor(vn, "v_new", 4, "[B, S_new, Hkv, Dv]");
    for (const auto& [t, name] : {std::pair(&kn, "k_new"), std::pair(&vn, "v_new")}) {
      check_same_device(*t, name, q.device);
      if (t->dtype != a.kv_dtype)
        bad(name, std::string("dtype ") + to_string(t->dtype) + " differs from the cache's " + to_string(a.kv_dtype) +
                      (a.kv_dtype != a.dtype ? " (new keys go into an fp8 cache as e4m3)" : ""));
      check_dim(*t, name, 0, "B", B, "q");
      check_dim(*t, name, 2, "Hkv", a.kv_heads, names.k);
    }
    check_dim(kn, "k_new", 3, "D", a.d, "q");
    check_dim(vn, "v_new", 1, "S_new", kn.shape[1], "k_new");
    check_dim(vn, "v_new", 3, "Dv", a.dv, names.v);
    pr.s_new = kn.shape[1];
    pr.k_new = {kn.data, kn.strides[0], kn.strides[1], kn.strides[2]};
    pr.v_new = {vn.data, vn.strides[0], vn.strides[1], vn.strides[2]};
  }

  // The outputs against the inputs check_attention did not see; when appending, the caches
  // are outputs too.
  const Tensor none;
  const std::pair<const Tensor*, const char*> inputs[] = {{&cache_seqlens, "cache_seqlens"},
                                                          {paged ? cache.block_table : &none, "block_table"},
                                                          {cache.k_new ? cache.k_new : &none, "k_new"},
                                                          {cache.v_new ? cache.v_new : &none, "v_new"}};
  for (const auto& [t, name] : inputs) {
    check_no_alias(out, "out", *t, name);
    if (params.lse != nullptr) check_no_alias(*params.lse, "params.lse", *t, name);
  }
  if (pr.s_new > 0) {
    for (const auto& [c, name] : {std::pair(&k_cache, "k_cache"), std::pair(&v_cache, "v_cache")}) {
      check_no_self_overlap(*c, name);
      check_no_alias(*c, name, q, "q");
      for (const auto& [t, in_name] : inputs) check_no_alias(*c, name, *t, in_name);
    }
    check_caches_disjoint(k_cache, "k_cache", v_cache, "v_cache");
  }

  pr.cache_rows = paged ? cache.block_table->shape[1] * kc.shape[1] : kc.shape[1];
  pr.num_pages = paged ? kc.shape[0] : 0;
  // CUDA: the lengths and the table stay on the device (no host sync) unless the caller asks
  // for the check (a copy to the host); the kernels clamp what they read to the cache
  // (src/cuda/kernels/params.hpp).
  if (q.device == Device::cuda) {
    if (cache.check_contents) check_device_contents(cache_seqlens, paged ? cache.block_table : nullptr, kc, names.k,
                                                    B, pr.s_new, params.stream);
    a.sk = std::max<int64_t>(pr.cache_rows - pr.s_new, 0);
  } else {
    a.sk = check_cache_contents(cache_seqlens, paged ? cache.block_table : nullptr, kc, names.k, B, pr.s_new);
  }
  a.seqlens_k = static_cast<const int32_t*>(cache_seqlens.data);
  if (paged) {
    a.block_table = static_cast<const int32_t*>(cache.block_table->data);
    a.block_table_sb = cache.block_table->strides[0];
    a.page_size = kc.shape[1];
  }
  return pr;
}

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
