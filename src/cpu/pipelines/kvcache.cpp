// attention_with_kvcache on the CPU: the new keys and values written into the cache (in
// place, at each sequence's length), then attention over the cache by the one attention
// pipeline (attention.cpp), its K/V read through KvSource (a contiguous cache) or
// PagedKvSource (a paged one) with the updated lengths. The caller's cache_seqlens is read,
// never written.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/kv_source.hpp"
#include "cpu/pipelines/pipelines.hpp"

namespace flashcore::cpu {
namespace {

// k_new / v_new row (b, i, h) into cache slot seqlens_k[b] + i of kv head h (the checks made
// sure every slot lies in the cache, and that no two rows share a slot).
template <class Src>
void append(const core::KvCacheProblem& p, int nthreads) {
  const core::AttentionProblem& a = p.attn;
  const Src kc(a, a.k), vc(a, a.v);
  const int64_t es = int64_t(dtype_size(a.dtype)), rows = a.batch * p.s_new * a.kv_heads;
#pragma omp parallel for num_threads(nthreads)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (p.s_new * a.kv_heads), i = r / a.kv_heads % p.s_new, h = r % a.kv_heads;
    const int64_t s = int64_t(a.seqlens_k[b]) + i;
    // (the cache is the call's output here: its rows are written through the read view)
    std::memcpy(const_cast<void*>(kc.row(b, s, h)), at(p.k_new.data, b * p.k_new.sb + i * p.k_new.ss + h * p.k_new.sh, es),
                size_t(a.d * es));
    std::memcpy(const_cast<void*>(vc.row(b, s, h)), at(p.v_new.data, b * p.v_new.sb + i * p.v_new.ss + h * p.v_new.sh, es),
                size_t(a.dv * es));
  }
}

}  // namespace

void attention_with_kvcache(const core::KvCacheProblem& p, PhaseTimes* times) {
  const core::AttentionProblem& a = p.attn;
  if (a.batch == 0) return;
  if (p.s_new > 0 && a.kv_heads > 0) {
    const int nthreads = int(std::min<int64_t>(resolve_threads(a.threads), a.batch * p.s_new));
    if (a.block_table != nullptr)
      append<PagedKvSource>(p, nthreads);
    else
      append<KvSource>(p, nthreads);
  }
  if (a.sq == 0 || a.heads == 0 || a.dv == 0) return;
  // The lengths the attention sees: the cache's own plus the appended keys.
  std::vector<int32_t> lens(static_cast<size_t>(a.batch));
  for (int64_t b = 0; b < a.batch; ++b) lens[size_t(b)] = int32_t(a.seqlens_k[b] + p.s_new);
  core::AttentionProblem ap = a;
  ap.seqlens_k = lens.data();
  ap.sk = *std::max_element(lens.begin(), lens.end());
  attention(ap, times);
}

}  // namespace flashcore::cpu
